"""Every course notebook runs top to bottom in a Jupyter kernel (quick mode in `make test`), through the course's
one executor (scripts/execute.py: papermill), and its outputs carry no stderr line and no warning that no entry
of helpers.noise.KNOWN allows, explained by this notebook or an earlier one. The executed copies are kept in
the outputs folder (executed/) for a look after a failure."""

import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import noise
from helpers.paths import outputs_dir

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(REPO / "scripts"))

from execute import execute, stderr_lines  # noqa: E402


def figures_missing(notebook) -> list[int]:
    """Code cells that draw a figure unconditionally (a top-level line calling ``plotting.`` or making
    ``fig, …``) but show no image: a figure created and never displayed (it happened once, when a style context
    switched Jupyter's interactive mode off after the first figure)."""
    missing = []
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        draws = any(line.startswith(("plotting.", "fig, ", "fig = ")) for line in cell.source.splitlines())
        shown = any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))
        if draws and not shown:
            missing.append(i)
    return missing


def engine_processes(since: float) -> list[str]:
    """Processes of a serving engine (Ray: its scheduler, control store, workers, agents) started since then."""
    found = []
    for p in psutil.process_iter(["name", "create_time"]):
        name = p.info["name"] or ""
        if p.info["create_time"] >= since and (name in ("raylet", "gcs_server") or name.startswith("ray::")):
            found.append(f"{name} ({p.pid})")
    return found


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_shows_only_explained_messages(path, monkeypatch):
    started = time.time()
    # The kernel gets Jupyter's own inline backend, as a learner's does (conftest sets Agg for this process,
    # and a kernel inherits the environment): figures are then really displayed, and checked below.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    run = execute(path, outputs_dir() / "executed" / path.name, timeout=600)
    left = engine_processes(started)
    for _ in range(20):  # the kernel has exited; give the engine's last processes a moment to follow it
        if not left:
            break
        time.sleep(0.5)
        left = engine_processes(started)
    assert not left, f"{path.name} left a serving engine's processes running: {left}"
    assert run.status == "ok", f"{path.name} failed at {run.error}\n(executed copy: {run.path})"
    assert not figures_missing(run.notebook), f"{path.name}: cells {figures_missing(run.notebook)} drew no figure"
    explained = {p.stem for p in NOTEBOOKS if p.stem <= path.stem}  # this notebook's and the earlier ones'
    shown = [(cell, line) for cell, line in stderr_lines(run.notebook) if noise.allowed(line, explained) is None]
    assert not shown, (
        f"{path.name} wrote to stderr what no notebook up to it explains (add the fix, or an entry to "
        f"helpers.noise.KNOWN with its reason and a notebook that explains it): "
        + "; ".join(f"cell {cell}: {line[:200]}" for cell, line in shown[:5])
    )
