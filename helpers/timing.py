"""One result type (``Measurement``) and one timer (``benchmark``) for every number the course shows.

The rules it enforces, so a notebook cannot forget them:

* the first call (compilation, allocation, cache misses, lazy init) is timed apart and never mixed into the
  steady state;
* warm-up calls run before any sample is taken;
* the device is synchronised around every sample: CUDA events on a GPU (they time the GPU's own timeline),
  ``time.perf_counter`` on the CPU;
* tiny workloads are repeated ``number`` times per sample so the timer's resolution does not dominate;
* a **time budget** bounds every measurement, as ``torch.utils.benchmark``'s ``blocked_autorange`` and
  ``triton.testing.do_bench`` do: sampling stops when the budget is spent (at least 6 samples when they
  fit), and a call longer than the budget gives the first call plus one timed sample, marked
  ``budget_limited``;
* the result keeps every raw sample and reports median, IQR and p95, never the mean of one run, and says
  *why* it is noisy when it is (a wide IQR, a fastest sample far below the median, a busy machine).

Both timers here (``benchmark`` and ``timed_call``) run the function in the caller's autograd state; pass
``inference_mode=True`` to either to run it under ``torch.inference_mode()``.

The noise threshold follows ``torch.utils.benchmark`` (IQR above 10 % of the median is flagged), and
:meth:`Measurement.from_torch` converts its results so both can sit in one table. Comparisons of two
measurements are decided by :mod:`helpers.verdict`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import math
import numbers
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from .checks import check_callable, check_int, check_number, check_numbers
from .device import DeviceLike, Load, LoadMeter, choose_device, last_level_cache_bytes, sync
from .modes import pick

#: An IQR larger than this fraction of the median marks a measurement as noisy (as torch.utils.benchmark does).
NOISE_THRESHOLD = 0.10
#: A fastest sample below this fraction of the median also marks it noisy: most samples were delayed.
MIN_TO_MEDIAN = 0.5
#: Samples wanted before a budget may stop the sampling (when they fit in it); also the fewest rounds a paired
#: verdict decides from (helpers.verdict): 6 is the smallest count whose order-statistic interval for a median
#: reaches 95 % coverage (with 5 it is 93.75 %), so a measurement the budget allowed is one the verdict can judge.
MIN_SAMPLES = 6
#: The fewest rounds a comparison (:func:`interleaved`) takes: at 10 the 95 % sign-test interval runs from the
#: 2nd to the 9th per-round ratio, so one outlying round (a page-fault storm, another program) cannot decide.
MIN_ROUNDS = 10
#: A table (``compare``) whose rows are noisy in more than this share says so once.
MOSTLY_NOISY = 0.5
#: Default time budget per measurement, in seconds: (quick mode, full mode). Quick mode is a smoke test (every
#: cell and assertion, smallest sizes): its verdicts may say "too few samples"; full mode's decide.
DEFAULT_BUDGET = (0.4, 3.0)

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_ADVICE = "close other programs (a browser, an IDE indexing files), wait a minute and re-run the cell"


def time_unit(seconds: float) -> tuple[float, str]:
    """The unit :func:`format_seconds` would print ``seconds`` in: ``(scale, name)``, e.g. ``(1e-3, 'ms')``."""
    check_number("seconds", seconds, minimum=0, hint="pass a duration in seconds, e.g. m.median")
    return next(((sc, un) for sc, un in _UNITS if seconds >= sc), _UNITS[-1])


def check_measurements(name: str, values: Any, allow_empty: bool = False) -> list[Measurement]:
    """``values`` must be a list of Measurements (non-empty unless ``allow_empty``), in one line otherwise."""
    if isinstance(values, Measurement) or isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of Measurements, got {type(values).__name__}; e.g. [m_eager, m_fast]")
    values = list(values)
    if not values and not allow_empty:
        raise ValueError(f"{name}=[] is empty: pass at least one Measurement (what helpers.benchmark returns).")
    for i, value in enumerate(values):
        if not isinstance(value, Measurement):
            raise TypeError(
                f"{name}[{i}] is a {type(value).__name__}, not a Measurement (what helpers.benchmark returns)."
            )
    return values


def default_budget() -> float:
    """Seconds one measurement may take by default: 0.4 s in quick mode, 3 s in full mode."""
    return pick(*DEFAULT_BUDGET)


def format_seconds(seconds: float, digits: int = 3) -> str:
    """``0.00123`` → ``'1.23 ms'``: a duration with a unit chosen so the number is between 1 and 1000 (NaN and
    infinity, a statistic of no samples, print as themselves)."""
    check_int("digits", digits, maximum=17, hint="pass how many significant digits to show, e.g. 3")
    if isinstance(seconds, numbers.Real) and not isinstance(seconds, bool) and not math.isfinite(seconds):
        return str(float(seconds))  # NaN or infinity (numpy's too): a statistic of no samples prints as itself
    check_number("seconds", seconds, hint="pass a duration in seconds, e.g. m.median")
    seconds = float(f"{seconds:.{digits}g}")  # round first so 0.9999 s shows as 1.00 s, not 1000 ms
    magnitude = abs(seconds)
    scale, unit = next(((sc, un) for sc, un in _UNITS if magnitude >= sc), _UNITS[-1])
    value = seconds / scale
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))) if value else digits - 1)
    return f"{value:.{decimals}f} {unit}"


def format_rate(per_second: float, unit: str = "items") -> str:
    """``123456.0`` → ``'123k items/s'``."""
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"unit={unit!r}: name what is counted, e.g. 'images' or 'tokens'.")
    check_number("per_second", per_second, minimum=0, hint="pass a rate, e.g. m.throughput")
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(per_second) >= scale:
            return f"{per_second / scale:.3g}{prefix} {unit}/s"
    return f"{per_second:.3g} {unit}/s"


@dataclass(frozen=True)
class Measurement:
    """Timing samples of one workload, with the statistics the course reports.

    ``samples`` are seconds *per call* (each sample timed ``number`` calls and divided by ``number``).
    ``items`` is how many inputs one call processes (the batch size), for throughput.
    ``budget`` is the time budget it ran under (None: unlimited); ``budget_limited`` is True when the budget
    cut it below :data:`MIN_SAMPLES` samples (a call too long for it). ``load`` is how busy the machine was
    while the samples were taken (:class:`helpers.device.Load` as a dict). ``session`` names the timing session
    the samples come from: every :func:`benchmark` call is a session of its own, and the candidates of one
    :func:`interleaved` run share one, their samples paired by round. :func:`helpers.verdict.verdict` compares
    two measurements of one session round by round, and refuses to decide between two sessions unless told why
    independent samples are right (None: samples typed in or converted, of no known session).
    """

    samples: tuple[float, ...]
    label: str = ""
    number: int = 1
    first_call: float | None = None
    device: str = "cpu"
    timer: str = "perf_counter"
    items: int | None = None
    budget: float | None = None
    budget_limited: bool = False
    load: dict[str, Any] | None = None
    session: str | None = None
    cache_flushed: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.samples, (str, bytes)) or not isinstance(self.samples, (tuple, list)):
            raise TypeError(f"samples must be a tuple of seconds per call, got {type(self.samples).__name__}.")
        if not all(isinstance(s, numbers.Real) and not isinstance(s, bool) for s in self.samples):
            raise TypeError("samples must be numbers: seconds per call.")
        if len(self.samples) == 0:
            raise ValueError("a Measurement needs at least one sample; time the workload at least once.")
        if any(not math.isfinite(s) or s < 0 for s in self.samples):
            raise ValueError("timing samples must be finite, non-negative seconds.")
        if self.number < 1:
            raise ValueError("number (calls per sample) must be at least 1.")
        if self.items is not None and self.items < 1:
            raise ValueError("items (inputs per call) must be at least 1, or None.")

    @classmethod
    def from_samples(cls, samples: Iterable[float], **kwargs: Any) -> Measurement:
        check_numbers(
            "samples",
            list(samples) if isinstance(samples, (list, tuple)) else samples,
            minimum=0,
            hint="pass the seconds per call of each sample, e.g. [1.2e-3, 1.1e-3]",
        )
        return cls(samples=tuple(float(s) for s in samples), **kwargs)

    @classmethod
    def from_torch(cls, m: Any, label: str | None = None, device: DeviceLike = None) -> Measurement:
        """Convert a ``torch.utils.benchmark.Measurement`` (its ``times`` are already per call).
        ``device`` is where the timed code ran (default: what ``choose_device()`` picks)."""
        return cls(
            samples=tuple(float(t) for t in m.times),
            label=label if label is not None else (m.description or m.sub_label or m.label or "torch.utils.benchmark"),
            number=int(m.number_per_run),
            device=str(choose_device(device)),
            timer="torch.utils.benchmark",
        )

    # -- statistics ---------------------------------------------------------------------------------------
    def quantile(self, q: float) -> float:
        """The ``q``-quantile (0–1) of the samples."""
        if not isinstance(q, numbers.Real) or isinstance(q, bool) or not 0 <= q <= 1:
            raise ValueError(f"q={q!r} is not allowed: q must be a quantile between 0 and 1, e.g. 0.99.")
        return float(np.quantile(np.asarray(self.samples, dtype=np.float64), q))

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return self.quantile(0.5)

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    @property
    def min(self) -> float:
        return float(np.min(self.samples))

    @property
    def max(self) -> float:
        return float(np.max(self.samples))

    @property
    def p25(self) -> float:
        return self.quantile(0.25)

    @property
    def p75(self) -> float:
        return self.quantile(0.75)

    @property
    def iqr(self) -> float:
        return self.p75 - self.p25

    @property
    def p95(self) -> float:
        return self.quantile(0.95)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else 0.0

    @property
    def busy(self) -> bool:
        """True when the machine was busy while the samples were taken (see :class:`helpers.device.Load`)."""
        return bool(self.load and self.load.get("busy"))

    def noise_reasons(self) -> list[str]:
        """Why these samples should not be trusted as they are: one short clause per symptom (empty if none)."""
        reasons = []
        if self.relative_iqr > NOISE_THRESHOLD:
            reasons.append(f"IQR is {self.relative_iqr:.0%} of the median")
        if self.n >= MIN_SAMPLES and self.median > 0 and self.min < MIN_TO_MEDIAN * self.median:
            reasons.append(
                f"the fastest sample took {self.min / self.median:.0%} of the median: most samples "
                "were delayed by something else"
            )
        if self.busy:
            reasons.append(Load(**{k: v for k, v in self.load.items() if k != "busy"}).reason() or "busy")
        return reasons

    @property
    def noisy(self) -> bool:
        """True when :meth:`noise_reasons` finds anything: re-run, or close other programs (see ``advice``)."""
        return bool(self.noise_reasons())

    @property
    def advice(self) -> str | None:
        """What to do about a noisy or budget-limited measurement, in one line; None when there is nothing."""
        parts = []
        if self.budget_limited:
            parts.append(self._budget_clause() + ": too few to compare; pass a larger budget= to take more")
        if self.noisy:
            parts.append("; ".join(self.noise_reasons()) + f" — {_ADVICE}")
        return ". ".join(parts) + "." if parts else None

    def _budget_clause(self) -> str:
        budget = format_seconds(self.budget) if self.budget else "its"
        if self.meta.get("note") == "one call is longer than the budget":
            return f"one call ({format_seconds(self.samples[0])}) is longer than the {budget} budget: one sample"
        plural = "s" if self.n != 1 else ""
        return f"the {budget} budget fitted only {self.n} sample{plural} of {format_seconds(self.median)}"

    @property
    def throughput(self) -> float | None:
        """Items per second at the median time, when ``items`` is known."""
        return None if self.items is None or self.median == 0 else self.items / self.median

    # -- presentation --------------------------------------------------------------------------------------
    def summary(self) -> str:
        text = (
            f"{self.label or 'measurement'}: median {format_seconds(self.median)}"
            f" (IQR {format_seconds(self.iqr)}, p95 {format_seconds(self.p95)};"
            f" {self.n} sample{'s' if self.n != 1 else ''} × {self.number} call{'s' if self.number != 1 else ''},"
            f" {self.timer})"
        )
        if self.throughput is not None:
            text += f", {format_rate(self.throughput)}"
        if self.first_call is not None:
            text += f"; first call {format_seconds(self.first_call)}"
        if self.budget_limited:
            text += f"  ⚠ budget-limited: {self._budget_clause()}"
        if self.noisy:
            text += "  ⚠ noisy: " + "; ".join(self.noise_reasons())
        return text

    def __repr__(self) -> str:
        return f"<Measurement {self.summary()}>"

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """Statistics and raw samples as plain JSON-able values (what ``results.record`` stores)."""
        data = asdict(self)
        data["samples"] = list(self.samples)
        data.update(
            median=self.median,
            iqr=self.iqr,
            p25=self.p25,
            p75=self.p75,
            p95=self.p95,
            mean=self.mean,
            min=self.min,
            n=self.n,
            noisy=self.noisy,
            throughput=self.throughput,
        )
        return data


def _infer_device(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.device:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
    if isinstance(fn, torch.nn.Module):
        for p in fn.parameters():
            return p.device
    return choose_device()  # a closure over its tensors: pass device= when it is not the default device


def _autograd(inference_mode: bool) -> contextlib.AbstractContextManager[Any]:
    return torch.inference_mode() if inference_mode else contextlib.nullcontext()


def timed_call(
    fn: Callable[..., Any], *args: Any, device: DeviceLike = None, inference_mode: bool = False, **kwargs: Any
) -> tuple[float, Any]:
    """Time one call of ``fn(*args)``, synchronised before and after, and return ``(seconds, result)``: for a
    first call (a compile, an export) that must be timed apart and whose result is then checked, which
    :func:`benchmark` would only time. It runs in the caller's autograd state, as :func:`benchmark` does
    (``inference_mode=True`` wraps the call in ``torch.inference_mode()``); :func:`benchmark` times its own
    first call with this function."""
    check_callable("fn", fn, "pass the function itself, not its result.")
    dev = choose_device(device) if device is not None else _infer_device(fn, args, kwargs)
    sync(dev)
    start = time.perf_counter()
    with _autograd(inference_mode):
        result = fn(*args, **kwargs)
    sync(dev)
    return time.perf_counter() - start, result


def cache_flusher(device: DeviceLike = None) -> Callable[[], None]:
    """A call that overwrites a buffer twice the size of the device's last cache (a GPU's L2, a CPU's last
    level), as ``triton.testing.do_bench`` does before each sample: pass it as a candidate's ``setup`` to
    :func:`interleaved` / :func:`helpers.verdict.time_together`, so that candidate is timed with cold caches."""
    return _CacheFlusher(choose_device(device))


class _CacheFlusher:
    """Overwrites a buffer twice the size of the device's last cache (the GPU's L2, the CPU's last level) before
    each sample, as ``triton.testing.do_bench`` does, so memory-bound work smaller than the cache is timed cold."""

    def __init__(self, dev: torch.device) -> None:
        if dev.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 256 * 2**20
            nbytes = 2 * l2
        else:
            nbytes = min(2 * (last_level_cache_bytes() or 64 * 2**20), 512 * 2**20)
        self.nbytes = int(nbytes)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.int32, device=dev)

    def __call__(self) -> None:
        self.buffer.zero_()


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    label: str = "",
    device: DeviceLike = None,
    warmup: int = 3,
    repeats: int = 20,
    number: int | None = None,
    min_sample_time: float = 1e-3,
    budget: float | None | str = "default",
    items: int | None = None,
    flush_cache: bool = False,
    inference_mode: bool = False,
    **kwargs: Any,
) -> Measurement:
    """Time ``fn(*args, **kwargs)`` the right way and return a :class:`Measurement`.

    1. the first call is timed on its own (``first_call``, with :func:`timed_call`), synchronised;
    2. up to ``warmup`` more calls run, each synchronised (they estimate the per-call time);
    3. up to ``repeats`` samples are taken, each of ``number`` calls (chosen so a sample lasts at least
       ``min_sample_time`` unless given), with the garbage collector paused;
    4. on CUDA each sample is bracketed by CUDA events, the samples queued back to back (how many fit the budget
       is fixed from the warm-up's estimate, as ``do_bench`` does); elsewhere by ``time.perf_counter`` with a
       device sync before the clock stops.

    ``budget`` (seconds; default :func:`default_budget`, 0.4 s quick and 3 s full) bounds steps 2–3:
    warm-up takes at most a quarter of it, ``number`` is chosen so :data:`MIN_SAMPLES` samples fit in the rest,
    and sampling stops once the next sample would not fit. What fits is judged from a *steady* call (the
    first warm-up call), not from the first call, which may have compiled. When that steady call alone is
    longer than the budget, it is the one sample (first call plus one sample, ``budget_limited``). Fewer than
    :data:`MIN_SAMPLES` samples is ``budget_limited`` too (too few for a verdict). An explicit ``number`` or
    ``repeats`` never runs past the budget (a clamped ``number`` is kept in ``meta['number_asked']``);
    ``budget=None`` removes the limit.
    ``flush_cache=True`` overwrites a buffer twice the last cache's size (GPU L2, CPU last level) before each
    sample, outside the timed region, and takes one call per sample: memory-bound work smaller than the
    cache is then timed cold, as ``triton.testing.do_bench`` does.
    ``device`` defaults to the device of the first tensor argument (or the module's parameters), else to
    ``choose_device()``: pass it explicitly when timing a closure that runs elsewhere.
    ``items`` (inputs per call, e.g. the batch size) enables ``Measurement.throughput``.
    ``inference_mode=True`` runs every call under ``torch.inference_mode()`` (else the caller's autograd state).
    """
    check_callable("fn", fn, "pass the function itself (benchmark(model, x)), not its result (benchmark(model(x))).")
    check_int("warmup", warmup, 0, hint="use 0 to skip warm-up.")
    check_int("repeats", repeats, 1, hint="take at least one sample (20 or more for a stable median).")
    if number is not None:
        check_int("number", number, 1, hint="or leave it as None to choose it automatically.")
    if items is not None:
        check_int("items", items, 1, hint="pass the batch size, or None.")
    check_number("min_sample_time", min_sample_time, positive=True, hint="pass seconds, e.g. 1e-3.")
    budget = default_budget() if budget == "default" else budget
    check_number(
        "budget",
        budget,
        positive=True,
        allow_none=True,
        hint="pass seconds for the whole measurement, or None for no limit.",
    )
    dev = choose_device(device) if device is not None else _infer_device(fn, args, kwargs)
    limit = math.inf if budget is None else float(budget)

    def call() -> Any:
        return fn(*args, **kwargs)

    meter = LoadMeter()  # from the first call on: a longer window than the samples alone, so a fairer reading
    with _autograd(inference_mode):
        # 1. the first call, on its own (a compile, lazy initialisation, cold caches)
        first_call, _ = timed_call(call, device=dev)
        begin = time.perf_counter()
        # 2. a steady call decides what fits (not the first call, which may have compiled), then warm-up
        estimate = first_call
        if warmup:
            estimate, _ = timed_call(call, device=dev)
        if estimate >= limit:  # one call is longer than the budget: the first call plus this one sample
            return Measurement(
                samples=(estimate,),
                label=label,
                number=1,
                first_call=first_call,
                device=str(dev),
                items=items,
                budget=budget,
                budget_limited=True,
                load=meter.stop().to_dict(),
                timer="perf_counter",
                meta={"note": "one call is longer than the budget"},
            )
        for _ in range(warmup - 1):
            if time.perf_counter() - begin + estimate > limit / 4:
                break  # keep most of the budget for samples
            seconds, _ = timed_call(call, device=dev)
            estimate = min(estimate, seconds)
        flusher = _CacheFlusher(dev) if flush_cache else None
        remaining = limit - (time.perf_counter() - begin)
        asked = 1 if flusher is not None else number
        planned = plan([estimate], remaining, min_sample_time=min_sample_time, number=asked)
        meta: dict[str, Any] = {}
        if asked is not None and planned.numbers[0] < asked:  # an explicit number never runs past the budget
            meta["number_asked"] = asked
        number = planned.numbers[0]
        samples, timer = _take_samples(call, dev, number, min(repeats, planned.rounds), limit, begin, flusher)
    return Measurement(
        samples=tuple(samples),
        label=label,
        number=number,
        first_call=first_call,
        device=str(dev),
        timer=timer,
        items=items,
        budget=budget,
        budget_limited=len(samples) < min(MIN_SAMPLES, repeats),
        load=meter.stop().to_dict(),
        session=new_session("benchmark"),
        cache_flushed=flusher is not None,
        meta=meta,
    )


def new_session(kind: str) -> str:
    """A fresh timing-session name (``'benchmark-…'``, ``'interleaved-…'``): unique within and across runs."""
    if not isinstance(kind, str) or not kind.strip():
        raise ValueError(f"kind={kind!r}: name the kind of session, e.g. 'benchmark' or 'interleaved'.")
    return f"{kind}-{time.time_ns()}-{next(_SESSIONS)}"


_SESSIONS = itertools.count()


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` decided: ``numbers[i]`` calls per sample of candidate ``i``, and how many rounds (one
    sample of every candidate each) fit the time left (``math.inf`` without a budget)."""

    numbers: tuple[int, ...]
    rounds: float
    seconds_per_round: float


def plan(
    estimates: Sequence[float],
    remaining: float,
    *,
    min_sample_time: float = 1e-3,
    number: int | None = None,
    min_rounds: int = MIN_SAMPLES,
) -> Plan:
    """The one rule for how many calls a sample holds and how many samples fit, used by :func:`benchmark` (one
    candidate) and :func:`interleaved` (several), on the CPU and on a GPU alike — as ``blocked_autorange``
    sizes its blocks and ``do_bench`` its repeats from a warm-up estimate.

    ``estimates`` are each candidate's seconds per call (from warm-up), ``remaining`` the seconds of budget left
    (``math.inf``: none). A sample repeats the call until it lasts ``min_sample_time`` (so the timer's
    resolution does not matter), or ``number`` times when given, but never so many that ``min_rounds``
    rounds of every candidate would not fit: each candidate gets an equal share of a round. ``rounds`` is how
    many rounds fit at those counts (it may be below ``min_rounds`` when one call is too slow: the
    caller decides whether to stop there or to take the time the minimum needs)."""
    check_numbers("estimates", estimates, minimum=0.0, hint="each candidate's seconds per call, from warm-up")
    if isinstance(remaining, bool) or not isinstance(remaining, (int, float)) or not remaining >= 0:
        raise ValueError(f"remaining={remaining!r}: pass the seconds of budget left (≥ 0), or math.inf for none.")
    check_int("min_rounds", min_rounds, hint="rounds every candidate needs, e.g. 6")
    if number is not None:
        check_int("number", number, hint="calls per sample, or None to size it from min_sample_time")
    share = remaining / (min_rounds * len(estimates))  # seconds each candidate may spend on one sample
    numbers = []
    for estimate in estimates:
        estimate = max(estimate, 1e-9)
        wanted = number if number is not None else max(1, math.ceil(min_sample_time / estimate))
        fits = max(1, math.floor(share / estimate)) if math.isfinite(share) else 1_000_000
        numbers.append(min(wanted, fits, 1_000_000))
    per_round = sum(max(e, 1e-9) * n for e, n in zip(estimates, numbers, strict=True))
    rounds = math.floor(remaining / per_round) if math.isfinite(remaining) else math.inf
    return Plan(numbers=tuple(numbers), rounds=max(rounds, 0), seconds_per_round=per_round)


def _take_samples(
    call: Callable[[], Any],
    dev: torch.device,
    number: int,
    count: float,
    limit: float,
    begin: float,
    flusher: _CacheFlusher | None,
) -> tuple[list[float], str]:
    """Step 3 of :func:`benchmark`: ``count`` samples (at least one) of ``number`` calls, as :func:`plan` fitted
    them to the budget. On the CPU a sample that would end after the budget (``limit`` seconds after
    ``begin``) is not taken: a guard against an estimate that was too low, not a second rule."""
    count = max(1, int(min(count, 1_000_000)))
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if dev.type == "cuda":
            # As triton's do_bench: the samples are queued back to back between CUDA events (a sync per sample
            # would idle the GPU between samples).
            events = []
            with torch.cuda.device(dev):  # events are recorded on this device's current stream
                for _ in range(count):
                    if flusher is not None:
                        flusher()
                    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start_event.record()
                    for _ in range(number):
                        call()
                    end_event.record()
                    events.append((start_event, end_event))
            torch.cuda.synchronize(dev)
            return [s.elapsed_time(e) / 1e3 / number for s, e in events], "cuda events"
        samples: list[float] = []
        for _ in range(count):
            if samples and time.perf_counter() - begin + samples[-1] * number > limit:
                break  # the next sample would not fit
            if flusher is not None:
                flusher()
                sync(dev)
            start = time.perf_counter()
            for _ in range(number):
                call()
            sync(dev)
            samples.append((time.perf_counter() - start) / number)
        return samples, "perf_counter"
    finally:
        if gc_was_enabled:
            gc.enable()


def _reachable(fn: Any, depth: int = 3) -> Iterator[Any]:
    """The objects a candidate callable can reach: its closure, defaults, bound object and the globals its code
    names, and their attributes one level down (a wrapper's session), up to ``depth`` steps."""
    seen: set[int] = set()
    todo = [(fn, 0)]
    while todo:
        obj, level = todo.pop()
        if id(obj) in seen or level > depth:
            continue
        seen.add(id(obj))
        yield obj
        found = []
        code = getattr(obj, "__code__", None)
        if code is not None:
            found += [c.cell_contents for c in (getattr(obj, "__closure__", None) or ()) if _filled(c)]
            found += list(getattr(obj, "__defaults__", None) or ())
            names = getattr(obj, "__globals__", {})
            found += [names[n] for n in code.co_names if n in names]
        if not isinstance(obj, (type, types.ModuleType)):  # a module's or a class's attributes are not its state
            for name in ("__self__", "func", "sess", "session", "_session", "model"):
                try:
                    value = getattr(obj, name, None)
                except Exception:  # a proxy whose attribute access does work of its own: not followed
                    value = None
                if value is not None:
                    found.append(value)
        if isinstance(obj, functools.partial):
            found += [*obj.args, *obj.keywords.values()]
        todo += [(o, level + 1) for o in found]


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def spinning_sessions(candidates: Mapping[str, Callable[[], Any]]) -> list[str]:
    """The candidates that run an ONNX Runtime session whose intra-op threads spin after each run (ORT's
    default, ``session.intra_op.allow_spinning``): timed alternately with others in one process, those threads
    keep the cores busy and tax the next candidate's call (measured 2.3× on a ResNet-50 here)."""
    spinning = []
    for label, fn in candidates.items():
        for obj in _reachable(fn):
            if type(obj).__name__ != "InferenceSession" or not type(obj).__module__.startswith("onnxruntime"):
                continue
            try:
                value = obj.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
            except Exception:  # not set: ORT's default, which spins
                value = "1"
            if value != "0" and label not in spinning:
                spinning.append(label)
    return spinning


def interleaved(
    candidates: Mapping[str, Callable[[], Any]],
    *,
    device: DeviceLike = None,
    warmup: int = 3,
    repeats: int = 20,
    min_sample_time: float = 1e-3,
    budget: float | None | str = "default",
    items: int | Mapping[str, int] | None = None,
    inference_mode: bool = False,
    setup: Mapping[str, Callable[[], Any]] | None = None,
) -> dict[str, Measurement]:
    """Time several candidates *alternately*, in one session: round after round, one sample of each, the order
    rotating, so drift (a laptop's clock, another program, a warming cache) hits every candidate alike. Returns
    one :class:`Measurement` per label, all of one ``session``: :func:`helpers.verdict.verdict` then compares
    them round by round (paired), which removes the drift that separate cells cannot.
    :func:`helpers.verdict.time_together` wraps this with the verdicts and a table.

    ``candidates`` maps a label to a zero-argument callable (``lambda: model(x)``). Each first call is timed
    apart; warm-up takes at most a quarter of ``budget`` (default: the per-measurement budget times the number
    of candidates); :func:`plan` then sizes each candidate's sample and the rounds. **Every candidate gets at
    least** :data:`MIN_ROUNDS` **rounds** (so one outlying round cannot decide a verdict): where a call is too
    slow for that inside the budget, the rounds take the time they need and ``meta['over_budget_s']`` says by
    how much (the table of :func:`helpers.verdict.time_together` prints it) — shrink the work if that is long.
    ``repeats`` is the most rounds taken (a smaller value still takes :data:`MIN_ROUNDS`). Every sample is
    synchronised and timed with ``perf_counter`` (on a GPU too: a round must end before the next candidate
    starts), so compare interleaved measurements with each other, not with ``benchmark``'s.
    ``setup`` maps a label to a call made before each of that candidate's calls (its first, its warm-up and each
    sample), outside the timed region: e.g. :func:`cache_flusher`'s, so the call is timed with cold caches, or
    one that gives the candidate state it needs (its own KV cache); such a candidate takes one call per sample.
    """
    _check_interleaved(candidates, warmup, repeats, min_sample_time, setup)
    repeats = max(repeats, MIN_ROUNDS)
    budget = default_budget() * len(candidates) if budget == "default" else budget
    check_number("budget", budget, positive=True, allow_none=True, hint="pass seconds for all rounds, or None.")
    labels = list(candidates)
    setup = dict(setup or {})
    per_item = (
        {name: items.get(name) for name in labels} if isinstance(items, Mapping) else dict.fromkeys(labels, items)
    )
    for name, value in per_item.items():
        if value is not None:
            check_int(f"items[{name!r}]", value, 1, hint="pass the batch size, or None.")
    dev = choose_device(device)
    limit = math.inf if budget is None else float(budget)
    if spinning := spinning_sessions(candidates):  # a candidate's threads must not tax the others unsaid
        print(
            f"⚠ {', '.join(spinning)}: an ONNX Runtime session whose threads spin after each run (ORT's default) "
            "holds the cores the other candidates need and slows them; create it with options.add_session_config_"
            "entry('session.intra_op.allow_spinning', '0') (helpers.onnxrt.session does) for a fair comparison."
        )
    meter = LoadMeter()

    def prepared(name: str) -> float:  # one call timed apart, after its setup (a setup may be state it needs)
        if name in setup:
            setup[name]()
        return timed_call(candidates[name], device=dev)[0]

    with _autograd(inference_mode):
        first = {name: prepared(name) for name in labels}
        begin = time.perf_counter()
        estimate = dict(first)
        for name in labels:
            for _ in range(warmup):
                if time.perf_counter() - begin + estimate[name] > limit / 4:
                    break
                estimate[name] = min(estimate[name], prepared(name))
        planned = plan(
            [estimate[n] for n in labels],
            limit - (time.perf_counter() - begin),
            min_sample_time=min_sample_time,
            min_rounds=MIN_ROUNDS,
        )
        number = {n: 1 if n in setup else k for n, k in zip(labels, planned.numbers, strict=True)}
        samples = _rounds(candidates, labels, number, dev, repeats, limit, begin, setup)
    load = meter.stop().to_dict()
    spent = time.perf_counter() - begin
    meta = {"over_budget_s": spent - limit} if spent > limit and planned.rounds < MIN_ROUNDS else {}
    session = new_session("interleaved")
    return {
        name: Measurement(
            samples=tuple(samples[name]),
            label=name,
            number=number[name],
            first_call=first[name],
            device=str(dev),
            items=per_item[name],
            budget=budget,
            timer="perf_counter (interleaved)",
            load=load,
            session=session,
            meta=dict(meta),
        )
        for name in labels
    }


def _check_interleaved(candidates: Any, warmup: Any, repeats: Any, min_sample_time: Any, setup: Any) -> None:
    if not isinstance(candidates, Mapping) or len(candidates) < 2:
        raise ValueError("interleaved() needs a dict of at least two labelled callables: {'eager': lambda: ..., ...}.")
    for name, fn in candidates.items():
        check_callable(f"candidates[{name!r}]", fn, "map each label to a zero-argument callable.")
    check_int("warmup", warmup, 0, hint="use 0 to skip warm-up.")
    check_int("repeats", repeats, 1, hint=f"the most rounds (20 is usual; {MIN_ROUNDS} are always taken).")
    check_number("min_sample_time", min_sample_time, positive=True, hint="pass seconds, e.g. 1e-3.")
    for name, fn in (setup or {}).items():
        if name not in candidates:
            raise ValueError(f"setup names {name!r}, which is not a candidate: one of {list(candidates)}.")
        check_callable(f"setup[{name!r}]", fn, "map a label to a zero-argument call made before each sample.")


def _rounds(
    candidates: Mapping[str, Callable[[], Any]],
    labels: list[str],
    number: Mapping[str, int],
    dev: torch.device,
    repeats: int,
    limit: float,
    begin: float,
    setup: Mapping[str, Callable[[], Any]],
) -> dict[str, list[float]]:
    """The rounds of :func:`interleaved`: the first :data:`MIN_ROUNDS` always, then more while the next round
    (as long as the last one took) fits the budget, up to ``repeats``."""
    from .progress import bar

    samples: dict[str, list[float]] = {n: [] for n in labels}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    shown = bar(total=repeats, desc=f"{len(labels)} candidates, timed round by round", unit="round")
    try:
        last = 0.0
        for r in range(repeats):
            if r >= MIN_ROUNDS and time.perf_counter() - begin + last > limit:
                break
            shown.update(1)
            started = time.perf_counter()
            for name in labels[r % len(labels) :] + labels[: r % len(labels)]:
                fn, n = candidates[name], number[name]
                if name in setup:
                    setup[name]()
                sync(dev)
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                sync(dev)
                samples[name].append((time.perf_counter() - start) / n)
            last = time.perf_counter() - started
    finally:
        shown.close()
        if gc_was_enabled:
            gc.enable()
    return samples


@dataclass(frozen=True)
class Probe:
    """What :func:`fit_to_budget` found: the largest size whose one call fits ``limit`` seconds, the seconds
    each timed size took, and the predicted seconds of the sizes it did not dare to run."""

    size: Any | None
    timed: dict[Any, float]
    predicted: dict[Any, float]
    limit: float

    @property
    def skipped(self) -> list[Any]:
        return list(self.predicted)

    def summary(self) -> str:
        parts = [f"{s}: {format_seconds(t)}" for s, t in self.timed.items()]
        parts += [f"{s}: ~{format_seconds(t)} predicted, not run" for s, t in self.predicted.items()]
        return f"one call per size ({', '.join(parts)}); limit {format_seconds(self.limit)} per call"


def fit_to_budget(
    make_call: Callable[[Any], Callable[[], Any]],
    sizes: Sequence[float],
    *,
    limit: float | None = None,
    exponent: float = 3.0,
    device: DeviceLike = None,
) -> Probe:
    """Probe a case that can be catastrophically slow on some hardware (fp16 on a CPU without fp16 units,
    int8 without VNNI) before timing it: time ONE call at the smallest size, predict the next size's call
    from it (``time × (next / size) ** exponent``: 3 for a square matmul, 1 for a copy), and go up only while
    the prediction fits ``limit`` (default: the budget over :data:`MIN_SAMPLES`, so that many samples fit).
    ``make_call(size)`` returns the zero-argument call to time. A size that is run gets a cold call (timed:
    if it is already over the limit the probe stops there) and then the timed one. Nothing predicted over the
    limit is ever run."""
    check_callable("make_call", make_call, "pass a function size -> zero-argument callable.")
    try:
        ordered = sorted(float(s) if not isinstance(s, numbers.Integral) else int(s) for s in sizes)
    except (TypeError, ValueError):
        ordered = []
    if not ordered or any(isinstance(s, bool) or not s > 0 for s in sizes):
        raise ValueError(f"sizes={sizes!r} is not allowed: pass positive sizes, e.g. [256, 1024, 2048].")
    limit = default_budget() / MIN_SAMPLES if limit is None else limit
    check_number("limit", limit, positive=True, hint="pass the seconds one call may take.")
    check_number("exponent", exponent, positive=True, hint="3 for a square matmul, 1 for a copy.")
    dev = choose_device(device)
    timed: dict[Any, float] = {}
    predicted: dict[Any, float] = {}
    last = None
    for size in ordered:
        if last is not None:
            guess = timed[last] * (size / last) ** exponent
            if guess > limit or predicted or timed[last] > limit:
                predicted[size] = guess
                continue
        call = make_call(size)
        cold, _ = timed_call(call, device=dev)  # allocation and packing: not the per-call time, unless too slow
        timed[size] = cold if cold > limit else timed_call(call, device=dev)[0]
        last = size
    fits = [s for s, t in timed.items() if t <= limit]
    return Probe(size=max(fits) if fits else None, timed=timed, predicted=predicted, limit=limit)
