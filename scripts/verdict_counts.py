"""Count the verdicts that did not decide in executed notebooks: a script, not a test.

    .venv/bin/python scripts/verdict_counts.py DIR [--strict]

``DIR`` holds executed copies (``scripts/full_run.py``'s ``executed/`` folder, or ``runtimes.py --out``). For
each notebook it counts, in the cells' outputs, the verdicts printed as **too few samples**, **within noise**
(including "the same time within ±3 %"), and **separate sessions** (a comparison of two cells' measurements,
which the verdict refuses to decide). A result a notebook states must not rest on "too few samples": with
``--strict`` the script exits 1 when any is printed outside a cell tagged ``teaches-noise`` (a cell that shows
noise on purpose). ``scripts/runtimes.py`` prints the same table after each run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

PATTERNS = {
    "too few samples": re.compile(r"too few (samples|energy windows)", re.IGNORECASE),
    "within noise": re.compile(r"within noise|take the same time within|same within ±", re.IGNORECASE),
    "separate sessions": re.compile(r"separate sessions", re.IGNORECASE),
}
ON_PURPOSE = "teaches-noise"


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    data = output.get("data", {})
    return "".join(data.get("text/plain", "")) + "".join(data.get("text/html", ""))


def count(path: Path) -> dict[str, int]:
    """Occurrences of each pattern in one executed notebook's outputs, plus those in cells tagged on purpose."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    counts = dict.fromkeys([*PATTERNS, f"too few samples ({ON_PURPOSE})"], 0)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        text = "\n".join(_text(o) for o in cell.get("outputs", []))
        on_purpose = ON_PURPOSE in cell.get("metadata", {}).get("tags", [])
        for name, pattern in PATTERNS.items():
            hits = len(pattern.findall(text))
            key = f"too few samples ({ON_PURPOSE})" if name == "too few samples" and on_purpose else name
            counts[key] += hits
    return counts


def table(folder: Path) -> tuple[str, dict[str, int]]:
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise SystemExit(f"no executed notebooks (NN_name.ipynb) in {folder}: pass the executed/ folder of a run")
    names = [*PATTERNS, f"too few samples ({ON_PURPOSE})"]
    rows = [f"{'notebook':<30} " + " ".join(f"{n:>18}" for n in names)]
    totals = dict.fromkeys(names, 0)
    for path in paths:
        c = count(path)
        rows.append(f"{path.stem:<30} " + " ".join(f"{c[n]:>18}" for n in names))
        for n in names:
            totals[n] += c[n]
    rows.append(f"{'total':<30} " + " ".join(f"{totals[n]:>18}" for n in names))
    return "\n".join(rows), totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="folder of executed notebooks")
    parser.add_argument("--strict", action="store_true", help="exit 1 on 'too few samples' outside tagged cells")
    args = parser.parse_args(argv)
    text, totals = table(args.folder)
    print(text)
    return 1 if args.strict and totals["too few samples"] else 0


if __name__ == "__main__":
    sys.exit(main())
