"""The README's table of reference results, generated from data/reference/*.jsonl.

    .venv/bin/python scripts/reference_table.py            # print the table
    .venv/bin/python scripts/reference_table.py --write    # replace it in README.md (between the markers)
    .venv/bin/python scripts/reference_table.py --check    # exit 1 if README.md is out of date (a test runs this)

One row per reference machine: a few headline numbers from the notebooks, each looked up by its notebook,
experiment and variant, so the table can never disagree with the shipped results. A number a machine did not
measure (no GPU, or a notebook it did not run) shows as "–".
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from helpers.results import read_records  # noqa: E402
from helpers.roofline import (  # noqa: E402  (the names notebook 00 records the roofline under)
    BANDWIDTH_VARIANT,
    DISPATCH_VARIANT,
    ROOF_EXPERIMENT,
    ROOF_NOTEBOOK,
    matmul_variant,
)

REFERENCE = REPO / "data" / "reference"
README = REPO / "README.md"
START, END = "<!-- reference-table:start -->", "<!-- reference-table:end -->"

Records = list[dict]


def _find(records: Records, notebook: str, experiment: str, variant: str) -> dict | None:
    matches = [r for r in records if (r["notebook"], r["experiment"], r["variant"]) == (notebook, experiment, variant)]
    return matches[-1] if matches else None


def _metric(notebook: str, experiment: str, variant: str, key: str, scale: float) -> Callable[[Records], float | None]:
    def get(records: Records) -> float | None:
        r = _find(records, notebook, experiment, variant)
        value = (r or {}).get("metrics", {}).get(key)
        return value * scale if value is not None else None

    return get


def _median(records: Records, notebook: str, experiment: str, variant: str) -> float | None:
    r = _find(records, notebook, experiment, variant)
    return (r.get("measurement") or {}).get("median") if r else None


def _ratio(notebook: str, experiment: str, slow: str, fast: str) -> Callable[[Records], float | None]:
    def get(records: Records) -> float | None:
        a, b = _median(records, notebook, experiment, slow), _median(records, notebook, experiment, fast)
        return a / b if a and b else None

    return get


def _best_throughput(records: Records) -> float | None:
    rows = [
        r
        for r in records
        if r["notebook"] == "03_batch_sizing"
        and r["experiment"] == "sweep"
        and r["variant"] == "resnet18"
        and (r.get("measurement") or {}).get("median")
    ]
    return max((r["batch"] / r["measurement"]["median"] for r in rows), default=None)


COLUMNS: list[tuple[str, Callable[[Records], float | None], str]] = [
    (
        "fp32 matmul (TFLOP/s)",
        _metric(ROOF_NOTEBOOK, ROOF_EXPERIMENT, matmul_variant("fp32"), "flops", 1e-12),
        "{:.2f}",
    ),
    (
        "bf16 matmul (TFLOP/s)",
        _metric(ROOF_NOTEBOOK, ROOF_EXPERIMENT, matmul_variant("bf16"), "flops", 1e-12),
        "{:.1f}",
    ),
    ("memory (GB/s)", _metric(ROOF_NOTEBOOK, ROOF_EXPERIMENT, BANDWIDTH_VARIANT, "bytes_per_s", 1e-9), "{:.0f}"),
    (
        "per-op launch/dispatch (µs)",
        _metric(ROOF_NOTEBOOK, ROOF_EXPERIMENT, DISPATCH_VARIANT, "seconds", 1e6),
        "{:.1f}",
    ),
    (
        "resnet18, 1 image (ms)",
        lambda r: (lambda m: m * 1e3 if m else None)(_median(r, "00_environment", "timing", "resnet18 steady state")),
        "{:.2f}",
    ),
    ("resnet18 best throughput (img/s)", _best_throughput, "{:,.0f}"),
    (
        "fused pointwise chain vs eager",
        _ratio("04_compilation_fusion", "fusion", "pointwise, eager", "pointwise, compiled"),
        "{:.1f}×",
    ),
    (
        "CUDA graph vs eager, MLP batch 1",
        _ratio("04_compilation_fusion", "cuda graphs", "eager", "cuda graph"),
        "{:.1f}×",
    ),
]


def load(path: Path) -> Records:
    """The file's records, read with helpers' tolerant loader (a torn line is skipped with a warning)."""
    return read_records(path)


def table(reference: Path = REFERENCE) -> str:
    header = ["machine", "torch", "notebooks", *[c[0] for c in COLUMNS]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for path in sorted(reference.glob("*.jsonl")):
        records = load(path)
        if not records:
            continue
        torch_version = records[0].get("versions", {}).get("torch", "?")
        notebooks = sorted({r["notebook"][:2] for r in records})
        cells = [f"`{path.stem}`", torch_version, f"{notebooks[0]}–{notebooks[-1]}"]
        for _, get, fmt in COLUMNS:
            value = get(records)
            cells.append(fmt.format(value) if value is not None else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from generated_blocks import main as sync

    return sync(__doc__.split("\n")[0], {README: (START, END, table())}, "scripts/reference_table.py", argv)


if __name__ == "__main__":
    sys.exit(main())
