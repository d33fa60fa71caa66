"""One result type (``Measurement``) and one timer (``benchmark``) for every number the course shows.

The rules it enforces, so a notebook cannot forget them:

* the first call (compilation, allocation, cache misses, lazy init) is timed apart and never mixed into the
  steady state;
* warm-up calls run before any sample is taken;
* the device is synchronised around every sample: CUDA events on a GPU (they time the GPU's own timeline),
  ``time.perf_counter`` on the CPU;
* tiny workloads are repeated ``number`` times per sample so the timer's resolution does not dominate;
* the result keeps every raw sample and reports median, IQR and p95, never the mean of one run.

The statistics and the noise threshold follow ``torch.utils.benchmark`` (IQR above 10 % of the median is
flagged), and :meth:`Measurement.from_torch` converts its results so both can sit in one table.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from .device import DeviceLike, choose_device, sync

#: An IQR larger than this fraction of the median marks a measurement as noisy (as torch.utils.benchmark does).
NOISE_THRESHOLD = 0.10

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def format_seconds(seconds: float, digits: int = 3) -> str:
    """``0.00123`` → ``'1.23 ms'``: a duration with a unit chosen so the number is between 1 and 1000."""
    if not math.isfinite(seconds):
        return str(seconds)
    seconds = float(f"{seconds:.{digits}g}")  # round first so 0.9999 s shows as 1.00 s, not 1000 ms
    magnitude = abs(seconds)
    scale, unit = next(((sc, un) for sc, un in _UNITS if magnitude >= sc), _UNITS[-1])
    value = seconds / scale
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))) if value else digits - 1)
    return f"{value:.{decimals}f} {unit}"


def format_rate(per_second: float, unit: str = "items") -> str:
    """``123456.0`` → ``'123k items/s'``."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(per_second) >= scale:
            return f"{per_second / scale:.3g}{prefix} {unit}/s"
    return f"{per_second:.3g} {unit}/s"


@dataclass(frozen=True)
class Measurement:
    """Timing samples of one workload, with the statistics the course reports.

    ``samples`` are seconds *per call* (each sample timed ``number`` calls and divided by ``number``).
    ``items`` is how many inputs one call processes (the batch size), for throughput.
    """

    samples: tuple[float, ...]
    label: str = ""
    number: int = 1
    first_call: float | None = None
    device: str = "cpu"
    timer: str = "perf_counter"
    items: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
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
    def noisy(self) -> bool:
        """True when the IQR is above ``NOISE_THRESHOLD`` of the median: re-run, or close other programs."""
        return self.relative_iqr > NOISE_THRESHOLD

    @property
    def throughput(self) -> float | None:
        """Items per second at the median time, when ``items`` is known."""
        return None if self.items is None or self.median == 0 else self.items / self.median

    # -- presentation --------------------------------------------------------------------------------------
    def summary(self) -> str:
        text = (
            f"{self.label or 'measurement'}: median {format_seconds(self.median)}"
            f" (IQR {format_seconds(self.iqr)}, p95 {format_seconds(self.p95)};"
            f" {self.n} samples × {self.number} call{'s' if self.number != 1 else ''}, {self.timer})"
        )
        if self.throughput is not None:
            text += f", {format_rate(self.throughput)}"
        if self.first_call is not None:
            text += f"; first call {format_seconds(self.first_call)}"
        if self.noisy:
            text += f"  ⚠ noisy: IQR is {self.relative_iqr:.0%} of the median"
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
            median=self.median, iqr=self.iqr, p25=self.p25, p75=self.p75, p95=self.p95,
            mean=self.mean, min=self.min, n=self.n, noisy=self.noisy, throughput=self.throughput,
        )
        return data


def _infer_device(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> torch.device:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
    if isinstance(fn, torch.nn.Module):
        for p in fn.parameters():
            return p.device
    return choose_device()  # a closure over its tensors: pass device= when it is not the default device


def _check_int(name: str, value: Any, minimum: int, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is not allowed: {name} must be an integer ≥ {minimum}; {hint}")


def timed_call(fn: Callable[..., Any], *args: Any, device: DeviceLike = None, **kwargs: Any) -> tuple[float, Any]:
    """Time one call of ``fn(*args)`` under ``torch.inference_mode()``, synchronised before and after, and
    return ``(seconds, result)``: for a first call (a compile, an export) that must be timed apart and whose
    result is then checked, which :func:`benchmark` would only time."""
    if not callable(fn):
        raise TypeError(f"timed_call() needs a callable, got {type(fn).__name__}.")
    dev = choose_device(device) if device is not None else _infer_device(fn, args, kwargs)
    sync(dev)
    start = time.perf_counter()
    with torch.inference_mode():
        result = fn(*args, **kwargs)
    sync(dev)
    return time.perf_counter() - start, result


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    label: str = "",
    device: DeviceLike = None,
    warmup: int = 3,
    repeats: int = 20,
    number: int | None = None,
    min_sample_time: float = 1e-3,
    max_time: float | None = None,
    items: int | None = None,
    **kwargs: Any,
) -> Measurement:
    """Time ``fn(*args, **kwargs)`` the right way and return a :class:`Measurement`.

    1. the first call is timed on its own (``first_call``), synchronised;
    2. ``warmup`` more calls run untimed; they also estimate the per-call time;
    3. ``repeats`` samples are taken, each of ``number`` calls (chosen so a sample lasts at least
       ``min_sample_time`` unless given), with the garbage collector paused;
    4. on CUDA each sample is bracketed by CUDA events (one synchronisation at the end); elsewhere by
       ``time.perf_counter`` with a device sync before the clock stops.

    ``device`` defaults to the device of the first tensor argument (or the module's parameters), else to
    ``choose_device()``: pass it explicitly when timing a closure that runs elsewhere.
    ``max_time`` (seconds) stops sampling early once at least 3 samples are in, to keep quick runs quick.
    ``items`` (inputs per call, e.g. the batch size) enables ``Measurement.throughput``.
    """
    if not callable(fn):
        raise TypeError(
            f"benchmark() needs a callable, got {type(fn).__name__}; pass the function itself "
            "(benchmark(model, x)), not its result (benchmark(model(x)))."
        )
    _check_int("warmup", warmup, 0, "use 0 to skip warm-up.")
    _check_int("repeats", repeats, 1, "take at least one sample (20 or more for a stable median).")
    if number is not None:
        _check_int("number", number, 1, "or leave it as None to choose it automatically.")
    if items is not None:
        _check_int("items", items, 1, "pass the batch size, or None.")
    if not min_sample_time > 0:
        raise ValueError(f"min_sample_time={min_sample_time!r} must be a positive number of seconds.")
    if max_time is not None and not max_time > 0:
        raise ValueError(f"max_time={max_time!r} must be a positive number of seconds, or None.")

    dev = choose_device(device) if device is not None else _infer_device(fn, args, kwargs)

    def call() -> Any:
        return fn(*args, **kwargs)

    # 1. first call, on its own
    sync(dev)
    start = time.perf_counter()
    call()
    sync(dev)
    first_call = time.perf_counter() - start

    # 2. warm-up, timed individually to estimate the per-call cost
    estimate = first_call
    for _ in range(warmup):
        start = time.perf_counter()
        call()
        sync(dev)
        estimate = min(estimate, time.perf_counter() - start)
    if number is None:
        number = max(1, math.ceil(min_sample_time / max(estimate, 1e-9)))
        number = min(number, 1_000_000)

    # 3. samples
    samples: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    begin = time.perf_counter()
    try:
        if dev.type == "cuda":
            events = []
            with torch.cuda.device(dev):  # events are recorded on this device's current stream
                for _ in range(repeats):
                    start_event = torch.cuda.Event(enable_timing=True)
                    end_event = torch.cuda.Event(enable_timing=True)
                    start_event.record()
                    for _ in range(number):
                        call()
                    end_event.record()
                    events.append((start_event, end_event))
                    if max_time is not None:
                        end_event.synchronize()  # the host clock must see finished work, not queued work
                        if len(events) >= 3 and time.perf_counter() - begin > max_time:
                            break
            torch.cuda.synchronize(dev)
            samples = [s.elapsed_time(e) / 1e3 / number for s, e in events]
            timer = "cuda events"
        else:
            for _ in range(repeats):
                start = time.perf_counter()
                for _ in range(number):
                    call()
                sync(dev)
                samples.append((time.perf_counter() - start) / number)
                if max_time is not None and len(samples) >= 3 and time.perf_counter() - begin > max_time:
                    break
            timer = "perf_counter"
    finally:
        if gc_was_enabled:
            gc.enable()
    return Measurement(
        samples=tuple(samples), label=label, number=number, first_call=first_call,
        device=str(dev), timer=timer, items=items,
    )


def compare(measurements: Sequence[Measurement], baseline: int | str | None = 0) -> Any:
    """A table (pandas DataFrame) of measurements with the speed-up of each against ``baseline``
    (an index or a label; ``None`` for a table of unrelated workloads, without speed-ups).
    Speed-ups are ratios of medians, measured here, never typed in."""
    import pandas as pd

    if not measurements:
        raise ValueError("compare() needs at least one Measurement.")
    if baseline is None:
        base = None
    elif isinstance(baseline, str):
        labels = [m.label for m in measurements]
        if baseline not in labels:
            raise ValueError(f"baseline {baseline!r} is not one of the labels {labels}.")
        base = measurements[labels.index(baseline)]
    else:
        if not -len(measurements) <= baseline < len(measurements):
            raise ValueError(f"baseline={baseline} is not an index of the {len(measurements)} measurements.")
        base = measurements[baseline]
    rows = []
    for m in measurements:
        rows.append({
            "variant": m.label,
            "median": format_seconds(m.median),
            "IQR": format_seconds(m.iqr),
            "p95": format_seconds(m.p95),
            "first call": format_seconds(m.first_call) if m.first_call is not None else "",
            "speed-up": round(base.median / m.median, 2) if base is not None and m.median > 0 else None,
            "noisy": "⚠" if m.noisy else "",
        })
    table = pd.DataFrame(rows).set_index("variant")
    return table.drop(columns="speed-up") if base is None else table
