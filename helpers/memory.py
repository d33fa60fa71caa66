"""Peak memory of a call, measured the right way on each device.

* CUDA: the caching allocator's own statistics (``max_memory_allocated``), reset before the call.
* CPU (and Apple MPS): ``torch.cuda`` functions return 0 there, so this module tracks the tensors the call creates: a
  dispatch mode sees every new tensor an aten op returns and a finaliser sees it freed, giving the peak of
  live tensor bytes the call added. (It does not see memory a kernel library allocates internally, such as
  oneDNN scratch space; nor tensors made in other threads, the dispatch mode being per thread; and a
  ``torch.compile``d function runs eagerly while a dispatch mode is active, so its eager peak is what it
  measures.)

Surviving a full device (``free_memory``, ``run_with_oom_backoff``, the simulated ``with_memory_cap``) is
:mod:`helpers.oom`'s (one home for each function).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .checks import check_callable, check_choice, check_int
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


def resident_memory() -> dict[str, int] | None:
    """This process's resident memory by kind, in bytes: ``anon`` (``RssAnon``, private memory: tensors, heaps;
    only swap can reclaim it) and ``file`` (``RssFile``, resident pages of mapped files: code, libraries, a
    checkpoint loaded with ``mmap=True``; clean copies the kernel can drop and read again). None where
    ``/proc/self/status`` does not exist (macOS, Windows)."""
    fields = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("RssAnon", "RssFile"):
                    fields[name] = int(value.split()[0]) * 1024
    except OSError:
        return None
    if len(fields) != 2:
        return None
    return {"anon": fields["RssAnon"], "file": fields["RssFile"]}


def snapshot_timeline(snapshot: dict[str, Any], device_index: int = 0) -> Any:
    """Memory over time from a CUDA allocator snapshot (``torch.cuda.memory._snapshot()``, recorded with
    ``_record_memory_history``), read offline: one row per allocation or free, with the bytes live after it.
    (torch's own HTML viewer, ``torch.cuda._memory_viz.trace_plot``, loads its script from a CDN.)"""
    import pandas as pd

    if not isinstance(snapshot, dict) or "device_traces" not in snapshot:
        raise ValueError("snapshot must be the dict of torch.cuda.memory._snapshot(), recorded with history on.")
    traces = snapshot["device_traces"]
    check_int("device_index", device_index, 0, max(0, len(traces) - 1), hint="the index of a recorded GPU")
    rows, live = [], 0
    for event in traces[device_index] if traces else []:
        action, size = event.get("action"), int(event.get("size", 0))
        if action == "alloc":
            live += size
        elif action in ("free_completed",):
            live -= size
        else:
            continue
        rows.append({"event": len(rows), "action": action, "bytes": size, "live bytes": live})
    return pd.DataFrame(rows, columns=["event", "action", "bytes", "live bytes"]).set_index("event")


_LOAD_SCRIPT = r"""
import gc, json, sys, torch, torchvision
path, how = sys.argv[1], sys.argv[2]

def status():  # this process's private (anonymous) and file-backed resident memory, and its peak, in bytes
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "VmHWM"):
                fields[name] = int(value.split()[0]) * 1024
    return fields

gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS: the peak measured is the loading's own
except OSError:
    pass
start = status()
stages = {}
def mark(stage):
    now = status()
    stages[stage] = {"anon": now["RssAnon"] - start["RssAnon"], "file": now["RssFile"] - start["RssFile"],
                     "peak": now["VmHWM"] - start["VmHWM"]}

if how == "meta + assign":  # the module is built without memory; the loaded tensors become its weights
    with torch.device("meta"):
        model = torchvision.models.resnet18()
else:
    model = torchvision.models.resnet18()
mark("model built")
state = torch.load(path, weights_only=True, mmap=how != "torch.load", map_location="cpu")  # a CPU model
mark("state dict loaded")  # both copies alive: the model's weights and the loaded tensors
model.load_state_dict(state, assign=how == "meta + assign")
mark("copied into the model")  # the state dict still alive: a mapped file's pages were read to copy them
del state
gc.collect()
mark("loaded into the model")
model.eval()
with torch.inference_mode():
    model(torch.randn(1, 3, 64, 64))  # it works: every weight is real (and, mapped, read now)
mark("after the first forward")
print(json.dumps(stages))
"""

#: The stages at which :func:`load_memory` reads the child's memory, in order.
LOAD_STAGES = (
    "model built",
    "state dict loaded",
    "copied into the model",
    "loaded into the model",
    "after the first forward",
)


def load_memory(path: str | os.PathLike[str], how: str) -> dict[str, dict[str, int]]:
    """What a fresh Python process holds while it builds a resnet18 and loads ``path`` (a state dict) into it,
    ``how`` = ``"torch.load"``, ``"torch.load(mmap=True)"`` or ``"meta + assign"`` (``mmap=True`` and
    ``assign=True`` on a model built on the meta device); then it runs the model once, which proves every weight
    is real and, for a mapped file, reads it.

    Returns, for each of :data:`LOAD_STAGES`, the growth since the start of ``anon`` (``RssAnon``: private memory,
    which only swap can reclaim), ``file`` (``RssFile``: resident pages of mapped files, clean page cache the kernel
    can drop and read again) and ``peak`` (``VmHWM``, the process's highest RSS, both kinds together). A fresh
    process each time, its peak reset first (``/proc/self/clear_refs``): memory a process freed is not always
    returned to the OS, and a forked child starts with its parent's peak. Linux only (``/proc``)."""
    import json
    import subprocess
    import sys

    check_choice("how", how, ("torch.load", "torch.load(mmap=True)", "meta + assign"), hint="a loading method")
    if not os.path.isfile(path):
        raise ValueError(f"path={str(path)!r} is not a file: save a state dict there first (torch.save).")
    if not os.path.exists("/proc/self/status"):
        raise RuntimeError("load_memory reads /proc/self/status (RssAnon, RssFile): it needs Linux.")
    try:
        out = subprocess.run(
            [sys.executable, "-c", _LOAD_SCRIPT, str(path), how],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"loading with {how} took over 300 s in a fresh process (a swapping machine?)") from None
    if out.returncode != 0:  # an OOM-killed child (status -9) leaves no stderr at all
        tail = " | ".join(out.stderr.strip().splitlines()[-3:]) or f"no message: killed by signal {-out.returncode}?"
        raise RuntimeError(f"loading with {how} failed in a fresh process (exit status {out.returncode}): {tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])
