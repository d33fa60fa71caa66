"""The one place where known-harmless library noise is listed and handled (installed on ``import helpers``).

The course's rule is that outputs carry no unexplained warnings, and that nothing is silenced wholesale.
:data:`KNOWN` is the allow-list: each entry matches one exact message, says why it is harmless, and names the
notebook whose markdown explains it to the learner. Anything else still shows. The same list drives
:func:`install` (what a notebook hides), the test suite (pytest turns every other warning into an error), and
the check over executed notebooks (no stderr line that no entry allows). ``tests/test_noise.py`` makes each
library emit each entry's message on this machine and fails on an entry nothing emits any more.

How each is handled (the numbers are the entries' order in :data:`KNOWN`):

1. ``torch.utils.cpp_extension`` logs *"No CUDA runtime is found, using CUDA_HOME=…"* when Inductor or
   ``torch.utils.benchmark`` import it on a machine with the CUDA toolkit but no GPU: a filter on that logger.
2. ``DataLoader(pin_memory=True)`` warns on a CPU-only machine: a warnings filter on its exact text.
3. The profiler's Kineto library prints *"ERROR … gpuGetDeviceCount failed with code 35"* with no GPU driver:
   ``KINETO_LOG_LEVEL=5``, set only when no CUDA GPU is present and the user has not set it.
4. ONNX Runtime (the ``onnxruntime-gpu`` build) logs two red lines when a session asks for the CUDA provider
   on a machine without a GPU: its default log severity raised to errors-only (3) on such a machine only.
5. torchao registers an Enum with ``torch.utils._pytree.register_constant``, which torch logs as deprecated
   at import: a filter on that logger.
6. Compiling a torchao-quantized model warns that its tensor subclass does not implement
   ``_stable_hash_for_caching``: a warnings filter.
7. On a GPU with TF32 tensor cores, Inductor warns at compile time that TF32 is *"available but not enabled"*:
   a warnings filter (the course keeps fp32 exact on purpose and measures TF32 in notebook 02).
8. Notebook 04 turns torch's recompile log on to show why a recompile happened: not hidden; its markdown says
   to read those lines.
9. Starting and stopping ``torch.profiler`` prints *"USDT:… profiler_start"* (and ``profiler_stop``) from C++
   straight to stderr; no log level turns it off. :func:`profiler_markers_silenced` captures file descriptor 2
   around the start and the stop only (never around the profiled code), drops those two lines and writes every
   other line back; :func:`helpers.profiling.quiet_profile` and :func:`helpers.profiling.quiet_step` use it.
   :func:`filter_profiler_markers` installs the same filter once, for the whole process (notebook 08's set-up),
   so that a notebook can call ``torch.profiler.profile(...)`` and ``prof.step()`` themselves.
10. Notebook 11 runs a compiled function past its recompile limit on purpose: Dynamo's warning block (each line
    prefixed ``torch/_dynamo/convert_frame.py:N] [frame/recompile]``) is the lesson; not hidden.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Known:
    """One known-harmless message. ``kind``: "warning" (the warnings module), "log" (a logger) or "stderr"
    (native code writing to file descriptor 2); ``pattern``: a regular expression matched at the start of the
    message (of a stderr line, after its log prefix); ``notebook``: the notebook whose markdown explains it, and
    ``explained``: words of that markdown the test finds there; ``where``: the machines where the library
    emits it ("cpu": without a CUDA GPU, "gpu": with one); ``hidden``: whether the course hides it (False: it
    shows where a learner's own call causes it, and the named notebook says what it means)."""

    key: str
    kind: str
    pattern: str
    notebook: str
    explained: str
    reason: str
    where: str = "cpu"
    logger: str = ""
    hidden: bool = True


KNOWN: tuple[Known, ...] = (
    Known(
        "cuda-home",
        "log",
        r"No CUDA runtime is found, using CUDA_HOME",
        "00_environment",
        "CUDA_HOME",
        "nothing is compiled for CUDA on a machine without a GPU, so the toolkit path it found is never used",
        logger="torch.utils.cpp_extension",
    ),
    Known(
        "pin-memory",
        "warning",
        r"'pin_memory' argument is set as true but no accelerator is found",
        "06_async_pipelines",
        "no accelerator is found",
        "the loader code is the same on CPU and GPU; on a CPU pinning is skipped, which is what we want",
    ),
    Known(
        "kineto-no-gpu",
        "stderr",
        r"gpuGetDeviceCount failed with code 35",
        "08_profiling",
        "gpuGetDeviceCount",
        "the profiler looked for a GPU driver and found none; CPU profiling is unaffected",
    ),
    Known(
        "ort-cuda-fallback",
        "stderr",
        r"(Failed to load library .*libonnxruntime_providers_cuda|"
        r"Failed to create CUDAExecutionProvider)",
        "05_onnx_runtime",
        "logs an error and carries on",
        "a session that lists the CUDA provider first falls back to the CPU where there is no GPU. The course's "
        "own sessions ask for it only where it works (helpers.onnxrt.working_providers); a learner's own call "
        "shows ORT's error line (its warning line is hidden: ORT's log severity is errors-only without a GPU)",
        hidden=False,
    ),
    Known(
        "torchao-enum",
        "log",
        r"<enum '\w+'> is an Enum subclass and is now natively supported by torch.compile",
        "02_precision_quantization",
        "Enum subclass",
        "torchao's own registration at import, deprecated by torch but working; nothing a learner can change",
        where="any",
        logger="torch.utils._pytree",
    ),
    Known(
        "stable-hash",
        "warning",
        r"\w+ does not implement _stable_hash_for_caching",
        "02_precision_quantization",
        "_stable_hash_for_caching",
        "AOTAutograd's cache skips the tensor subclass, so the graph is recompiled instead of loaded from the "
        "cache; results are unaffected and the first call's time (reported apart) shows the cost",
        where="any",
    ),
    Known(
        "tf32-available",
        "warning",
        r"TensorFloat32 tensor cores for float32 matrix multiplication available but "
        r"not enabled",
        "02_precision_quantization",
        "available but not enabled",
        "the course keeps fp32 exact when it compares formats, and measures TF32 on purpose in notebook 02",
        where="gpu",
    ),
    Known(
        "recompiles-log",
        "stderr",
        r"\[__recompiles\]",
        "04_compilation_fusion",
        "read the log lines below",
        "the lesson turns torch's recompile log on (torch._logging.set_logs(recompiles=True)) to show why each "
        "recompile happened, then back off",
        where="any",
        hidden=False,
    ),
    Known(
        "profiler-usdt",
        "stderr",
        r"USDT:.*profiler_st(art|op)",
        "08_profiling",
        "USDT",
        "markers torch's profiler prints on every start and stop; no log level turns them off",
        where="any",
    ),
    Known(
        "recompile-limit",
        "stderr",
        r"torch/_dynamo/convert_frame\.py:\d+\] \[\d+/\d+\] (torch\._dynamo hit config\.recompile_limit|"
        r"\s+function: |\s+last reason: |To log all recompilation reasons|To diagnose recompilation issues)",
        "11_shipping",
        "Dynamo logs **one warning**",
        "the lesson runs a function past its recompile limit on purpose: this warning, one block of lines, is the "
        "only sign a server gives that the function now runs eagerly",
        where="any",
        hidden=False,
    ),
)


def known(key: str) -> Known:
    """The :data:`KNOWN` entry called ``key``."""
    for entry in KNOWN:
        if entry.key == key:
            return entry
    raise KeyError(f"{key!r} is not a known message; KNOWN has {', '.join(e.key for e in KNOWN)}")


def allowed(line: str, notebooks: set[str] | None = None) -> Known | None:
    """The entry that allows ``line`` (a warning, a log or stderr line), or None. With ``notebooks``, only an
    entry explained by one of them counts (a notebook may show what it, or an earlier one, explains)."""
    import re

    if not isinstance(line, str):
        raise TypeError(f"line must be a str (a warning, log or stderr line), got {type(line).__name__}.")
    if notebooks is not None and (isinstance(notebooks, str) or not all(isinstance(n, str) for n in notebooks)):
        raise TypeError("notebooks must be a set of notebook names, e.g. {'00_environment'}, or None.")

    for entry in KNOWN:
        if notebooks is not None and entry.notebook not in notebooks:
            continue
        if re.search(entry.pattern, line):
            return entry
    return None


class _DropMessage(logging.Filter):
    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment  # a regular expression, matched at the start of the message

    def filter(self, record: logging.LogRecord) -> bool:
        import re

        return re.match(self.fragment, record.getMessage()) is None


def _marker_filter(target: int) -> tuple[int, Any]:
    """A pipe whose lines are forwarded to file descriptor ``target``, the profiler's markers dropped:
    ``(write end, forwarder)``, the forwarder having a ``join(timeout)``. Each line is forwarded as soon as it is
    complete. Where ``grep`` exists the forwarder is a separate process, so what this process wrote just before
    it was killed (a native crash's last words, a line without its newline) still reaches ``target``: a thread
    of this process would die with it and lose what it had not forwarded yet."""
    import re
    import shutil
    import subprocess
    import threading

    pattern = known("profiler-usdt").pattern
    read_end, write_end = os.pipe()
    grep = shutil.which("grep")
    if grep is not None:
        proc = subprocess.Popen(
            [grep, "--line-buffered", "-v", "-E", "^" + pattern], stdin=read_end, stdout=target, stderr=target
        )
        os.close(read_end)  # the child holds it now
        return write_end, _ProcessJoin(proc)
    marker = re.compile(pattern.encode())

    def forward() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                kept = b"".join(line + b"\n" for line in lines if not marker.match(line))
                if kept:
                    os.write(target, kept)
            if pending and not marker.match(pending):
                os.write(target, pending)

    reader = threading.Thread(target=forward, name="stderr-filter", daemon=True)
    reader.start()
    return write_end, reader


class _ProcessJoin:
    """A forwarding process with a thread's ``join(timeout)``: wait for it to see the pipe's end and exit."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # a child process still holds the pipe: leave the filter running
            pass


_PERSISTENT_FILTER: list[int] = []  # the saved stderr, once filter_profiler_markers() has run


def filter_profiler_markers() -> None:
    """From now on, for the rest of the process, drop the profiler's start/stop marker lines from native stderr
    (item 9 above); every other line passes through as it is written. Idempotent. At a normal exit the lines
    still in the pipe are forwarded before the process ends (a daemon thread would otherwise be cut off)."""
    if _PERSISTENT_FILTER:
        return
    import atexit

    sys.stderr.flush()
    saved = os.dup(2)
    write_end, reader = _marker_filter(saved)
    os.dup2(write_end, 2)
    os.close(write_end)  # fd 2 is now the pipe's only writer
    _PERSISTENT_FILTER.append(saved)

    def drain() -> None:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last writer (unless a child process inherited it): the reader
        reader.join(timeout=1.0)  # sees its end, forwards the rest and stops; a child still holding it costs 1 s

    atexit.register(drain)


@contextlib.contextmanager
def profiler_markers_silenced() -> Iterator[None]:
    """Drop the profiler's ``USDT: … profiler_start/stop`` lines that native code writes to stderr inside the
    block (see 9 above); every other line written there is passed on as it arrives (a thread reads file
    descriptor 2 through a pipe), so a process that dies inside the block has still shown what it wrote."""
    if _PERSISTENT_FILTER:  # already filtered for the whole process
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    write_end, reader = _marker_filter(saved)
    os.dup2(write_end, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(write_end)  # the pipe's last writer: the reader sees its end, forwards the rest and stops
        reader.join(timeout=10)
        os.close(saved)


def quiet_onnxruntime() -> None:
    """Raise ONNX Runtime's log severity to errors-only on a machine without a CUDA GPU (see 4 above)."""
    if torch.cuda.is_available() or importlib.util.find_spec("onnxruntime") is None:
        return
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)


def install() -> None:
    """Install the filters for :data:`KNOWN`. Idempotent: calling it again re-adds only what a caller (e.g.
    pytest, which restores the warning filters after each test) has removed."""
    for entry in KNOWN:
        if entry.kind == "log":
            logger = logging.getLogger(entry.logger)
            if not any(isinstance(f, _DropMessage) and f.fragment == entry.pattern for f in logger.filters):
                logger.addFilter(_DropMessage(entry.pattern))
        elif entry.kind == "warning":
            warnings.filterwarnings("ignore", message=entry.pattern)
    if not torch.cuda.is_available():
        # kineto-no-gpu: read when the profiler first starts, so setting it here (before any profiling) is enough
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        quiet_onnxruntime()  # ort-cuda-fallback
