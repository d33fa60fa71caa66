"""Shared helpers for the GPU inference optimization course.

One concept per module, each function in one home (imports run one way: ``tests/test_imports.py``):
``device`` (choose, sync, report, CPU features, a busy machine), ``fp32`` (fp32 means fp32: the TF32 switches),
``timing`` (Measurement, the time-budgeted benchmark, interleaved rounds, the one sample planner, probing a slow
case), ``verdict`` (the one judge of every comparison, ``time_together`` and its Comparison, tables, ``settle``: noise
stops a decision), ``roofline``
(this machine's limits, measured once and stored), ``opcount`` (the ops, FLOPs and bytes of one eager call),
``doctor`` (which regime a model is in), ``fusion`` (kernels and generated code, eager vs compiled), ``onnxrt``
(ONNX export, ONNX Runtime sessions, int8), ``energy`` (joules per call from NVML or RAPL), ``pipeline``
(prefetchers: a loader thread, a CUDA side stream), ``profiling`` (start the profiler, traces as data),
``harness`` (compare variants: speed, size, memory, accuracy), ``memory`` (peak memory), ``oom`` (surviving
out-of-memory: free, largest fitting batch, back-off, a simulated cap), ``batching`` (knee, latency target,
serving simulation), ``coldstart`` (fresh replica processes), ``serving`` (load generation against a server),
``llm`` (a small GPT decoder, KV caches, greedy generation), ``llm_serving`` (an LLM engine's schedulers),
``results`` (record and load), ``plotting`` (one style), ``data`` and ``models`` (the shipped data, the course
models, accuracy), ``modes`` (quick/full), ``paths`` (the outputs folder, atomic writes), ``checks`` (argument
checks, one message shape), ``noise`` (the known-harmless warnings, handled in one place; installed on import).
"""

from __future__ import annotations

import os as _os

from . import noise as _noise
from .paths import ensure_dir as _ensure_dir
from .paths import outputs_dir as _outputs_dir

_noise.install()
# torch.compile's caches go to the ignored outputs folder, so a re-run compiles in seconds, not tens of seconds.
# Importing never fails on the environment: where that folder cannot be made, torch keeps its own cache folder
# and the first result the course tries to write says, in one line, to set COURSE_OUTPUTS.
# Triton's own cache (a hand-written @triton.jit kernel, notebook 04) goes there too, not to ~/.triton.
try:
    for _variable, _folder in (("TORCHINDUCTOR_CACHE_DIR", "inductor-cache"), ("TRITON_CACHE_DIR", "triton-cache")):
        if _variable not in _os.environ:
            _os.environ[_variable] = str(_ensure_dir(_outputs_dir() / _folder))
except OSError as _exc:
    import warnings as _warnings

    _warnings.warn(f"{_exc} (torch.compile and Triton keep their default cache folders meanwhile)", stacklevel=2)

from .device import choose_device, environment_report, machine_id, sync  # noqa: E402
from .fp32 import exact_fp32  # noqa: E402
from .modes import course_mode, pick, set_mode  # noqa: E402
from .results import Recorder, load_reference, load_results, record  # noqa: E402
from .timing import Measurement, benchmark, format_seconds, interleaved, timed_call  # noqa: E402
from .verdict import Comparison, Verdict, compare, settle, time_together, verdict, winner  # noqa: E402

__all__ = [
    "Comparison",
    "Measurement",
    "Recorder",
    "Verdict",
    "benchmark",
    "choose_device",
    "compare",
    "course_mode",
    "environment_report",
    "exact_fp32",
    "format_seconds",
    "interleaved",
    "load_reference",
    "load_results",
    "machine_id",
    "pick",
    "record",
    "set_mode",
    "settle",
    "sync",
    "time_together",
    "timed_call",
    "verdict",
    "winner",
]
