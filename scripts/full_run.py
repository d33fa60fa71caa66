"""Execute every course notebook and collect what it measured: the reference-run script.

    .venv/bin/python scripts/full_run.py OUT [--mode full|quick] [--notebooks DIR] [--timeout SECONDS]

Writes, under OUT:
    executed/NN_name.ipynb   each notebook with its outputs
    results.jsonl            every record the notebooks made (the machine's results file for this run)
    summary.json             the environment report, and per notebook: status, seconds, error if any

Work files the notebooks produce (exported models, traces, compile caches) go to OUT/work, which
``--work`` can move elsewhere (e.g. /tmp, when only the results should come back). To turn a run into
shipped reference results: copy OUT/results.jsonl to data/reference/<machine_id>.jsonl (see data/README.md).
Exits non-zero if any notebook failed; the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for executed notebooks, results and summary")
    parser.add_argument("--mode", choices=("quick", "full"), default="full")
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="folder of *.ipynb to run")
    parser.add_argument("--only", nargs="*", default=None, help="run only notebooks whose name starts so")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    parser.add_argument("--work", type=Path, default=None, help="folder for work files (default OUT/work)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebooks = sorted(args.notebooks.glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(prefix) for prefix in args.only)]
    if not notebooks:
        print(f"no notebooks to run in {args.notebooks}", file=sys.stderr)
        return 2

    out = args.out.resolve()
    work = (args.work or out / "work").resolve()
    (out / "executed").mkdir(parents=True, exist_ok=True)
    # A previous run's results in `work` would be mixed in: start clean.
    shutil.rmtree(work / "results", ignore_errors=True)
    os.environ["COURSE_MODE"] = args.mode
    os.environ["COURSE_OUTPUTS"] = str(work)
    # The kernels import helpers from this checkout even where it is not pip-installed (a GPU box's own torch).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

    sys.path.insert(0, str(REPO))
    import helpers

    summary: dict = {"mode": args.mode, "environment": helpers.environment_report(), "notebooks": {}}
    failed = 0
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        start = time.perf_counter()
        status, error = "ok", None
        try:
            client.execute()
        except CellExecutionError as exc:
            status, error = "failed", str(exc).splitlines()[-1] if str(exc) else repr(exc)
            failed += 1
        except Exception as exc:  # a dead kernel or a timeout: record it and go on with the next notebook
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            failed += 1
        seconds = round(time.perf_counter() - start, 1)
        nbformat.write(nb, out / "executed" / path.name)
        summary["notebooks"][path.stem] = {"status": status, "seconds": seconds, "error": error}
        print(f"{path.name}: {status} in {seconds:.0f} s" + (f" ({error})" if error else ""), flush=True)

    results = sorted((work / "results").glob("*.jsonl"))
    with open(out / "results.jsonl", "w", encoding="utf-8") as merged:
        for file in results:
            merged.write(file.read_text(encoding="utf-8"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{len(notebooks) - failed}/{len(notebooks)} notebooks ok; results in {out / 'results.jsonl'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
