"""Load experiments judged on repeated runs: **the run is the unit**.

The requests of one load run share one queue: when one waits, those behind it wait too, so their latencies are
not independent samples, and an interval computed as if they were is far too narrow (on the course's machines a
verdict built on one run's requests flipped sign between two loads). Policies, replica counts and scenarios are
therefore compared on **repeated runs**, as a benchmark compares rounds:

- every candidate runs once per *replicate*, the candidates alternated (the order rotating from one replicate to
  the next, as the rounds of :func:`helpers.timing.interleaved`), so drift hits them alike;
- each replicate has its own arrival trace, and every candidate of that replicate serves the same one;
- each run is summarised by one number (its p99, its median time to first token, its seconds per answered
  request: a time, lower is better), and :func:`helpers.verdict.verdict` pairs the runs replicate by replicate
  (:func:`helpers.verdict.run_interval`: Student's t interval of the per-run log ratios; a run's statistic is an
  aggregate of many requests, close to log-normal, and runs are few), decided only where the whole interval
  clears the verdict's 3 % margin;
- at least :data:`MIN_RUNS` replicates: a time budget shrinks each run (a shorter trace), never the replicates.
  Quick mode, a smoke test, takes :data:`QUICK_RUNS` (:func:`replicates`): its verdicts say too few runs.

Measured on a synthetic server whose truth is known (``tests/test_runs.py``): two identical policies (A/A) are
called different in under 5 % of trials, a real 20 % difference (A/B) is found in over 95 %, where a verdict on
the requests of one run each calls the A/A pair different far more often.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import check_callable, check_int
from .modes import pick
from .timing import Measurement, new_session
from .verdict import Verdict, verdict, winner

#: Replicates per candidate: with six, a real 20 % difference is found in over 95 % of trials on the synthetic server
#: of ``tests/test_runs.py`` (runs of about 100 requests), and identical policies are called different in under 5 %.
MIN_RUNS = 6
#: Replicates in quick mode (a smoke test: every code path runs, the verdicts say "too few samples").
QUICK_RUNS = 2


def replicates() -> int:
    """Replicates per candidate in this mode: :data:`MIN_RUNS` in full mode, :data:`QUICK_RUNS` in quick mode."""
    return pick(QUICK_RUNS, MIN_RUNS)


@dataclass(frozen=True)
class Runs:
    """The candidates of one load comparison, each run once per replicate on that replicate's trace
    (:func:`compare_runs`). ``results[label]`` are the runs themselves (whatever a candidate returned),
    ``values[label]`` each run's statistic (seconds, lower is better), ``statistic`` what that number is."""

    results: dict[str, list[Any]]
    values: dict[str, list[float]]
    statistic: str
    baseline: str
    session: str

    @property
    def labels(self) -> list[str]:
        return list(self.values)

    def measurement(self, label: str) -> Measurement:
        """One candidate's runs as a :class:`Measurement` whose samples are the runs' statistic (one per
        replicate, in replicate order), of this comparison's session: the verdict pairs them by replicate."""
        if label not in self.values:
            raise KeyError(f"{label!r} is not a candidate of this comparison: one of {self.labels}.")
        return Measurement(
            samples=tuple(self.values[label]),
            label=label,
            session=self.session,
            timer="runs",
            meta={"statistic": self.statistic},
        )

    def with_statistic(self, statistic: Callable[[Any], float], statistic_name: str) -> Runs:
        """The same runs judged on another statistic (e.g. end-to-end latency beside time to first token): still
        paired by replicate, in this comparison's session."""
        check_callable("statistic", statistic, "pass a function of one run that returns seconds.")
        values = {label: [float(statistic(run)) for run in runs] for label, runs in self.results.items()}
        return Runs(self.results, values, statistic_name, self.baseline, self.session)

    def verdict(self, candidate: str, against: str | None = None) -> Verdict:
        """``candidate``'s statistic against ``against``'s (default: the baseline), paired run by run."""
        return verdict(self.measurement(candidate), self.measurement(against or self.baseline), min_samples=MIN_RUNS)

    def verdicts(self) -> dict[str, Verdict]:
        return {label: self.verdict(label) for label in self.labels if label != self.baseline}

    def winner(self, among: Sequence[str] | None = None) -> tuple[str, list[Verdict]]:
        """The candidate with the lowest statistic, replicate by replicate, and its verdicts against the others."""
        labels = self.labels if among is None else list(among)
        if len(labels) == 1:
            return labels[0], []
        best, against = winner([self.measurement(label) for label in labels], min_samples=MIN_RUNS)
        return best.label, against

    def table(self) -> Any:
        """One row per candidate: the median of its runs' statistic, the lowest and highest run, and its verdict
        against the baseline (paired by replicate)."""
        import pandas as pd

        from .timing import format_seconds

        rows = []
        for label in self.labels:
            values = self.values[label]
            row = {
                "candidate": label,
                f"{self.statistic}, median of runs": format_seconds(float(np.median(values))),
                "lowest–highest run": f"{format_seconds(min(values))}–{format_seconds(max(values))}",
                "runs": len(values),
            }
            row["verdict"] = "baseline" if label == self.baseline else self.verdict(label).short()
            rows.append(row)
        return pd.DataFrame(rows).set_index("candidate")


def compare_runs(
    candidates: Mapping[str, Callable[[int], Any]],
    statistic: Callable[[Any], float],
    *,
    statistic_name: str,
    runs: int | None = None,
    baseline: str | None = None,
    progress: str | None = None,
) -> Runs:
    """Run every candidate ``runs`` times (default :func:`replicates`), alternately; return the :class:`Runs`.

    ``candidates`` maps a label to a function of the replicate's index (0, 1, …) that performs one run on that
    replicate's arrival trace (every candidate is given the same index, so the same trace: build it from a seed
    derived from the index) and returns the run; ``statistic(run)`` is that run's number, in seconds, lower is
    better (``statistic_name`` says what it is: ``"p99 latency"``). The order of the candidates rotates from one
    replicate to the next. ``progress`` labels a progress bar (:func:`helpers.progress.bar`)."""
    from .progress import bar

    if not isinstance(candidates, Mapping) or len(candidates) < 2:
        raise ValueError("compare_runs needs a dict of at least two labelled run functions: {'A': run_a, 'B': run_b}.")
    for name, fn in candidates.items():
        check_callable(f"candidates[{name!r}]", fn, "map each label to a function of the replicate index.")
    check_callable("statistic", statistic, "pass a function of one run that returns seconds, e.g. its p99.")
    runs = replicates() if runs is None else runs
    check_int(
        "runs",
        runs,
        replicates(),
        hint=f"at least {replicates()} replicates ({MIN_RUNS} in full mode: the fewest a 95 % paired interval needs)",
    )
    if not isinstance(statistic_name, str) or not statistic_name.strip():
        raise ValueError("statistic_name= says what each run's number is, e.g. 'p99 latency'.")
    labels = list(candidates)
    if baseline is not None and baseline not in candidates:
        raise ValueError(f"baseline {baseline!r} is not one of the candidates {labels}.")
    results: dict[str, list[Any]] = {label: [] for label in labels}
    values: dict[str, list[float]] = {label: [] for label in labels}
    with bar(total=runs * len(labels), desc=progress or f"runs of {', '.join(labels)}", unit="run") as shown:
        for r in range(runs):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                run = candidates[label](r)
                value = float(statistic(run))
                if not value > 0 or not np.isfinite(value):
                    raise ValueError(f"statistic gave {value!r} for a run of {label!r}: it must be a positive time.")
                results[label].append(run)
                values[label].append(value)
                shown.update(1)
    return Runs(results, values, statistic_name, baseline or labels[0], new_session("runs"))


def rising_with_load(loads: Sequence[float], runs_by_load: Sequence[Sequence[float]], what: str = "p99") -> str | None:
    """A load sweep's check: one line naming each step where the statistic (``what``, one value per run, at
    least :data:`MIN_RUNS` runs per load) *fell* as the offered load rose, beyond the noise of the runs (a
    verdict on the runs of the two loads, each run the unit); None when it never did. A latency that falls with
    load is not the server's: a run was disturbed, or the runs are too short to hold a queue."""
    if len(loads) != len(runs_by_load) or len(loads) < 2:
        raise ValueError("pass two or more loads, each with its runs' values (one list per load).")
    drops = []
    for (a, runs_a), (b, runs_b) in zip(
        zip(loads, runs_by_load, strict=True), list(zip(loads, runs_by_load, strict=True))[1:], strict=False
    ):
        why = "each value is one run, the run is the unit"
        v = verdict(list(runs_b), list(runs_a), independent=why, margin=0, min_samples=MIN_RUNS)
        if v.faster:
            drops.append(f"{a:g} → {b:g} ({v.ratio:.2f}× lower)")
    if not drops:
        return None
    return (
        f"⚠ the {what} fell where the load rose: {', '.join(drops)}, beyond the noise of the runs; a latency "
        "that falls with load is not the server's: a run was disturbed, or the runs are too short to build a queue."
    )
