"""Execute every course notebook and collect what it measured: the reference-run script.

    .venv/bin/python scripts/full_run.py OUT [--mode full|quick] [--notebooks DIR] [--timeout SECONDS]
                                             [--executor auto|kernel|plain]

Writes, under OUT:
    executed/NN_name.ipynb   each notebook with its outputs
    results.jsonl            every record the notebooks made (the machine's results file for this run)
    summary.json             the environment report, and per notebook: status, seconds, error if any

Work files the notebooks produce (exported models, traces, compile caches) go to OUT/work, which
``--work`` can move elsewhere (e.g. /tmp, when only the results should come back). To turn a run into
shipped reference results: copy OUT/results.jsonl to data/reference/<machine_id>.jsonl (see data/README.md).
Exits non-zero if any notebook failed; the others still run. Interrupted (Ctrl-C, or SIGTERM from a time
limit), it stops, still writes ``summary.json`` (the running notebook "interrupted", the rest "not run") and the
merged results, and exits 130. ``summary.json`` is also rewritten after every notebook. An earlier run's
results left in the work folder are moved aside (``results-before-<time>``), never deleted.

Executors: ``kernel`` runs each notebook in a Jupyter kernel through the course's one executor
(scripts/execute.py: papermill), as a learner would. ``plain`` runs
each notebook's code cells in a fresh Python process, capturing printed output and the value of each cell's
last expression: for machines that have PyTorch but no Jupyter packages (a GPU image). ``auto`` (default)
uses ``kernel`` when papermill, nbclient and ipykernel are installed, else ``plain``. The plain executor goes once
the kernel path has run on the GPU machine (its wheels: scripts/gpu-wheels.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: its shared command-line types
from cli_types import positive_int  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for executed notebooks, results and summary")
    parser.add_argument("--mode", choices=("quick", "full"), default="full")
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="folder of *.ipynb to run")
    parser.add_argument("--only", nargs="*", default=None, help="run only notebooks whose name starts so")
    parser.add_argument("--timeout", type=positive_int, default=1800, help="seconds allowed per cell")
    parser.add_argument("--work", type=Path, default=None, help="folder for work files (default OUT/work)")
    parser.add_argument("--executor", choices=("auto", "kernel", "plain"), default="auto")
    return parser.parse_args(argv)


PLAIN_RUNNER = r"""
import ast, contextlib, io, json, linecache, os, sys, traceback
import matplotlib
matplotlib.use("Agg")
src, dst = sys.argv[1], sys.argv[2]
nb = json.load(open(src, encoding="utf-8"))
os.chdir(os.path.dirname(os.path.abspath(src)))
def display(*objs):  # like IPython's: a table in full, not pandas' truncated repr
    for o in objs:
        print(o.to_string() if hasattr(o, "to_string") else o)
namespace = {"__name__": "__main__", "display": display}
failed = None
for index, cell in enumerate(nb["cells"]):
    if cell["cell_type"] != "code":
        continue
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    out = io.StringIO()
    cell["outputs"] = []
    # Register the cell's source, as Jupyter does: inspect.getsource (torch.jit.script, tracebacks) needs it.
    name = f"<cell-{index}>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    try:
        tree = ast.parse(source, name)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(tree, name, "exec"), namespace)
            value = eval(compile(ast.Expression(last.value), name, "eval"), namespace) if last else None
        if value is not None and not type(value).__module__.startswith("matplotlib"):
            out.write((value.to_string() if hasattr(value, "to_string") else repr(value)) + chr(10))
    except BaseException:
        out.write(traceback.format_exc())
        failed = traceback.format_exc().strip().splitlines()[-1]
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": out.getvalue()}]
    import matplotlib.pyplot as plt
    plt.close("all")
    if failed:
        break
with open(dst + ".partial", "w", encoding="utf-8") as fh:  # renamed when complete: never half a notebook
    json.dump(nb, fh, indent=1)
os.replace(dst + ".partial", dst)
if failed:
    print(failed, file=sys.stderr)
    sys.exit(1)
"""


#: Notebooks that need a package a machine may lack, and why it matters: skipped *by name* there (status
#: "skipped", the reason in the summary), never run to fail. The GPU image has no serving engine, and Ray
#: (~470 MB installed) is too large to carry to it.
NEEDS = {
    "12_serving": (
        "ray",
        "needs Ray Serve (ray[serve]), which this machine lacks: the serving engine is not installed",
    ),
}


def skip_reason(path: Path) -> str | None:
    """Why this notebook cannot run on this machine (a package it needs is missing), or None."""
    import importlib.util

    need = NEEDS.get(path.stem)
    return need[1] if need and importlib.util.find_spec(need[0]) is None else None


def _kernel_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) for name in ("papermill", "nbclient", "nbformat", "ipykernel"))


def run_plain(path: Path, dst: Path, timeout: int) -> tuple[str, str | None]:
    import subprocess

    try:
        proc = subprocess.run(
            [sys.executable, "-c", PLAIN_RUNNER, str(path), str(dst)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "failed", f"timed out after {timeout} s"
    if proc.returncode:
        return "failed", (proc.stderr.strip().splitlines() or ["no message"])[-1]
    return "ok", None


def run_kernel(path: Path, dst: Path, timeout: int) -> tuple[str, str | None]:
    """The course's one executor (scripts/execute.py: papermill in a Jupyter kernel); the error in one line."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from execute import execute

    run = execute(path, dst, timeout=timeout)
    return run.status, run.error.splitlines()[0] if run.error else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    executor = args.executor
    if executor == "auto":
        executor = "kernel" if _kernel_available() else "plain"
    elif executor == "kernel" and not _kernel_available():
        print(
            "--executor kernel needs papermill, nbclient, nbformat and ipykernel; install them or use --executor plain",
            file=sys.stderr,
        )
        return 2

    notebooks = sorted(args.notebooks.glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(prefix) for prefix in args.only)]
    if not notebooks:
        print(f"no notebooks to run in {args.notebooks}", file=sys.stderr)
        return 2

    out = args.out.resolve()
    work = (args.work or out / "work").resolve()
    (out / "executed").mkdir(parents=True, exist_ok=True)
    # A previous run's results in `work` would be mixed in, and may be its only copy (an interrupted run):
    # move them aside, never delete them.
    previous = work / "results"
    if previous.is_dir() and any(previous.iterdir()):
        kept = work / f"results-before-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        previous.rename(kept)
        print(f"an earlier run's results were in {previous}: kept in {kept}", flush=True)
    os.environ["COURSE_MODE"] = args.mode
    os.environ["COURSE_OUTPUTS"] = str(work)
    # The kernels import helpers from this checkout even where it is not pip-installed (a GPU box's own torch).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

    sys.path.insert(0, str(REPO))
    import helpers
    from helpers.paths import write_atomic

    summary: dict = {
        "mode": args.mode,
        "executor": executor,
        "environment": helpers.environment_report(),
        "notebooks": {},
    }
    run = run_kernel if executor == "kernel" else run_plain
    # A time limit (`timeout`, a batch scheduler) sends SIGTERM: stop like Ctrl-C, so what ran is still collected.
    signal.signal(signal.SIGTERM, _interrupt)
    failed, skipped, interrupted = 0, 0, False
    try:
        for path in notebooks:
            summary["notebooks"][path.stem] = {"status": "running", "seconds": None, "error": None}
            start = time.perf_counter()
            reason = skip_reason(path)
            if reason:
                summary["notebooks"][path.stem] = {"status": "skipped", "seconds": 0.0, "error": reason}
                print(f"{path.name}: skipped ({reason})", flush=True)
                skipped += 1
                continue
            try:
                # plain: one timeout for the whole notebook, generous since the per-cell limit cannot apply
                status, error = run(path, out / "executed" / path.name, args.timeout)
            finally:
                seconds = round(time.perf_counter() - start, 1)
                summary["notebooks"][path.stem].update(status="interrupted", seconds=seconds)
            failed += status != "ok"
            summary["notebooks"][path.stem] = {"status": status, "seconds": seconds, "error": error}
            print(f"{path.name}: {status} in {seconds:.0f} s" + (f" ({error})" if error else ""), flush=True)
            write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")  # after every notebook
    except KeyboardInterrupt:
        interrupted = True
        for path in notebooks:
            summary["notebooks"].setdefault(path.stem, {"status": "not run", "seconds": None, "error": None})
        print("interrupted: the results of the notebooks that ran are collected below", flush=True)
    finally:
        records, torn = merge_results(sorted((work / "results").glob("*.jsonl")), out / "results.jsonl")
        summary["interrupted"] = interrupted
        write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(
        f"{len(notebooks) - failed - skipped}/{len(notebooks)} notebooks ok"
        + (f", {skipped} skipped (their reason in summary.json)" if skipped else "")
        + f"; {records} records in {out / 'results.jsonl'}"
        + (f" ({torn} torn or corrupt line(s) skipped)" if torn else "")
    )
    if interrupted:
        return 130
    return 1 if failed else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def merge_results(files: list[Path], dest: Path) -> tuple[int, int]:
    """Every complete record of ``files``, in order, written to ``dest`` atomically; a torn or corrupt line (a
    writer killed mid-line) is skipped and counted, never glued to the first line of the next file.
    Returns (records kept, lines skipped)."""
    from helpers.paths import write_atomic
    from helpers.results import parse_records  # the loader helpers itself reads results with

    kept, torn = [], 0
    for file in files:
        records, bad = parse_records(file.read_text(encoding="utf-8", errors="replace"))
        kept += [json.dumps(record, ensure_ascii=False) for record in records]
        torn += bad
    if torn:
        print(f"warning: skipped {torn} torn or corrupt line(s) while merging results into {dest}", file=sys.stderr)
    write_atomic(dest, "".join(line + "\n" for line in kept))
    return len(kept), torn


if __name__ == "__main__":
    sys.exit(main())
