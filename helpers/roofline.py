"""This machine's limits, measured: peak matmul FLOP/s per dtype, memory bandwidth, host→device bandwidth,
per-op dispatch/launch latency; and where a workload sits against them (the roofline model).

A kernel that does ``F`` floating-point operations and moves ``B`` bytes has arithmetic intensity
``I = F / B``. It cannot run faster than ``min(peak_flops, I × bandwidth)``: below the *ridge point*
``peak_flops / bandwidth`` it is memory-bound, above it compute-bound. Tiny kernels are bound by neither:
they are overhead-bound (launch or dispatch latency).

All peaks here are *achievable* peaks measured with PyTorch on this machine, not datasheet numbers. Like
STREAM and most peak benchmarks, a roof is computed from the *fastest* sample (what the machine has shown it
can do); workloads placed against it are timed by their median.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .device import DeviceLike, choose_device, last_level_cache_bytes, machine_id
from .modes import course_mode, pick
from .timing import Measurement, benchmark

_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def default_dtypes(device: DeviceLike = None) -> list[str]:
    """The matmul dtypes worth measuring: fp32 and bf16 on a CPU; fp32, tf32, bf16, fp16 on a GPU."""
    return ["fp32", "tf32", "bf16", "fp16"] if choose_device(device).type == "cuda" else ["fp32", "bf16"]


@contextmanager
def _matmul_precision(dtype_name: str) -> Iterator[None]:
    """tf32 is fp32 storage with TensorFloat-32 tensor-core math. Uses the fp32_precision API of
    PyTorch ≥ 2.9 (``allow_tf32`` is being deprecated, and mixing the two APIs warns).

    Caveat: the new setter does not update the legacy global. While "tf32" is set, reading the legacy API
    (``torch.get_float32_matmul_precision()``, ``allow_tf32``) raises a "mix of the legacy and new APIs" error,
    which is why this is a short-lived context manager that restores the previous value."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32" if dtype_name == "tf32" else "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def matmul_flops(
    dtype: str = "fp32", device: DeviceLike = None, n: int | None = None, repeats: int | None = None
) -> tuple[float, Measurement]:
    """Achieved FLOP/s of an ``n×n @ n×n`` matmul (``2·n³`` FLOPs) and the timing behind it."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(_DTYPES)}; pick one of those names.")
    dev = choose_device(device)
    if n is None:
        n = pick(512, 2048) if dev.type == "cpu" else pick(2048, 8192)
    if n < 1:
        raise ValueError(f"n={n} must be a positive matrix size.")
    repeats = repeats if repeats is not None else pick(5, 15)
    a = torch.randn(n, n, device=dev).to(_DTYPES[dtype])
    b = torch.randn(n, n, device=dev).to(_DTYPES[dtype])
    with _matmul_precision(dtype), torch.inference_mode():
        m = benchmark(torch.mm, a, b, label=f"matmul {n}×{n} {dtype}", device=dev, repeats=repeats, warmup=2)
    return 2 * n**3 / m.min, m


def memory_bandwidth(
    device: DeviceLike = None, nbytes: int | None = None, repeats: int | None = None
) -> tuple[float, Measurement]:
    """Achieved main-memory bandwidth (bytes/s) of a large copy: it reads ``nbytes`` and writes ``nbytes``.

    The default buffer is far larger than the caches (at least 256 MiB, and twice the reported last-level
    cache up to 1 GiB) so the copy really goes to DRAM / HBM; a smaller one measures a cache instead.
    """
    dev = choose_device(device)
    if nbytes is None:
        nbytes = beyond_cache_bytes(dev, pick(256, 512) * 2**20) if dev.type == "cpu" else pick(256, 1024) * 2**20
    if nbytes < 2**20:
        raise ValueError(f"nbytes={nbytes} is too small to measure bandwidth; pass at least 1 MiB (2**20).")
    repeats = repeats if repeats is not None else pick(5, 20)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    m = benchmark(dst.copy_, src, label=f"copy {nbytes / 2**20:.0f} MiB", device=dev, repeats=repeats, warmup=2)
    return 2 * src.numel() * 4 / m.min, m


def beyond_cache_bytes(device: DeviceLike = None, minimum: int = 256 * 2**20, cap: int = 2**30) -> int:
    """A buffer size that lives in main memory, not in a cache: at least ``minimum``, and on a CPU twice the
    OS-reported last-level cache, up to ``cap`` (a VM may report the host's whole cache)."""
    if choose_device(device).type != "cpu":
        return minimum
    return max(minimum, min(2 * (last_level_cache_bytes() or 0), cap))


def h2d_bandwidth(
    nbytes: int | None = None, pinned: bool = True, repeats: int | None = None, device: DeviceLike = "cuda"
) -> tuple[float, Measurement]:
    """Host→device copy bandwidth (bytes/s), from pinned or pageable host memory. Needs a CUDA GPU."""
    if not torch.cuda.is_available():
        raise ValueError(
            "host→device bandwidth needs a CUDA GPU and this machine has none: on a CPU the data is already "
            "where the compute is. Use load_reference(...) to see a GPU's result."
        )
    dev = choose_device(device)
    if dev.type != "cuda":
        raise ValueError(f"host→device bandwidth is measured into a CUDA device, not {dev}; use device='cuda'.")
    nbytes = nbytes if nbytes is not None else pick(64, 256) * 2**20
    repeats = repeats if repeats is not None else pick(5, 20)
    host = torch.empty(nbytes // 4, dtype=torch.float32).uniform_()
    if pinned:
        host = host.pin_memory()
    dst = torch.empty(host.shape, dtype=host.dtype, device=dev)
    kind = "pinned" if pinned else "pageable"
    m = benchmark(dst.copy_, host, label=f"H2D {nbytes / 2**20:.0f} MiB {kind}", device=dev, repeats=repeats)
    return host.numel() * 4 / m.min, m


def dispatch_latency(device: DeviceLike = None, repeats: int | None = None) -> tuple[float, Measurement]:
    """Seconds per tiny op (``torch.add`` of two one-element tensors): pure framework dispatch on a CPU,
    kernel-launch latency on a GPU. No real work is done, so this is the floor for any single op."""
    dev = choose_device(device)
    a, b = torch.zeros(1, device=dev), torch.ones(1, device=dev)
    repeats = repeats if repeats is not None else pick(10, 30)
    with torch.inference_mode():
        m = benchmark(torch.add, a, b, label="tiny op (1-element add)", device=dev, repeats=repeats,
                      min_sample_time=pick(2e-3, 10e-3))
    return m.median, m


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte moved."""
    if nbytes <= 0:
        raise ValueError("bytes moved must be positive to compute an arithmetic intensity.")
    return flops / nbytes


def matmul_cost(m: int, n: int, k: int, bytes_per_element: int = 4) -> tuple[float, float]:
    """(FLOPs, bytes) of ``(m×k) @ (k×n)``: reads both inputs and writes the output once."""
    return 2.0 * m * n * k, float(bytes_per_element * (m * k + k * n + m * n))


def elementwise_cost(numel: int, flops_per_element: int = 1, inputs: int = 1,
                     bytes_per_element: int = 4) -> tuple[float, float]:
    """(FLOPs, bytes) of a pointwise op on ``numel`` elements reading ``inputs`` tensors, writing one."""
    return float(flops_per_element * numel), float(bytes_per_element * numel * (inputs + 1))


@dataclass
class Roofline:
    """Measured limits of one device. Bandwidth in bytes/s, peaks in FLOP/s, latency in seconds."""

    device: str
    machine_id: str
    peak_flops: dict[str, float]
    bandwidth: float
    dispatch_latency: float
    h2d_bandwidth: dict[str, float] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list, repr=False)

    def _peak(self, dtype: str) -> float:
        if dtype not in self.peak_flops:
            raise ValueError(f"no peak measured for {dtype!r}; measured: {sorted(self.peak_flops)}.")
        return self.peak_flops[dtype]

    def ridge_point(self, dtype: str = "fp32") -> float:
        """Arithmetic intensity (FLOP/byte) where memory-bound turns into compute-bound."""
        return self._peak(dtype) / self.bandwidth

    def attainable(self, intensity: float, dtype: str = "fp32") -> float:
        """The roofline: the best FLOP/s a kernel of this intensity can reach here."""
        return min(self._peak(dtype), intensity * self.bandwidth)

    def place(self, flops: float, nbytes: float, seconds: float, dtype: str = "fp32") -> dict[str, Any]:
        """Where a measured workload sits: its intensity, achieved FLOP/s and bytes/s, the bound that
        applies, and the fraction of that bound it reached."""
        if seconds <= 0:
            raise ValueError("seconds must be positive (use a Measurement's median).")
        intensity = arithmetic_intensity(flops, nbytes)
        bound = "memory" if intensity < self.ridge_point(dtype) else "compute"
        attainable = self.attainable(intensity, dtype)
        achieved = flops / seconds
        fraction = achieved / attainable
        return {
            "intensity_flop_per_byte": intensity,
            "achieved_flops": achieved,
            "achieved_bytes_per_s": nbytes / seconds,
            "bound": bound,
            "attainable_flops": attainable,
            "fraction_of_bound": fraction,
            # Short *and* far from its roof: the fixed cost of launching it dominates. A short op that already
            # reaches half its roof (a large add on a GPU that streams 4 TB/s) is limited by that roof instead.
            "overhead_bound": seconds < 10 * self.dispatch_latency and fraction < 0.5,
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("measurements")
        return data

    def table(self) -> Any:
        import pandas as pd

        rows = [{"limit": f"matmul {k}", "value": v / 1e9, "unit": "GFLOP/s"} for k, v in self.peak_flops.items()]
        rows.append({"limit": "memory bandwidth", "value": self.bandwidth / 1e9, "unit": "GB/s"})
        rows += [{"limit": f"host→device ({k})", "value": v / 1e9, "unit": "GB/s"}
                 for k, v in self.h2d_bandwidth.items()]
        rows.append({"limit": "dispatch/launch latency", "value": self.dispatch_latency * 1e6, "unit": "µs/op"})
        rows += [{"limit": f"ridge point {k}", "value": self.ridge_point(k), "unit": "FLOP/byte"}
                 for k in self.peak_flops]
        return pd.DataFrame(rows).set_index("limit").round(2)


def measure_roofline(device: DeviceLike = None, dtypes: list[str] | None = None) -> Roofline:
    """Measure every limit above on ``device`` (sizes follow the course mode)."""
    dev = choose_device(device)
    measurements: list[Measurement] = []
    peaks: dict[str, float] = {}
    for name in dtypes or default_dtypes(dev):
        peaks[name], m = matmul_flops(name, dev)
        measurements.append(m)
    bandwidth, m = memory_bandwidth(dev)
    measurements.append(m)
    latency, m = dispatch_latency(dev)
    measurements.append(m)
    h2d: dict[str, float] = {}
    if dev.type == "cuda":
        for pinned in (True, False):
            h2d["pinned" if pinned else "pageable"], m = h2d_bandwidth(pinned=pinned, device=dev)
            measurements.append(m)
    return Roofline(device=str(dev), machine_id=machine_id(dev), peak_flops=peaks, bandwidth=bandwidth,
                    dispatch_latency=latency, h2d_bandwidth=h2d, measurements=measurements)


def compare_with_reference(rf: Roofline | None = None) -> Any:
    """One row per machine: the rooflines recorded in ``data/reference/`` by notebook 00, plus ``rf`` (this
    machine, when given), in readable units."""
    import pandas as pd

    from .results import load_reference

    rows: dict[str, dict[str, float]] = {}
    ref = load_reference(notebook="00_environment", experiment="roofline")
    for _, r in ref.iterrows():
        row = rows.setdefault(f"{r['machine_id']} (reference, {r['mode']} mode)", {})
        variant = r["variant"]
        if variant.startswith("matmul "):
            row[f"{variant.split()[1]} GFLOP/s"] = r["flops"] / 1e9
        elif variant == "memory bandwidth":
            row["memory GB/s"] = r["bytes_per_s"] / 1e9
        elif variant == "dispatch latency":
            row["µs per tiny op"] = r["seconds"] * 1e6
        elif variant.startswith("host to device"):
            row[f"H2D {variant.split()[-1]} GB/s"] = r["bytes_per_s"] / 1e9
    if rf is not None:
        row = rows.setdefault(f"{rf.machine_id} (this run, {course_mode()} mode)", {})
        row.update({f"{k} GFLOP/s": v / 1e9 for k, v in rf.peak_flops.items()})
        row["memory GB/s"] = rf.bandwidth / 1e9
        row["µs per tiny op"] = rf.dispatch_latency * 1e6
        row.update({f"H2D {k} GB/s": v / 1e9 for k, v in rf.h2d_bandwidth.items()})
    return pd.DataFrame.from_dict(rows, orient="index").round(2)
