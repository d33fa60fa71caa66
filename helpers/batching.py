"""Choosing a batch size: the knee of the throughput curve, the batch that meets a latency target, the
largest batch that fits in memory lives in :mod:`helpers.oom` (``largest_fitting_batch``, ``memory_capped``), and
this module has a small simulation of a batching server."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .checks import check_callable, check_int, check_ints, check_number, check_numbers
from .timing import MIN_SAMPLES, Measurement, new_session
from .verdict import Comparison


def _check_curve(batches: Sequence[int], values: Sequence[float], name: str) -> None:
    check_ints("batches", batches, hint="pass the batch sizes measured, e.g. [1, 2, 4, 8]")
    check_numbers(f"{name}s", values, minimum=0, hint=f"pass one measured {name} per batch size")
    if len(batches) != len(values):
        raise ValueError(f"need one {name} per batch size: got {len(batches)} batch sizes and {len(values)} values.")
    if list(batches) != sorted(set(batches)):
        raise ValueError(f"batches={list(batches)!r}: batch sizes must be distinct and in increasing order.")


def sweep(
    model: Callable[[torch.Tensor], Any],
    make_input: Callable[[int], torch.Tensor],
    batches: Sequence[int],
    *,
    device: Any = None,
    repeats: int = 20,
    number: int | None = None,
    budget: float | None | str = "default",
    measure_memory: bool = False,
    label: str = "",
    progress: bool = False,
) -> tuple[Any, list[Any]]:
    """Time ``model(make_input(b))`` for each batch size ``b`` (under ``inference_mode``).

    Returns a DataFrame indexed by batch (p50 and p99 latency per batch, samples, throughput, time per item,
    and with ``measure_memory`` the peak bytes one call adds) and the ``Measurement`` of each batch.
    ``number=1`` makes every sample a single call, so p99 is a percentile of single-call latencies.
    ``budget`` bounds each batch's measurement (seconds; the default is ``timing.default_budget()``). A batch
    that took less time per call than a smaller one (beyond noise) is named in one printed line: the machine
    was busy, and the curve should be measured again.
    """
    import pandas as pd

    from .memory import peak_allocated_bytes
    from .timing import benchmark
    from .verdict import sweep_warning

    check_callable("model", model, hint="sweep() needs a model and a make_input(batch) function")
    check_callable("make_input", make_input, hint="sweep() needs a model and a make_input(batch) function")
    check_ints("batches", batches, hint="pass a list of batch sizes ≥ 1, e.g. [1, 8, 64]")
    from .progress import bar

    shown = bar(total=len(batches), desc=f"{label or 'batch sweep'}: batch sizes", unit="batch") if progress else None
    rows, measurements = [], []
    for b in batches:
        x = make_input(b)
        first = x[0] if isinstance(x, (tuple, list)) and x else x
        if not isinstance(first, torch.Tensor) or first.dim() == 0 or first.shape[0] != b:
            shape = tuple(first.shape) if isinstance(first, torch.Tensor) else type(first).__name__
            raise ValueError(
                f"make_input({b}) gave {shape}, not a batch of {b}: the throughput would count items that were "
                "not run; make it build b inputs, e.g. lambda b: x[:b]"
            )
        with torch.inference_mode():
            m = benchmark(
                model,
                x,
                label=f"{label} batch {b}".strip(),
                device=device,
                repeats=repeats,
                number=number,
                items=b,
                budget=budget,
            )
            peak = peak_allocated_bytes(lambda: model(x), device) if measure_memory else None  # noqa: B023
        measurements.append(m)
        row = {
            "batch": b,
            "p50": m.median,
            "p99": m.p99,
            "samples": m.n,
            "throughput": m.throughput,
            "per_item": m.median / b,
            "noisy": m.noisy,
        }
        if measure_memory:
            row["peak_bytes"] = peak
        rows.append(row)
        if shown is not None:
            shown.set_postfix_str(f"batch {b}: {m.median * 1e3:.3g} ms per call", refresh=False)
            shown.update(1)
    if shown is not None:
        shown.close()
    warning = sweep_warning(list(batches), measurements)  # a bigger batch that took less time: a busy machine
    if warning:
        print(warning)
    return pd.DataFrame(rows).set_index("batch"), measurements


#: A p99 more than this many times its p50, and more than :data:`TAIL_SLACK_S` above it, is a preemption tail: a
#: few calls waited for the CPU (another program, a time slice), not what the model's latency is.
TAIL_FACTOR = 3.0
#: ... and more than this many seconds above the p50 (a few timer interrupts on a 100 µs call are not a tail).
TAIL_SLACK_S = 1e-3


def tail_warning(batches: Sequence[int], measurements: Sequence[Measurement]) -> str | None:
    """For a sweep of single calls (``number=1``) whose p99 will set a latency target, a batch choice or a serving
    simulation: one line naming the batch sizes whose p99 is a preemption tail (over :data:`TAIL_FACTOR` × their
    p50 and :data:`TAIL_SLACK_S` above it), or None. A decision built on such a tail teaches the machine's noise."""
    _check_curve(batches, [m.median for m in measurements], "latency")
    tails = [
        f"batch {b} (p99 {m.p99 * 1e3:.3g} ms, {m.p99 / m.median:.0f}× its p50)"
        for b, m in zip(batches, measurements, strict=True)
        if m.median > 0 and m.p99 > TAIL_FACTOR * m.median and m.p99 - m.median > TAIL_SLACK_S
    ]
    if not tails:
        return None
    return (
        f"a preemption tail: {', '.join(tails)}; a few calls waited for the CPU, so the p99 measures the machine's "
        "noise, not the model's latency"
    )


#: Timed calls a batch needs before "none of them went over the target" may stand for its p99 meeting it: the
#: fewest whose slowest call lies above the p99 with 95 % probability (1 - 0.99**n >= 0.95 from n = 299).
P99_CALLS = 299


def _lower_rank(n: int, q: float = 0.99, confidence: float = 0.975) -> int:
    """The largest rank r (1-based) whose order statistic lies below the q-quantile with probability at least
    ``confidence``: P(Binomial(n, q) >= r) >= confidence (a distribution-free bound, no SciPy)."""
    log_q, log_p = math.log(q), math.log1p(-q)
    tail = 0.0  # P(Binomial(n, q) >= r), accumulated from r = n downwards
    for r in range(n, 0, -1):
        tail += math.exp(math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1) + r * log_q + (n - r) * log_p)
        if tail >= confidence:
            return r
    return 1


def allowed_over(n: int, q: float = 0.99, confidence: float = 0.95) -> int | None:
    """How many of ``n`` timed calls may exceed a latency target while their q-quantile still lies below it with
    ``confidence``: the largest k with P(Binomial(n, 1 - q) <= k) <= 1 - confidence (the k + 1 calls over the
    quantile that this many calls would show that often). None when even k = 0 is too many: under 299 calls for
    the p99 (0.99**299 < 0.05 <= 0.99**298). 473 calls allow one over, 628 two."""
    p = 1 - q
    log_p, log_q = math.log(p), math.log(q)
    below, k = 0.0, -1  # P(Binomial(n, p) <= k), accumulated upwards
    while k + 1 <= n:
        j = k + 1
        below += math.exp(
            math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q
        )
        if below > 1 - confidence:
            break
        k = j
    return None if k < 0 else k


def calls_to_meet(over: int) -> int:
    """The fewest timed calls for which ``over`` calls above the target still let the p99 meet it
    (:func:`allowed_over`): 299 for none, 473 for one, 628 for two."""
    check_int("over", over, 0, hint="pass how many timed calls went over the target")
    n = P99_CALLS
    while (allowed_over(n) or 0) < over or allowed_over(n) is None:
        n += 1
    return n


def p99_against(samples: Sequence[float], target: float) -> str:
    """Whether single-call latencies ``samples`` meet a p99 ``target`` (seconds), as far as they can tell:
    ``"meets"`` when the p99 lies under the target with 95 % confidence (order statistics, distribution-free: of
    299 calls none may go over it, of 473 one, of 628 two; :func:`allowed_over`); ``"misses"`` when the lower end
    of the p99's 95 % interval is above it; otherwise ``"undecided"``: more calls would tell
    (:func:`calls_to_meet` says how many). A p99 from a few hundred calls is one of their largest values, so a
    point estimate a hair under the target says little."""
    check_numbers("samples", samples, hint="pass the single-call latencies in seconds, e.g. m.samples")
    check_number("target", target, positive=True, hint="pass the p99 target in seconds, e.g. 0.005")
    xs = sorted(samples)
    allowed = allowed_over(len(xs))
    if allowed is not None and sum(x > target for x in xs) <= allowed:
        return "meets"
    if xs[_lower_rank(len(xs)) - 1] > target:
        return "misses"
    return "undecided"


def find_knee(batches: Sequence[int], throughputs: Sequence[float], within: float = 0.10) -> int:
    """The smallest batch whose throughput is within ``within`` (a fraction) of the best measured.

    Past the knee, bigger batches buy little throughput but cost latency and memory.
    """
    _check_curve(batches, throughputs, "throughput")
    check_number("within", within, minimum=0, hint="pass a fraction in [0, 1), e.g. 0.1 for 10 %")
    if not within < 1:
        raise ValueError(f"within={within} must be a fraction in [0, 1), e.g. 0.1 for 10 %.")
    best = max(throughputs)
    return next(b for b, t in zip(batches, throughputs, strict=True) if t >= (1 - within) * best)


def choose_batch(
    batches: Sequence[int], latencies: Sequence[float], target: float, throughputs: Sequence[float] | None = None
) -> int | None:
    """The batch with the highest throughput among those whose latency (e.g. p99, seconds) meets ``target``;
    without throughputs, the largest such batch. None when no batch meets the target."""
    _check_curve(batches, latencies, "latency")
    check_number("target", target, positive=True, hint="pass the latency target in seconds, e.g. 0.005")
    ok = [i for i, lat in enumerate(latencies) if lat <= target]
    if not ok:
        return None
    if throughputs is None:
        return batches[ok[-1]]
    _check_curve(batches, throughputs, "throughput")
    return batches[max(ok, key=lambda i: throughputs[i])]


def shape_buckets(largest: int, most: int = 8) -> list[int]:
    """The batch sizes a compiled model or a CUDA graph is given (each one its own recorded graph): powers of two
    up to ``largest``, and ``largest`` itself, at most ``most`` of them (1, then the largest ones, so a partial batch
    is padded at most to twice its size, except the smallest ones). Eight by default: with ``dynamic=False`` each
    shape is a compile of its own, and Dynamo stops recompiling a function after
    ``torch._dynamo.config.recompile_limit`` of them (8 by default); with dynamic shapes, PyTorch warns beyond eight
    recorded CUDA graphs of one function
    (``cudagraph_dynamic_shape_warn_limit``)."""
    check_int("largest", largest, hint="pass the largest batch served, e.g. 64")
    check_int("most", most, minimum=2, hint="pass how many shapes to allow at most, e.g. 8")
    sizes = sorted({2**k for k in range(largest.bit_length()) if 2**k < largest} | {largest})
    return sizes if len(sizes) <= most else [1, *sizes[len(sizes) - most + 1 :]]


def bucket_for(n: int, buckets: Sequence[int]) -> int:
    """The smallest of ``buckets`` that holds ``n`` requests: the shape a batch of ``n`` is padded to."""
    check_int("n", n, hint="pass the number of requests in the batch, e.g. 3")
    check_ints("buckets", buckets, hint="pass the batch sizes compiled for, e.g. shape_buckets(64)")
    fitting = [b for b in buckets if b >= n]
    if not fitting:
        raise ValueError(f"a batch of {n} fits none of the buckets {sorted(buckets)}: add a bucket of at least {n}.")
    return min(fitting)


def graphed(
    module: Callable[[torch.Tensor], torch.Tensor],
    example: Callable[[int], torch.Tensor],
    shapes: Sequence[int],
    budget_s: float = math.inf,
    record: Callable[..., Callable[[], torch.Tensor]] | None = None,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` recorded as one CUDA graph per batch size in ``shapes`` (``example(b)``: an input of ``b`` items in
    the dtype and layout it is served with): the largest and the smallest first, the others while ``budget_s``
    seconds of recording last (a compiled module compiles each new shape while it is recorded). Returns a function
    of a batch whose size was recorded: it copies the batch into that graph's input, replays it and returns its
    output, overwritten by the next replay (clone what you keep); ``.shapes`` lists the recorded sizes.
    ``record(fn, x)`` records one call (default: :func:`helpers.llm.cuda_graph`, warm-up on a side stream first)."""
    check_callable("module", module, hint="pass the model to record, e.g. the compiled module")
    check_ints("shapes", shapes, hint="pass the batch sizes to record, e.g. shape_buckets(64)")
    if record is None:
        from .llm import cuda_graph as record
    replays: dict[int, Callable[[], torch.Tensor]] = {}
    extra_from = math.inf
    for b in dict.fromkeys([max(shapes), min(shapes), *sorted(shapes, reverse=True)]):
        if len(replays) == 2:
            extra_from = time.perf_counter()  # the budget counts the shapes beyond the largest and the smallest
        if time.perf_counter() - extra_from > budget_s:
            break
        replays[b] = record(module, example(b))

    def run(x: torch.Tensor) -> torch.Tensor:
        replay = replays[len(x)]
        replay.inputs[0].copy_(x)  # type: ignore[attr-defined]  # the graph reads its recorded input's address
        return replay()

    run.shapes = tuple(sorted(replays))  # type: ignore[attr-defined]
    return run


def latency_model(batches: Sequence[int], seconds: Sequence[float]) -> Callable[[int], float]:
    """Service time of any batch size: linearly interpolated between measured medians; beyond the largest
    measured batch, proportional to the batch (the saturated regime: time per item stays that of the largest)."""
    _check_curve(batches, seconds, "time")
    b = np.asarray(batches, dtype=float)
    s = np.asarray(seconds, dtype=float)

    def service(n: int) -> float:
        check_int("batch", n, hint="a batch holds at least one request")
        if n <= b[-1]:
            return float(np.interp(n, b, s))
        return float(s[-1] * n / b[-1])

    return service


class SampledLatency:
    """Service times drawn from the measured single-call samples of each batch size, so a simulation sees the
    tail the sweep measured, not only its medians. Each call draws a quantile uniformly at random and returns
    that quantile's latency curve at the batch asked for (interpolated between ``quantiles`` evenly spaced
    curves, and between the measured batch sizes as :func:`latency_model` does for the median), so a draw
    exceeds the measured p99 one time in a hundred. With ``padded=True`` the batch sizes are the shapes the
    model is given (:func:`shape_buckets`): a batch of n costs the measured time of the smallest one that holds
    it, as a compiled model or a CUDA graph padded to it does, not an interpolation. ``median`` is the median
    model (what :func:`is_stable` should be given). :func:`simulate_server` reseeds it with its own seed, so a
    simulation is repeatable."""

    def __init__(
        self,
        batches: Sequence[int],
        samples: Sequence[Sequence[float]],
        quantiles: int = 101,
        seed: int = 0,
        padded: bool = False,
    ) -> None:
        check_int("quantiles", quantiles, minimum=2, maximum=10_001, hint="pass how many quantiles to keep, e.g. 101")
        if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence) or len(samples) != len(batches):
            raise ValueError(
                "pass one list of measured seconds per batch size, e.g. [m.samples for m in measurements]."
            )
        for b, values in zip(batches, samples, strict=True):
            check_numbers(f"samples of batch {b}", list(values), positive=True, hint="pass the measured seconds")
        qs = np.linspace(0.0, 1.0, quantiles)
        table = np.array([np.quantile(np.asarray(v, dtype=float), qs) for v in samples])
        self._curves = [latency_model(batches, list(table[:, j])) for j in range(quantiles)]
        median = latency_model(batches, [float(np.median(v)) for v in samples])
        self._batches = list(batches) if padded else None
        self.median = (lambda n: median(self._padded(n))) if padded else median
        self.reseed(seed)

    def _padded(self, n: int) -> int:  # the measured batch a batch of n runs as (padded), if padded
        return n if self._batches is None or n > self._batches[-1] else bucket_for(n, self._batches)

    def reseed(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def __call__(self, n: int) -> float:
        # a uniform draw of the quantile, interpolated between the stored curves: each stretch of the measured
        # distribution is drawn as often as its share (picking one of the curves at random gave the largest sample
        # a 1-in-101 chance whatever the count, so a simulated p99 came out at the maximum, not at the p99)
        n = self._padded(n)
        u = float(self._rng.random()) * (len(self._curves) - 1)
        j = min(int(u), len(self._curves) - 2)
        frac = u - j
        return (1.0 - frac) * self._curves[j](n) + frac * self._curves[j + 1](n)


@dataclass
class ServingResult:
    rate: float
    max_batch: int
    timeout: float
    latencies: np.ndarray
    batch_sizes: np.ndarray
    throughput: float

    def row(self) -> dict[str, Any]:
        steady = self.latencies[len(self.latencies) // 10 :]  # drop the first 10 %: the warm-up of the queue
        return {
            "arrival rate (req/s)": round(self.rate, 1),
            "max batch": self.max_batch,
            "p50 latency": float(np.percentile(steady, 50)),
            "p99 latency": float(np.percentile(steady, 99)),
            "mean batch": float(self.batch_sizes.mean()),
            "throughput (req/s)": self.throughput,
        }


def is_stable(rate: float, max_batch: int, service: Callable[[int], float]) -> bool:
    """Whether a server with this max batch can keep up with ``rate`` at all: full batches must be served
    faster than they arrive. Otherwise the queue, and the latency, grow without bound."""
    check_number("rate", rate, positive=True, hint="pass the arrival rate in requests per second, e.g. 100")
    check_int("max_batch", max_batch, hint="pass the largest batch the server forms, e.g. 32")
    check_callable("service", service, hint="pass a function batch size → seconds, e.g. latency_model(...)")
    if isinstance(service, SampledLatency):
        service = service.median  # stability is about the typical batch, not one random draw
    seconds = service(max_batch)
    check_number("service(max_batch)", seconds, positive=True, hint="service must return a positive time in seconds")
    return rate < max_batch / seconds


#: Settings whose simulated p99 is within this fraction of the lowest count as tied (:func:`lowest_p99`).
P99_TIE = 0.01


def lowest_p99(p99_by_setting: dict[int, float], tie: float = P99_TIE) -> int:
    """The smallest setting (a max batch) whose p99 latency is within ``tie`` of the lowest. A simulation run at
    a fixed seed is not a noisy measurement, but two settings a percent apart in p99 are the same for any
    practical purpose, and the smaller batch then waits less and needs less memory."""
    return min(tied_with_lowest_p99(p99_by_setting, tie))


def tied_with_lowest_p99(p99_by_setting: dict[int, float], tie: float = P99_TIE) -> set[int]:
    """Every setting whose p99 latency is within ``tie`` of the lowest (see :func:`lowest_p99`)."""
    if not isinstance(p99_by_setting, dict) or not p99_by_setting:
        raise ValueError("pass a non-empty dict {max batch: p99 latency in seconds}, e.g. {1: 0.002, 8: 0.001}.")
    check_number("tie", tie, minimum=0, hint="pass the tie as a fraction, e.g. 0.01 for 1 %")
    finite = {}
    for k, v in p99_by_setting.items():
        number = isinstance(v, int | float | np.floating) and not isinstance(v, bool) and not math.isnan(v) and v >= 0
        if not number:
            raise ValueError(f"p99 of {k!r} is {v!r}: pass p99 latencies in seconds (inf for an overloaded setting).")
        if math.isfinite(v):
            finite[k] = float(v)
    if not finite:
        raise ValueError("every p99 is infinite (every setting overloaded): lower the load or raise the max batch.")
    lowest = min(finite.values())
    return {k for k, v in finite.items() if v <= (1 + tie) * lowest}


def simulate_server(
    rate: float, max_batch: int, timeout: float, service: Callable[[int], float], n_requests: int = 5000, seed: int = 0
) -> ServingResult:
    """A server that batches requests: Poisson arrivals at ``rate`` per second; when the server is free and a
    request waits, it starts a batch once ``max_batch`` requests are queued or the oldest has waited
    ``timeout`` seconds, and the batch takes ``service(size)`` seconds (a :class:`SampledLatency` draws it from
    the measured samples). Returns each request's latency (queueing + service)."""
    check_number("rate", rate, positive=True, hint="pass the arrival rate in requests per second, e.g. 100")
    check_int("max_batch", max_batch, hint="pass the largest batch the server forms, e.g. 32")
    check_number("timeout", timeout, minimum=0, hint="pass how long (seconds) the oldest request may wait, e.g. 0.002")
    check_int("n_requests", n_requests, maximum=10**7, hint="pass how many requests to simulate, e.g. 5000")
    check_callable("service", service, hint="pass a function batch size → seconds, e.g. latency_model(...)")
    if isinstance(service, SampledLatency):
        service.reseed(seed + 1)  # its draws repeat with the simulation's seed
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n_requests))
    latencies = np.empty(n_requests)
    sizes = []
    free_at, i = 0.0, 0
    while i < n_requests:
        first = arrivals[i]
        # the batch starts when the server is free and either it is full or the oldest request timed out
        full_at = arrivals[min(i + max_batch - 1, n_requests - 1)]
        start = max(
            free_at, first, min(first + timeout, full_at) if i + max_batch - 1 < n_requests else first + timeout
        )
        j = i
        while j < n_requests and j - i < max_batch and arrivals[j] <= start:
            j += 1
        j = max(j, i + 1)
        took = service(j - i)
        if not isinstance(took, numbers.Real) or isinstance(took, bool) or not math.isfinite(took) or took < 0:
            raise ValueError(
                f"service({j - i}) returned {took!r}: a batch must take a finite, non-negative number of seconds; "
                "check the latency model passed as service."
            )
        done = start + took
        latencies[i:j] = done - arrivals[i:j]
        sizes.append(j - i)
        free_at, i = done, j
    span = max(free_at - arrivals[0], math.ulp(1.0))
    return ServingResult(rate, max_batch, timeout, latencies, np.asarray(sizes), n_requests / span)


def p99_over_seeds(
    rate: float,
    max_batches: Sequence[int],
    timeout: float | Sequence[float],
    service: Callable[[int], float],
    n_requests: int | Callable[[int], int] = 5000,
    seeds: int = 10,
) -> tuple[Comparison | None, list[int]]:
    """Simulate each stable ``max_batches`` setting on the same ``seeds`` arrival traces (seed ``s`` draws the
    same arrivals and service draws for every setting: common random numbers) and keep each run's p99 latency.
    Returns a :class:`helpers.verdict.Comparison` whose candidates are ``"max batch N"`` and whose rounds are
    the seeds, so its verdicts pair two settings trace by trace (``meta`` holds the max batch, the timeout and
    the mean batch formed), and the settings that cannot keep up with ``rate`` (None for the comparison when
    none can). ``timeout`` may be one value per max batch, and ``n_requests`` a function of the max batch (a large
    batch needs more requests to fill many times). Labels are ``"timeout <seconds>"`` instead when every setting
    has the same max batch and the timeouts differ."""
    check_number("rate", rate, positive=True, hint="pass the arrival rate in requests per second, e.g. 100")
    check_ints("max_batches", list(max_batches), hint="pass the max batch sizes to simulate, e.g. [1, 8, 64]")
    check_int("seeds", seeds, minimum=MIN_SAMPLES, hint=f"pass how many arrival traces (at least {MIN_SAMPLES})")
    timeouts = [timeout] * len(max_batches) if isinstance(timeout, int | float) else list(timeout)
    if len(timeouts) != len(max_batches):
        raise ValueError(f"pass one timeout, or one per max batch ({len(max_batches)}), not {len(timeouts)}.")
    check_numbers("timeout", timeouts, minimum=0, hint="pass how long (seconds) the oldest request may wait")
    count = n_requests if callable(n_requests) else (lambda _mb: n_requests)
    by_timeout = len(set(max_batches)) == 1 and len(set(timeouts)) == len(timeouts) > 1
    session = new_session("serving-simulation")
    measured, unstable = {}, []
    for mb, wait in zip(max_batches, timeouts, strict=True):
        if not is_stable(rate, mb, service):
            unstable.append(int(mb))
            continue
        runs = [simulate_server(rate, mb, wait, service, n_requests=count(mb), seed=s).row() for s in range(seeds)]
        label = f"timeout {wait:.3g} s" if by_timeout else f"max batch {mb}"
        measured[label] = Measurement.from_samples(
            [r["p99 latency"] for r in runs],
            label=label,
            session=session,
            timer="simulation (p99 per arrival trace)",
            meta={
                "max_batch": int(mb),
                "timeout": float(wait),
                "mean_batch": float(np.mean([r["mean batch"] for r in runs])),
            },
        )
    if not measured:
        return None, unstable
    return Comparison(measurements=measured, baseline=next(iter(measured))), unstable


def tied_settings(comparison: Comparison) -> tuple[int, list[int]]:
    """From :func:`p99_over_seeds`'s comparison: the max batch with the lowest median p99 over the traces, and
    every max batch whose paired verdict against it (trace by trace) is undecided: its p99 is within the noise
    of the arrival traces, smallest first. Any tied setting is as good as the best here; the smallest waits
    least and needs the least memory."""
    if not isinstance(comparison, Comparison):
        raise TypeError(f"tied_settings() needs p99_over_seeds()'s Comparison, got {type(comparison).__name__}.")
    best = min(comparison.labels, key=lambda label: comparison[label].median)
    tied = [best] + [
        label for label in comparison.labels if label != best and not comparison.verdict(label, against=best).decided
    ]
    return comparison[best].meta["max_batch"], sorted(comparison[label].meta["max_batch"] for label in tied)


@dataclass(frozen=True)
class Capacity:
    """What :func:`capacity_at_target` found: the highest arrival ``rate`` (requests/s) at which the simulated server
    meets both the p99 target and the utilisation ceiling, the ``p99`` and ``busy`` share there, the
    ``stability_limit`` (full batches served as fast as they arrive: the rate no queue survives), and which
    constraint stops the rate from going higher: ``binds`` is ``"the p99 target"``, ``"the utilisation ceiling"``,
    both joined by "and", or ``"stability"`` (neither binds below the stability limit)."""

    rate: float
    p99: float
    busy: float
    binds: str
    stability_limit: float

    def sentence(self) -> str:
        if self.rate == 0:
            return f"no rate meets the target: {self.binds} is missed even by a lone request"
        return (
            f"{self.rate:,.1f} requests/s (p99 {self.p99 * 1e3:.3g} ms, busy {self.busy:.0%}; the stability limit is "
            f"{self.stability_limit:,.1f}/s): {self.binds} binds"
        )


def capacity_at_target(
    service: Callable[[int], float],
    max_batch: int,
    timeout: float,
    p99_target: float,
    ceiling: float,
    n_requests: int = 5000,
    tolerance: float = 0.01,
) -> Capacity:
    """The highest arrival rate a server (``max_batch``, ``timeout``, service times from ``service``, e.g. a
    :class:`SampledLatency`) sustains with a simulated p99 latency at most ``p99_target`` seconds and busy at most
    ``ceiling`` of the time, found by bisection up to the stability limit (``max_batch`` / the service time of a
    full batch) to within ``tolerance`` of that limit, on one arrival trace (a fixed seed: the p99 and the busy
    share then grow with the rate). The first tenth of the requests warms the queue up and is left out of the p99.
    Says which constraint binds: the one that fails just above the rate found."""
    check_int("max_batch", max_batch, hint="pass the largest batch the server forms, e.g. 32")
    check_number("timeout", timeout, minimum=0, hint="pass how long (seconds) the oldest request may wait, e.g. 0.002")
    check_number("p99_target", p99_target, positive=True, hint="pass the p99 latency target in seconds, e.g. 0.02")
    check_number("ceiling", ceiling, positive=True, hint="pass the busiest share allowed, e.g. 0.7")
    if ceiling > 1:
        raise ValueError(f"ceiling={ceiling!r} is a share of the time: pass at most 1, e.g. 0.7.")
    check_int("n_requests", n_requests, minimum=100, maximum=10**7, hint="pass how many requests to simulate")
    check_number("tolerance", tolerance, positive=True, hint="pass a fraction of the limit, e.g. 0.01")
    if tolerance > 0.5:
        raise ValueError(f"tolerance={tolerance!r} is a fraction of the stability limit: pass at most 0.5, e.g. 0.01.")
    check_callable("service", service, hint="pass a function batch size → seconds, e.g. SampledLatency(...)")
    median = service.median if isinstance(service, SampledLatency) else service
    limit = max_batch / median(max_batch)

    def run(rate: float) -> tuple[float, float]:
        sim = simulate_server(rate, max_batch, timeout, service, n_requests=n_requests)
        p99 = float(np.percentile(sim.latencies[n_requests // 10 :], 99))
        busy = float(sum(map(median, sim.batch_sizes.tolist())) * sim.throughput / n_requests)
        return p99, busy

    def failing(p99: float, busy: float) -> list[str]:
        return [
            name
            for name, bad in (("the p99 target", p99 > p99_target), ("the utilisation ceiling", busy > ceiling))
            if bad
        ]

    top = limit * (1 - tolerance / 2)  # just below the limit: above it the queue grows without bound
    p99, busy = run(top)
    if not failing(p99, busy):
        return Capacity(top, p99, busy, "stability", limit)
    low, best = 0.0, (0.0, math.nan, math.nan)
    high = top
    while high - low > tolerance * limit:
        mid = (low + high) / 2
        p99, busy = run(mid)
        if failing(p99, busy):
            high = mid
        else:
            low, best = mid, (mid, p99, busy)
    above = run(high)
    binds = " and ".join(failing(*above)) or "the p99 target"
    return Capacity(best[0], best[1], best[2], binds, limit)
