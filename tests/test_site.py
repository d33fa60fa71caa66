"""The course website (scripts/build_site.py) builds from the executed copies that the notebook tests just made
(quick mode, outputs/test/executed), and a real browser (headless Chromium, driven by Selenium) loads it from a
local server: the landing page and its navigation, two notebook pages with their plots drawn, and an offline
search that finds a term from a notebook. `make test` runs this after the notebooks (`make test-site`)."""

import functools
import http.server
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

from helpers.paths import outputs_dir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
PLOTTED = ("01_bottlenecks", "13_llm_serving")  # two pages that draw figures in quick mode too
SEARCH_TERM = "roofline"  # taught in 00 and used throughout
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
    out = tmp_path_factory.mktemp("site") / "html"
    landing = build(executed, out)
    assert landing.is_file()
    return out


def test_the_site_has_every_page_offline_search_and_where_each_copy_ran(site):
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page = (site / "notebooks" / f"{path.stem}.html").read_text(encoding="utf-8")
        assert "Time for a learner" in page and "executed in <strong>quick mode</strong>" in page, path.stem
    assert (site / "TEACHING.html").is_file() and (site / "searchindex.js").stat().st_size > 10_000


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


def test_a_browser_loads_the_landing_page_and_its_navigation(browser):
    browser.get(browser.base + "/README.html")
    assert "GPU inference optimization" in browser.title
    links = browser.execute_script("return Array.from(document.querySelectorAll('a')).map(a => a.href);")
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert any(link.endswith(f"notebooks/{path.stem}.html") for link in links), path.stem


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
    found = WebDriverWait(browser, 30).until(
        lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('#search-results li a')).map(a => a.href);"
        )
    )
    assert any("/notebooks/" in href for href in found), found
