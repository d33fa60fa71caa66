"""The bottleneck doctor: given a model (or any callable) and an example input, run three simple tests and
say which regime it is in, with the evidence.

1. **Batch doubling** (Horace He's test): time the call at batch B and 2B. If the time doubles, the work
   per item is what costs. If it barely grows, either the call is *overhead-bound* (dispatch, launches,
   Python) or its time goes to something a bigger batch shares, such as reading the weights.
2. **Arithmetic intensity against the machine balance**: FLOPs (``torch.utils.flop_counter`` for matmuls
   and convolutions, plus an estimate of one FLOP per output element for every other op) over the bytes
   each op reads and writes in eager mode (every aten op's tensor inputs and outputs; views move nothing).
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
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode  # the standard hook for counting aten ops
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from .device import DeviceLike, choose_device
from .modes import pick
from .roofline import Roofline
from .timing import Measurement, benchmark

#: time(2B) / time(B) below this: a bigger batch is almost free (overhead, or shared weight reads).
FLAT_GROWTH = 1.3
#: ops × dispatch latency above this share of the time: overhead-bound.
OVERHEAD_SHARE = 0.5
#: the work at the roofs would take less than this share of the measured time: overhead-bound.
EXPLAINED_MIN = 0.25


#: ops that dispatch but move no data: allocations without initialisation, and views not flagged as such
_NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_unsafe_view", "alias",
               "detach", "lift_fresh"}


def _unique(values: Any) -> list[torch.Tensor]:
    seen, tensors = set(), []
    for v in values:
        if isinstance(v, torch.Tensor) and id(v) not in seen:
            seen.add(id(v))
            tensors.append(v)
    return tensors


def _decomposed(mode: TorchDispatchMode, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """Composite ops (matmul, linear under inference_mode) run as the kernels they decompose into: run those
    under ``mode``, so that it sees them as a GPU or CPU would launch them. NotImplemented for other ops."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        with mode:
            return func.decompose(*args, **kwargs)
    return NotImplemented


def _operands(name: str, args: Any, kwargs: dict[str, Any], out: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The tensors an op reads (copy_'s destination and ``out=`` are only written) and the tensors it writes."""
    leaves = torch.utils._pytree.tree_leaves
    read_args = args[1:] if name == "copy_" else args
    return _unique(leaves((read_args, {k: v for k, v in kwargs.items() if k != "out"}))), _unique(leaves(out))


class _AtenOpMode(TorchDispatchMode):
    """Runs every aten op (a composite op as the kernels it decomposes into) and hands each to ``on_op``."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        decomposed = _decomposed(self, func, args, kwargs)
        if decomposed is not NotImplemented:
            return decomposed
        out = func(*args, **kwargs)
        self.on_op(func, func.overloadpacket.__name__, args, kwargs, out)
        return out

    def on_op(self, func: Any, name: str, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        raise NotImplementedError


class _OpCounter(_AtenOpMode):
    """Counts aten ops, the bytes they read and write (eager mode: nothing is fused), and one FLOP per output
    element of the ops that FlopCounterMode does not count (pointwise ops, reductions)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.kernels = 0
        self.bytes = 0
        self.other_flops = 0
        self.host_reads = 0
        self.names: dict[str, int] = {}

    def on_op(self, func: Any, name: str, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        self.ops += 1
        self.names[name] = self.names.get(name, 0) + 1
        inputs, outputs = _operands(name, args, kwargs, out)
        # a value read back to Python (.item(), bool(tensor)), or a copy from a device to the host (.cpu(), .tolist())
        if name == "_local_scalar_dense" or (
                any(t.device.type != "cpu" for t in inputs) and any(t.device.type == "cpu" for t in outputs)):
            self.host_reads += 1
        if not func.is_view and name not in _NO_TRAFFIC:
            self.kernels += 1
            # bytes read (each input tensor once; copy_'s destination and out= are only written) + bytes written
            self.bytes += sum(t.numel() * t.element_size() for t in inputs + outputs)
            if func.overloadpacket not in flop_registry:
                self.other_flops += sum(t.numel() for t in outputs if t.is_floating_point())


@dataclass
class OpCount:
    """What one call does: aten ops dispatched, FLOPs, bytes moved (unfused), and values read back to the host
    (each a synchronisation on a GPU). ``kernels`` leaves out the ops that only make a view or an empty tensor
    (no kernel runs for them on a GPU): the count of launches an eager call makes."""

    ops: int
    flops: float
    bytes: float
    by_op: dict[str, int] = field(default_factory=dict)
    host_reads: int = 0
    kernels: int = 0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


@torch.inference_mode()
def count_ops(fn: Callable[..., Any], *args: Any) -> OpCount:
    """Run ``fn(*args)`` once and count its aten ops, FLOPs and eager memory traffic."""
    counter = _OpCounter()
    flop_mode = FlopCounterMode(display=False)
    with flop_mode, counter:
        fn(*args)
    flops = float(flop_mode.get_total_flops() + counter.other_flops)
    return OpCount(ops=counter.ops, kernels=counter.kernels, flops=flops, bytes=float(counter.bytes),
                   by_op=dict(sorted(counter.names.items(), key=lambda kv: -kv[1])), host_reads=counter.host_reads)


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
    if not callable(model):
        raise TypeError(f"diagnose() needs a model or function, got {type(model).__name__}.")
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
        fraction = achieved_bytes / rf.bandwidth
        reasons.append(
            f"It does {counts.intensity:.2f} FLOP per byte moved, below this machine's ridge point of {ridge:.1f}: "
            f"moving data costs more than computing ({fraction:.0%} of the memory roof"
            + ("; above 100 % because part of the data is served from caches)." if fraction > 1 else ").")
            + " Move fewer bytes: fuse ops, use smaller dtypes."
        )
    else:
        regime = "compute"
        reasons.append(
            f"It does {counts.intensity:.1f} FLOP per byte, above the ridge point of {ridge:.1f}, and reaches "
            f"{achieved_flops / rf.peak_flops[dtype]:.0%} of the {dtype} compute roof. "
            "Use faster math: bf16/fp16 or tf32 tensor cores, int8."
        )
    if regime != "overhead" and explained < EXPLAINED_MIN:
        reasons.append(f"But the work at the roofs would take only {explained:.0%} of the time: the kernels are "
                       "inefficient for these shapes (small or strided work), far from both roofs.")
    if regime == "memory" and flat:
        reasons.append("The time barely grew with the batch: it goes to data every item shares (the weights), "
                       "so a bigger batch is almost free.")
    elif regime == "compute" and flat:
        reasons.append("The time barely grew with the batch: the machine is not saturated yet, so a bigger batch "
                       "is almost free.")
    return Diagnosis(
        regime=regime, batch=batch, time=t1, time_doubled=t2, growth=growth, explained=explained, counts=counts,
        dispatch_share=dispatch_share, ridge_point=ridge, achieved_flops=achieved_flops,
        achieved_bytes_per_s=achieved_bytes, fraction_of_compute_roof=achieved_flops / rf.peak_flops[dtype],
        fraction_of_memory_roof=achieved_bytes / rf.bandwidth, reasons=reasons,
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

    if not batches or any(not isinstance(b, int) or b < 1 for b in batches):
        raise ValueError(f"batches={batches!r} must be a non-empty list of integers ≥ 1.")
    diagnoses = [diagnose(model, make_input(b), rf, **kwargs) for b in batches]
    return diagnoses, pd.DataFrame([d.row() for d in diagnoses]).set_index("batch")
