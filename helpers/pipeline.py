"""Overlap input and compute: prefetchers for the CPU (a loader thread) and the GPU (copies on a side stream),
and the small tools to check that overlap really happened.

- :class:`ThreadPrefetcher` — iterate over anything in a background thread, ``depth`` items ahead: while the
  caller computes on item *i*, items *i+1…* are being loaded (decoding and resizing release the GIL).
- :class:`CudaPrefetcher` — over a ``DataLoader`` with ``pin_memory=True``: copies batch *i+1* to the GPU on a
  side stream while batch *i* computes on the default stream, with the stream synchronisation and memory
  bookkeeping (``record_stream``) that makes it correct.
- :func:`to_device` — move every tensor of a batch (tensor, tuple, list, dict).
- :func:`overlap_seconds` — how much of one set of time intervals ran during another (e.g. copies during kernels).
- :func:`child_processes` — the worker processes this process still has (a clean pipeline leaves none).
"""

from __future__ import annotations

import functools
import math
import numbers
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from .checks import check_int, check_number
from .device import DeviceLike, choose_device

_END = object()


def to_device(batch: Any, device: DeviceLike, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor moved to ``device`` (nested tuples, lists and dicts are followed)."""
    dev = choose_device(device)
    return torch.utils._pytree.tree_map(
        lambda t: t.to(dev, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t, batch
    )


class ThreadPrefetcher:
    """Iterate over ``iterable`` in a background thread, keeping up to ``depth`` items ready.

    Items come out in order; an exception raised while loading is raised in the caller, at the item where it
    happened. The thread stops when the iteration ends, fails, or the consumer stops early (``close()`` or
    garbage collection of the generator)."""

    def __init__(self, iterable: Iterable[Any], depth: int = 2) -> None:
        check_int("depth", depth, hint="pass how many items to load ahead, e.g. 2")
        if not isinstance(iterable, Iterable) or isinstance(iterable, (str, bytes)):
            raise TypeError(f"ThreadPrefetcher needs an iterable of items (e.g. a DataLoader), got {iterable!r}.")
        self.iterable = iterable
        self.depth = depth

    def __iter__(self) -> Iterator[Any]:
        items: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def put(entry: tuple[Any, BaseException | None]) -> bool:
            """Put unless the consumer has gone; False once it has (every put, the last ones too)."""
            while not stop.is_set():
                try:
                    items.put(entry, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def load() -> None:
            try:
                for item in self.iterable:
                    if not put((item, None)):
                        return
                put((_END, None))
            except BaseException as exc:  # handed to the consumer, raised there
                put((_END, exc))

        thread = threading.Thread(target=load, name="ThreadPrefetcher", daemon=True)
        thread.start()
        try:
            while True:
                item, error = items.get()
                if error is not None:
                    raise error
                if item is _END:
                    return
                yield item
        finally:
            stop.set()
            thread.join(timeout=5)


@functools.cache
def copy_stream(device: torch.device) -> torch.cuda.Stream:
    """One side stream per device for host-to-device copies, made once. ``torch.cuda.Stream()`` takes the next of a
    pool of streams, and the caching allocator reuses a freed block only on the stream that allocated it: a new
    stream per pass would allocate every copied batch anew (a ``cudaMalloc`` each) instead of reusing the last
    pass's blocks."""
    return torch.cuda.Stream(device)


class CudaPrefetcher:
    """Iterate over ``loader`` with each batch already on ``device``: the copy of batch *i+1* is issued on a
    side CUDA stream before batch *i* is handed out, so it overlaps with the caller's compute on batch *i*.
    The loader should pin its memory (``DataLoader(..., pin_memory=True)``): a copy from pageable memory is
    not asynchronous."""

    def __init__(self, loader: Iterable[Any], device: DeviceLike = "cuda") -> None:
        self.device = choose_device(device)
        if self.device.type != "cuda":
            raise ValueError(
                f"CudaPrefetcher overlaps copies with CUDA streams; device={self.device} is not a "
                "CUDA device. On a CPU, use ThreadPrefetcher."
            )
        self.loader = loader

    def _issue(self, iterator: Iterator[Any], stream: torch.cuda.Stream) -> Any:
        batch = next(iterator, _END)
        if batch is _END:
            return _END
        with torch.cuda.stream(stream):
            return to_device(batch, self.device, non_blocking=True)

    def __iter__(self) -> Iterator[Any]:
        stream = copy_stream(self.device)  # the same stream every pass: see copy_stream
        compute = torch.cuda.current_stream(self.device)
        iterator = iter(self.loader)
        upcoming = self._issue(iterator, stream)
        while upcoming is not _END:
            compute.wait_stream(stream)  # the batch's copy is complete before any kernel reads it
            for t in torch.utils._pytree.tree_leaves(upcoming):
                if isinstance(t, torch.Tensor):
                    t.record_stream(compute)  # its memory is not reused while the compute stream may read it
            current, upcoming = upcoming, self._issue(iterator, stream)
            yield current


def overlap_seconds(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Total time during which some interval of ``a`` and some interval of ``b`` both ran (same unit as given):
    the union of ``a`` against the union of ``b``, so it never exceeds either's span. Each interval is a
    ``(start, end)`` pair of finite numbers with ``end ≥ start``."""
    total = 0.0
    union_b = _union(b, "b")
    for start, end in _union(a, "a"):
        for m_start, m_end in union_b:
            total += max(0.0, min(end, m_end) - max(start, m_start))
    return total


def _union(intervals: Sequence[tuple[float, float]], name: str) -> list[list[float]]:
    """Sorted, non-overlapping intervals covering the same time as ``intervals`` (checked)."""
    if isinstance(intervals, (str, bytes)) or not hasattr(intervals, "__iter__"):
        raise TypeError(f"{name} must be a list of (start, end) intervals, got {type(intervals).__name__}.")
    pairs = []
    for i, pair in enumerate(intervals):
        ok = isinstance(pair, (tuple, list)) and len(pair) == 2
        ok = ok and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
        if not ok or pair[1] < pair[0]:
            raise ValueError(
                f"{name}[{i}]={pair!r} is not an interval: pass (start, end) with finite numbers and end ≥ start."
            )
        pairs.append((float(pair[0]), float(pair[1])))
    merged: list[list[float]] = []
    for start, end in sorted(pairs):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


class WorkerWatch:
    """The child processes started after this watch was made (DataLoader workers), leaving out the helpers
    libraries started before (compilers, ...): ``alive()`` lists them, ``none_left()`` waits for them to exit."""

    def __init__(self) -> None:
        self.before = {p.pid for p in child_processes()}

    def alive(self) -> list[Any]:
        return child_processes(exclude=self.before)

    def none_left(self, timeout: float = 10.0) -> bool:
        return not wait_for_children(exclude=self.before, timeout=timeout)


def child_processes(exclude: Iterable[int] = ()) -> list[Any]:
    """This process's live child processes (e.g. DataLoader workers that were not shut down), leaving out the
    pids in ``exclude`` (take them before creating a loader: compilers and other libraries start helpers too)."""
    import psutil

    skip = set(exclude)
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid not in skip and child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:  # exited while we looked
            continue
    return alive


def wait_for_children(exclude: Iterable[int] = (), timeout: float = 10.0) -> list[Any]:
    """Wait up to ``timeout`` seconds for this process's child processes (other than ``exclude``) to exit, e.g.
    DataLoader workers after their loader is deleted; returns those still alive (empty: all gone)."""
    import time

    check_number("timeout", timeout, minimum=0.0, hint="seconds to wait, e.g. 10")
    deadline = time.perf_counter() + timeout
    while (alive := child_processes(exclude)) and time.perf_counter() < deadline:
        time.sleep(0.05)
    return alive
