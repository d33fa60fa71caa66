"""Running out of memory without crashing: the one place where an out-of-memory error is caught
(``torch.OutOfMemoryError`` on a GPU, the CPU allocator's ``RuntimeError`` on a CPU: :func:`is_out_of_memory`).

Every helper here follows one rule, written once in :func:`_attempt`: **catch** the out-of-memory error (and
nothing else: any other exception is a real bug and propagates), **free** memory *after* the ``except``
block (inside it, the exception's traceback still holds the failed attempt's tensors, so nothing could be
freed), then **try a smaller batch** (half the one that failed, or half-way between the largest batch that
fitted and the smallest that did not).

* :func:`free_memory`: garbage collection, then (on CUDA) the caching allocator's unused blocks back to the
  driver.
* :func:`largest_fitting_batch`: the largest batch a function can run (doubling, then bisection); notebook 03.
* :func:`run_with_oom_backoff`: run a whole input in chunks, halving the chunk on each OOM; notebook 07.
* :func:`with_memory_cap`: a simulated memory limit, so that the two above can be shown and tested on a
  machine whose memory is not full (a CPU would swap or be killed long before PyTorch raised).

Each function has its home here only: notebooks write ``from helpers import oom``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .checks import check_callable, check_choice, check_int, check_number, check_tensor
from .device import DeviceLike, choose_device
from .memory import peak_allocated_bytes

#: where a capped call's peak comes from: measured around the call, or the number the call returns
PEAK_SOURCES = ("measured", "returned")


def free_memory(device: DeviceLike = None) -> None:
    """Collect garbage, then (on CUDA) return the caching allocator's unused blocks to the driver."""
    gc.collect()
    if choose_device(device).type == "cuda":
        torch.cuda.empty_cache()


_FAILED = object()
#: What the CPU allocator says when an allocation fails: it raises a plain ``RuntimeError``, not
#: ``torch.OutOfMemoryError`` (that one comes from the CUDA caching allocator).
CPU_OOM_MESSAGES = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True for an allocation failure on any device: ``torch.OutOfMemoryError`` (CUDA, MPS) or the CPU
    allocator's ``RuntimeError``. Any other error is a real bug and must propagate."""
    if not isinstance(exc, BaseException):
        raise TypeError(f"is_out_of_memory takes the exception caught, got {type(exc).__name__}.")
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in CPU_OOM_MESSAGES)


def _attempt(fn: Callable[..., Any], *args: Any, device: DeviceLike = None) -> tuple[bool, Any]:
    """``(True, fn(*args))``, or ``(False, None)`` when the call ran out of memory (on a GPU or on the CPU);
    then memory was freed, outside the except block (its traceback holds the failed attempt's tensors until
    the block ends)."""
    try:
        result = fn(*args)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        result = _FAILED
    if result is _FAILED:
        free_memory(device)
        return False, None
    return True, result


@dataclass
class FitSearch:
    """Result of :func:`largest_fitting_batch`: the answer and every attempt, in order."""

    largest: int
    attempts: list[tuple[int, bool]]
    hit_limit: bool


def largest_fitting_batch(
    try_batch: Callable[[int], Any], start: int = 1, limit: int = 2**14, device: DeviceLike = None
) -> FitSearch:
    """Find the largest batch for which ``try_batch(b)`` does not run out of memory (:func:`is_out_of_memory`).

    Doubles from ``start`` until a batch fails (or ``limit`` is reached), then bisects between the last
    batch that fitted and the first that did not. After each OOM it frees what it can (garbage collection and
    the CUDA cache of ``device``, by default the course's device) so the next attempt starts clean. Any other
    exception propagates.
    """
    check_callable(
        "try_batch", try_batch, hint="largest_fitting_batch() needs a function that runs one batch: try_batch(b)"
    )
    check_int("start", start, hint="pass the first batch to try, e.g. 1")
    check_int("limit", limit, minimum=start, hint=f"pass the largest batch to try, at least start={start}")
    attempts: list[tuple[int, bool]] = []

    def fits(b: int) -> bool:
        ok, _ = _attempt(try_batch, b, device=device)
        attempts.append((b, ok))
        return ok

    if not fits(start):
        raise RuntimeError(f"batch {start} does not fit in memory: reduce the model, the input size or the dtype.")
    good, bad = start, None
    while bad is None:
        nxt = min(good * 2, limit)
        if nxt == good:
            return FitSearch(good, attempts, hit_limit=True)
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return FitSearch(good, attempts, hit_limit=False)


class BackoffResult:
    """What :func:`run_with_oom_backoff` did: the concatenated outputs, the batch size it ended with, and each
    out-of-memory retry as ``(batch that failed, batch tried next)``."""

    def __init__(self, outputs: torch.Tensor, batch: int, retries: list[tuple[int, int]]) -> None:
        self.outputs, self.batch, self.retries = outputs, batch, retries

    def __repr__(self) -> str:
        shape = tuple(self.outputs.shape)
        return f"<BackoffResult {shape} outputs, final batch {self.batch}, {len(self.retries)} retries>"


def run_with_oom_backoff(
    fn: Callable[[torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    batch: int,
    min_batch: int = 1,
    device: DeviceLike = None,
) -> BackoffResult:
    """Run ``fn`` over ``inputs`` in chunks of ``batch``; when a chunk runs out of memory (GPU or CPU), free
    memory (garbage collection, the CUDA cache of ``device``, by default that of ``inputs``), halve the batch
    and retry that chunk, down to ``min_batch``. Returns the outputs in order (concatenated on the first
    dimension) and what it had to do."""
    check_callable("fn", fn, hint="run_with_oom_backoff() needs a function of one batch, e.g. model")
    check_int("batch", batch, hint="pass the chunk size to try first, e.g. 64")
    check_tensor("inputs", inputs, nonempty=False, hint="pass the batch of inputs to split, e.g. images")
    check_int(
        "min_batch", min_batch, maximum=batch, hint=f"pass the smallest chunk to fall back to, at most batch={batch}"
    )
    if len(inputs) == 0:
        raise ValueError("run_with_oom_backoff() got no inputs: pass at least one item.")
    device = device if device is not None else inputs.device
    outputs, retries, start = [], [], 0
    while start < len(inputs):
        chunk = inputs[start : start + batch]
        ok, out = _attempt(fn, chunk, device=device)
        if not ok:
            size = len(chunk)  # the chunk that failed (the last one can be shorter than batch)
            if size <= min_batch:
                raise RuntimeError(
                    f"out of memory even at batch {size}: free memory, use a smaller model or "
                    "dtype, or lower min_batch."
                )
            batch = max(min_batch, size // 2)
            retries.append((size, batch))
            continue
        if not isinstance(out, torch.Tensor) or out.dim() == 0 or len(out) != len(chunk):
            got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"fn returned {got} for a chunk of {len(chunk)}: it must return one row per input.")
        outputs.append(out)
        start += len(chunk)
    return BackoffResult(torch.cat(outputs), batch, retries)


def with_memory_cap(
    fn: Callable[..., Any], cap_bytes: float, device: DeviceLike = None, *, peak: str = "measured"
) -> Callable[..., Any]:
    """``fn`` with a simulated memory limit: a call whose peak memory goes over ``cap_bytes`` raises
    ``torch.OutOfMemoryError``, as a full GPU would. For teaching and testing out-of-memory handling on a
    machine whose memory is not full.

    ``peak`` says where a call's peak comes from:

    * ``"measured"`` (notebook 07): each call is measured with :func:`helpers.memory.peak_allocated_bytes` on
      ``device`` (given, or that of the call's first tensor argument); the wrapper returns ``fn``'s result, and
      over the cap drops it before raising, so the refused call holds no memory.
    * ``"returned"`` (notebook 03, :func:`memory_capped`): ``fn`` measures itself and returns its peak in bytes
      (e.g. ``run(b)`` running batch ``b``); the wrapper returns that number.
    """
    check_callable("fn", fn, hint="with_memory_cap() needs a function to wrap, e.g. model")
    check_number("cap_bytes", cap_bytes, positive=True, hint="pass the simulated limit in bytes, e.g. 512 * 2**20")
    check_choice("peak", peak, PEAK_SOURCES, hint="'measured' measures each call, 'returned' trusts fn's return value")

    def refuse(used: float) -> torch.OutOfMemoryError:
        return torch.OutOfMemoryError(f"simulated: the call needed {used:,.0f} bytes, over the cap of {cap_bytes:,.0f}")

    def capped(*args: Any, **kwargs: Any) -> Any:
        if peak == "returned":
            used = fn(*args, **kwargs)
            check_number("fn's result", used, minimum=0, hint="with peak='returned', fn returns its peak in bytes")
            if used > cap_bytes:
                raise refuse(used)
            return used
        kept: list[Any] = []
        where = (
            device
            if device is not None
            else next(
                (a.device for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)), None
            )
        )
        used = peak_allocated_bytes(lambda: kept.append(fn(*args, **kwargs)), where)
        if used > cap_bytes:
            kept.clear()
            raise refuse(used)
        return kept[0]

    return capped


def memory_capped(run: Callable[[int], int], cap_bytes: float) -> Callable[[int], int]:
    """``with_memory_cap(run, cap_bytes, peak="returned")``: wrap ``run(b) -> peak bytes`` so that a peak above
    ``cap_bytes`` raises ``torch.OutOfMemoryError``, as a full GPU would; lets the OOM-safe search run for real
    on a machine whose memory is not the limit (notebook 03)."""
    return with_memory_cap(run, cap_bytes, peak="returned")


def torchvision_batches(name: str, image: int) -> Callable[[int], Any]:
    """A function of the batch size that runs torchvision's ``name`` (random weights, seed 0, CPU, inference
    mode) on that many random ``image``-pixel images: what :func:`attempts_under_cap` builds in its child."""
    from .models import torchvision_model

    torch.manual_seed(0)
    model = torchvision_model(name, torch.device("cpu"))

    def run(batch: int) -> None:
        with torch.inference_mode():
            model(torch.randn(batch, 3, image, image))

    return run


def _address_space_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:160]


def _capped_child(
    conn: Any, build: Callable[[], Callable[[int], Any]], batches: list[int] | None, limit: int, cap: int
) -> None:  # pragma: no cover - runs in a child process
    import resource

    run = build()
    run(1)  # before the cap: the libraries, the thread pool and the kernels' first allocations are in place
    resource.setrlimit(resource.RLIMIT_AS, (_address_space_bytes() + cap, resource.RLIM_INFINITY))
    if batches is None:  # a real search: largest_fitting_batch against the cap, every attempt and failure kept
        tried: list[tuple[int, bool]] = []
        failures: list[tuple[int, str]] = []

        def attempt(batch: int) -> None:
            try:
                run(batch)
            except Exception as exc:  # noqa: BLE001 - re-raised: the search decides what an OOM is
                tried.append((batch, False))
                failures.append((batch, _first_line(exc)))
                raise
            tried.append((batch, True))

        answer = {"attempts": tried, "hit_limit": False, "stopped": None}
        try:
            found = largest_fitting_batch(attempt, limit=limit, device="cpu")
            answer.update(largest=found.largest, hit_limit=found.hit_limit)
        except Exception as exc:  # noqa: BLE001 - not an out-of-memory error: the search stops, and says why
            fitted = [b for b, ok in tried if ok]
            answer.update(largest=max(fitted) if fitted else None, stopped=f"{type(exc).__name__}: {_first_line(exc)}")
        answer["first_failure"] = failures[0] if failures else None
        answer["last_failure"] = failures[-1] if failures else None
        conn.send(answer)
        return
    outcomes = []
    for batch in batches:
        try:
            run(batch)
            outcomes.append({"batch": batch, "outcome": "ran", "error": ""})
        except Exception as exc:  # noqa: BLE001 - reported, whatever it is: which error a cap raises is the lesson
            kind = "out of memory" if is_out_of_memory(exc) else f"failed ({type(exc).__name__})"
            outcomes.append({"batch": batch, "outcome": kind, "error": _first_line(exc)})
        free_memory("cpu")
    conn.send(outcomes)


def _in_capped_child(
    build: Callable[[], Callable[[int], Any]], batches: list[int] | None, limit: int, cap_bytes: int, timeout: float
) -> Any:
    import multiprocessing
    import sys

    check_callable("build", build, hint="pass a picklable function that builds run(batch), e.g. a partial")
    check_int("cap_bytes", cap_bytes, minimum=1, hint="pass the memory cap in bytes, e.g. 1200 * 2**20")
    if not sys.platform.startswith("linux"):
        raise NotImplementedError(f"a capped child process needs Linux's RLIMIT_AS; {sys.platform} does not enforce it")
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process's memory is shared
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_capped_child, args=(child, build, batches, limit, cap_bytes), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise TimeoutError(f"the capped child did not answer within {timeout:.0f} s")
        return parent.recv()
    except EOFError as exc:  # the child died without answering: the OS killed it, or a library aborted
        raise RuntimeError(f"the capped child died (exit code {process.exitcode}) before it answered") from exc
    finally:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()


def attempts_under_cap(
    build: Callable[[], Callable[[int], Any]], batches: list[int], cap_bytes: int, timeout: float = 180.0
) -> list[dict[str, Any]]:
    """Run ``build()(batch)`` for each of ``batches`` in a child process whose address space is capped: what it
    holds after one call at batch 1, plus ``cap_bytes`` (``RLIMIT_AS``). The real failure path of a CPU that runs
    out of memory, without risking the notebook's process. ``build`` must be picklable (a module-level function,
    or a ``functools.partial`` of one, e.g. ``partial(oom.torchvision_batches, "resnet18", 160)``). Returns one
    dict per batch: ``{"batch", "outcome": "ran" | "out of memory" | "failed (<error type>)", "error"}``.
    Linux only: macOS does not enforce ``RLIMIT_AS``, so elsewhere it raises ``NotImplementedError`` (a named
    skip in a notebook)."""
    return _in_capped_child(build, list(batches), 0, cap_bytes, timeout)


def largest_under_cap(
    build: Callable[[], Callable[[int], Any]], cap_bytes: int, limit: int = 2**14, timeout: float = 300.0
) -> dict[str, Any]:
    """:func:`largest_fitting_batch` with real calls, in a child process capped as :func:`attempts_under_cap`'s.
    Returns ``{"largest": the largest batch that ran (None if none), "attempts": [(batch, ran)], "hit_limit",
    "first_failure" and "last_failure": (batch, what the library said) or None, "stopped": None, or the error that
    was not an out-of-memory one (the search stops there)}``."""
    check_int("limit", limit, minimum=1, hint="pass the largest batch to try, e.g. 4096")
    return _in_capped_child(build, None, limit, cap_bytes, timeout)
