"""The bottleneck doctor: given a model (or any callable) and an example input, run three simple tests and
say which regime it is in, with the evidence.

1. **Batch doubling, twice** (Horace He's test): time the call at batch B, 2B and 4B, together, round by round
   (:func:`helpers.verdict.time_together`), and judge each doubling with paired verdicts (:func:`doubling`):
   *free* (no more time), *shared* (more time, less per item), *proportional* (the same time per item: the work
   per item is what costs) or *more per item* (a different kernel or thread split at the bigger size). On the
   line ``time = fixed + per item × batch`` each item a doubling adds costs the same; where the second doubling's
   items cost more (the machine fills up) or less (a better kernel at that size), beyond the noise of rounds a
   busy moment would have hit alike, the sentence says so (:func:`reversed_order`).
2. **Arithmetic intensity against the machine balance**: FLOPs (``torch.utils.flop_counter`` for matmuls
   and convolutions, plus an estimate of one FLOP per output element for every other op) over the bytes
   each op reads and writes in eager mode (every aten op's tensor inputs and outputs; views move nothing),
   all counted by :func:`helpers.opcount.count_ops` (its ``"per-op"`` byte rule). When the call runs a fused
   op with matrix products inside that ``FlopCounterMode`` has no formula for (PyTorch's fast-path transformer
   and attention kernels, RNNs, int8 matmuls), the count is incomplete, and the doctor says so and does not
   place the call against the ridge point: the regime is *undetermined* unless overhead decides it.
   Below the ridge point: *memory-bound*; above: *compute-bound*. **The memory roof is cache-aware**: when
   the call's working set (its weights and buffers, its input, its activations and output) fits in the last cache before
   main memory (``rf.cache_bytes``), the bandwidth that applies is the cache's, measured here with a copy of
   that size, not main memory's; a small model whose weights stay in cache is not limited by DRAM.
3. **Time explained by the work**: the roofline time of the work, ``max(FLOPs / peak, bytes / bandwidth)``,
   over the measured time; and the **overhead share**. On a GPU it is measured on the model itself: the
   profiler's kernel time over the wall time of the same calls (the GPU idles while the CPU prepares and
   launches each op: Horace He's "look for gaps" test). Elsewhere it is ops per call × this machine's cost
   of a typical small op (``rf.dispatch_latency``). When the overhead share is half the time, or the work
   explains under a quarter of it *and* the first doubling puts half the time or more in a fixed cost per call
   (time = fixed + per item × batch, so the fixed share is 2 − the doubling's growth), the call is
   overhead-bound. Where dispatch explains it, fewer ops (fusion, CUDA graphs) help; where dispatch is a small
   share, the fixed cost is something else every call pays (the Python around the ops, a per-call weight
   reorder, a slow small-batch kernel), and a bigger batch shares it. When the work explains under a quarter
   of the time and the time mostly follows the batch past the ridge, neither a roof nor overhead limits the
   call: the regime is *inefficient* (kernels slow for these shapes), not compute-bound, and the advice is not
   faster math; below the ridge it is *inefficient* too when its whole working set is in cache, and otherwise
   stays memory-bound (strided reads move more bytes than counted) and says so. The working set counts the
   weights, the input and the most tensor bytes the call holds at once (:func:`helpers.memory.peak_allocated_bytes`).

Use it on your own model: ``diagnose(model, example_input, rf)`` with ``rf = roofline.measure_roofline()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .checks import check_callable, check_instance, check_int
from .device import DeviceLike, choose_device
from .memory import peak_allocated_bytes
from .modes import pick
from .opcount import OpCount, count_ops
from .roofline import CACHE_GAIN, Roofline, memory_bandwidth
from .timing import Measurement
from .verdict import Comparison, busy_reason, paired_interval, settle, time_together

#: How :func:`doubling` words each outcome, in the doctor's sentences.
DOUBLING_WORDS = {
    "free": "no more time, within the noise",
    "shared": "more time, but less per item",
    "proportional": "the same time per item, within the noise",
    "more per item": "more time per item",
}
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
    doublings: tuple[str, str] = ("", "")  # each doubling's verdict: see :func:`doubling`

    def row(self) -> dict[str, Any]:
        """One line of a comparison table."""
        return {
            "batch": self.batch,
            "regime": self.regime,
            "median": self.time.median,
            "time ×, batch ×2": round(self.growth, 2),
            "and ×2 again": round(self.growth_again, 2),
            "doublings": " / ".join(self.doublings),
            "FLOPs counted": "all" if self.counts.flops_complete else "incomplete",
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
        name = {"inefficient": "inefficient kernels", "undetermined": "undetermined", "busy": "undecided (busy)"}
        head = f"batch {self.batch}: {name.get(self.regime, self.regime + '-bound')}"
        fraction = {"compute": self.fraction_of_compute_roof, "memory": self.fraction_of_memory_roof}.get(self.regime)
        head += f", at {fraction:.0%} of the {self.regime} roof." if fraction is not None else "."
        return head + "".join(f"\n  · {reason}" for reason in self.reasons)  # one line per piece of evidence


def doubling(sizes: Comparison, small: str, big: str) -> str:
    """How the time of ``big`` (twice the batch of ``small``, both candidates of one session) grew, judged by
    paired verdicts: ``"free"`` (the call takes no more time, within the noise), ``"shared"`` (more time, but
    less per item: a cost the batch shares), ``"proportional"`` (the same time per item, within the noise: the
    work per item is what costs), or ``"more per item"`` (each item costs more at the bigger batch: a different
    kernel or thread split at that size)."""
    check_instance("sizes", sizes, Comparison, hint="pass the time_together comparison of the batch sizes")
    if not sizes.verdict(big, against=small).slower:
        return "free"
    per_item = sizes.verdict(big, against=small, per_item=True)
    if per_item.faster:
        return "shared"
    return "more per item" if per_item.slower else "proportional"


def _per_item(sizes: Comparison, small: str, big: str) -> str:
    """Time per item at ``big`` over ``small``, with the paired interval the doubling's label was decided on."""
    v = sizes.verdict(big, against=small, per_item=True)
    if not v.paired or math.isnan(v.low):
        return f"{1 / v.ratio:.2f}× per item"
    return f"{1 / v.ratio:.2f}× per item, interval {1 / v.high:.2f}–{1 / v.low:.2f}×"


def reversed_order(sizes: Comparison, small: str, middle: str, big: str) -> str | None:
    """Whether each item the second doubling added (``middle`` → ``big``) cost ``"dearer"`` or ``"cheaper"`` than each
    item the first added (``small`` → ``middle``), against the line ``time = fixed + per item × batch``. On that line
    ``(t(4B) + 2·t(B)) / (3·t(2B))`` is exactly 1 whatever the fixed cost (the second doubling adds twice the first's
    items, so twice its time), even though the second doubling's *growth* is always the larger; above 1 the added
    items cost more (the machine fills up), below 1 less. Decided by one paired test on the per-round values (the
    same rounds, so drift cancels), with the verdict's margin; None when the line fits within the noise."""
    from .verdict import MARGIN

    t1, t2, t4 = (np.asarray(sizes[label].samples) for label in (small, middle, big))
    ratio, low, high = paired_interval((t4 + 2 * t1) / (3 * t2))  # 1 on the line of a fixed cost plus a cost per item
    if math.isnan(low):
        return None
    if low > 1 and ratio >= 1 + MARGIN:
        return "dearer"
    if high < 1 and ratio <= 1 / (1 + MARGIN):
        return "cheaper"
    return None


def fewer_bytes(rf: Roofline, weight_share: float = 0.0) -> str:
    """The advice for a memory-bound call, from what this machine measured: fusion always moves fewer bytes; a
    narrower dtype does too, but it pays only where its kernels are not slower than the bytes it saves.
    ``weight_share``: the model's weights over the bytes a call moves; above half, the bytes are its weights,
    which fusion cannot shrink."""
    if weight_share > 0.5:
        return (
            f"Its bytes are mostly its weights ({weight_share:.0%} of what a call moves), which fusion cannot "
            "shrink: store them in fewer bits (weight-only int8 or int4, notebook 02) where those kernels pay "
            "here, or serve more inputs per weight read (a bigger batch, notebook 03)."
        )
    bf16 = rf.speed("bf16", "matmul")
    if rf.pays("bf16"):
        return "Move fewer bytes: fuse ops, or store bf16 (half the bytes; its kernels measured faster than fp32 here)."
    if bf16 and bf16.get("outcome") not in (None, "no kernel"):
        return (
            f"Move fewer bytes: fuse ops. A narrower dtype halves the bytes, but bf16 matmuls ran at "
            f"{bf16['ratio']:.2f}× fp32's speed here (roofline.speed_table): measure it before converting."
        )
    return "Move fewer bytes: fuse ops, or a narrower dtype where its kernels are fast (roofline.speed_table)."


def faster_math(rf: Roofline, device: torch.device, convolutions: bool = False) -> str:
    """The advice for a compute-bound call, from what this machine measured (``rf.dtype_speed``): the number
    formats that ran faster than fp32 here, or that none did. ``convolutions``: the call's work is convolutions,
    which int8 reaches only through static quantization (PT2E), not through the matmul the table timed."""
    faster = rf.faster_dtypes()
    if faster:
        gains = ", ".join(
            f"{d} ({kernel} {entry['ratio']:.1f}× fp32 measured here"
            + (", the bare torch._int_mm, before quantizing and dequantizing" if d == "int8" else "")
            + ("; for convolutions, static int8 through PT2E: notebook 02" if d == "int8" and convolutions else "")
            + ")"
            for d in faster
            for kernel, entry in [
                max(
                    ((k, rf.speed(d, k) or {"ratio": 0}) for k in ("matmul", "conv")),
                    key=lambda pair: pair[1].get("ratio", 0),
                )
            ]
        )
        return f"Use faster math: {gains}" + ("; tf32 for fp32 work on tensor cores." if device.type == "cuda" else ".")
    if not rf.dtype_speed:
        return "Faster math may help where its kernels are fast: roofline.dtype_speeds measures which are, here."
    return (
        "No number format ran faster than fp32 here (roofline.speed_table): on this machine do less work (a smaller "
        "model, a compiled kernel that wastes less) rather than change the math."
    )


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


def working_set_bytes(model: Any, example: torch.Tensor, output: Any = None, peak: int | None = None) -> int:
    """Bytes a call keeps touching: the model's parameters and buffers (when it is an ``nn.Module``), its input,
    and ``peak``, the most tensor bytes the call holds at once (:func:`helpers.memory.peak_allocated_bytes`: its
    activations and its output); without ``peak``, only its output (a floor: activations left out)."""
    weights = 0
    if isinstance(model, torch.nn.Module):
        weights = sum(_tensor_bytes(t) for t in (*model.parameters(), *model.buffers()))
    return weights + _tensor_bytes(example) + (peak if peak is not None else _tensor_bytes(output))


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


ORDER_WORDS = {
    "cheaper": (  # each item the second doubling added cost less than each the first added
        "Each item the second doubling added cost less than each the first added, beyond the noise (a fixed "
        "cost plus a cost per item would make them equal): the bigger batch used the machine better, through "
        "a kernel or a thread split this library picks only at that size (notebook 08 profiles one). Read each "
        "batch size's regime on its own."
    ),
    "dearer": (
        "Each item the second doubling added cost more than each the first added, beyond the noise (a fixed "
        "cost plus a cost per item would make them equal): the machine fills up between these sizes (its cores, "
        "caches or memory bandwidth), or the library switches kernels there."
    ),
}


def _overhead_reason(
    source: str,
    explained: float,
    overhead_share: float,
    ops: int,
    rf: Roofline,
    fixed_share: float | None,
    amortised: bool,
) -> str:
    """Why an overhead-bound call is: the GPU idle between launches (profiler), dispatch costs, or a fixed cost
    per call that the doctor's counts leave unexplained."""
    if source == "profiler":
        return (
            f"At the roofs its work would take {explained:.0%} of the measured time, and the GPU was "
            f"idle for {overhead_share:.0%} of the call (profiler: kernel time against wall time), waiting for "
            "the CPU to prepare and launch each op. Batch more, or cut the number of launches (fusion, CUDA "
            "graphs)."
        )
    if overhead_share >= OVERHEAD_SHARE:
        return (
            f"At the roofs its work would take {explained:.0%} of the measured time, and {ops} "
            f"ops × {rf.dispatch_latency * 1e6:.2f} µs (the cost of a typical small op here) are "
            f"{overhead_share:.0%} of it: dispatching ops is what costs. Batch more, or cut the number of "
            "ops (fusion, CUDA graphs)."
        )
    return (
        f"At the roofs its work would take {explained:.0%} of the measured time; the first doubling "
        f"puts about {fixed_share:.0%} of it in a fixed cost per call (time = fixed + per item × batch), and "
        f"{ops} ops × {rf.dispatch_latency * 1e6:.2f} µs (a typical small op) only "
        f"{overhead_share:.0%}: "
        "that fixed cost is unexplained by what the doctor counts: the Python around the ops "
        "(nn.Module calls, which a bare op does not pay and torch.compile removes), a per-call weight "
        "reorder, or a slow small-batch kernel: profile the call (notebook 08) to see which. "
        + ("A bigger batch shares it." if amortised else "The doublings above do not show a bigger batch sharing it.")
    )


def _incomplete_count(counts: Any) -> str:
    """The sentence that says a FLOP count is a floor (an op FlopCounterMode has no formula for), or ""."""
    if counts.flops_complete:
        return ""
    verb = "has" if len(counts.uncounted) == 1 else "have"
    return (
        f"The FLOP count is incomplete: {', '.join(sorted(counts.uncounted))} {verb} matrix products inside that "
        "FlopCounterMode has no formula for (a fused op), so the counted FLOPs, the intensity and the work's share "
        "of the time are floors, possibly far too low. "
    )


def _weight_bytes(model: Any) -> int:
    """A module's parameters and buffers, in bytes (0 for a plain function)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(_tensor_bytes(t) for t in (*model.parameters(), *model.buffers()))


def _overhead_share(
    call: Callable[..., Any], example: torch.Tensor, dev: torch.device, ops: int, rf: Roofline, seconds: float
) -> tuple[float, str]:
    """The share of a call's time that is overhead, and where it was read: on a GPU the time the device was idle
    (the profiler), on a CPU the ops' count times a typical small op's dispatch cost."""
    if dev.type == "cuda":
        return 1.0 - min(1.0, _device_busy_seconds(call, example) / seconds), "profiler"
    return min(1.0, ops * rf.dispatch_latency / seconds), "dispatch"


def _growth_words(grows: bool, amortised: bool) -> str:
    """What the doublings say about the work per item, where the FLOP count cannot place the call."""
    if grows:
        return "Its time follows the batch, so the work per item is what costs."
    if amortised:
        return (
            "Its time grows less than the batch: part of it is shared by every item (fixed costs, or weights read "
            "once per call)."
        )
    return (
        "Its time grows less than the batch at one doubling and in proportion at the other: the doublings above "
        "say which."
    )


#: What a batch that shares its cost says, by regime and whether the time stayed flat.
SHARED_WORDS = {
    ("memory", True): "The time did not grow with the batch: it goes to data every item shares (the weights), so a "
    "bigger batch is almost free.",
    ("memory", False): "The time grew less than the batch: part of it goes to data every item shares (the weights), "
    "so a bigger batch costs less per item.",
    ("compute", True): "The time did not grow with the batch: the machine is not saturated yet, so a bigger batch is "
    "almost free.",
    ("compute", False): "The time grew less than the batch: the machine is not saturated yet, so a bigger batch "
    "still costs less per item.",
}


def _against_roof(rf: Roofline, counts: Any, seconds: float, dtype: str, fraction: float, words: str) -> str:
    """``words`` with the share of a roof a call reached, or, above the roof (a count below the real work, or a
    cache's bandwidth), the roofline's own explanation: never a share above 100 % as an achievement."""
    if fraction <= 1:
        return words.format(fraction)
    return rf.place(counts.flops, counts.bytes, seconds, dtype)["explanation"]


def _fixed_words(fixed_share: float | None) -> str:
    """What the doublings put in a fixed cost per call (None: they fit no line of fixed + per item)."""
    if fixed_share is None:
        return "the doublings fit no one line of a fixed cost plus a cost per item"
    if round(fixed_share, 2):
        return f"the doublings put only {fixed_share:.0%} of it in a fixed cost per call"
    return "the doublings put none of it in a fixed cost per call"


def _check_diagnose(model: Any, example: Any, rf: Any, batch_dim: int) -> None:
    check_callable("model", model, hint="diagnose() needs a model or function, e.g. diagnose(model, x, rf)")
    check_instance("rf", rf, Roofline, hint="pass this machine's roofline, e.g. roofline.get_roofline(device)")
    if not isinstance(example, torch.Tensor) or example.dim() == 0:
        raise ValueError("diagnose() needs an example input tensor with a batch dimension, e.g. torch.randn(8, 784).")
    if not -example.dim() <= batch_dim < example.dim():
        raise ValueError(f"batch_dim={batch_dim} is not a dimension of an input of shape {tuple(example.shape)}.")
    if example.shape[batch_dim] < 1:
        raise ValueError("the example input's batch is empty; give it at least one item.")


def _memory_roof(rf: Roofline, ws: int, dev: torch.device) -> tuple[float, bool, bool]:
    """The memory roof a call with working set ``ws`` meets: ``(bandwidth, served from cache, decided by a copy
    measured here)``. In cache by the knee this machine measured, or unknown (straddling it, no knee): on a CPU
    a copy of the working set's size decides."""
    fits = rf.fits_in_cache(ws)  # by the knee this machine measured (None: straddles it, or no knee decided)
    bandwidth = rf._bandwidth()  # checked again here: a field can be changed after the roofline was built
    measured_here = False
    if fits is not False and dev.type == "cpu":  # in cache, or unknown: a copy of the working set's size decides
        copy_bw = memory_bandwidth(dev, nbytes=max(ws // 2, 2**20), repeats=pick(15, 31))[0]  # its best sample
        measured_here = fits is None and copy_bw >= CACHE_GAIN * rf.bandwidth  # ran as the sweep's cached sizes did
        fits = True if measured_here else fits
        bandwidth = max(rf.bandwidth, copy_bw) if fits else bandwidth
    elif fits:
        bandwidth = max(rf.bandwidth, memory_bandwidth(dev, nbytes=max(ws // 2, 2**20), repeats=pick(5, 9))[0])
    return bandwidth, fits is True, measured_here


def _where_served(rf: Roofline, ws: int, bandwidth: float, measured_here: bool) -> str:
    """The reason that says a cache-resident call meets the cache's roof, not main memory's."""
    cache = rf.cache_bytes or 0
    knee = "the knee of its bandwidth sweep" if rf.cache_sweep else "as the OS reports it"
    return (
        f"Its working set ({ws / 2**20:.2f} MiB: weights, input, and the activations and output it holds at once) "
        + (
            f"was copied here {CACHE_GAIN:.1f}× faster or more than main memory ("
            + (
                "this machine's cache sweep was undecided"
                if not rf.cache_sweep or rf.cache_sweep.get("undecided")
                else "it lies between the largest copy this machine's sweep found cached and the smallest it found "
                "in main memory"
            )
            + ", so a copy of its size decided): it is served from cache, and the memory roof that applies is the "
            if measured_here
            else f"fits in the {cache / 2**20:.0f} MiB this machine's caches served faster than main memory ({knee}), "
            "so the memory roof that applies is the "
        )
        + f"cache's, {bandwidth / 1e9:.0f} GB/s (a copy of that size), "
        f"not main memory's {rf.bandwidth / 1e9:.0f} GB/s. "
    )


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
    _check_diagnose(model, example, rf, batch_dim)
    batch = example.shape[batch_dim]
    peak = rf._peak(dtype)  # before any timing: a dtype the roofline lacks is refused at once, in one line
    dev = choose_device(device) if device is not None else example.device
    repeats = repeats if repeats is not None else pick(7, 25)
    doubled = _double_batch(example, batch_dim)

    def call(x: torch.Tensor) -> Any:
        with torch.inference_mode():
            return model(x)

    quadrupled = _double_batch(doubled, batch_dim)
    inputs = {batch: example, 2 * batch: doubled, 4 * batch: quadrupled}
    labels = {b: f"batch {b}" for b in inputs}
    # the three sizes timed together, round by round: each doubling is judged by paired verdicts, not by a ratio
    # of medians from separate cells held against a fixed threshold
    settled = settle(  # noise stops a decision: a busy session is timed once more, then the regime is undecided
        lambda: time_together(
            {labels[b]: (lambda x=x: call(x)) for b, x in inputs.items()},
            items={labels[b]: b for b in inputs},
            device=dev,
            repeats=repeats,
        ),
        what=f"the regime at batch {batch}",
        flagged=busy_reason,
    )
    sizes = settled.value
    t1, t2, t4 = (sizes[labels[b]] for b in inputs)
    growth = 1 / sizes.speedup(labels[2 * batch], against=labels[batch])  # time(2B) / time(B), paired
    growth2 = 1 / sizes.speedup(labels[4 * batch], against=labels[2 * batch])
    first = doubling(sizes, labels[batch], labels[2 * batch])
    second = doubling(sizes, labels[2 * batch], labels[4 * batch])
    counts = count_ops(call, example)  # as timed: under inference_mode, where fast paths (fused kernels) run
    convolutions = any("conv" in op for op in counts.by_op)  # int8 advice differs for a convolution network
    ws = working_set_bytes(model, example, peak=peak_allocated_bytes(lambda: call(example), dev))
    weight_share = _weight_bytes(model) / counts.bytes if counts.bytes else 0.0  # bytes fusion cannot shrink
    bandwidth, cache_resident, measured_here = _memory_roof(rf, ws, dev)
    overhead_share, source = _overhead_share(call, example, dev, counts.ops, rf, t1.median)
    ridge = peak / bandwidth
    achieved_flops = counts.flops / t1.median
    achieved_bytes = counts.bytes / t1.median
    work_time = max(counts.flops / peak, counts.bytes / bandwidth)
    explained = work_time / t1.median

    reasons = [
        f"Doubling the batch took {growth:.2f}× the time ({_per_item(sizes, labels[batch], labels[2 * batch])}: "
        f"{DOUBLING_WORDS[first]}), and doubling it again {growth2:.2f}× "
        f"({_per_item(sizes, labels[2 * batch], labels[4 * batch])}: {DOUBLING_WORDS[second]}); the three sizes "
        "were timed together, round by round."
    ]
    order = reversed_order(sizes, *(labels[b] for b in inputs))
    if order:  # the two doublings' costs per item differ beyond the noise
        reasons.append(ORDER_WORDS[order])
    amortised = first in ("free", "shared") and second in ("free", "shared")  # fixed costs shared by the batch
    # time = fixed + per-item × batch: the first doubling adds one batch's per-item part, so the fixed part of the
    # call at this batch is 2 - growth of its time (1 when doubling is free, 0 when the time doubles)
    # (doublings off that line, either way, fit no such line: no fixed share is read from them)
    fixed_share = None if order else min(1.0, max(0.0, 2.0 - growth))
    flat = first == "free" and second == "free"  # a bigger batch costs nothing more
    grows = first in ("proportional", "more per item") and second in ("proportional", "more per item")
    if cache_resident:  # a reason of its own: which memory roof applies
        reasons.append(_where_served(rf, ws, bandwidth, measured_here).strip())
    incomplete = _incomplete_count(counts)
    # Little of the time is the work, and most of it is a fixed cost per call (the doublings say so): neither roof
    # limits the call, its fixed costs do. Time that follows the batch is not a fixed cost: kernels that are slow
    # for these shapes (below) are another regime, with other cures.
    unexplained = (
        counts.flops_complete
        and explained < EXPLAINED_MIN
        and first in ("free", "shared")
        and (fixed_share or 0) >= 0.5
    )
    if overhead_share >= OVERHEAD_SHARE or unexplained:
        regime = "overhead"
        reasons.append(_overhead_reason(source, explained, overhead_share, counts.ops, rf, fixed_share, amortised))
        reasons += [incomplete.strip()] * bool(incomplete)  # the count's floor, said after the cause
    elif not counts.flops_complete and counts.intensity < ridge:
        regime = "undetermined"
        reasons.append(
            incomplete + "The doctor does not place it against the ridge point: profile it (notebook 08) "
            "or count its FLOPs analytically. " + _growth_words(grows, amortised)
        )
    elif counts.intensity < ridge:
        regime = "memory"
        fraction = achieved_bytes / bandwidth
        reasons.append(
            f"It does {counts.intensity:.2f} FLOP per byte moved, below the ridge point of {ridge:.1f}: "
            + _against_roof(
                rf,
                counts,
                t1.median,
                dtype,
                fraction,
                "moving data costs more than computing ({:.0%} of the memory roof).",
            )  # never above 100 % as an achievement
            + " "
            + fewer_bytes(rf, weight_share)
        )
    else:
        regime = "compute"
        compute_fraction = achieved_flops / peak
        reasons.append(
            (
                incomplete + "Uncounted FLOPs only raise the intensity, and the counted ones already pass the ridge. "
                if not counts.flops_complete
                else ""
            )
            + f"It does {counts.intensity:.1f} FLOP per byte, above the ridge point of {ridge:.1f}, and "
            + _against_roof(
                rf, counts, t1.median, dtype, compute_fraction, "reaches {:.0%} of the " + dtype + " compute roof."
            )
            + " "
            + faster_math(rf, dev, convolutions)
        )
    if not settled.decided:  # measured twice on a busy machine: no regime is claimed from it
        regime = "busy"
        reasons.insert(0, settled.undecided() + " What follows is what the numbers would say on a quiet machine.")
    if regime == "compute" and counts.flops_complete and explained < EXPLAINED_MIN:
        # past the ridge, yet far from the compute roof: under-used compute, not compute-bound (faster math would
        # speed up kernels that are not what limits it)
        reasons[-1] = reasons[-1].replace(faster_math(rf, dev, convolutions), "").rstrip()
        reasons.append(
            f"But the work at the roofs would take only {explained:.0%} of the time, and "
            + _fixed_words(fixed_share)
            + ": neither roof nor overhead limits it, the kernels are "
            "inefficient for these shapes (small or awkward work), so faster math would not help much; a bigger "
            "batch, another layout or a compiled kernel might (notebooks 03, 04, 08)."
        )
        regime = "inefficient"
    elif regime == "memory" and counts.flops_complete and explained < EXPLAINED_MIN and cache_resident:
        # everything it touches sits in cache, yet it is far from the cache's roof: not the bytes, the kernels
        reasons[-1] = reasons[-1].replace(fewer_bytes(rf, weight_share), "").rstrip()
        reasons.append(
            f"But the work at the roofs would take only {explained:.0%} of the time, with its whole working set in "
            "cache: the bytes are not what it waits for. The kernels are slow for these shapes (small work, or a "
            "switch of kernel between batch sizes, which the doublings above show): a bigger batch, another layout "
            "or a compiled kernel might help (notebooks 03, 04, 08); fewer bytes would not."
        )
        regime = "inefficient"
    elif regime == "memory" and explained < EXPLAINED_MIN:
        reasons.append(
            f"But the work at the roofs would take only {explained:.0%} of the time: the bytes counted are not all "
            "the bytes moved (strided or scattered reads use a fraction of each cache line they bring in: section "
            "2.4), or the kernels are slow for these shapes. Contiguous layouts and fusion cut both."
        )
    if amortised and (regime, flat) in SHARED_WORDS:
        reasons.append(SHARED_WORDS[(regime, flat)])
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
        doublings=(first, second),
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
    check_callable("make_input", make_input, hint="pass a function of the batch size, e.g. lambda b: x[:b]")
    diagnoses = [diagnose(model, make_input(b), rf, **kwargs) for b in batches]
    return diagnoses, pd.DataFrame([d.row() for d in diagnoses]).set_index("batch")
