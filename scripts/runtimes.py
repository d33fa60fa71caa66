"""How long each notebook takes on this machine, against the course's run-time targets: a script, not a test.

    .venv/bin/python scripts/runtimes.py [--mode quick|full] [--only 00 02] [--write] [--out DIR]

Runs the notebooks one after another, each in a fresh Jupyter kernel (``scripts/full_run.py``, the path a
learner's JupyterLab takes), in a fresh outputs folder, so compile caches start empty and notebook 00 stores
the roofline the others reuse, as on a learner's first run. Prints one row per notebook (seconds, target,
within it or not) and the total, and with ``--write`` stores the figures in this machine's
``data/reference/<machine_id>.env.json`` (``notebooks.<name>.<mode>_seconds``; the file is created with the
environment report, CPU features included, when it does not exist), which ``scripts/agenda.py`` turns into
the README's run-time map. Then it counts the verdicts that did not decide (too few samples, within noise,
separate sessions) in the executed copies (``scripts/verdict_counts.py``). Exits 1 if a notebook failed; a
notebook over its target is reported, not failed.

Targets: quick mode, a smoke test, ≤ 25 s per notebook on 2 CPU cores, kernel start included (40 s for the
serving and shipping notebooks, which start servers or fresh processes; DESIGN.md §6 allowed 60 and 90 s before
`make test` had to fit 10 minutes) and ≤ 4 min for the eleven notebooks 00–10 together;
full mode ≤ 6 min per notebook, and the whole full-mode course ≤ 8 min on an H200.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: its shared command-line types
from cli_types import positive_int  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

QUICK_TARGET, QUICK_TARGET_SLOW, FULL_TARGET = 25, 40, 360
QUICK_TOTAL_TARGET, QUICK_TOTAL_NOTEBOOKS = 240, 11
GPU_FULL_TOTAL_TARGET = 480  # the whole course in full mode on an H200: one prepared GPU run covers it
SLOW_TOPICS = ("serving", "shipping")


def target(name: str, mode: str) -> int:
    if mode == "full":
        return FULL_TARGET
    return QUICK_TARGET_SLOW if any(topic in name for topic in SLOW_TOPICS) else QUICK_TARGET


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("quick", "full"), default="quick")
    parser.add_argument("--only", nargs="*", default=None, help="notebooks whose name starts so (e.g. 00 02)")
    parser.add_argument("--write", action="store_true", help="store the figures in data/reference/<machine>.env.json")
    parser.add_argument("--out", type=Path, default=None, help="keep the executed notebooks here (default: a temp dir)")
    parser.add_argument("--timeout", type=positive_int, default=1800, help="seconds allowed per cell")
    parser.add_argument(
        "--executor",
        choices=("auto", "kernel", "plain"),
        default="kernel",
        help="kernel (a Jupyter kernel, as a learner runs it); plain where Jupyter is missing",
    )
    return parser.parse_args(argv)


def write_runtimes(summary: dict, mode: str, reference: Path = REPO / "data" / "reference") -> Path:
    """Merge this run's seconds into ``<machine_id>.env.json`` (atomically), creating the file if needed, with
    this run's environment. The machine id names the CPU features that decide results
    (``helpers.device.feature_tags``), so a host with other features writes to a file of its own."""
    from helpers.paths import write_atomic

    env = summary["environment"]
    path = reference / f"{env['machine_id']}.env.json"
    data = (
        json.loads(path.read_text())
        if path.exists()
        else {
            "machine_id": env["machine_id"],
            "date": dt.date.today().isoformat(),
            "how": "scripts/runtimes.py (each notebook in a fresh Jupyter kernel, empty compile caches)",
            "notebooks": {},
        }
    )
    today = dt.date.today().isoformat()
    data["environment"] = env  # the environment of the run whose seconds are written
    data.setdefault("runtimes", {})[mode] = {"date": today, "script": "scripts/runtimes.py"}
    for name, result in summary["notebooks"].items():
        if result["status"] == "ok":
            data.setdefault("notebooks", {}).setdefault(name, {})[f"{mode}_seconds"] = result["seconds"]
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


def report(summary: dict, mode: str) -> str:
    rows = [f"{'notebook':<30} {'status':<7} {'seconds':>8} {'target':>7}  within?"]
    for name, result in summary["notebooks"].items():
        limit, seconds = target(name, mode), result["seconds"] or 0.0
        ok = "yes" if result["status"] == "ok" and seconds <= limit else "NO"
        rows.append(f"{name:<30} {result['status']:<7} {seconds:>8.1f} {limit:>7}  {ok}")
    total = sum(r["seconds"] or 0.0 for r in summary["notebooks"].values())
    core = [n for n in summary["notebooks"] if n[:2].isdigit() and int(n[:2]) <= 10]
    if mode == "quick" and len(core) == QUICK_TOTAL_NOTEBOOKS:
        core_total = sum(summary["notebooks"][n]["seconds"] or 0.0 for n in core)
        rows.append(
            f"{'total of 00–10':<30} {'':<7} {core_total:>8.1f} {QUICK_TOTAL_TARGET:>7}  "
            f"{'yes' if core_total <= QUICK_TOTAL_TARGET else 'NO'}"
        )
    elif mode == "full" and summary["environment"].get("gpu"):
        rows.append(
            f"{'total (one GPU run)':<30} {'':<7} {total:>8.1f} {GPU_FULL_TOTAL_TARGET:>7}  "
            f"{'yes' if total <= GPU_FULL_TOTAL_TARGET else 'NO'}"
        )
    rows.append(f"{'total':<30} {'':<7} {total:>8.1f}")
    env = summary["environment"]
    rows.append(
        f"machine: {env['machine_id']} ({env['cpu']}, {env['usable_cpus']} CPUs, torch {env['torch']}); "
        f"CPU features: {env.get('cpu_features')}"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    import full_run
    import verdict_counts

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="course-runtimes-") as tmp:
        out = args.out or Path(tmp) / "run"
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            sys.exit(f"--out {out}: cannot create that folder ({exc.strerror}): pass a folder you can write")
        run_args = [
            str(out),
            "--mode",
            args.mode,
            "--executor",
            args.executor,
            "--timeout",
            str(args.timeout),
            "--work",
            str(Path(tmp) / "work"),
        ]
        if args.only:
            run_args += ["--only", *args.only]
        status = full_run.main(run_args)
        summary = json.loads((out / "summary.json").read_text())
        verdicts = verdict_counts.table(out / "executed")[0] if (out / "executed").is_dir() else ""
    print(report(summary, args.mode))
    if verdicts:
        print("verdicts that did not decide (scripts/verdict_counts.py):\n" + verdicts)
    if args.write:
        print(f"run times written to {write_runtimes(summary, args.mode).relative_to(REPO)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
