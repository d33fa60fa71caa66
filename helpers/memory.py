"""Peak memory of a call, measured the right way on each device.

* CUDA: the caching allocator's own statistics (``max_memory_allocated``), reset before the call.
* CPU (and Apple MPS): ``torch.cuda`` functions return 0 there, so this module tracks the tensors the call creates: a
  dispatch mode sees every new tensor an aten op returns and a finaliser sees it freed, giving the peak of
  live tensor bytes the call added. (It does not see memory a kernel library allocates internally, such as
  oneDNN scratch space; nor tensors made in other threads, the dispatch mode being per thread; and a
  ``torch.compile``d function runs eagerly while a dispatch mode is active, so its eager peak is what it
  measures.) ``rss_peak_growth`` samples the process's resident memory instead: closer to what
  the OS sees, but blind to memory the allocator reuses.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .device import DeviceLike, choose_device, sync


class _LiveTensorBytes(TorchDispatchMode):
    def __init__(self, device_type: str = "cpu") -> None:
        super().__init__()
        self.device_type = device_type  # tensors on this kind of device are counted (cpu, or mps on a Mac)
        self.live = 0
        self.peak = 0
        self._lock = threading.Lock()

    def _free(self, nbytes: int) -> None:
        with self._lock:
            self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor) and a.device.type == self.device_type}
        for t in torch.utils._pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type != self.device_type:
                continue
            storage = t.untyped_storage()
            if storage.data_ptr() in inputs or storage.nbytes() == 0:
                continue  # in-place or aliasing result: nothing new was allocated
            nbytes = storage.nbytes()
            with self._lock:
                self.live += nbytes
                self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._free, nbytes)
        return out


def peak_allocated_bytes(fn: Callable[[], Any], device: DeviceLike = None) -> int:
    """Peak bytes of tensor memory that ``fn()`` adds on ``device`` while it runs (see the module docstring)."""
    if not callable(fn):
        raise TypeError("peak_allocated_bytes() needs a function of no arguments, e.g. lambda: model(x).")
    dev = choose_device(device)
    if dev.type == "cuda":
        sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        result = fn()
        sync(dev)
        del result
        return max(0, torch.cuda.max_memory_allocated(dev) - base)
    tracker = _LiveTensorBytes(dev.type)
    with tracker:
        result = fn()
    del result
    return tracker.peak


def rss_peak_growth(fn: Callable[[], Any], calls: int = 1) -> int:
    """Growth of the process's resident memory (RSS) while ``fn()`` runs ``calls`` times, sampled every
    ~0.2 ms by a thread. Misses spikes shorter than that, and memory the allocator reuses."""
    if not callable(fn):
        raise TypeError("rss_peak_growth() needs a function of no arguments.")
    import psutil

    process = psutil.Process()
    base = process.memory_info().rss
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.0002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in range(calls):
            fn()
    finally:
        done.set()
        sampler.join()
    return max(0, max(peak, process.memory_info().rss) - base)


def free_memory(device: DeviceLike = None) -> None:
    """Collect garbage, then (on CUDA) return the caching allocator's unused blocks to the driver."""
    import gc

    gc.collect()
    if choose_device(device).type == "cuda":
        torch.cuda.empty_cache()


def cuda_memory(device: DeviceLike = "cuda") -> dict[str, int]:
    """The CUDA caching allocator's view: bytes allocated to live tensors, reserved from the driver (live +
    cached), and the peaks of both since the last reset."""
    dev = choose_device(device)
    if dev.type != "cuda":
        raise ValueError(f"cuda_memory() reads the CUDA allocator; device={dev} is not CUDA (on a CPU, "
                         "torch.cuda.memory_allocated() is simply 0: use peak_allocated_bytes or psutil).")
    return {"allocated": torch.cuda.memory_allocated(dev), "reserved": torch.cuda.memory_reserved(dev),
            "max allocated": torch.cuda.max_memory_allocated(dev), "max reserved": torch.cuda.max_memory_reserved(dev)}


class BackoffResult:
    """What :func:`run_with_oom_backoff` did: the concatenated outputs, the batch size it ended with, and each
    out-of-memory retry as ``(batch that failed, batch tried next)``."""

    def __init__(self, outputs: torch.Tensor, batch: int, retries: list[tuple[int, int]]) -> None:
        self.outputs, self.batch, self.retries = outputs, batch, retries

    def __repr__(self) -> str:
        shape = tuple(self.outputs.shape)
        return f"<BackoffResult {shape} outputs, final batch {self.batch}, {len(self.retries)} retries>"


def run_with_oom_backoff(fn: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor, batch: int,
                         min_batch: int = 1, device: DeviceLike = None) -> BackoffResult:
    """Run ``fn`` over ``inputs`` in chunks of ``batch``; when a chunk raises ``torch.OutOfMemoryError``, free
    memory (garbage collection, the CUDA cache), halve the batch and retry that chunk, down to ``min_batch``.
    Returns the outputs in order (concatenated on the first dimension) and what it had to do."""
    if not callable(fn):
        raise TypeError("run_with_oom_backoff() needs a function of one batch, e.g. model.")
    for name, value in (("batch", batch), ("min_batch", min_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer ≥ 1.")
    if min_batch > batch:
        raise ValueError(f"min_batch={min_batch} is larger than batch={batch}.")
    if len(inputs) == 0:
        raise ValueError("run_with_oom_backoff() got no inputs: pass at least one item.")
    outputs, retries, start = [], [], 0
    while start < len(inputs):
        chunk = inputs[start:start + batch]
        try:
            out = fn(chunk)
            failed = False
        except torch.OutOfMemoryError:
            failed = True
        if failed:  # outside the except block: its traceback holds the failed attempt's tensors
            size = len(chunk)  # the chunk that failed (the last one can be shorter than batch)
            if size <= min_batch:
                raise RuntimeError(f"out of memory even at batch {size}: free memory, use a smaller model or "
                                   "dtype, or lower min_batch.") from None
            free_memory(device if device is not None else inputs.device)
            retries.append((size, max(min_batch, size // 2)))
            batch = max(min_batch, size // 2)
            continue
        outputs.append(out)
        start += len(chunk)
    return BackoffResult(torch.cat(outputs), batch, retries)


def with_memory_cap(fn: Callable[..., Any], cap_bytes: int, device: DeviceLike = None) -> Callable[..., Any]:
    """``fn`` with a simulated memory limit: each call is measured (:func:`peak_allocated_bytes`) and raises
    ``torch.OutOfMemoryError`` if its peak went over ``cap_bytes``, as a full GPU would; otherwise returns
    ``fn``'s result. For teaching and testing out-of-memory handling on a machine whose memory is not full."""
    if not callable(fn):
        raise TypeError("with_memory_cap() needs a function to wrap, e.g. model.")
    if isinstance(cap_bytes, bool) or not isinstance(cap_bytes, int) or cap_bytes <= 0:
        raise ValueError(f"cap_bytes={cap_bytes!r} must be a positive number of bytes.")

    def capped(*args: Any, **kwargs: Any) -> Any:
        kept: list[Any] = []
        # the device the call works on: given, or that of its first tensor argument
        where = device if device is not None else next(
            (a.device for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)), None)
        peak = peak_allocated_bytes(lambda: kept.append(fn(*args, **kwargs)), where)
        if peak > cap_bytes:
            kept.clear()
            raise torch.OutOfMemoryError(f"simulated: the call needed {peak:,} bytes, over the cap of {cap_bytes:,}")
        return kept[0]

    return capped
