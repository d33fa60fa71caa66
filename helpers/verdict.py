"""The one function that decides every measured comparison the course prints: faster, slower, within noise,
or too few samples.

**The statistic.** The speed-up of a candidate over a baseline is the ratio of their median times
(``baseline.median / candidate.median``: above 1, the candidate is faster). Its uncertainty is a
**bootstrap percentile interval** (95 % by default): both sample sets are resampled with replacement
``resamples`` times and the ratio of medians recomputed each time. The verdict is

* *faster* when the whole interval is above 1, *slower* when it is wholly below 1,
* *within noise* when it contains 1 (the data cannot tell them apart: no threshold of our own decides),
* *too few samples* when either side has fewer than ``min_samples`` (default :data:`MIN_SAMPLES`) samples.

When both measurements were taken interleaved (:func:`helpers.timing.interleaved`, same ``group`` and the
same number of rounds), the speed-up is the median of the per-round ratios and the bootstrap resamples
*rounds*: drift between rounds (a laptop clocking down, another program starting) moves both sides of a
round alike and cancels out in its ratio.

The resampling is seeded, so the same samples always give the same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .checks import check_int, check_number
from .timing import MIN_SAMPLES, Measurement

#: Fewest samples per side for a verdict (the same minimum ``benchmark`` fills its budget to); below it the
#: answer is "too few samples".
MIN_SAMPLES = MIN_SAMPLES
#: Confidence of the interval.
CONFIDENCE = 0.95
#: Bootstrap resamples.
RESAMPLES = 2000

Outcome = Literal["faster", "slower", "within noise", "too few samples"]


@dataclass(frozen=True)
class Verdict:
    """A candidate judged against a baseline. ``ratio`` is the speed-up (baseline time / candidate time) and
    ``low``–``high`` its interval (NaN when there are too few samples)."""

    candidate: str
    baseline: str
    outcome: Outcome
    ratio: float
    low: float
    high: float
    confidence: float
    paired: bool
    n: tuple[int, int]
    min_samples: int

    @property
    def faster(self) -> bool:
        return self.outcome == "faster"

    @property
    def slower(self) -> bool:
        """A regression: the candidate takes longer, beyond the noise."""
        return self.outcome == "slower"

    @property
    def decided(self) -> bool:
        return self.outcome in ("faster", "slower")

    @property
    def interval(self) -> str:
        digits = 3 if self.decided and (round(self.low, 2) == 1 or round(self.high, 2) == 1) else 2
        return f"{self.confidence:.0%} interval {self.low:.{digits}f}–{self.high:.{digits}f}×"

    def sentence(self) -> str:
        """One sentence a notebook can print as it is."""
        if self.outcome == "too few samples":
            return (
                f"too few samples to compare {self.candidate} with {self.baseline} ({self.n[0]} and "
                f"{self.n[1]}; at least {self.min_samples} each are needed): time them again with more repeats "
                "or a larger budget."
            )
        how = " (interleaved)" if self.paired else ""
        if self.outcome == "faster":
            return f"{self.candidate} is {self.ratio:.2f}× faster than {self.baseline}{how} ({self.interval} speed-up)."
        if self.outcome == "slower":  # the interval of the factor the sentence names: the slowdown
            low, high = 1 / self.high, 1 / self.low
            digits = 3 if round(low, 2) == 1 or round(high, 2) == 1 else 2
            return (
                f"{self.candidate} is {1 / self.ratio:.2f}× slower than {self.baseline}{how} "
                f"({self.confidence:.0%} interval {low:.{digits}f}–{high:.{digits}f}× slowdown)."
            )
        return (
            f"{self.candidate} and {self.baseline} are within noise of each other{how}: a {self.ratio:.2f}× "
            f"speed-up with a {self.interval} that includes 1."
        )

    def short(self) -> str:
        """A table cell: ``'1.83× faster'``, ``'1.25× slower'``, ``'within noise'``, ``'too few samples'``."""
        if self.outcome == "faster":
            return f"{self.ratio:.2f}× faster"
        if self.outcome == "slower":
            return f"{1 / self.ratio:.2f}× slower"
        return self.outcome

    def phrase(self) -> str:
        """A clause naming the baseline: ``'1.83× faster than eager'``, ``'within noise of eager'``,
        ``'too few samples to compare with eager'``."""
        if self.decided:
            return f"{self.short()} than {self.baseline}"
        if self.outcome == "within noise":
            return f"within noise of {self.baseline}"
        return f"too few samples to compare with {self.baseline}"

    def __str__(self) -> str:
        return self.sentence()


def _samples(x: Measurement | Sequence[float], name: str) -> np.ndarray:
    """The positive samples. A Measurement may hold zeros (a timer below its resolution): they cannot enter a
    ratio, so they do not count towards the minimum; a list passed by hand must be positive."""
    if isinstance(x, Measurement):
        values = np.asarray(x.samples, dtype=np.float64)
        return values[values > 0]
    try:
        values = np.asarray(list(x), dtype=np.float64)
    except (TypeError, ValueError):
        values = np.array([np.nan])
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"{name} must be a Measurement or a list of positive, finite times in seconds.")
    return values


def verdict(
    candidate: Measurement | Sequence[float],
    baseline: Measurement | Sequence[float],
    *,
    candidate_label: str | None = None,
    baseline_label: str | None = None,
    confidence: float = CONFIDENCE,
    min_samples: int = MIN_SAMPLES,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Verdict:
    """Judge ``candidate`` against ``baseline`` (two Measurements, or two lists of times in seconds): the
    speed-up, its bootstrap interval, and faster / slower / within noise / too few samples (module docstring)."""
    check_number("confidence", confidence, positive=True, hint="pass a probability such as 0.95.")
    if not confidence < 1:
        raise ValueError(f"confidence={confidence!r} is not allowed: pass a probability below 1, such as 0.95.")
    check_int("min_samples", min_samples, 3, hint=f"{MIN_SAMPLES} is the course's minimum.")
    check_int("resamples", resamples, 100, hint="2000 is plenty.")
    check_int("seed", seed, 0, hint="any integer ≥ 0; the same seed gives the same interval.")
    c, b = _samples(candidate, "candidate"), _samples(baseline, "baseline")
    c_label = candidate_label or (candidate.label if isinstance(candidate, Measurement) else "") or "candidate"
    b_label = baseline_label or (baseline.label if isinstance(baseline, Measurement) else "") or "baseline"
    paired = (
        isinstance(candidate, Measurement)
        and isinstance(baseline, Measurement)
        and candidate.group is not None
        and candidate.group == baseline.group
        and candidate.n == baseline.n
    )
    if paired:  # keep the rounds where both sides have a positive sample, still pairwise
        rc, rb = np.asarray(candidate.samples), np.asarray(baseline.samples)
        both = (rc > 0) & (rb > 0)
        c, b = rc[both], rb[both]
    if min(len(c), len(b)) == 0:
        ratio = math.nan
    else:
        ratio = float(np.median(b / c) if paired else np.median(b) / np.median(c))
    common = {
        "candidate": c_label,
        "baseline": b_label,
        "ratio": ratio,
        "confidence": confidence,
        "paired": paired,
        "n": (len(c), len(b)),
        "min_samples": min_samples,
    }
    if min(len(c), len(b)) < min_samples:
        return Verdict(outcome="too few samples", low=math.nan, high=math.nan, **common)
    rng = np.random.default_rng(seed)
    if paired:
        rounds = rng.integers(0, len(c), size=(resamples, len(c)))
        boot = np.median((b / c)[rounds], axis=1)
    else:
        boot = np.median(b[rng.integers(0, len(b), size=(resamples, len(b)))], axis=1) / np.median(
            c[rng.integers(0, len(c), size=(resamples, len(c)))], axis=1
        )
    tail = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(boot, [tail, 1 - tail]))
    outcome: Outcome = "faster" if low > 1 else "slower" if high < 1 else "within noise"
    return Verdict(outcome=outcome, low=low, high=high, **common)


def winner(measurements: Sequence[Measurement], **kwargs: object) -> tuple[Measurement, list[Verdict]]:
    """The fastest measurement by median, and its verdict against each other one: name a winner only where
    those verdicts are all *faster* (``all(v.faster for v in verdicts)``)."""
    from .timing import check_measurements

    measurements = check_measurements("measurements", measurements)
    if len(measurements) < 2:
        raise ValueError("winner() needs at least two Measurements to choose between.")
    best = min(measurements, key=lambda m: m.median)
    return best, [verdict(best, m, **kwargs) for m in measurements if m is not best]  # type: ignore[arg-type]
