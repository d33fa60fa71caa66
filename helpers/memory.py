"""Peak memory of a call, measured the right way on each device.

* CUDA: the caching allocator's own statistics (``max_memory_allocated``), reset before the call.
* CPU (and Apple MPS): ``torch.cuda`` functions return 0 there, so this module tracks the tensors the call creates: a
  dispatch mode sees every new tensor an aten op returns and a finaliser sees it freed, giving the peak of
  live tensor bytes the call added. (It does not see memory a kernel library allocates internally, such as
  oneDNN scratch space; nor tensors made in other threads, the dispatch mode being per thread; and a
  ``torch.compile``d function runs eagerly while a dispatch mode is active, so its eager peak is what it
  measures.)

Surviving a full device (``free_memory``, ``run_with_oom_backoff``, the simulated ``with_memory_cap``) is
:mod:`helpers.oom`'s; those names are re-exported here.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .checks import check_callable
from .device import DeviceLike, choose_device, sync

# out-of-memory handling lives in one module; these names stay importable from here (notebook 07 uses them)
from .oom import BackoffResult, free_memory, run_with_oom_backoff, with_memory_cap  # noqa: F401 - re-exported


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
        inputs = {
            a.untyped_storage().data_ptr()
            for a in torch.utils._pytree.tree_leaves((args, kwargs))
            if isinstance(a, torch.Tensor) and a.device.type == self.device_type
        }
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
    check_callable("fn", fn, hint="peak_allocated_bytes() needs a function of no arguments, e.g. lambda: model(x)")
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


def cuda_memory(device: DeviceLike = "cuda") -> dict[str, int]:
    """The CUDA caching allocator's view: bytes allocated to live tensors, reserved from the driver (live +
    cached), and the peaks of both since the last reset."""
    dev = choose_device(device)
    if dev.type != "cuda":
        raise ValueError(
            f"cuda_memory() reads the CUDA allocator; device={dev} is not CUDA (on a CPU, "
            "torch.cuda.memory_allocated() is simply 0: use peak_allocated_bytes or psutil)."
        )
    return {
        "allocated": torch.cuda.memory_allocated(dev),
        "reserved": torch.cuda.memory_reserved(dev),
        "max allocated": torch.cuda.max_memory_allocated(dev),
        "max reserved": torch.cuda.max_memory_reserved(dev),
    }
