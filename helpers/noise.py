"""The one place where known-harmless library noise is handled (installed on ``import helpers``).

The course's rule is that outputs carry no unexplained warnings, and that nothing is silenced wholesale.
Each filter below matches one exact message, and each says why it is harmless. Anything else still shows.

1. ``torch.utils.cpp_extension`` logs *"No CUDA runtime is found, using CUDA_HOME=…"* when Inductor or
   ``torch.utils.benchmark`` import it on a machine with the CUDA toolkit but no GPU. Nothing is compiled
   for CUDA on such a machine, so the path it found is never used.
2. ``DataLoader(pin_memory=True)`` warns *"'pin_memory' argument is set as true but no accelerator is
   found"* on a CPU-only machine. Notebooks use the same loader code on CPU and GPU; on the CPU pinning is
   simply skipped, which is what we want.
3. The profiler's Kineto library prints *"ERROR … gpuGetDeviceCount failed with code 35"* when there is no
   GPU driver. ``KINETO_LOG_LEVEL=5`` hides its log lines; it is set only when no CUDA GPU is present
   (and only if the user has not set it), so real errors on a GPU machine still show.
4. ONNX Runtime (the ``onnxruntime-gpu`` build) logs two red lines when a session asks for the CUDA
   provider on a machine without a GPU and falls back to the CPU. On such a machine its default log
   severity is raised to errors-only (3); on a GPU machine its warnings are left alone.
5. torchao 0.18 registers an Enum with ``torch.utils._pytree.register_constant``, which torch 2.14 logs as
   deprecated (*"… is an Enum subclass and is now natively supported by torch.compile …"*) at import. It is
   torchao's internal call, nothing a learner can change, and it works.
6. Compiling a torchao-quantized model warns *"Int8Tensor does not implement _stable_hash_for_caching"*:
   AOTAutograd's cache skips that tensor subclass, so the graph is recompiled instead of being loaded from
   the cache. Correctness is unaffected; the first call's time (reported apart) shows the cost.
7. On a GPU with TF32 tensor cores, some torch versions warn at compile time that *"TensorFloat32 tensor cores
   for float32 matrix multiplication available but not enabled"*. The course keeps fp32 exact on purpose when
   it compares formats, and measures TF32 explicitly (notebook 02); the advice is noted there.
8. Starting and stopping ``torch.profiler`` prints *"USDT:… SyncActivityProfilerHandler.cpp… profiler_start"*
   (and ``profiler_stop``) from C++ straight to the process's stderr, on every start and stop; no log level
   or variable turns it off. :func:`profiler_markers_silenced` captures file descriptor 2 around the start
   and the stop only (never around the profiled code), drops those two lines and writes every other line
   back, so a real profiler error still shows. The profiler itself is started elsewhere:
   :func:`helpers.profiling.quiet_profile` and :func:`helpers.profiling.quiet_step` wrap its start, stop and
   steps in this filter.
9. Inductor's GEMM autotuner (``max-autotune``) in some torch versions calls the deprecated
   ``tensor.storage()`` itself, which warns *"TypedStorage is deprecated"*. It is torch's own internal call,
   attributed to ``torch._inductor``. (torch emits this warning once per process, so after it a learner's own
   ``.storage()`` call would not warn either; the course's code never calls it.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Iterator

import torch

_CUDA_HOME = "No CUDA runtime is found"


class _DropMessage(logging.Filter):
    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.getMessage()


@contextlib.contextmanager
def profiler_markers_silenced() -> Iterator[None]:
    """Drop the profiler's ``USDT: … profiler_start/stop`` lines that native code writes to stderr inside the
    block (see 8 above); every other line written there is passed on. Wrap a profiler's start and stop."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().splitlines(keepends=True)
                if not (line.startswith(b"USDT:") and b"profiler_st" in line)
            ]
            if kept:
                os.write(2, b"".join(kept))


def quiet_onnxruntime() -> None:
    """Raise ONNX Runtime's log severity to errors-only on a machine without a CUDA GPU (see 4 above)."""
    if torch.cuda.is_available() or importlib.util.find_spec("onnxruntime") is None:
        return
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)


def install() -> None:
    """Install the filters above. Idempotent: calling it again re-adds only what a caller (e.g. pytest,
    which restores the warning filters after each test) has removed."""
    # 1. one logger, one message
    logger = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _DropMessage) for f in logger.filters):
        logger.addFilter(_DropMessage(_CUDA_HOME))
    # 5. one logger, one message
    pytree = logging.getLogger("torch.utils._pytree")
    if not any(isinstance(f, _DropMessage) for f in pytree.filters):
        pytree.addFilter(_DropMessage("is an Enum subclass and is now natively supported by torch.compile"))
    # 6.
    warnings.filterwarnings("ignore", message=r"\w+ does not implement _stable_hash_for_caching", category=UserWarning)
    # 7.
    warnings.filterwarnings(
        "ignore",
        message=r"TensorFloat32 tensor cores for float32 matrix multiplication "
        r"available but not enabled",
        category=UserWarning,
    )
    # 9. one warning, from one package
    warnings.filterwarnings(
        "ignore", message=r"TypedStorage is deprecated", category=UserWarning, module=r"torch\._inductor"
    )
    # 2. one warning, by its exact text
    warnings.filterwarnings(
        "ignore",
        message=r"'pin_memory' argument is set as true but no accelerator is found",
        category=UserWarning,
    )
    if not torch.cuda.is_available():
        # 3. read when the profiler first starts, so setting it here (before any profiling) is enough
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        # 4.
        quiet_onnxruntime()
