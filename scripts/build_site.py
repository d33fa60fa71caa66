"""Build the course website: a static site, offline, with Sphinx and myst-nb (requirements-site.txt).

    scripts/build_site.py [--executed DIR] [--out DIR]

Pages: the README (landing page), one page per notebook showing an executed copy the course's executor made
(scripts/execute.py; `make full-run` writes full-mode copies, `make test-notebooks` quick-mode ones), TEACHING.md,
and the Markdown files they link to. A page shows each exercise and its self-check, not its solution. At the top
of each notebook page: where and when the copy ran (kept in its
metadata by the executor), its mode, and the minutes TEACHING.md plans for it. Nothing is executed here.
Sphinx runs with warnings as errors: a link to a page or heading that does not exist fails the build.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)]*)?\)")  # Markdown links to .md files: staged with the pages


def notebook_names() -> list[str]:
    return [p.stem for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))]


def gpu_reference(name: str) -> str:
    """How many of the H200's reference records (data/reference) this notebook made, and when ("" for none)."""
    sys.path.insert(0, str(REPO))
    from helpers.results import load_reference  # the loader the notebooks use, with its checks

    records = load_reference(notebook=name, machine="cuda-nvidia-h200")
    if records.empty:
        return ""
    dates = sorted({str(t)[:10] for t in records["time"]})
    return f"{len(records)} records, full mode, {', '.join(dates)}"


def header(name: str, course: dict) -> str:
    """The first cell of a notebook's page: where and when this copy ran, and the time a learner needs."""
    from agenda import slot  # TEACHING.md's minutes (scripts/agenda.py computes and checks them)

    machine = f"`{course['machine_id']}` ({course['cpu']}, {course['usable_cpus']} CPUs"
    machine += f", {course['gpu']})" if course.get("gpu") else ", no GPU)"
    status = (
        ""
        if course.get("status") == "ok"
        else f" It stopped early ({course.get('status')}): see the cell with the error."
    )
    gpu = gpu_reference(name)
    reference = (
        f"\n\nThe H200's reference results of this notebook ship with the course ({gpu}, in "
        "`data/reference/cuda-nvidia-h200.jsonl`); the [reference table](../README.md#reference-results) compares "
        "the machines."
        if gpu
        else "\n\nThis notebook has no H200 reference results yet."
    )
    return (
        f"```{{note}}\nThis page shows a copy executed in **{course['mode']} mode** on {machine}, "
        f"torch {course['torch']}, on {course['date']}, by the course's executor.{status} "
        f"Numbers on your machine will differ: run the notebook to see them.\n\n"
        f"**Time for a learner:** about {slot(name, 'quick')} min on a laptop in quick mode, "
        f"{slot(name, 'gpu')} min on a GPU in full mode ([TEACHING.md](../TEACHING.md)).{reference}\n\n"
        f"**Run it yourself:** {{download}}`{name}.ipynb <../sources/{name}.ipynb>` is this notebook without "
        "outputs, as the course ships it; with the whole course, `make lab` opens it in JupyterLab and `make test` "
        "runs every notebook in quick mode ([the README](../README.md) says how to set up).\n```"
    )


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and "solution" in cell.get("metadata", {}).get("tags", [])


def without_solutions(nb, name: str):
    """The page keeps each exercise and its self-check, not its answer: each solution cell (tagged ``solution``;
    myst-nb ignores Jupyter's ``source_hidden``) becomes a line saying where the answer is."""
    import nbformat

    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            title = cell.source.splitlines()[0].lstrip("# ").strip() if cell.source.strip() else "Solution"
            nb.cells[i] = nbformat.v4.new_markdown_cell(
                f"*{title}: not on the website. It is in the notebook, folded: open `notebooks/{name}.ipynb` in "
                "JupyterLab and expand the cell once you have tried.*"
            )
    return nb


def exposed_solutions(html: str, nb) -> list[str]:
    """The code lines only ``nb``'s solution cells have (25 characters or more, comments left out; a line another
    cell has too proves nothing) that a page's text shows: the site test's check that no answer is given away."""
    import html as html_module

    shown = {line.strip() for line in html_module.unescape(re.sub(r"<[^>]+>", "", html)).splitlines()}
    elsewhere = {line.strip() for cell in nb.cells if not is_solution(cell) for line in cell.source.splitlines()}
    lines = {
        line.strip()
        for cell in nb.cells
        if is_solution(cell)
        for line in cell.source.splitlines()
        if len(line.strip()) >= 25 and not line.strip().startswith("#") and line.strip() not in elsewhere
    }
    return sorted(lines & shown)  # whole lines: a self-check may hold a solution's line inside a longer one


def stage(executed: Path, src: Path) -> None:
    """Copy the pages into ``src``, laid out as in the repository so that their relative links hold."""
    import nbformat

    (src / "notebooks").mkdir(parents=True)
    (src / "sources").mkdir()  # the committed notebooks, offered for download on each page (not pages themselves)
    for name in notebook_names():
        shutil.copyfile(REPO / "notebooks" / f"{name}.ipynb", src / "sources" / f"{name}.ipynb")
    missing = [n for n in notebook_names() if not (executed / f"{n}.ipynb").is_file()]
    if missing:
        raise SystemExit(
            f"no executed copy of {', '.join(missing)} in {executed}: run `make full-run` (full mode) or "
            "`make test-notebooks` (quick mode, outputs/test/executed) first, or pass --executed DIR."
        )
    for name in notebook_names():
        nb = nbformat.read(executed / f"{name}.ipynb", as_version=4)
        course = nb.metadata.get("course")
        if not course or "machine_id" not in course:
            raise SystemExit(
                f"{executed / name}.ipynb says nothing of where it ran: execute it with the course's executor "
                "(make full-run, make test-notebooks or scripts/run_notebook.py)."
            )
        titled = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("# ")]
        if not titled:
            raise SystemExit(
                f"{executed / name}.ipynb has no title (a Markdown cell starting '# '): is it a course copy?"
            )
        first = titled[0]  # its first line is the page's title (a failed run's error banner comes before it)
        title, _, rest = first.source.partition("\n")
        first.source = f"{title}\n\n{header(name, course)}\n{rest}"
        nbformat.write(without_solutions(nb, name), src / "notebooks" / f"{name}.ipynb")
    todo = [REPO / "README.md", REPO / "TEACHING.md"]
    todo += [REPO / "notebooks" / f"{n}.ipynb" for n in notebook_names()]  # their links to Markdown files
    seen: set[Path] = set()
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        rel = page.relative_to(REPO)
        if page.suffix == ".md":
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, src / rel)
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            linked = (page.parent / target).resolve()
            if linked.is_file() and linked.is_relative_to(REPO):
                todo.append(linked)
    toctree = ["", "```{toctree}", ":hidden:", ":maxdepth: 1", ""]
    toctree += [f"notebooks/{n}" for n in notebook_names()] + ["TEACHING"]
    others = sorted(str(p.relative_to(src).with_suffix("")) for p in src.rglob("*.md"))
    toctree += [o for o in others if o not in ("README", "TEACHING")] + ["```", ""]
    with open(src / "README.md", "a", encoding="utf-8") as f:
        f.write("\n".join(toctree))


def build(executed: Path, out: Path) -> Path:
    """Stage the pages and run sphinx-build (warnings are errors); returns the landing page."""
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        src = Path(tmp) / "src"
        stage(executed, src)
        if out.exists():  # only a site this script built is replaced: never a folder of something else
            if not (out / "built-from.json").is_file():
                raise SystemExit(f"{out} exists and is not a site built here: pass --out a new or empty folder")
            shutil.rmtree(out)
        cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-j", "auto"]
        cmd += ["-c", str(REPO / "website"), "-d", str(Path(tmp) / "doctrees"), str(src), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr.replace(str(src) + "/", ""))
            raise SystemExit(f"sphinx-build failed (exit status {proc.returncode}): the warnings above")
    (out / ".nojekyll").touch()
    (out / "built-from.json").write_text(json.dumps({"executed": str(executed)}) + "\n")
    return out / "README.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--executed",
        type=Path,
        default=REPO / "outputs" / "full-run" / "executed",
        help="folder of executed notebooks (default: make full-run's)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "site", help="where the site is written")
    args = parser.parse_args(argv)
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError:
        raise SystemExit(
            "the site needs Sphinx and myst-nb: pip install -r requirements-site.txt (make site does)"
        ) from None
    landing = build(args.executed.resolve(), args.out.resolve())
    print(f"site written: {landing}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
