"""The course website (scripts/build_site.py) builds from the executed copies that the notebook tests just made
(quick mode, outputs/test/executed), and a real browser (headless Chromium, driven by Selenium) loads it from a
local server: the landing page and its navigation, two notebook pages with their plots drawn, and an offline
search that finds a term from a notebook. `make test` runs this after the notebooks (`make test-site`)."""

import functools
import http.server
import os
import re
import shutil
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from helpers.paths import outputs_dir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
PLOTTED = ("01_bottlenecks", "13_llm_serving")  # two pages that draw figures in quick mode too
SEARCH_TERM = "autotune"  # in notebooks 04 and 09, not in the README or TEACHING.md
pytestmark = pytest.mark.site


def chromium() -> tuple[str, str] | None:
    """The browser and its driver (Debian: chromium, chromium-driver), or None where they are not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from build_site import build

    executed = outputs_dir() / "executed"
    if not list(executed.glob("[0-9][0-9]_*.ipynb")):
        pytest.fail(f"no executed notebooks in {executed}: run the notebook tests first (make test runs them before)")
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):  # this run's copies, each complete
        copy = nbformat.read(executed / path.name, as_version=4)
        assert copy.metadata["course"]["status"] == "ok", f"{path.stem}: its executed copy failed"
        code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert [c.source for c in copy.cells if c.cell_type == "code"] == code, f"{path.stem}: an older copy"
    out = tmp_path_factory.mktemp("site") / "html"
    landing = build(executed, out)
    assert landing.is_file()
    return out


def test_the_site_has_every_page_offline_search_and_where_each_copy_ran(site):
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page = (site / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
        assert "Time for a learner" in page, path.stem
        assert "executed in <strong>quick mode</strong>" in page, path.stem
    assert (site / "TEACHING.html").is_file()
    assert (site / "searchindex.js").stat().st_size > 10_000


def test_no_page_gives_an_exercise_s_answer_away(site):
    from build_site import exposed_solutions

    checked = 0
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        page = (site / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
        assert not exposed_solutions(page, nb), (
            f"{path.stem}'s page shows its solution: {exposed_solutions(page, nb)[:2]}"
        )
        checked += sum("solution" in c.metadata.get("tags", []) for c in nb.cells)
        if any("solution" in c.metadata.get("tags", []) for c in nb.cells):
            assert "not on the website" in page, path.stem  # the page says where the answer is
    assert checked >= 15  # the exercises were there to hide


def test_each_notebook_page_offers_its_source_notebook_and_says_how_to_run_the_course(site):
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page = (site / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
        links = re.findall(r'href="([^"]*/' + re.escape(path.name) + ')"', page)
        text = re.sub(r"<[^>]+>", "", page)  # `make lab` is split into spans
        assert links, path.stem
        assert "make lab" in text, path.stem
        assert "make test" in text, path.stem
        offered = nbformat.read(site / "notebooks" / links[0], as_version=4)
        assert [c.source for c in offered.cells] == [c.source for c in nbformat.read(path, as_version=4).cells]
        assert not any(c.get("outputs") for c in offered.cells if c.cell_type == "code"), path.stem


def test_the_answer_check_finds_a_solution_shown_as_a_highlighted_page_would_show_it():
    import html

    from build_site import exposed_solutions

    nb = nbformat.read(REPO / "notebooks" / "03_batch_sizing.ipynb", as_version=4)
    solution = next(c for c in nb.cells if "solution" in c.metadata.get("tags", []))
    spans = "".join(f'<span class="n">{html.escape(ch)}</span>' for ch in solution.source)  # as Pygments splits it
    assert exposed_solutions(f"<div class='highlight'><pre>{spans}</pre></div>", nb)
    assert not exposed_solutions("<p>the exercise alone</p>", nb)


def test_every_link_of_the_site_leads_to_a_file_of_it_and_nothing_is_fetched_from_the_network(site):
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)  # not the theme's templates
    assert len(pages) >= 18
    for page in pages:
        html = page.read_text(encoding="utf-8")
        remote = re.findall(r'<(?:script|img)[^>]*\ssrc="(https?:[^"]*)"|<link[^>]*\shref="(https?:[^"]*)"', html)
        assert not remote, f"{page.relative_to(site)} loads {remote[:3]} from the network"
        for target in re.findall(r'\s(?:href|src)="([^"#?]+)', html):
            if re.match(r"[a-z]+:", target):  # http(s), mailto, data, javascript: not a file of the site
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(site)}: {target} does not exist"


def test_the_build_refuses_what_it_cannot_use_in_one_line(tmp_path):
    from build_site import build

    with pytest.raises(SystemExit, match="no executed copy of 00_environment.*make full-run"):
        build(tmp_path / "nothing", tmp_path / "out")
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        shutil.copyfile(path, bare / path.name)  # committed notebooks: never executed, no record of where
    with pytest.raises(SystemExit, match="says nothing of where it ran"):
        build(bare, tmp_path / "out")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "results.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit, match="not a site built here"):
        build(outputs_dir() / "executed", tmp_path / "mine")
    assert (tmp_path / "mine" / "results.jsonl").is_file()  # nothing of it deleted


@pytest.fixture(scope="module")
def browser(site, tmp_path_factory):
    found = chromium()
    if found is None:
        message = "no Chromium and ChromeDriver here (Debian/Ubuntu: apt-get install chromium chromium-driver)"
        if os.environ.get("COURSE_REQUIRE_BROWSER"):
            pytest.fail(message + "; COURSE_REQUIRE_BROWSER is set (CI), so the browser check may not be skipped")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    # headless, and none of Chromium's own connections to Google's hosts (the machine has no network)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no network at all: the site must not need one
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=found[1]))
    driver.set_page_load_timeout(60)
    driver.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield driver
    driver.quit()
    server.shutdown()
    server.server_close()


def images_drawn(driver) -> list[tuple[str, bool, int]]:
    return driver.execute_script(
        "return Array.from(document.images).filter(i => i.src.includes('/_images/'))"
        ".map(i => [i.src, i.complete, i.naturalWidth]);"
    )


@pytest.mark.parametrize("how", ["server", "file"])
def test_a_browser_loads_the_landing_page_and_its_navigation_in_course_order(browser, site, how):
    browser.get(browser.base + "/README.html" if how == "server" else (site / "README.html").as_uri())
    assert "GPU inference optimization" in browser.title
    nav = browser.execute_script("return Array.from(document.querySelectorAll('nav.bd-links a')).map(a => a.href);")
    order = [re.search(r"notebooks/(\d\d_\w+)\.html", link).group(1) for link in nav if "/notebooks/" in link]
    assert order == [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))], order
    assert any(link.endswith("/TEACHING.html") for link in nav), nav


@pytest.mark.parametrize("name", PLOTTED)
def test_a_browser_shows_a_notebook_page_with_its_plots(browser, name):
    browser.get(f"{browser.base}/notebooks/{name}.html")
    assert name[:2] in browser.title or name[3:].split("_")[0] in browser.title.lower()
    drawn = images_drawn(browser)
    assert drawn, f"{name}: no plot on the page"
    assert all(complete and width > 0 for _, complete, width in drawn), f"{name}: a plot did not load: {drawn}"
    assert "Time for a learner" in browser.find_element("tag name", "body").text


def test_the_offline_search_finds_a_term_from_a_notebook(browser):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{browser.base}/search.html?q={SEARCH_TERM}")
    summary_js = "const s = document.querySelector('#search-results .search-summary'); return s ? s.innerText : '';"
    # the results are shown one by one, then this line
    summary = WebDriverWait(browser, 30).until(lambda d: "Search finished" in (t := d.execute_script(summary_js)) and t)
    found = browser.execute_script(
        "return Array.from(document.querySelectorAll('#search-results li a')).map(a => a.href);"
    )
    assert any("/notebooks/" in href for href in found), (summary, found)
