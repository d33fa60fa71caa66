"""What the course checks on every notebook nbmake executes (`make test-notebooks`, or `pytest --nbmake notebooks/`
in your own CI; set COURSE_MODE=quick for the smoke test, or each notebook runs in full mode).

nbmake runs the notebook top to bottom in its kernel and fails on an error. On top of that, for each notebook:
its executed copy is kept in the outputs folder (executed/, written atomically, a failed run included) for a look
afterwards and for the course website; its figures were really displayed; no serving engine's processes outlived
it; and nothing reached stderr (warnings included) that no entry of helpers.noise.KNOWN allows, explained by this
notebook or an earlier one. This file is pytest's: a root conftest.py is what `pytest --nbmake notebooks/` loads.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "scripts"))


def pytest_report_header(config):
    if config.getoption("nbmake", default=False):
        mode = os.environ.get("COURSE_MODE") or "full (set COURSE_MODE=quick for the smoke test)"
        return f"course notebooks: mode {mode}; executed copies in {_outputs() / 'executed'}"


def pytest_collection_modifyitems(config, items):
    """nbmake's items carry the course's ``notebook`` marker (``-m notebook`` selects them)."""
    for item in items:
        if getattr(item, "nbmake", False):
            item.add_marker(pytest.mark.notebook)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not getattr(item, "nbmake", False):
        return (yield)
    from nbmake.nb_run import NotebookRun

    path, started, kept = Path(item.filename).resolve(), time.time(), {}
    execute = NotebookRun.execute

    def execute_and_keep(run):  # nbmake's run, with its executed notebook kept before nbmake judges it
        result = execute(run)
        kept["nb"] = result.nb
        _keep_copy(result.nb, path.name, "ok" if result.error is None else "failed")
        return result

    from execute import RUN_TAG

    tag = f"{path.stem}-{os.getpid()}-{started}"
    saved = {k: os.environ.get(k) for k in ("MPLBACKEND", "COURSE_PROGRESS", "OMP_NUM_THREADS", RUN_TAG)}
    os.environ.pop("MPLBACKEND", None)  # the kernel inherits these: Jupyter's inline backend displays figures,
    os.environ.setdefault("COURSE_PROGRESS", "off")  # no progress bars in the executed copies,
    os.environ[RUN_TAG] = tag  # and every process it starts carries the run's tag (the engine check below)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # notebooks run side by side (make test-notebooks): each kernel gets its share of the cores
        from helpers.device import usable_cpus

        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, usable_cpus() // workers)))
    NotebookRun.execute = execute_and_keep
    try:
        result = yield  # nbmake: fails here if a cell raised or timed out
    finally:
        NotebookRun.execute = execute
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    _check(path, kept["nb"], started, tag)
    return result


def _outputs() -> Path:
    from helpers.paths import outputs_dir

    return outputs_dir()


def _keep_copy(nb, name: str, status: str) -> None:
    import nbformat
    from execute import where_it_ran

    dst = _outputs() / "executed" / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    nb.metadata["course"] = where_it_ran(None, status)  # the course website says where and when
    partial = dst.with_name(f".{dst.stem}.partial.ipynb")
    nbformat.write(nb, partial)
    os.replace(partial, dst)


def _check(path: Path, nb, started: float, tag: str) -> None:
    from execute import engine_processes, figures_missing, stderr_lines

    from helpers import noise

    left = engine_processes(started, tag)
    for _ in range(20):  # the kernel has exited; give the engine's last processes a moment to follow it
        if not left:
            break
        time.sleep(0.5)
        left = engine_processes(started, tag)
    assert not left, f"{path.name} left a serving engine's processes running: {left}"
    assert not figures_missing(nb), f"{path.name}: cells {figures_missing(nb)} drew no figure"
    explained = {p.stem for p in path.parent.glob("[0-9][0-9]_*.ipynb") if p.stem <= path.stem}
    shown = [(cell, line) for cell, line in stderr_lines(nb) if noise.allowed(line, explained) is None]
    assert not shown, (
        f"{path.name} wrote to stderr what no notebook up to it explains (add the fix, or an entry to "
        f"helpers.noise.KNOWN with its reason and a notebook that explains it): "
        + "; ".join(f"cell {cell}: {line[:200]}" for cell, line in shown[:5])
    )
