"""Energy per call, read from the device's own energy counter, never estimated.

* A CUDA GPU: NVML's ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded; Volta and
  newer), from ``nvidia-ml-py``. The GPU is found by UUID, so it is the one PyTorch uses also when
  ``CUDA_VISIBLE_DEVICES`` renumbers them.
* A CPU: Linux's RAPL counter (``/sys/class/powercap/intel-rapl:0/energy_uj``, the package domain; AMD's
  Zen CPUs expose it under the same name). Virtual machines and unprivileged users usually cannot read it.
* Anything else (Apple, Windows, a VM): not available, said in one line.

Both counters measure the **whole device**, idle power included: the energy the machine really draws while it
serves. NVML's counter can be refreshed less often than a short window lasts (a window then reads 0 J), so a
window must be long beside its refresh
(:data:`MIN_WINDOW`). :func:`samples` measures candidates in interleaved windows (drift, such as a GPU warming
up, hits both alike), so :func:`helpers.verdict.verdict` can judge joules per call like times: a smaller value
wins. :func:`sentence` words that verdict in energy terms.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .checks import check_callable, check_int, check_number
from .device import DeviceLike, choose_device, sync
from .timing import MIN_SAMPLES, Measurement, new_session
from .verdict import Verdict, verdict

RAPL = "/sys/class/powercap/intel-rapl:0"
#: Shortest window (seconds) a sample may use: NVML's counter is not refreshed continuously.
MIN_WINDOW = 0.2


@dataclass
class Counter:
    """An open energy counter: ``read()`` gives joules since an arbitrary origin; ``close()`` releases it."""

    name: str
    read: Callable[[], float]
    wrap: float | None = None  # the value after which the counter restarts at 0 (RAPL), if known
    close: Callable[[], None] = lambda: None


def _nvml(device: torch.device) -> Counter | str:
    try:
        import pynvml  # from nvidia-ml-py (requirements.txt)
    except ImportError:
        return "nvidia-ml-py is not installed (`make setup` installs it)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return f"NVML cannot start ({err})"
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # NotSupported before Volta
    except pynvml.NVMLError as err:
        pynvml.nvmlShutdown()
        return f"NVML has no energy counter for this GPU ({err})"
    name = pynvml.nvmlDeviceGetName(handle)
    return Counter(
        name=f"NVML total energy of {name.decode() if isinstance(name, bytes) else name}",
        read=lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000,  # mJ → J
        close=pynvml.nvmlShutdown,
    )


def _rapl(root: str) -> Counter | str:
    path = os.path.join(root, "energy_uj")
    if not os.access(path, os.R_OK):
        why = "no RAPL counter (a VM, macOS or Windows)" if not os.path.exists(path) else "RAPL needs root here"
        return f"{why}: {path} is not readable"

    def read() -> float:
        with open(path) as f:
            return int(f.read()) / 1e6  # µJ → J

    try:
        with open(os.path.join(root, "max_energy_range_uj")) as f:
            wrap = int(f.read()) / 1e6
    except (OSError, ValueError):
        wrap = None
    try:
        with open(os.path.join(root, "name")) as f:
            domain = f.read().strip()
    except OSError:
        domain = "package"
    return Counter(name=f"RAPL {domain} energy of the CPU", read=read, wrap=wrap)


def counter(device: DeviceLike = None) -> Counter | str:
    """The energy counter of ``device`` (a CUDA GPU or the CPU), or a one-line reason it cannot be read here."""
    dev = choose_device(device if device is not None else "cpu")
    if dev.type == "cuda":
        return _nvml(dev)
    if dev.type == "cpu":
        return _rapl(RAPL)
    return f"no energy counter the course can read for a {dev.type} device"


def _used(c: Counter, start: float, end: float) -> float:
    if end >= start:
        return end - start
    if c.wrap is None:
        raise RuntimeError(f"the {c.name} counter went backwards and its range is unknown: measure again.")
    return end + c.wrap - start


def samples(
    fns: Mapping[str, Callable[[], Any]],
    device: DeviceLike = None,
    *,
    window: float = 0.5,
    windows: int = 5,
    seconds: dict[str, list[float]] | None = None,
) -> dict[str, list[float]] | str:
    """Joules per call of each of ``fns`` (name → a no-argument call), in ``windows`` interleaved windows of
    about ``window`` seconds each, on ``device``'s counter: ``{name: [J/call per window]}``, or the reason no
    counter is readable here. Warm each call up before (the first call of a compiled function is compilation).
    ``seconds``: a dict to fill with each window's seconds per call, so that the average power (J/call ÷ s/call)
    comes from the same windows as the energy."""
    if not isinstance(fns, Mapping) or not fns:
        raise ValueError(f"fns={fns!r} is not allowed: fns must be a dict of name → a call with no arguments.")
    for name, fn in fns.items():
        check_callable(f"fns[{name!r}]", fn)
    check_number("window", window, minimum=MIN_WINDOW, hint=f"NVML's counter needs ≥ {MIN_WINDOW} s windows.")
    check_int("windows", windows, 1, hint=f"pass {MIN_SAMPLES} or more to give the verdict enough samples.")
    if seconds is not None and not isinstance(seconds, dict):
        raise ValueError(f"seconds={seconds!r} is not allowed: pass an empty dict to be filled, or nothing.")
    dev = choose_device(device if device is not None else "cpu")
    c = counter(dev)
    if isinstance(c, str):
        return c
    out: dict[str, list[float]] = {name: [] for name in fns}
    try:
        for _ in range(windows):
            for name, fn in fns.items():
                sync(dev)
                start, t0, calls = c.read(), time.perf_counter(), 0
                while time.perf_counter() - t0 < window:
                    fn()
                    calls += 1
                sync(dev)
                out[name].append(_used(c, start, c.read()) / calls)
                if seconds is not None:
                    seconds.setdefault(name, []).append((time.perf_counter() - t0) / calls)
    finally:
        c.close()
    return out


def judge(
    per_call: Mapping[str, Sequence[float]],
    candidate: str,
    baseline: str,
    *,
    items: int = 1,
    candidate_label: str | None = None,
    baseline_label: str | None = None,
) -> Verdict:
    """The verdict on joules per item of ``candidate`` against ``baseline``, from what :func:`samples` returned:
    its windows alternate between the candidates, so they are rounds of one session and are compared window by
    window (paired), as :func:`helpers.verdict.time_together` compares times. ``items`` per call (the batch)."""
    check_int("items", items, 1, hint="pass the batch size of one call.")
    if candidate == baseline:
        raise ValueError(f"candidate and baseline are both {candidate!r}: pass two different names of per_call.")
    for name in (candidate, baseline):
        if not isinstance(per_call, Mapping) or name not in per_call:
            raise ValueError(
                f"{name!r} is not a key of per_call: pass what energy.samples returned and two of its names."
            )
    session = new_session("energy")
    a, b = (
        Measurement.from_samples([j / items for j in per_call[n]], label=label or n, session=session)
        for n, label in ((candidate, candidate_label), (baseline, baseline_label))
    )
    return verdict(a, b)


def sentence(v: Verdict, per: str = "call") -> str:
    """A verdict on joules per ``per`` (candidate vs baseline, smaller wins) in energy words; the interval is of
    the factor the sentence names (less energy: baseline ÷ candidate; more energy: its inverse)."""
    if not isinstance(v, Verdict):
        raise TypeError(f"v must be a Verdict (what energy.judge returns), got {type(v).__name__}.")
    if not isinstance(per, str) or not per.strip():
        raise ValueError(f"per={per!r}: name the unit of work, e.g. 'call' or 'image'.")
    pct = f"{v.confidence:.0%} interval"
    if v.outcome == "faster":
        return (
            f"{v.candidate} uses {v.ratio:.2f}× less energy per {per} than {v.baseline} "
            f"({pct} {v.low:.2f}–{v.high:.2f}×)."
        )
    if v.outcome == "slower":
        return (
            f"{v.candidate} uses {1 / v.ratio:.2f}× more energy per {per} than {v.baseline} "
            f"({pct} {1 / v.high:.2f}–{1 / v.low:.2f}×)."
        )
    if v.outcome == "within noise":
        return (
            f"{v.candidate} and {v.baseline} use the same energy per {per} within noise (a {v.ratio:.2f}× "
            f"ratio, {pct} {v.low:.2f}–{v.high:.2f}× includes 1)."
        )
    if v.outcome == "separate sessions":
        return f"{v.candidate} and {v.baseline} were measured in separate sessions: use energy.judge on one run."
    return f"too few energy windows to compare {v.candidate} with {v.baseline} ({v.n[0]} and {v.n[1]})."
