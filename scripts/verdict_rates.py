"""How often the verdict is wrong on this machine: a script, not a test (timings are never asserted in tests).

    .venv/bin/python scripts/verdict_rates.py [--runs 50] [--budget 0.6]

Three experiments, each ``--runs`` times, on real timings of ``torch.mm``:

* **A/A, one session**: the same call as two candidates of :func:`helpers.time_together`. Any decided verdict
  is a false alarm; the bar is ≤ 5 % of runs.
* **A/B, one session**: the call against the same call with 1.3× the rows (1.3× the work). The bar is the
  faster one found in ≥ 95 % of runs.
* **A/A, two sessions**: the same call in two separate ``benchmark`` calls, judged as if independent samples
  were right (``independent=``): what the course did before one comparison became one session.

Prints each rate with the run's machine; the numbers go in the session note, not into a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: its shared command-line types
from cli_types import positive_float, positive_int  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import torch

    import helpers

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=positive_int, default=50)
    parser.add_argument("--budget", type=positive_float, default=0.6, help="seconds per comparison")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    b = torch.randn(256, 256)
    a, a_more = torch.randn(2000, 256), torch.randn(2600, 256)  # 1.3× the rows: 1.3× the work

    def one() -> torch.Tensor:
        return a @ b

    def more() -> torch.Tensor:
        return a_more @ b

    aa = ab = separate = 0
    ratios = []
    for _ in range(args.runs):
        aa += helpers.time_together({"a": one, "a again": one}, budget=args.budget).verdict("a again").decided
        v = helpers.time_together({"1.3× rows": more, "1× rows": one}, budget=args.budget).verdict("1× rows")
        ab += v.faster
        ratios.append(v.ratio)
        m1 = helpers.benchmark(one, label="a", budget=args.budget / 2)
        m2 = helpers.benchmark(one, label="a again", budget=args.budget / 2)
        separate += helpers.verdict(m2, m1, independent="what the course did before: two cells").decided
    n = args.runs
    print(helpers.environment_report())
    print(f"A/A, one session:   called different in {aa}/{n} runs ({aa / n:.0%}; the bar: ≤ 5 %)")
    print(
        f"A/B, one session:   1.3× the work found faster in {ab}/{n} runs ({ab / n:.0%}; the bar: ≥ 95 %); "
        f"measured speed-ups {min(ratios):.2f}–{max(ratios):.2f}× (median {sorted(ratios)[n // 2]:.2f}×)"
    )
    print(f"A/A, two sessions:  called different in {separate}/{n} runs ({separate / n:.0%}): why they are refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
