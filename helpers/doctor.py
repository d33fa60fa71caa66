"""The bottleneck doctor: given a model (or any callable) and an example input, run three simple tests and
say which regime it is in, with the evidence.

1. **Batch doubling, twice** (Horace He's test): time the call at batch B, 2B and 4B. If the time doubles,
   the work per item is what costs. If it barely grows, either the call is *overhead-bound* (dispatch,
   launches, Python) or its time goes to something a bigger batch shares, such as reading the weights. When
   the two doublings disagree (one flat, one not), the verdict says so: a busy machine, or a kernel switch
   between the sizes.
2. **Arithmetic intensity against the machine balance**: FLOPs (``torch.utils.flop_counter`` for matmuls
   and convolutions, plus an estimate of one FLOP per output element for every other op) over the bytes
   each op reads and writes in eager mode (every aten op's tensor inputs and outputs; views move nothing),
   all counted by :func:`helpers.opcount.count_ops` (its ``"per-op"`` byte rule).
   Below the ridge point: *memory-bound*; above: *compute-bound*. **The memory roof is cache-aware**: when
   the call's working set (its weights and buffers, its input and its output) fits in the last cache before
   main memory (``rf.cache_bytes``), the bandwidth that applies is the cache's, measured here with a copy of
   that size, not main memory's; a small model whose weights stay in cache is not limited by DRAM.
3. **Time explained by the work**: the roofline time of the work, ``max(FLOPs / peak, bytes / bandwidth)``,
   over the measured time; and the **overhead share**. On a GPU it is measured on the model itself: the
   profiler's kernel time over the wall time of the same calls (the GPU idles while the CPU prepares and
   launches each op: Horace He's "look for gaps" test). Elsewhere it is ops per call × this machine's cost
   of dispatching the tiniest op (a lower bound: a module call costs more than a 1-element add). When the
   overhead share is half the time, or the work explains under a quarter of it *and* the time does not grow
   with the batch (for a cache-resident call: does not clearly grow at both doublings), the call is
   overhead-bound: fewer, bigger ops (batching, fusion, CUDA graphs) will help
   more than anything else. When the work explains little but the time does grow with the batch, the
   kernels themselves are inefficient for these shapes: the verdict follows the intensity and says so.

Use it on your own model: ``diagnose(model, example_input, rf)`` with ``rf = roofline.measure_roofline()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .checks import check_callable, check_instance, check_int
from .device import DeviceLike, choose_device
from .modes import pick
from .opcount import OpCount, count_ops
from .roofline import Roofline, memory_bandwidth
from .timing import Measurement, benchmark

#: time(2B) / time(B) below this: a bigger batch is almost free (overhead, or shared weight reads).
FLAT_GROWTH = 1.3
#: ops × dispatch latency above this share of the time: overhead-bound.
OVERHEAD_SHARE = 0.5
#: the work at the roofs would take less than this share of the measured time: overhead-bound.
EXPLAINED_MIN = 0.25


@dataclass
class Diagnosis:
    """The doctor's verdict for one call at one batch size, and the evidence for it."""

    regime: str
    batch: int
    time: Measurement
    time_doubled: Measurement
    growth: float
    explained: float
    counts: OpCount
    dispatch_share: float
    ridge_point: float
    achieved_flops: float
    achieved_bytes_per_s: float
    fraction_of_compute_roof: float
    fraction_of_memory_roof: float
    reasons: list[str]
    time_quadrupled: Measurement | None = None
    growth_again: float = float("nan")  # time(4B) / time(2B): the second doubling
    working_set_bytes: int = 0
    memory_roof: float = float("nan")  # the bandwidth judged against: main memory's, or the cache's
    cache_resident: bool = False
    overhead_source: str = "dispatch"  # "profiler" (GPU: idle share measured on the model) or "dispatch"

    def row(self) -> dict[str, Any]:
        """One line of a comparison table."""
        return {
            "batch": self.batch,
            "regime": self.regime,
            "median": self.time.median,
            "time ×, batch ×2": round(self.growth, 2),
            "and ×2 again": round(self.growth_again, 2),
            "ops/call": self.counts.ops,
            "overhead share": round(self.dispatch_share, 2),
            "working set MiB": round(self.working_set_bytes / 2**20, 2),
            "in cache": self.cache_resident,
            "work explains": round(self.explained, 2),
            "FLOP/byte": round(self.counts.intensity, 2),
            "ridge": round(self.ridge_point, 1),
            "% compute roof": round(100 * self.fraction_of_compute_roof, 1),
            "% memory roof": round(100 * self.fraction_of_memory_roof, 1),
        }

    def explain(self) -> str:
        return f"batch {self.batch}: {self.regime}-bound. " + " ".join(self.reasons)


def _double_batch(x: torch.Tensor, batch_dim: int) -> torch.Tensor:
    return torch.cat([x, x], dim=batch_dim)


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_tensor_bytes(o) for o in obj.values())
    return 0


def working_set_bytes(model: Any, example: torch.Tensor, output: Any = None) -> int:
    """Bytes a call keeps touching: the model's parameters and buffers (when it is an ``nn.Module``), its input
    and its output. Intermediate activations are left out: each lives briefly; this is the floor."""
    weights = 0
    if isinstance(model, torch.nn.Module):
        weights = sum(_tensor_bytes(t) for t in (*model.parameters(), *model.buffers()))
    return weights + _tensor_bytes(example) + _tensor_bytes(output)


def _device_busy_seconds(call: Callable[[torch.Tensor], Any], example: torch.Tensor, calls: int = 3) -> float:
    """Seconds per call the GPU spent running kernels, from the profiler (CUDA kernel events)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    call(example)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call(example)
        torch.cuda.synchronize()
    busy_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return busy_us / 1e6 / calls


def diagnose(
    model: Callable[..., Any],
    example: torch.Tensor,
    rf: Roofline,
    *,
    dtype: str = "fp32",
    batch_dim: int = 0,
    device: DeviceLike = None,
    repeats: int | None = None,
) -> Diagnosis:
    """Diagnose ``model(example)``: see the module docstring for the three tests and their thresholds.

    ``rf`` is this machine's measured roofline (``roofline.measure_roofline``); ``dtype`` picks which
    compute roof to compare against.
    """
    check_callable("model", model, hint="diagnose() needs a model or function, e.g. diagnose(model, x, rf)")
    check_instance("rf", rf, Roofline, hint="pass this machine's roofline, e.g. roofline.get_roofline(device)")
    if not isinstance(example, torch.Tensor) or example.dim() == 0:
        raise ValueError("diagnose() needs an example input tensor with a batch dimension, e.g. torch.randn(8, 784).")
    if not -example.dim() <= batch_dim < example.dim():
        raise ValueError(f"batch_dim={batch_dim} is not a dimension of an input of shape {tuple(example.shape)}.")
    batch = example.shape[batch_dim]
    if batch < 1:
        raise ValueError("the example input's batch is empty; give it at least one item.")
    dev = choose_device(device) if device is not None else example.device
    repeats = repeats if repeats is not None else pick(7, 25)
    doubled = _double_batch(example, batch_dim)

    def call(x: torch.Tensor) -> Any:
        with torch.inference_mode():
            return model(x)

    t1 = benchmark(call, example, label=f"batch {batch}", device=dev, repeats=repeats, items=batch)
    t2 = benchmark(call, doubled, label=f"batch {2 * batch}", device=dev, repeats=repeats, items=2 * batch)
    quadrupled = _double_batch(doubled, batch_dim)
    t4 = benchmark(call, quadrupled, label=f"batch {4 * batch}", device=dev, repeats=repeats, items=4 * batch)
    growth, growth2 = t2.median / t1.median, t4.median / t2.median
    counts = count_ops(model, example)
    ws = working_set_bytes(model, example, call(example))
    cache = rf.cache_bytes
    cache_resident = bool(cache) and ws <= cache
    bandwidth = rf.bandwidth
    if cache_resident:  # the roof that applies is the cache's: measure a copy of the working set's size
        bandwidth = max(rf.bandwidth, memory_bandwidth(dev, nbytes=max(ws // 2, 2**20), repeats=pick(5, 9))[0])
    if dev.type == "cuda":
        overhead_share, source = 1.0 - min(1.0, _device_busy_seconds(call, example) / t1.median), "profiler"
    else:
        overhead_share, source = min(1.0, counts.ops * rf.dispatch_latency / t1.median), "dispatch"
    peak = rf.peak_flops[dtype]
    ridge = peak / bandwidth
    achieved_flops = counts.flops / t1.median
    achieved_bytes = counts.bytes / t1.median
    work_time = max(counts.flops / peak, counts.bytes / bandwidth)
    explained = work_time / t1.median

    reasons = [f"Doubling the batch took {growth:.2f}× the time, and doubling it again {growth2:.2f}×."]
    flat = growth < FLAT_GROWTH and growth2 < FLAT_GROWTH
    if (growth < FLAT_GROWTH) != (growth2 < FLAT_GROWTH):
        reasons.append(
            "The two doublings disagree (one nearly free, one not): the machine may be busy, or the library "
            "switches kernels between these sizes; read this verdict as uncertain and run it again."
        )
    where = (
        f"Its working set ({ws / 2**20:.2f} MiB: weights, input, output) fits in the {cache / 2**20:.0f} MiB "
        f"cache, so the memory roof that applies is the cache's, {bandwidth / 1e9:.0f} GB/s (a copy of that "
        f"size), not main memory's {rf.bandwidth / 1e9:.0f} GB/s. "
        if cache_resident
        else ""
    )
    grows = growth >= FLAT_GROWTH and growth2 >= FLAT_GROWTH
    # Little of the time is the work, and the time does not follow the batch (or, with everything in cache,
    # does not clearly follow it): neither roof limits the call, its fixed costs do.
    unexplained = explained < EXPLAINED_MIN and (flat or (cache_resident and not grows))
    if overhead_share >= OVERHEAD_SHARE or unexplained:
        regime = "overhead"
        cost = (
            f"the GPU was idle for {overhead_share:.0%} of the call (profiler: kernel time against wall time), "
            "waiting for the CPU to prepare and launch each op"
            if source == "profiler"
            else f"{counts.ops} ops × {rf.dispatch_latency * 1e6:.2f} µs of dispatch are at least "
            f"{overhead_share:.0%} of it"
        )
        reasons.append(
            where + f"At the roofs its work would take {explained:.0%} of the measured time, and {cost}: the "
            "work is not what costs. Batch more, or cut the number of ops (fusion, CUDA graphs)."
        )
    elif counts.intensity < ridge:
        regime = "memory"
        fraction = achieved_bytes / bandwidth
        reasons.append(
            where
            + f"It does {counts.intensity:.2f} FLOP per byte moved, below the ridge point of {ridge:.1f}: "
            + (
                f"moving data costs more than computing ({fraction:.0%} of the memory roof)."
                if fraction <= 1
                else rf.place(counts.flops, counts.bytes, t1.median, dtype)["explanation"]
            )  # never above 100 % as an achievement
            + " Move fewer bytes: fuse ops, use smaller dtypes."
        )
    else:
        regime = "compute"
        placed = rf.place(counts.flops, counts.bytes, t1.median, dtype)
        reasons.append(
            where
            + f"It does {counts.intensity:.1f} FLOP per byte, above the ridge point of {ridge:.1f}, and "
            + (
                f"reaches {placed['fraction_of_bound']:.0%} of the {dtype} compute roof. "
                if not placed["above_roof"]
                else placed["explanation"] + " "
            )
            + "Use faster math: bf16/fp16 or tf32 tensor cores, int8."
        )
    if regime != "overhead" and explained < EXPLAINED_MIN:
        reasons.append(
            f"But the work at the roofs would take only {explained:.0%} of the time: the kernels are "
            "inefficient for these shapes (small or strided work), far from both roofs."
        )
    if regime == "memory" and flat:
        reasons.append(
            "The time barely grew with the batch: it goes to data every item shares (the weights), "
            "so a bigger batch is almost free."
        )
    elif regime == "compute" and flat:
        reasons.append(
            "The time barely grew with the batch: the machine is not saturated yet, so a bigger batch is almost free."
        )
    return Diagnosis(
        regime=regime,
        batch=batch,
        time=t1,
        time_doubled=t2,
        growth=growth,
        explained=explained,
        counts=counts,
        dispatch_share=overhead_share,
        ridge_point=ridge,
        achieved_flops=achieved_flops,
        achieved_bytes_per_s=achieved_bytes,
        fraction_of_compute_roof=achieved_flops / peak,
        fraction_of_memory_roof=achieved_bytes / bandwidth,
        time_quadrupled=t4,
        growth_again=growth2,
        working_set_bytes=ws,
        memory_roof=bandwidth,
        cache_resident=cache_resident,
        overhead_source=source,
        reasons=reasons,
    )


def diagnose_batches(
    model: Callable[..., Any],
    make_input: Callable[[int], torch.Tensor],
    batches: list[int],
    rf: Roofline,
    **kwargs: Any,
) -> tuple[list[Diagnosis], Any]:
    """:func:`diagnose` at several batch sizes; returns the diagnoses and a table (pandas DataFrame)."""
    import pandas as pd

    if not batches:
        raise ValueError(f"batches={batches!r} is empty: pass a list of batch sizes ≥ 1, e.g. [1, 8, 64].")
    for b in batches:
        check_int("batch", b, hint="pass batches as a list of integers ≥ 1, e.g. [1, 8, 64]")
    diagnoses = [diagnose(model, make_input(b), rf, **kwargs) for b in batches]
    return diagnoses, pd.DataFrame([d.row() for d in diagnoses]).set_index("batch")
