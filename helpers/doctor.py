"""The bottleneck doctor: given a model (or any callable) and an example input, run three simple tests and
say which regime it is in, with the evidence.

1. **Batch doubling** (Horace He's test): time the call at batch B and 2B. If the time doubles, the work
   per item is what costs. If it barely grows, either the call is *overhead-bound* (dispatch, launches,
   Python) or its time goes to something a bigger batch shares, such as reading the weights.
2. **Arithmetic intensity against the machine balance**: FLOPs (``torch.utils.flop_counter`` for matmuls
   and convolutions, plus an estimate of one FLOP per output element for every other op) over the bytes
   each op reads and writes in eager mode (every aten op's tensor inputs and outputs; views move nothing),
   all counted by :func:`helpers.opcount.count_ops` (its ``"per-op"`` byte rule).
   Below this machine's ridge point: *memory-bound*; above: *compute-bound*.
3. **Time explained by the work**: the roofline time of the work, ``max(FLOPs / peak, bytes / bandwidth)``,
   over the measured time; and the **dispatch share**, ops per call × this machine's per-op dispatch/launch
   latency over the measured time. When dispatch alone is half the time, or the work explains under a
   quarter of it *and* the time does not grow with the batch, the call is overhead-bound: fewer, bigger ops
   (batching, fusion, CUDA graphs) will help more than anything else. When the work explains little but the
   time does grow with the batch, the kernels themselves are inefficient for these shapes: the verdict
   follows the intensity and says so.

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
from .opcount import OpCount, count_ops  # the op/FLOP/byte accounting, re-exported: doctor.count_ops
from .roofline import Roofline
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

    def row(self) -> dict[str, Any]:
        """One line of a comparison table."""
        return {
            "batch": self.batch,
            "regime": self.regime,
            "median": self.time.median,
            "time ×, batch ×2": round(self.growth, 2),
            "ops/call": self.counts.ops,
            "dispatch share": round(self.dispatch_share, 2),
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
    growth = t2.median / t1.median
    counts = count_ops(model, example)
    dispatch_share = min(1.0, counts.ops * rf.dispatch_latency / t1.median)
    ridge = rf.ridge_point(dtype)
    achieved_flops = counts.flops / t1.median
    achieved_bytes = counts.bytes / t1.median
    work_time = max(counts.flops / rf.peak_flops[dtype], counts.bytes / rf.bandwidth)
    explained = work_time / t1.median

    reasons = [f"Doubling the batch took {growth:.2f}× the time."]
    flat = growth < FLAT_GROWTH
    if dispatch_share >= OVERHEAD_SHARE or (flat and explained < EXPLAINED_MIN):
        regime = "overhead"
        reasons.append(
            f"At this machine's roofs its work would take {explained:.0%} of the measured time, and "
            f"{counts.ops} ops × {rf.dispatch_latency * 1e6:.2f} µs of dispatch at least {dispatch_share:.0%}: "
            "the work is not what costs. Batch more, or cut the number of ops (fusion, CUDA graphs)."
        )
    elif counts.intensity < ridge:
        regime = "memory"
        placed = rf.place(counts.flops, counts.bytes, t1.median, dtype)
        reasons.append(
            f"It does {counts.intensity:.2f} FLOP per byte moved, below this machine's ridge point of {ridge:.1f}: "
            + (
                f"moving data costs more than computing ({placed['fraction_of_bound']:.0%} of the memory roof)."
                if not placed["above_roof"]
                else placed["explanation"]
            )  # never above 100 % as an achievement
            + " Move fewer bytes: fuse ops, use smaller dtypes."
        )
    else:
        regime = "compute"
        placed = rf.place(counts.flops, counts.bytes, t1.median, dtype)
        reasons.append(
            f"It does {counts.intensity:.1f} FLOP per byte, above the ridge point of {ridge:.1f}, and "
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
        dispatch_share=dispatch_share,
        ridge_point=ridge,
        achieved_flops=achieved_flops,
        achieved_bytes_per_s=achieved_bytes,
        fraction_of_compute_roof=achieved_flops / rf.peak_flops[dtype],
        fraction_of_memory_roof=achieved_bytes / rf.bandwidth,
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
