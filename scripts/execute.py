"""The course's one notebook executor: papermill, in a Jupyter kernel, as a learner runs a notebook.

Used by ``scripts/full_run.py`` (reference runs, the GPU
one included) and ``scripts/run_notebook.py``. :func:`execute` runs one notebook top to bottom and writes the
executed copy atomically (papermill saves it after every cell to a temporary file beside the destination, so a
run cut short still leaves what ran there). ``make test-notebooks`` executes with nbmake instead (conftest.py at
the root), and checks what it executed with the functions at the end: :func:`stderr_lines` lists what the cells
wrote to stderr, which the tests hold to the allow-list of ``helpers.noise``; :func:`figures_missing` and
:func:`engine_processes` find a figure never shown and a serving engine left running.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Executed:
    """What one run of a notebook gave: ``status`` "ok" or "failed", ``error`` (one paragraph: the cell, the
    exception and the end of its traceback), the executed notebook, and where it was written."""

    status: str
    error: str | None
    notebook: object = field(repr=False)
    path: Path


def execute(
    path: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    parameters: dict[str, object] | None = None,
    timeout: int = 600,
) -> Executed:
    """Run the notebook at ``path`` in its kernel (cells run in its folder); write the executed copy to ``dst``.

    ``timeout``: seconds allowed per cell. A failing cell stops the run (as "Run All" does) and is reported;
    a dead kernel or a time-out too. The executed copy, outputs and error included, is written in every case.
    """
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    path, dst = Path(path).resolve(), Path(dst)
    if not path.is_file() or path.suffix != ".ipynb":
        raise ValueError(f"path={str(path)!r} is not a notebook; pass the path of an .ipynb file")
    dst.parent.mkdir(parents=True, exist_ok=True)
    partial = dst.with_name(f".{dst.stem}.partial.ipynb")  # papermill wants an .ipynb name
    os.environ.setdefault("COURSE_PROGRESS", "off")  # the kernel inherits it: no progress bars in executed copies
    status, error = "ok", None
    try:
        papermill.execute_notebook(
            str(path),
            str(partial),
            parameters=parameters or {},
            cwd=str(path.parent),
            progress_bar=False,
            execution_timeout=timeout,
            kernel_name="python3",
        )
    except PapermillExecutionError as exc:
        tail = "\n".join(line for line in exc.traceback[-6:] if line.strip())
        status, error = (
            "failed",
            f"cell {exc.cell_index} (execution {exc.exec_count}): {exc.ename}: {exc.evalue}\n{tail}",
        )
    except Exception as exc:  # a dead kernel, a time-out: record it, the caller goes on
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    if partial.exists():
        nb = nbformat.read(partial, as_version=4)
        nb.metadata["course"] = where_it_ran(parameters, status)  # the course website says where and when
        nbformat.write(nb, partial)
        os.replace(partial, dst)  # the finished (or cut-short) copy replaces the old one in one step
    else:  # papermill failed before writing anything (a notebook it cannot read)
        nb = nbformat.read(path, as_version=4)
    return Executed(status, error, nb, dst)


def where_it_ran(parameters: dict[str, object] | None, status: str) -> dict[str, object]:
    """The machine, date, mode and outcome of a run, kept in the executed copy's metadata (``course``): the
    course website (scripts/build_site.py) prints them at the top of each page. The kernel ran on this machine."""
    import datetime

    mode = str((parameters or {}).get("MODE") or os.environ.get("COURSE_MODE") or "full").strip().lower()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    try:
        machine = _machine()
    except Exception as exc:  # a broken torch or driver must not lose the executed copy: say so in its place
        machine = {"machine_error": f"{type(exc).__name__}: {exc}"}
    return {**machine, "mode": mode, "date": date, "status": status}


@functools.cache
def _machine() -> dict[str, object]:
    """This machine as the course names it (helpers.device), once per process."""
    import torch

    from helpers.device import cpu_model, machine_id, usable_cpus

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "machine_id": machine_id(),
        "cpu": cpu_model(),
        "usable_cpus": usable_cpus(),
        "gpu": gpu,
        "torch": torch.__version__,
    }


def stderr_lines(nb: object) -> list[tuple[int, str]]:
    """``(cell index, line)`` for every non-empty line the notebook's cells wrote to stderr (warnings included)."""
    lines = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                lines += [(index, line) for line in output.get("text", "").splitlines() if line.strip()]
    return lines


def figures_missing(notebook: object) -> list[int]:
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


#: The environment variable that marks the processes one notebook run started (its kernel passes it on to every
#: process it starts, a serving engine's included): two notebooks run at once do not see each other's engines.
RUN_TAG = "COURSE_RUN_TAG"


#: How much earlier than ``since`` a process's start time may read and still count as started since then.
CLOCK_SLACK_S = 3.0


def engine_processes(since: float, tag: str | None = None) -> list[str]:
    """Processes of a serving engine (Ray: its scheduler, control store, workers, agents) started since then;
    with ``tag``, only those whose environment carries ``RUN_TAG=tag`` (the run that started them)."""
    import psutil

    found = []
    for p in psutil.process_iter(["name", "create_time"]):
        name = p.info["name"] or ""
        # psutil derives a start time from the boot time, which /proc gives in whole seconds: it can read up to
        # a second or two before time.time() said the process started, so "since" gets that much slack
        engine = name in ("raylet", "gcs_server") or name.startswith("ray::")
        if engine and p.info["create_time"] >= since - CLOCK_SLACK_S:
            try:
                if tag is not None and p.environ().get(RUN_TAG) != tag:
                    continue
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # gone already, or another user's: not this run's
            found.append(f"{name} ({p.pid})")
    return found
