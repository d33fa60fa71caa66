"""Choosing a batch size: the knee of the throughput curve, the batch that meets a latency target, the
largest batch that fits in memory (OOM-safe), and a small simulation of a batching server."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def _check_curve(batches: Sequence[int], values: Sequence[float], name: str) -> None:
    if len(batches) == 0 or len(batches) != len(values):
        raise ValueError(f"need one {name} per batch size, and at least one batch size.")
    if any(b < 1 for b in batches) or list(batches) != sorted(batches):
        raise ValueError("batch sizes must be positive and in increasing order.")


def sweep(
    model: Callable[[torch.Tensor], Any],
    make_input: Callable[[int], torch.Tensor],
    batches: Sequence[int],
    *,
    device: Any = None,
    repeats: int = 20,
    number: int | None = None,
    max_time: float | None = None,
    measure_memory: bool = False,
    label: str = "",
    progress: bool = False,
) -> tuple[Any, list[Any]]:
    """Time ``model(make_input(b))`` for each batch size ``b`` (under ``inference_mode``).

    Returns a DataFrame indexed by batch (p50 and p99 latency per batch, samples, throughput, time per item,
    and with ``measure_memory`` the peak bytes one call adds) and the ``Measurement`` of each batch.
    ``number=1`` makes every sample a single call, so p99 is a percentile of single-call latencies.
    """
    import pandas as pd

    from .memory import peak_allocated_bytes
    from .timing import benchmark

    if not callable(model) or not callable(make_input):
        raise TypeError("sweep() needs a model and a make_input(batch) function.")
    if not batches or any(b < 1 for b in batches):
        raise ValueError(f"batches={list(batches)!r} must be a non-empty list of sizes ≥ 1.")
    iterator: Any = batches
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(batches, desc=label or "batch sweep")
    rows, measurements = [], []
    for b in iterator:
        x = make_input(b)
        with torch.inference_mode():
            m = benchmark(model, x, label=f"{label} batch {b}".strip(), device=device, repeats=repeats,
                          number=number, items=b, max_time=max_time)
            peak = peak_allocated_bytes(lambda: model(x), device) if measure_memory else None  # noqa: B023
        measurements.append(m)
        row = {"batch": b, "p50": m.median, "p99": m.p99, "samples": m.n, "throughput": m.throughput,
               "per_item": m.median / b, "noisy": m.noisy}
        if measure_memory:
            row["peak_bytes"] = peak
        rows.append(row)
    return pd.DataFrame(rows).set_index("batch"), measurements


def find_knee(batches: Sequence[int], throughputs: Sequence[float], within: float = 0.10) -> int:
    """The smallest batch whose throughput is within ``within`` (a fraction) of the best measured.

    Past the knee, bigger batches buy little throughput but cost latency and memory.
    """
    _check_curve(batches, throughputs, "throughput")
    if not 0 <= within < 1:
        raise ValueError(f"within={within} must be a fraction in [0, 1), e.g. 0.1 for 10 %.")
    best = max(throughputs)
    return next(b for b, t in zip(batches, throughputs, strict=True) if t >= (1 - within) * best)


def choose_batch(batches: Sequence[int], latencies: Sequence[float], target: float,
                 throughputs: Sequence[float] | None = None) -> int | None:
    """The batch with the highest throughput among those whose latency (e.g. p99, seconds) meets ``target``;
    without throughputs, the largest such batch. None when no batch meets the target."""
    _check_curve(batches, latencies, "latency")
    if not target > 0:
        raise ValueError(f"target={target} must be a positive latency in seconds.")
    ok = [i for i, lat in enumerate(latencies) if lat <= target]
    if not ok:
        return None
    if throughputs is None:
        return batches[ok[-1]]
    _check_curve(batches, throughputs, "throughput")
    return batches[max(ok, key=lambda i: throughputs[i])]


@dataclass
class FitSearch:
    """Result of :func:`largest_fitting_batch`: the answer and every attempt, in order."""

    largest: int
    attempts: list[tuple[int, bool]]
    hit_limit: bool


def _free_after_oom() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def largest_fitting_batch(try_batch: Callable[[int], Any], start: int = 1, limit: int = 2**14) -> FitSearch:
    """Find the largest batch for which ``try_batch(b)`` does not raise ``torch.OutOfMemoryError``.

    Doubles from ``start`` until a batch fails (or ``limit`` is reached), then bisects between the last
    batch that fitted and the first that did not. After each OOM it frees what it can (garbage collection and
    the CUDA cache) so the next attempt starts clean. Any other exception propagates.
    """
    if not callable(try_batch):
        raise TypeError("largest_fitting_batch() needs a function that runs one batch: try_batch(b).")
    if start < 1 or limit < start:
        raise ValueError(f"need 1 ≤ start ≤ limit, got start={start}, limit={limit}.")
    attempts: list[tuple[int, bool]] = []

    def fits(b: int) -> bool:
        try:
            try_batch(b)
            ok = True
        except torch.OutOfMemoryError:
            ok = False
        # Free only after the except block: inside it, the traceback still holds the failed attempt's tensors.
        if not ok:
            _free_after_oom()
        attempts.append((b, ok))
        return ok

    if not fits(start):
        raise RuntimeError(f"batch {start} does not fit in memory: reduce the model, the input size or the dtype.")
    good, bad = start, None
    while bad is None:
        nxt = min(good * 2, limit)
        if nxt == good:
            return FitSearch(good, attempts, hit_limit=True)
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return FitSearch(good, attempts, hit_limit=False)


def memory_capped(run: Callable[[int], int], cap_bytes: int) -> Callable[[int], int]:
    """Wrap ``run(b) -> peak bytes`` so that a peak above ``cap_bytes`` raises ``torch.OutOfMemoryError``,
    as a full GPU would: lets the OOM-safe search run for real on a machine whose memory is not the limit."""
    if cap_bytes <= 0:
        raise ValueError("cap_bytes must be positive.")

    def capped(b: int) -> int:
        peak = run(b)
        if peak > cap_bytes:
            raise torch.OutOfMemoryError(f"batch {b} needs {peak} bytes, over the cap of {cap_bytes}")
        return peak

    return capped


def latency_model(batches: Sequence[int], seconds: Sequence[float]) -> Callable[[int], float]:
    """Service time of any batch size: linearly interpolated between measured medians; beyond the largest
    measured batch, proportional to the batch (the saturated regime: time per item stays that of the largest)."""
    _check_curve(batches, seconds, "time")
    b = np.asarray(batches, dtype=float)
    s = np.asarray(seconds, dtype=float)

    def service(n: int) -> float:
        if n <= b[-1]:
            return float(np.interp(n, b, s))
        return float(s[-1] * n / b[-1])

    return service


@dataclass
class ServingResult:
    rate: float
    max_batch: int
    timeout: float
    latencies: np.ndarray
    batch_sizes: np.ndarray
    throughput: float

    def row(self) -> dict[str, Any]:
        steady = self.latencies[len(self.latencies) // 10:]  # drop the first 10 %: the warm-up of the queue
        return {"arrival rate (req/s)": round(self.rate, 1), "max batch": self.max_batch,
                "p50 latency": float(np.percentile(steady, 50)),
                "p99 latency": float(np.percentile(steady, 99)),
                "mean batch": float(self.batch_sizes.mean()), "throughput (req/s)": self.throughput}


def is_stable(rate: float, max_batch: int, service: Callable[[int], float]) -> bool:
    """Whether a server with this max batch can keep up with ``rate`` at all: full batches must be served
    faster than they arrive. Otherwise the queue, and the latency, grow without bound."""
    return rate < max_batch / service(max_batch)


def simulate_server(rate: float, max_batch: int, timeout: float, service: Callable[[int], float],
                    n_requests: int = 5000, seed: int = 0) -> ServingResult:
    """A server that batches requests: Poisson arrivals at ``rate`` per second; when the server is free and a
    request waits, it starts a batch once ``max_batch`` requests are queued or the oldest has waited
    ``timeout`` seconds, and the batch takes ``service(size)`` seconds. Returns each request's latency
    (queueing + service)."""
    if rate <= 0 or max_batch < 1 or timeout < 0 or n_requests < 1:
        raise ValueError("need rate > 0, max_batch ≥ 1, timeout ≥ 0 and n_requests ≥ 1.")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n_requests))
    latencies = np.empty(n_requests)
    sizes = []
    free_at, i = 0.0, 0
    while i < n_requests:
        first = arrivals[i]
        # the batch starts when the server is free and either it is full or the oldest request timed out
        full_at = arrivals[min(i + max_batch - 1, n_requests - 1)]
        start = max(free_at, first, min(first + timeout, full_at) if i + max_batch - 1 < n_requests
                    else first + timeout)
        j = i
        while j < n_requests and j - i < max_batch and arrivals[j] <= start:
            j += 1
        j = max(j, i + 1)
        done = start + service(j - i)
        latencies[i:j] = done - arrivals[i:j]
        sizes.append(j - i)
        free_at, i = done, j
    span = max(free_at - arrivals[0], math.ulp(1.0))
    return ServingResult(rate, max_batch, timeout, latencies, np.asarray(sizes), n_requests / span)
