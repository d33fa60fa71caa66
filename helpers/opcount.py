"""Op, FLOP and byte accounting for one eager call: what it dispatches, computes and moves, op by op.

One dispatch mode, :class:`OpCounter`, sees every aten op a call runs (a composite op such as ``matmul`` or
``linear`` as the kernels it decomposes into, as a CPU or GPU would run them) and counts:

* **ops**: every aten op dispatched; **kernels**: those that are not a view or an allocation without
  initialisation (no kernel runs for them on a GPU: the launches an eager call makes);
* **FLOPs**: ``torch.utils.flop_counter.FlopCounterMode`` for the ops it knows (matmuls, convolutions,
  attention), plus one FLOP per floating-point output element of every other op that runs a kernel
  (pointwise ops, reductions: an estimate);
* **bytes**, by one of two named rules (both documented here, both computed by the same counter):

  - ``"per-op"``: each op reads each distinct input tensor once and writes each output once (``copy_``'s
    destination and ``out=`` are only written; views and allocations move nothing); summed over the ops.
    What the call moves run eagerly, nothing fused and no cache assumed. :func:`count_ops` reports it as
    ``OpCount.bytes`` (the doctor, :mod:`helpers.doctor`, divides FLOPs by it for the arithmetic intensity of
    the call *as it runs*), and :func:`traffic` as ``Traffic.unfused``.
  - ``"fused"``: the call's inputs from outside read once, its final outputs written once: what one perfectly
    fused kernel would move, the floor that fusion can reach. Only :func:`traffic` computes it
    (``Traffic.fused``, used by :mod:`helpers.fusion` and notebook 04), with ``Traffic.intermediate``, what the
    ops wrote for each other. It follows tensors by storage, so the counter keeps every output alive until
    the call ends (a freed intermediate's memory is reused by the next op, and two tensors at one address
    would be taken for one): more memory, which is why it is asked for (``OpCounter(fused=True)``) and not
    always on.

``helpers.doctor`` and ``helpers.fusion`` use these functions; notebooks call them from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode  # the standard hook for counting aten ops
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from .checks import check_callable

#: ops that dispatch but move no data: allocations without initialisation, and views not flagged as such
NO_TRAFFIC = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "_unsafe_view",
        "alias",
        "detach",
        "lift_fresh",
    }
)


def _unique(values: Any) -> list[torch.Tensor]:
    seen, tensors = set(), []
    for v in values:
        if isinstance(v, torch.Tensor) and id(v) not in seen:
            seen.add(id(v))
            tensors.append(v)
    return tensors


def _operands(name: str, args: Any, kwargs: dict[str, Any], out: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The tensors an op reads (copy_'s destination and ``out=`` are only written) and the tensors it writes."""
    leaves = torch.utils._pytree.tree_leaves
    read_args = args[1:] if name == "copy_" else args
    return _unique(leaves((read_args, {k: v for k, v in kwargs.items() if k != "out"}))), _unique(leaves(out))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


#: names of ops with matrix products inside (fused attention, transformer layers, RNNs, int8/int4 matmuls): when
#: ``FlopCounterMode`` has no formula for one, the call's FLOP count is incomplete (see :attr:`OpCount.uncounted`)
MATMUL_INSIDE = re.compile(r"attention|transformer|rnn|lstm|gru|_int_mm|int\d+pack|linear|conv|matmul|mm$|einsum")


class OpCounter(TorchDispatchMode):
    """Counts the aten ops run under it (see the module docstring): ``ops``, ``kernels``, ``names`` (ops by
    name), ``bytes`` (the per-op rule), ``other_flops`` (the FLOPs FlopCounterMode does not count),
    ``host_reads`` (values read back to Python, device-to-host copies) and ``moving`` (the names of the ops
    that move bytes, in order). With ``fused=True`` it also follows storages for the fused rule:
    ``written`` and ``external`` (storage → bytes) and ``intermediate_reads``."""

    def __init__(self, fused: bool = False) -> None:
        if not isinstance(fused, bool):
            raise TypeError(f"fused must be True or False, got {fused!r}.")
        super().__init__()
        self.fused = fused
        self.ops = 0
        self.kernels = 0
        self.bytes = 0
        self.other_flops = 0
        self.uncounted: dict[str, int] = {}  # ops with matmuls inside that no FLOP formula covers
        self.host_reads = 0
        self.names: dict[str, int] = {}
        self.moving: list[str] = []
        self.written: dict[int, int] = {}  # storage -> bytes, for storages this call produced
        self.external: dict[int, int] = {}  # storage -> bytes, for inputs read from outside the call
        self.intermediate_reads = 0
        self.external_reads = 0  # every read of an outside input, repeats included
        self.writes = 0  # every write, rewrites of the same storage (in-place ops) included
        self.allocated = 0  # the bytes of the new tensors the call created
        self.alive: list[torch.Tensor] = []  # fused rule: outputs kept until the call ends (see the docstring)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        # Composite ops (matmul, linear under inference_mode) run as the kernels they decompose into, under
        # this mode, so that it sees them as a GPU or CPU would launch them. (A private torch API: there is
        # no public way to ask whether an op is CompositeImplicitAutograd.)
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            with self:
                return func.decompose(*args, **kwargs)
        out = func(*args, **kwargs)
        self._record(func, func.overloadpacket.__name__, args, kwargs, out)
        return out

    def _record(self, func: Any, name: str, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        self.ops += 1
        self.names[name] = self.names.get(name, 0) + 1
        inputs, outputs = _operands(name, args, kwargs, out)
        # a value read back to Python (.item(), bool(tensor)), or a copy from a device to the host (.cpu(), .tolist())
        if name == "_local_scalar_dense" or (
            any(t.device.type != "cpu" for t in inputs) and any(t.device.type == "cpu" for t in outputs)
        ):
            self.host_reads += 1
        if func.is_view or name in NO_TRAFFIC:
            return
        self.kernels += 1
        self.moving.append(name)
        self.bytes += sum(_nbytes(t) for t in inputs + outputs)  # the per-op rule
        if func.overloadpacket not in flop_registry:
            self.other_flops += sum(t.numel() for t in outputs if t.is_floating_point())
            if MATMUL_INSIDE.search(name):
                self.uncounted[name] = self.uncounted.get(name, 0) + 1
        if self.fused:
            for t in inputs:
                key = t.untyped_storage().data_ptr()
                if key in self.written:
                    self.intermediate_reads += _nbytes(t)
                else:
                    self.external[key] = max(self.external.get(key, 0), _nbytes(t))
                    self.external_reads += _nbytes(t)
            for t in outputs:
                key = t.untyped_storage().data_ptr()
                if key not in self.written and key not in self.external:  # a new tensor, not an in-place write
                    self.allocated += _nbytes(t)
                self.written[key] = _nbytes(t)
                self.writes += _nbytes(t)
                self.alive.append(t)


@dataclass
class OpCount:
    """What one call does: aten ops dispatched, FLOPs, bytes moved (the per-op rule: unfused), and values read
    back to the host (each a synchronisation on a GPU). ``kernels`` leaves out the ops that only make a view or
    an empty tensor (no kernel runs for them on a GPU): the count of launches an eager call makes."""

    ops: int
    flops: float
    bytes: float
    by_op: dict[str, int] = field(default_factory=dict)
    host_reads: int = 0
    kernels: int = 0
    uncounted: dict[str, int] = field(default_factory=dict)

    @property
    def flops_complete(self) -> bool:
        """False when the call ran an op with matrix products inside that ``FlopCounterMode`` has no formula for
        (PyTorch's fused transformer and attention kernels, RNNs, int8 matmuls): ``flops`` then counts only one
        FLOP per output element of it, and can be thousands of times too low."""
        return not self.uncounted

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else 0.0


@torch.inference_mode()
def count_ops(fn: Callable[..., Any], *args: Any) -> OpCount:
    """Run ``fn(*args)`` once and count its aten ops, FLOPs and eager memory traffic (the per-op rule)."""
    check_callable("fn", fn, hint="pass the model or function to count, e.g. model")
    counter = OpCounter()
    flop_mode = FlopCounterMode(display=False)
    with flop_mode, counter:
        fn(*args)
    flops = float(flop_mode.get_total_flops() + counter.other_flops)
    return OpCount(
        ops=counter.ops,
        kernels=counter.kernels,
        flops=flops,
        bytes=float(counter.bytes),
        by_op=dict(sorted(counter.names.items(), key=lambda kv: -kv[1])),
        host_reads=counter.host_reads,
        uncounted=dict(counter.uncounted),
    )


@dataclass
class Traffic:
    """Bytes one call moves through memory: each eager op reading its inputs and writing its output
    (``unfused``, the per-op rule), against reading the call's inputs once and writing its outputs once
    (``fused``, the fused rule: what a single perfectly fused kernel would move). ``intermediate`` is what the
    ops wrote for each other and read back, in-place rewrites included (a ReLU or a residual add applied to a
    tensor already written); ``reread`` the inputs from outside read again by a later op (one input feeding two
    ops). Fusing saves both: ``unfused == fused + intermediate + reread``. ``ops``: the ops that moved bytes.
    ``allocated``: the bytes of the new tensors the eager call created (each once), against ``outputs``, those of
    the tensors it returns: what any implementation must allocate, and all a perfectly fused one does (on a CPU a
    large new tensor is faulted in page by page, a cost a copy into an existing buffer never pays)."""

    unfused: int
    fused: int
    intermediate: int
    ops: list[str]
    reread: int = 0
    allocated: int = 0
    outputs: int = 0

    @property
    def saving(self) -> float:
        """How many times fewer bytes the fused call moves."""
        return self.unfused / self.fused if self.fused else float("nan")


def traffic(fn: Callable[..., Any], *args: Any) -> Traffic:
    """Estimate the memory traffic of one eager call of ``fn(*args)``, unfused and ideally fused."""
    check_callable("fn", fn, hint="pass the function (or module) whose call to measure")
    counter = OpCounter(fused=True)
    with torch.inference_mode(), counter:
        result = fn(*args)
    final = {t.untyped_storage().data_ptr(): _nbytes(t) for t in _unique(torch.utils._pytree.tree_leaves(result))}
    fused = sum(counter.external.values()) + sum(final.values())
    final_written = sum(b for k, b in final.items() if k in counter.written)  # the last write of each output
    return Traffic(
        unfused=counter.bytes,
        fused=fused,
        intermediate=counter.intermediate_reads + counter.writes - final_written,
        ops=counter.moving,
        reread=counter.external_reads - sum(counter.external.values()),
        allocated=counter.allocated,
        outputs=sum(final.values()),
    )


#: The Tensor methods through which Python code reads a value back from a tensor (on a GPU, each one waits for
#: the device): what :func:`python_reads` counts.
READ_METHODS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


def python_reads(fn: Callable[..., Any], *args: Any) -> dict[str, int]:
    """Run ``fn(*args)`` once and count, by method, the values Python read back from tensors (``.item()``,
    ``.tolist()``, ``.cpu()``, ``.numpy()``, ``float(t)``, ``int(t)``, ``if t:``). Unlike ``count_ops``'s
    ``host_reads`` (device-to-host copies, which a CPU tensor never needs), this counts the reads themselves,
    so a loop that would synchronise on a GPU is seen on a CPU too. The methods are restored afterwards."""
    check_callable("fn", fn, hint="pass the function to run, e.g. python_reads(my_fn, x)")
    counts = dict.fromkeys(READ_METHODS, 0)
    originals = {name: getattr(torch.Tensor, name) for name in READ_METHODS}
    own = {name for name in READ_METHODS if name in vars(torch.Tensor)}  # the rest live on torch._C.TensorBase

    def counting(name: str) -> Callable[..., Any]:
        def read(self: torch.Tensor, *a: Any, **k: Any) -> Any:
            counts[name] += 1
            return originals[name](self, *a, **k)

        return read

    try:
        for name in READ_METHODS:
            setattr(torch.Tensor, name, counting(name))
        fn(*args)
    finally:
        for name, original in originals.items():
            if name in own:
                setattr(torch.Tensor, name, original)
            else:
                delattr(torch.Tensor, name)  # back to the inherited method, as before
    return {name: n for name, n in counts.items() if n}
