"""The one judge of every measured comparison the course prints — faster, slower, within noise, too few samples,
or *separate sessions* — and the one way to time a comparison: all its candidates together, in one session.

**One comparison, one session.** On the machines the course runs on, the same function timed in two cells
differs by up to ~20 % (drift: clocks, other programs, caches); timed in two separate ``benchmark`` calls and
compared, it was called different 11 times in 20. So :func:`time_together` times every candidate alternately,
round by round (:func:`helpers.timing.interleaved`), and returns a :class:`Comparison` whose measurements,
verdicts, speed-ups and table all come from that one session. :func:`verdict` on two measurements of different
sessions says so (outcome ``"separate sessions"``) instead of deciding — unless the caller states, with
``independent="why"``, that independent samples are right (each sample a fresh process of a cold start, or one
load run).

**The statistic, paired (one session).** The speed-up is the **median of the per-round ratios**
(baseline time / candidate time: above 1, the candidate is faster); drift moves both sides of a round alike and
cancels in its ratio. Its interval is the **order-statistic (sign-test) interval of that median**: with the
``n`` ratios sorted, ``[r_k, r_{n+1-k}]`` for the largest ``k`` with ``P(Binomial(n, ½) < k) ≤ (1 − confidence)/2``.
It assumes nothing about the shape of the noise, one outlier moves it by one rank only, and its coverage is at
least the confidence for any continuous distribution of ratios — exactly, not asymptotically. At 95 % it needs 6
rounds (:data:`helpers.timing.MIN_SAMPLES`); below, the answer is "too few samples". With 6–8 rounds the
interval runs from the lowest ratio to the highest, so one outlying round can still decide: a comparison
(:func:`time_together`) therefore takes at least 10 (:data:`helpers.timing.MIN_ROUNDS`), where it runs from the
2nd to the 9th.

**The statistic, independent samples.** The speed-up is the Hodges–Lehmann estimate (the median of all pairwise
ratios of a baseline sample to a candidate sample) with the Mann–Whitney interval that goes with it (exact
counts up to 20 samples a side, the normal approximation beyond; a bootstrap of the ratio of medians for very
large samples such as thousands of request latencies).

**The decision.** *Faster* when the interval lies wholly above 1 **and** the speed-up is at least
:data:`MARGIN` (3 %) away from 1; *slower* likewise below; otherwise *within noise*. The margin is practical
equivalence: a difference under 3 % is below what any lesson here rests on, and a long run on a quiet machine
can make such a difference "significant" without making it matter. Where the whole interval lies inside
±3 %, the sentence says the two take the same time.

Measured on the course's machine (``scripts/verdict_rates.py``): the same function as two candidates (A/A) and a
real 1.3× difference (A/B), 50 times each; the rates are in the 2026-12-03 session note. ``tests/test_verdict.py``
checks the same rates on synthetic samples.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from .checks import check_callable, check_int, check_number
from .device import Load
from .modes import course_mode
from .timing import (
    _ADVICE,
    MIN_ROUNDS,
    MIN_SAMPLES,
    MOSTLY_NOISY,
    Measurement,
    check_measurements,
    format_seconds,
    interleaved,
)

#: Confidence of the interval.
CONFIDENCE = 0.95
#: Bootstrap resamples (independent samples of thousands a side only).
RESAMPLES = 2000
#: Practical equivalence: a speed-up within this fraction of 1 is never called faster or slower.
MARGIN = 0.03
#: Above this many pairs (samples × samples) independent samples are judged by a bootstrap of medians.
_MAX_PAIRS = 250_000

Outcome = Literal["faster", "slower", "within noise", "too few samples", "separate sessions"]


@dataclass(frozen=True)
class Verdict:
    """A candidate judged against a baseline. ``ratio`` is the speed-up (baseline time / candidate time) and
    ``low``–``high`` its interval (NaN when there are too few samples or the sessions differ). ``paired`` is
    True for one session (per-round ratios); ``independent`` holds the reason given for independent samples."""

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
    independent: str | None = None
    margin: float = MARGIN
    unit: str = "round"  # what was paired: rounds of one session, or "run"s (repeated load runs, helpers.runs)

    @property
    def faster(self) -> bool:
        return self.outcome == "faster"

    @property
    def slower(self) -> bool:
        """A regression: the candidate takes longer, beyond the noise and the margin."""
        return self.outcome == "slower"

    @property
    def decided(self) -> bool:
        return self.outcome in ("faster", "slower")

    @property
    def equivalent(self) -> bool:
        """The whole interval lies within ±:data:`MARGIN` of 1: the two take the same time, as far as it matters."""
        return self.outcome == "within noise" and 1 / (1 + self.margin) <= self.low and self.high <= 1 + self.margin

    @property
    def interval(self) -> str:
        digits = 3 if self.decided and (round(self.low, 2) == 1 or round(self.high, 2) == 1) else 2
        return f"{self.confidence:.0%} interval {self.low:.{digits}f}–{self.high:.{digits}f}×"

    def _how(self) -> str:
        if self.paired and self.unit == "run":
            return f" ({self.n[0]} runs each, alternated, paired by arrival trace)"
        return " (interleaved)" if self.paired else f" (independent runs: {self.independent})"

    def sentence(self) -> str:
        """One sentence a notebook can print as it is."""
        if self.outcome == "separate sessions":
            return (
                f"{self.candidate} and {self.baseline} were timed in separate sessions, so they are not compared: "
                "drift between cells can exceed the difference. Time them together (helpers.time_together)."
            )
        if self.outcome == "too few samples":
            return (
                f"too few samples to compare {self.candidate} with {self.baseline} ({self.n[0]} and "
                f"{self.n[1]}; at least {self.min_samples} each are needed for a {self.confidence:.0%} interval): "
                "time them again with more rounds or smaller work."
            )
        if self.outcome == "faster":
            how = self._how()
            return f"{self.candidate} is {self.ratio:.2f}× faster than {self.baseline}{how} ({self.interval} speed-up)."
        if self.outcome == "slower":  # the interval of the factor the sentence names: the slowdown
            low, high = 1 / self.high, 1 / self.low
            digits = 3 if round(low, 2) == 1 or round(high, 2) == 1 else 2
            return (
                f"{self.candidate} is {1 / self.ratio:.2f}× slower than {self.baseline}{self._how()} "
                f"({self.confidence:.0%} interval {low:.{digits}f}–{high:.{digits}f}× slowdown)."
            )
        if self.equivalent:
            return (
                f"{self.candidate} and {self.baseline} take the same time within ±{self.margin:.0%}{self._how()}: "
                f"a {self.ratio:.2f}× speed-up, {self.interval}."
            )
        if self._off_one:  # off 1, but not clear of the ±margin band
            return (
                f"{self.candidate} against {self.baseline} is undecided{self._how()}: a {self.ratio:.2f}× speed-up "
                f"whose {self.interval} excludes 1 but reaches into the ±{self.margin:.0%} band a verdict must "
                f"clear: more {self.unit}s would decide it."
            )
        return (
            f"{self.candidate} and {self.baseline} are within noise of each other{self._how()}: a {self.ratio:.2f}× "
            f"speed-up with a {self.interval} that includes 1."
        )

    @property
    def _off_one(self) -> bool:
        """Within noise, yet the interval excludes 1: a difference too small to clear the ±margin band."""
        return self.outcome == "within noise" and not self.equivalent and (self.low > 1 or self.high < 1)

    def short(self) -> str:
        """A table cell: ``'1.83× faster'``, ``'1.25× slower'``, ``'within noise'``, ``'same within ±3%'``,
        ``'too few samples'``, ``'separate sessions'``."""
        if self.outcome == "faster":
            return f"{self.ratio:.2f}× faster"
        if self.outcome == "slower":
            return f"{1 / self.ratio:.2f}× slower"
        if self.equivalent:
            return f"same within ±{self.margin:.0%}"
        if self._off_one:
            return f"undecided (near the ±{self.margin:.0%} band)"
        return self.outcome

    def phrase(self) -> str:
        """A clause naming the baseline: ``'1.83× faster than eager'``, ``'within noise of eager'``,
        ``'too few samples to compare with eager'``, ``'not compared with eager (separate sessions)'``."""
        if self.decided:
            return f"{self.short()} than {self.baseline}"
        if self.equivalent:
            return f"the same time as {self.baseline} within ±{self.margin:.0%}"
        if self._off_one:
            return (
                f"undecided against {self.baseline} (its interval excludes 1 but reaches the ±{self.margin:.0%} band)"
            )
        if self.outcome == "within noise":
            return f"within noise of {self.baseline}"
        if self.outcome == "separate sessions":
            return f"not compared with {self.baseline} (separate sessions)"
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


def _binomial_rank(n: int, confidence: float) -> int:
    """The largest k with P(Binomial(n, ½) < k) ≤ (1 − confidence)/2 (0: no interval reaches the confidence)."""
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    for j in range(n // 2 + 1):
        below += math.comb(n, j) / 2**n  # P(B ≤ j)
        if below > tail:
            break
        k = j + 1
    return k


def _nonnegative(name: str, values: Any, what: str) -> np.ndarray:
    """``values`` as a 1-d float array of finite numbers ≥ 0 (empty allowed), or one line saying what to pass."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.ndim != 1 or not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError(f"{name} must be a list of {what}.")
    return array


def _check_confidence(confidence: float) -> None:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} is not allowed: pass a probability between 0 and 1, e.g. 0.95.")


def paired_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Median of per-round ratios and its order-statistic (sign-test) interval: ``(median, low, high)``, with
    NaN bounds where ``len(ratios)`` is too small for ``confidence`` (fewer than 6 at 95 %)."""
    _check_confidence(confidence)
    r = np.sort(_nonnegative("ratios", ratios, "per-round speed-ups: finite numbers ≥ 0"))
    k = _binomial_rank(len(r), confidence)
    median = float(np.median(r)) if len(r) else math.nan
    if k == 0:
        return median, math.nan, math.nan
    return median, float(r[k - 1]), float(r[len(r) - k])


@lru_cache(maxsize=256)
def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile (``P(T ≤ t) = p``, ``p > ½``) with ``df`` degrees of freedom: bisection on the CDF,
    itself the density integrated by Simpson's rule (no SciPy needed; error far below what a verdict rounds to)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        n = 2000
        h = x / n
        ys = [math.exp(log_norm - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(n + 1)]
        return 0.5 + h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))

    low, high = 0.0, 1.0
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def run_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """The speed-up of repeated runs and its interval, from per-run ratios (baseline / candidate, one per
    replicate): the geometric mean and Student's t interval on the log ratios, ``(ratio, low, high)``. Each run's
    statistic is an aggregate of many requests, so its log is close to normal, and runs are few: where the sign
    test of rounds needs 6 and has little power at that count, the t interval decides from 3 (NaN bounds below)."""
    _check_confidence(confidence)
    r = _nonnegative("ratios", ratios, "per-run speed-ups: finite numbers > 0")
    if len(r) == 0 or np.any(r <= 0):
        return math.nan, math.nan, math.nan
    logs = np.log(r)
    mean = float(np.mean(logs))
    if len(r) < 3:
        return math.exp(mean), math.nan, math.nan
    half = _t_quantile(1 - (1 - confidence) / 2, len(r) - 1) * float(np.std(logs, ddof=1)) / math.sqrt(len(r))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


@lru_cache(maxsize=512)
def _mann_whitney_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings give each value of the Mann–Whitney U (0 … n·m)."""
    if n == 0 or m == 0:
        return (1,)
    a, b = _mann_whitney_counts(n - 1, m), _mann_whitney_counts(n, m - 1)
    out = [0] * (n * m + 1)
    for u, c in enumerate(a):  # the largest value is from the first sample: it beats all m of the other
        out[u + m] += c
    for u, c in enumerate(b):
        out[u] += c
    return tuple(out)


def _mann_whitney_rank(n: int, m: int, confidence: float) -> int:
    """The largest k with P(U < k) ≤ (1 − confidence)/2 under no difference (0: none reaches the confidence)."""
    tail = (1 - confidence) / 2
    if n <= 20 and m <= 20:
        counts = _mann_whitney_counts(n, m)
        total, below, k = math.comb(n + m, n), 0, 0
        for u, c in enumerate(counts):
            below += c
            if below / total > tail:
                break
            k = u + 1
        return k
    z = float(np.sqrt(2) * _erfinv(confidence))
    return max(0, math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12)))


def _erfinv(y: float) -> float:
    """The inverse error function, by Newton steps on math.erf (only the normal quantile needs it)."""
    x = 0.0
    for _ in range(60):
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


def independent_interval(
    baseline: np.ndarray,
    candidate: np.ndarray,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Speed-up of independent samples and its interval: ``(ratio, low, high)`` (NaN bounds where the samples
    are too few for ``confidence``). Hodges–Lehmann with the Mann–Whitney interval on log times; a bootstrap of
    the ratio of medians above ``_MAX_PAIRS`` pairs."""
    _check_confidence(confidence)
    check_int("resamples", resamples, 100, hint="2000 is plenty.")
    baseline = _nonnegative("baseline", baseline, "times in seconds: finite and ≥ 0")
    candidate = _nonnegative("candidate", candidate, "times in seconds: finite and ≥ 0")
    n, m = len(baseline), len(candidate)
    if n * m > _MAX_PAIRS:
        rng = np.random.default_rng(seed)
        boot = np.median(baseline[rng.integers(0, n, size=(resamples, n))], axis=1) / np.median(
            candidate[rng.integers(0, m, size=(resamples, m))], axis=1
        )
        tail = (1 - confidence) / 2
        low, high = np.quantile(boot, [tail, 1 - tail])
        return float(np.median(baseline) / np.median(candidate)), float(low), float(high)
    d = np.sort((np.log(baseline)[:, None] - np.log(candidate)[None, :]).ravel())
    ratio = float(np.exp(np.median(d)))
    k = _mann_whitney_rank(n, m, confidence)
    if k == 0:
        return ratio, math.nan, math.nan
    return ratio, float(np.exp(d[k - 1])), float(np.exp(d[len(d) - k]))


def _decide(ratio: float, low: float, high: float, margin: float) -> Outcome:
    if low > 1 and ratio >= 1 + margin:
        return "faster"
    if high < 1 and ratio <= 1 / (1 + margin):
        return "slower"
    return "within noise"


def verdict(
    candidate: Measurement | Sequence[float],
    baseline: Measurement | Sequence[float],
    *,
    independent: str | None = None,
    candidate_label: str | None = None,
    baseline_label: str | None = None,
    confidence: float = CONFIDENCE,
    min_samples: int = MIN_SAMPLES,
    margin: float = MARGIN,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Verdict:
    """Judge ``candidate`` against ``baseline`` (two Measurements, or two lists of times in seconds): the
    speed-up, its interval, and faster / slower / within noise / too few samples (module docstring).

    Two measurements of one session (:func:`time_together`, :func:`helpers.timing.interleaved`) are compared
    round by round. Anything else — two ``benchmark`` calls, lists — is **not** compared (outcome "separate
    sessions") unless ``independent`` says why independent samples are right, e.g.
    ``independent="each sample is a fresh process"`` or ``"each is one load run on the same trace"``."""
    check_number("confidence", confidence, positive=True, hint="pass a probability such as 0.95.")
    if not confidence < 1:
        raise ValueError(f"confidence={confidence!r} is not allowed: pass a probability below 1, such as 0.95.")
    check_int("min_samples", min_samples, 3, hint=f"{MIN_SAMPLES} is the course's minimum.")
    check_number("margin", margin, minimum=0, hint="pass a fraction such as 0.03 (3 %), or 0 for none.")
    check_int("resamples", resamples, 100, hint="2000 is plenty.")
    check_int("seed", seed, 0, hint="any integer ≥ 0; the same seed gives the same interval.")
    if independent is not None and (not isinstance(independent, str) or not independent.strip()):
        raise ValueError("independent= must say why independent samples are right, e.g. 'each is a fresh process'.")
    one_run = next(
        (x for x in (candidate, baseline) if isinstance(x, Measurement) and str(x.session).startswith("benchmark-")),
        None,
    )
    if independent is not None and one_run is not None:  # its samples share one run: a step change moves them all
        raise ValueError(
            f"{one_run.label or 'a measurement'} is one benchmark run, whose samples share its moment and are not "
            "independent: time the two together (helpers.time_together), or compare one value per run "
            "(helpers.runs.compare_runs)."
        )
    c, b = _samples(candidate, "candidate"), _samples(baseline, "baseline")
    c_label = candidate_label or (candidate.label if isinstance(candidate, Measurement) else "") or "candidate"
    b_label = baseline_label or (baseline.label if isinstance(baseline, Measurement) else "") or "baseline"
    paired = (
        independent is None
        and isinstance(candidate, Measurement)
        and isinstance(baseline, Measurement)
        and candidate.session is not None
        and candidate.session == baseline.session
        and candidate.n == baseline.n
    )
    if paired:  # keep the rounds where both sides have a positive sample, still pairwise
        rc, rb = np.asarray(candidate.samples), np.asarray(baseline.samples)
        both = (rc > 0) & (rb > 0)
        c, b = rc[both], rb[both]
    common = {
        "candidate": c_label,
        "baseline": b_label,
        "confidence": confidence,
        "paired": paired,
        "n": (len(c), len(b)),
        "min_samples": min_samples,
        "independent": independent,
        "margin": float(margin),
        "unit": "run" if paired and isinstance(candidate, Measurement) and candidate.timer == "runs" else "round",
    }
    nan = math.nan
    if not paired and independent is None:
        ratio = float(np.median(b) / np.median(c)) if len(b) and len(c) else nan
        return Verdict(outcome="separate sessions", ratio=ratio, low=nan, high=nan, **common)
    enough = (
        (lambda k: k >= 3)
        if common["unit"] == "run"
        else (lambda k: _binomial_rank(k, confidence) > 0)
        if paired
        else (lambda k: _mann_whitney_rank(k, k, confidence) > 0)
    )
    # how many samples a side the interval needs at this confidence: what "too few samples" says to take
    needed = max(next((k for k in range(max(min_samples, 2), 200) if enough(k)), min_samples), min_samples)
    if min(len(c), len(b)) < min_samples:
        ratio = float(np.median(b) / np.median(c)) if len(b) and len(c) else nan
        common["min_samples"] = needed
        return Verdict(outcome="too few samples", ratio=ratio, low=nan, high=nan, **common)
    if paired and common["unit"] == "run":
        ratio, low, high = run_interval(b / c, confidence)
    elif paired:
        ratio, low, high = paired_interval(b / c, confidence)
    else:
        ratio, low, high = independent_interval(b, c, confidence, resamples, seed)
    if math.isnan(low):  # the interval cannot reach the confidence at these counts: say how many it needs
        common["min_samples"] = needed
        return Verdict(outcome="too few samples", ratio=ratio, low=nan, high=nan, **common)
    if common["unit"] == "run":  # few runs, a parametric interval: decided only where it all clears the margin
        outcome: Outcome = "faster" if low > 1 + margin else "slower" if high < 1 / (1 + margin) else "within noise"
        return Verdict(outcome=outcome, ratio=ratio, low=low, high=high, **common)
    return Verdict(outcome=_decide(ratio, low, high, margin), ratio=ratio, low=low, high=high, **common)


def _round_scores(measurements: Sequence[Measurement]) -> list[float] | None:
    """For measurements of one session: each one's median over rounds of its time relative to the round's
    geometric mean (drift cancels as in a paired verdict). None when they are not one session."""
    sessions = {m.session for m in measurements}
    if len(sessions) != 1 or None in sessions or len({m.n for m in measurements}) != 1:
        return None
    times = np.log(np.array([np.maximum(m.samples, 1e-15) for m in measurements]))
    return list(np.median(times - times.mean(axis=0), axis=1))


def winner(measurements: Sequence[Measurement], **kwargs: Any) -> tuple[Measurement, list[Verdict]]:
    """The fastest measurement and its verdict against each other one: name a winner only where those verdicts
    are all *faster* (``all(v.faster for v in verdicts)``). In one session "fastest" is decided round by round
    (each round's times relative to that round), as the verdicts are; otherwise by the median, and the verdicts
    say "separate sessions" unless ``independent=`` is given."""
    measurements = check_measurements("measurements", measurements)
    if len(measurements) < 2:
        raise ValueError("winner() needs at least two Measurements to choose between.")
    scores = _round_scores(measurements)
    if scores is None:
        best = min(measurements, key=lambda m: m.median)
    else:
        best = measurements[int(np.argmin(scores))]
    return best, [verdict(best, m, **kwargs) for m in measurements if m is not best]


def noise_note(measurements: Sequence[Measurement]) -> str | None:
    """One line for a table whose rows are mostly noisy (more than :data:`helpers.timing.MOSTLY_NOISY` of
    them), saying why and what to do; None otherwise. :func:`compare` prints it under its table."""
    check_measurements("measurements", measurements, allow_empty=True)
    noisy = [m for m in measurements if m.noisy]
    if not measurements or len(noisy) <= MOSTLY_NOISY * len(measurements):
        return None
    busy = next((m for m in noisy if m.busy), None)
    why = (
        Load(**{k: v for k, v in busy.load.items() if k != "busy"}).reason()
        if busy is not None
        else "their samples spread widely"
    )
    sessions = {m.session for m in measurements}
    if len(sessions) == 1 and None not in sessions and busy is None:  # one time_together session: paired verdicts
        return (
            f"⚠ {len(noisy)} of {len(measurements)} rows are noisy ({why}). Their verdicts are paired round by round, "
            "so drift that hit every row alike cancels and each interval widens with what is left: a verdict that "
            f"clears the noise stands, and 'within noise' means undecided. For tighter intervals, {_ADVICE}."
        )
    return (
        f"⚠ {len(noisy)} of {len(measurements)} rows are noisy ({why}): {_ADVICE}; until then, read the "
        "comparisons as uncertain."
    )


def sweep_warning(xs: Sequence[Any], measurements: Sequence[Measurement], increasing: bool = True) -> str | None:
    """For a sweep whose time should grow with ``xs`` (more work per call): one line naming the steps where it
    fell instead, decided by :func:`verdict` (no margin), so noise is not called a drop; None when the sweep
    behaves. Sizes timed together in one session (:func:`time_together`) are judged round by round (paired): a
    drop that survives that is not drift but the library itself (another kernel or thread split for one size).
    Sizes timed apart are judged as independent samples, and a drop is most often a busy machine."""
    check_measurements("measurements", measurements)
    if isinstance(xs, (str, bytes)) or not hasattr(xs, "__len__"):
        raise TypeError(f"xs must be a list of sweep values (one per measurement), got {type(xs).__name__}.")
    if len(xs) != len(measurements):
        raise ValueError(f"xs has {len(xs)} values but there are {len(measurements)} measurements; pass one each.")
    sessions = {m.session for m in measurements}
    together = len(sessions) == 1 and None not in sessions
    why = None if together else "a sweep's sizes are separate workloads; a drop flags a disturbed measurement"
    drops = []
    for (x0, m0), (x1, m1) in itertools.pairwise(zip(xs, measurements, strict=True)):
        # apart: their samples, taken as independent (each size's run is its own; a flag to re-measure, not a verdict)
        v = (
            verdict(m1, m0, margin=0)
            if together
            else verdict([x for x in m1.samples if x > 0], [x for x in m0.samples if x > 0], independent=why, margin=0)
        )
        if (v.outcome == "faster") if increasing else (v.outcome == "slower"):
            drops.append(f"{x0} → {x1} ({v.ratio:.2f}× less time)" if increasing else f"{x0} → {x1}")
    if not drops:
        return None
    head = f"⚠ the time fell where more work should take longer: {', '.join(drops)}; "
    if together:
        return head + (
            "the sizes were timed alternately in one session, so this is not drift: the library runs the smaller "
            "size with a slower kernel or thread split (notebook 08 profiles such a switch)."
        )
    busy = any(m.busy for m in measurements)
    return head + (
        f"the machine was busy during the sweep — {_ADVICE}."
        if busy
        else "no other load was seen, so the library may have switched kernels or thread counts between "
        f"these sizes (notebook 08 profiles such a switch); if it repeats, it is real, else {_ADVICE}."
    )


def compare(
    measurements: Sequence[Measurement], baseline: int | str | None = 0, *, independent: str | None = None
) -> Any:
    """A table (pandas DataFrame) of measurements, each judged against ``baseline`` (an index or a label;
    ``None`` for a table of unrelated workloads) by :func:`verdict`: the speed-up, its interval and the verdict.
    Rows of another session than the baseline's read "separate sessions" unless ``independent`` says why
    independent samples are right. Prints one line under the table when most rows are noisy."""
    import pandas as pd

    check_measurements("measurements", measurements)
    if baseline is None:
        base = None
    elif isinstance(baseline, str):
        labels = [m.label for m in measurements]
        if baseline not in labels:
            raise ValueError(f"baseline {baseline!r} is not one of the labels {labels}.")
        base = measurements[labels.index(baseline)]
    else:
        index_ok = isinstance(baseline, int) and not isinstance(baseline, bool)
        if not index_ok or not -len(measurements) <= baseline < len(measurements):
            raise ValueError(f"baseline={baseline} is not an index of the {len(measurements)} measurements.")
        base = measurements[baseline]
    rows = []
    for m in measurements:
        row = {
            "variant": m.label,
            "median": format_seconds(m.median),
            "IQR": format_seconds(m.iqr),
            "p95": format_seconds(m.p95),
            "first call": format_seconds(m.first_call) if m.first_call is not None else "",
            "noisy": "⚠" if m.noisy else "",
        }
        if base is not None:
            v = verdict(m, base, independent=independent)
            shown = m is not base and v.outcome != "separate sessions"
            row["speed-up"] = round(v.ratio, 2) if shown else (1.0 if m is base else None)
            row["interval"] = f"{v.low:.2f}–{v.high:.2f}" if shown and math.isfinite(v.low) else ""
            row["verdict"] = "baseline" if m is base else v.short()
        rows.append(row)
    note = noise_note(measurements)
    if note:
        print(note)
    return pd.DataFrame(rows).set_index("variant")


def _per_item(m: Measurement) -> Measurement:
    if m.items is None:
        raise ValueError(f"{m.label!r} has no items: pass items= to time_together to judge time per item.")
    return Measurement.from_samples(
        [s / m.items for s in m.samples], label=m.label, items=1, device=m.device, session=m.session
    )


@dataclass(frozen=True)
class Comparison:
    """The candidates of one comparison, timed together in one session (:func:`time_together`): every number a
    notebook prints beside a verdict, and every quantity derived from one (a break-even, machines needed, a
    waterfall bar), comes from here.

    ``cmp["compiled"]`` is a candidate's :class:`Measurement`; ``cmp.verdict("compiled")`` its paired verdict
    against the baseline (or ``against=`` another candidate); ``cmp.speedup(...)`` that verdict's speed-up;
    ``cmp.verdicts()`` every candidate against the baseline; ``cmp.winner()`` the fastest and its verdicts;
    ``cmp.table()`` all of it as a DataFrame; ``cmp.note`` what the session had to do to reach enough rounds."""

    measurements: dict[str, Measurement]
    baseline: str

    def __post_init__(self) -> None:
        if self.baseline not in self.measurements:
            raise ValueError(f"baseline {self.baseline!r} is not one of the candidates {list(self.measurements)}.")

    @property
    def labels(self) -> list[str]:
        return list(self.measurements)

    def __getitem__(self, label: str) -> Measurement:
        if label not in self.measurements:
            raise KeyError(f"{label!r} is not a candidate of this comparison: one of {self.labels}.")
        return self.measurements[label]

    def verdict(self, candidate: str, against: str | None = None, *, per_item: bool = False, **kwargs: Any) -> Verdict:
        """The paired verdict of ``candidate`` against ``against`` (default: the baseline). ``per_item=True``
        judges time per item (each sample divided by its candidate's ``items``), for candidates of different
        batch sizes."""
        if candidate == (against or self.baseline):
            raise ValueError(
                f"{candidate!r} against itself: name another candidate as against= (one of {self.labels})."
            )
        a, b = self[candidate], self[against or self.baseline]
        if per_item:
            a, b = (_per_item(m) for m in (a, b))
        return verdict(a, b, **kwargs)

    def speedup(self, candidate: str, against: str | None = None) -> float:
        """Baseline time / candidate time, the median of the per-round ratios (the verdict's ``ratio``)."""
        return self.verdict(candidate, against).ratio

    def verdicts(self) -> dict[str, Verdict]:
        """Each candidate but the baseline, against the baseline."""
        return {label: self.verdict(label) for label in self.labels if label != self.baseline}

    def winner(self, among: Sequence[str] | None = None) -> tuple[str, list[Verdict]]:
        """The fastest candidate (round by round) and its verdicts against each other one; ``among`` limits the
        choice to some labels (e.g. the variants within an accuracy tolerance)."""
        labels = self.labels if among is None else list(among)
        for label in labels:
            self[label]  # a KeyError that names the candidates, for a label that is not one
        if len(labels) == 1:
            return labels[0], []
        best, against = winner([self.measurements[label] for label in labels])
        return best.label, against

    @property
    def note(self) -> str | None:
        """What the session did to reach :data:`helpers.timing.MIN_ROUNDS` rounds, when a call was too slow for its
        budget."""
        over = max((m.meta.get("over_budget_s", 0.0) for m in self.measurements.values()), default=0.0)
        if not over:
            return None
        m = next(iter(self.measurements.values()))
        return (
            f"the {MIN_ROUNDS} rounds a comparison takes took {format_seconds(over)} beyond the "
            f"{format_seconds(m.budget)} budget: one call of the slowest candidate is long for it"
        )

    def table(self) -> Any:
        """A DataFrame: each candidate's median, IQR, p95, first call, and its verdict against the baseline."""
        if self.note:
            print("ℹ", self.note)
        return compare(list(self.measurements.values()), baseline=self.baseline)


def time_together(
    candidates: Mapping[str, Callable[[], Any]], *, baseline: str | None = None, **options: Any
) -> Comparison:
    """Time every candidate of one comparison together — alternately, round by round, in one session — and
    return the :class:`Comparison` (measurements, paired verdicts, table). ``baseline`` is the label the others
    are judged against (default: the first). Every candidate gets at least :data:`helpers.timing.MIN_ROUNDS`
    rounds, so one outlying round cannot decide. ``options`` are :func:`helpers.timing.interleaved`'s: ``device``,
    ``warmup``, ``repeats``, ``min_sample_time``, ``budget``, ``items``, ``inference_mode``, ``setup``."""
    if isinstance(candidates, Mapping) and baseline is not None and baseline not in candidates:
        raise ValueError(f"baseline {baseline!r} is not one of the candidates {list(candidates)}.")
    known = set(inspect.signature(interleaved).parameters) - {"candidates"}
    if unknown := sorted(set(options) - known):
        raise TypeError(f"time_together got {unknown}: its options are interleaved's, {sorted(known)}.")
    measured = interleaved(candidates, **options)
    return Comparison(measurements=measured, baseline=baseline if baseline is not None else next(iter(measured)))


#: A decision is refused when more than this share of the measurements it rests on are noisy (any busy one
#: refuses it): a few noisy rows of a table do not stop a choice, a sweep mostly disturbed does.
NOISY_SHARE = 0.25


def _measurements_in(value: Any) -> list[Measurement]:
    if isinstance(value, Measurement):
        return [value]
    if isinstance(value, Comparison):
        return list(value.measurements.values())
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in _measurements_in(v)]
    return []


def noise_reason(value: Any) -> str | None:
    """Why the measurements in ``value`` (a Measurement, a Comparison, or a list or dict of them) cannot carry a
    decision, or None: the machine was busy during any of them, or more than :data:`NOISY_SHARE` of them are
    noisy (their own spread, or delayed samples). The reason names the measurement and its symptom."""
    found = _measurements_in(value)
    busy = next((m for m in found if m.busy), None)
    if busy is not None:
        return f"{busy.label or 'a measurement'}: " + "; ".join(r for r in busy.noise_reasons() if "busy" in r)
    noisy = [m for m in found if m.noisy]
    if found and len(noisy) > NOISY_SHARE * len(found):
        worst = noisy[0]
        return (
            f"{len(noisy)} of {len(found)} measurements are noisy ({worst.label or 'one'}: "
            f"{'; '.join(worst.noise_reasons())})"
        )
    return None


#: A round of a comparison in which every candidate took more than this many times its own median is a stall of
#: the machine (another program, the hypervisor), not a candidate's own tail.
STALL_FACTOR = 3.0


def stall_reason(value: Comparison) -> str | None:
    """Why a comparison's tails (its p99s) cannot carry a decision, or None: rounds in which every candidate took
    over :data:`STALL_FACTOR` times its own median at once, a stall of the machine. Use it as
    ``settle(..., flagged=stall_reason)`` where percentiles of single calls decide something."""
    rows = [m.samples for m in value.measurements.values()]  # one sample per round each, in round order
    if len(rows) < 2 or len({len(r) for r in rows}) != 1:
        return None  # not one sample per round for every candidate: rounds cannot be lined up
    samples = np.asarray(rows)
    rounds = np.flatnonzero((samples > STALL_FACTOR * np.median(samples, axis=1, keepdims=True)).all(axis=0))
    if not len(rounds):
        return None
    return (
        f"in {len(rounds)} of its rounds (round {rounds[0] + 1} to {rounds[-1] + 1}) every candidate took over "
        f"{STALL_FACTOR:g}x its median: a stall of the machine, not of a candidate"
    )


def busy_reason(value: Any) -> str | None:
    """Why the measurements in ``value`` cannot carry a decision for a *paired* comparison, or None: only a busy
    machine refuses it (a candidate's own spread is already in the per-round intervals)."""
    busy = next((m for m in _measurements_in(value) if m.busy), None)
    if busy is None:
        return None
    return f"{busy.label or 'a measurement'}: " + "; ".join(r for r in busy.noise_reasons() if "busy" in r)


@dataclass(frozen=True)
class Settled:
    """What :func:`settle` measured: ``value`` (the last attempt's), ``reason`` (None when it may carry the
    decision; else why not), ``attempts`` (1, or 2 after a re-measurement) and ``what`` the decision is."""

    value: Any
    reason: str | None
    attempts: int
    what: str

    @property
    def decided(self) -> bool:
        return self.reason is None

    def undecided(self) -> str:
        """The line to print in place of the decision: ``'undecided: <what>: <reason> (measured twice) — …'``."""
        if self.attempts == 1:  # quick mode measures once: a smoke test, not a decision
            return f"undecided: {self.what}: {self.reason} (measured once: quick mode does not measure again)."
        return f"undecided: {self.what}: {self.reason} (measured {self.attempts}×) — {_ADVICE}."


def settle(measure: Callable[[], Any], *, what: str, flagged: Callable[[Any], str | None] = noise_reason) -> Settled:
    """**Noise stops decisions**, the one rule every notebook uses: call ``measure()``; when ``flagged`` finds a
    reason not to decide on what it returned (default :func:`noise_reason`: a busy machine, or mostly noisy
    measurements), call it once more; when that is flagged too, the decision named ``what`` (a target, a choice,
    a simulation input, a derived ratio) is undecided: print ``settled.undecided()`` instead of a number. Quick mode
    (a smoke test) measures once: a flagged measurement is undecided at once."""
    check_callable("measure", measure, "pass a zero-argument function that takes the measurements")
    if not isinstance(what, str) or not what.strip():
        raise ValueError("what= names the decision that rests on the measurement, e.g. 'the p99 target'.")
    value = measure()
    reason = flagged(value)
    if reason is None:
        return Settled(value, None, 1, what)
    if course_mode() == "quick":  # a smoke test: the decision is said undecided, not measured again
        return Settled(value, reason, 1, what)
    print(f"re-measuring once: {reason}")
    value = measure()
    return Settled(value, flagged(value), 2, what)
