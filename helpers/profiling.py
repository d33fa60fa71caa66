"""Profiler traces as data: start the profiler quietly (:func:`quiet_profile`, :func:`quiet_step`), record a few
steps, load the Chrome trace into pandas, and ask it questions (the top ops, the syncs in a loop, the device's
idle gaps, the dtypes an op received).

The Chrome-trace format (what ``prof.export_chrome_trace`` and ``tensorboard_trace_handler`` write) is a JSON
object with a ``traceEvents`` list; complete events have a name, a category (``cpu_op``, ``user_annotation``
for ``record_function`` labels, ``kernel`` and ``gpu_memcpy`` on a GPU, ``cuda_runtime`` for the CPU side of
CUDA calls), a start ``ts`` and a duration ``dur`` in microseconds, and ``args`` (input shapes and types with
``record_shapes=True``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .checks import check_callable, check_int
from .device import DeviceLike, choose_device, sync
from .noise import profiler_markers_silenced
from .paths import atomic_path, check_file_name, output_subdir

#: the op every read-back of a value to Python goes through (.item(), bool(t), int(t)), once per read-back
READ_BACK = "aten::_local_scalar_dense"
#: CUDA runtime calls that make the CPU wait for the GPU
CUDA_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
#: both: each is a point where the CPU stops until the device has caught up (on a GPU, one .item() is a
#: read-back and a CUDA wait)
SYNC_OPS = (READ_BACK, *CUDA_WAITS)


def traces_dir() -> Path:
    return output_subdir("traces")


@contextlib.contextmanager
def quiet_profile(**kwargs: object) -> Iterator[object]:
    """``torch.profiler.profile(**kwargs)``, started and stopped without the marker lines the profiler prints
    on both (see ``helpers.noise``, item 8): the course's one way of starting the profiler.

    ``with quiet_profile(activities=[ProfilerActivity.CPU]) as prof: ...`` as ``with profile(...) as prof``."""
    from torch.profiler import profile

    prof = profile(**kwargs)
    with profiler_markers_silenced():
        prof.start()
    try:
        yield prof
    finally:
        with profiler_markers_silenced():
            prof.stop()


def quiet_step(prof: Any) -> None:
    """``prof.step()`` without the marker lines the profiler prints when a schedule starts or stops it."""
    with profiler_markers_silenced():
        prof.step()


def record_trace(
    fn: Callable[[], Any],
    name: str,
    steps: int = 3,
    warmup: int = 1,
    device: DeviceLike = None,
    record_shapes: bool = True,
    profile_memory: bool = False,
    with_stack: bool = False,
) -> tuple[Any, Path]:
    """Profile ``fn()`` with ``schedule(wait=0, warmup, active=steps)`` (one ``prof.step()`` per call), export the
    Chrome trace to ``<outputs>/traces/<name>.json`` and return ``(profiler, path)``."""
    from torch.profiler import ProfilerActivity, schedule

    check_callable("fn", fn, hint="record_trace() needs a function of no arguments, e.g. lambda: loop(images)")
    check_int("steps", steps, hint="pass how many calls to record, e.g. 3")
    check_int("warmup", warmup, minimum=0, hint="pass how many calls run before recording, e.g. 1")
    dev = choose_device(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    path = traces_dir() / f"{check_file_name('name', name)}.json"
    with quiet_profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
    ) as prof:
        for _ in range(warmup + steps):
            fn()
            sync(dev)
            quiet_step(prof)
    with atomic_path(path) as tmp:  # a trace viewer never opens half a trace
        prof.export_chrome_trace(str(tmp))
    return prof, path


#: the columns :func:`load_trace` gives a trace; every reader below needs them
TRACE_COLUMNS = ("name", "cat", "ts", "dur", "end", "tid", "args")


def _trace(df: Any, *needed: str, name: str = "df") -> Any:
    """``df`` if it is a trace table with the ``needed`` columns (:func:`load_trace` gives them all), else one line
    saying what to pass."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame) or not set(needed) <= set(df.columns):
        raise ValueError(f"{name} must be a trace table from profiling.load_trace(path) (columns {TRACE_COLUMNS}).")
    return df


def noncontiguous_inputs(df: Any, op: str) -> int:
    """How many calls of ``op`` got a first input that is not contiguous (needs ``record_shapes=True``)."""
    df = _trace(df, "name", "args")
    import torch

    count = 0
    for args in df[df["name"] == op]["args"]:
        dims, strides = args.get("Input Dims", []), args.get("Input Strides", [])
        if not (dims and strides and dims[0] and strides[0]):
            continue
        contiguous = torch.empty(dims[0], device="meta").stride()  # row-major strides of that shape
        count += tuple(strides[0]) != contiguous
    return count


def load_trace(path: str | os.PathLike[str]) -> Any:
    """A Chrome trace as a DataFrame of complete events: name, cat, ts, dur (µs), end, tid, args."""
    import pandas as pd

    if not isinstance(path, (str, os.PathLike)) or not Path(path).is_file():
        raise FileNotFoundError(f"no trace at {path!r}: pass the path record_trace returned (a .json file).")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{Path(path).name} is not a whole Chrome trace ({exc}): record it again.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{Path(path).name} is JSON but not a Chrome trace (no traceEvents): record it again.")
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    if not events:
        raise ValueError(f"{path} has no complete events: was anything recorded while the profiler was active?")
    df = pd.DataFrame(
        {
            "name": [e.get("name", "") for e in events],
            "cat": [e.get("cat", "") for e in events],
            "ts": [float(e.get("ts", 0)) for e in events],
            "dur": [float(e.get("dur", 0)) for e in events],
            "tid": [e.get("tid") for e in events],
            "args": [e.get("args", {}) for e in events],
        }
    )
    df["end"] = df["ts"] + df["dur"]
    return df.sort_values("ts").reset_index(drop=True)


def within(df: Any, label: str, cat: str = "user_annotation") -> Any:
    """The events that ran inside the ``record_function(label)`` ranges (the label's rows excluded); with
    ``cat="cpu_op"``, inside every call of the op named ``label`` (what an op ran on its own behalf)."""
    df = _trace(df, "cat", "name", "ts", "end")
    own = (df["cat"] == cat) & (df["name"] == label)
    ranges = df[own][["ts", "end"]].to_numpy()
    if len(ranges) == 0:
        return df.iloc[0:0]
    mask = sum(((df["ts"] >= s) & (df["end"] <= e)) for s, e in ranges).astype(bool)
    return df[mask & ~own]


def conv_relayouts(df: Any, op: str = "aten::conv2d") -> Any:
    """The copies each call of ``op`` made inside itself (``aten::contiguous``) because its input and its weights
    were in different memory formats: oneDNN and cuDNN pick one format for both, so one of them is re-laid out on
    every call. Usually the weights (a ``channels_last`` input on an NCHW model); with bf16 on an AMX CPU, oneDNN
    returns ``channels_last`` activations, and each convolution of an NCHW model copies its *input* back. The
    rows' ``Input Dims`` say which. In fp32: none with an NCHW input on an NCHW model, or both ``channels_last``."""
    inner = within(df, op, cat="cpu_op")
    return inner[inner["name"] == "aten::contiguous"]


#: The backend ops a CPU or GPU convolution lands in: which one ran says which path ATen chose.
CONV_BACKENDS = (
    "aten::mkldnn_convolution",
    "aten::_slow_conv2d_forward",
    "aten::cudnn_convolution",
    "aten::miopen_convolution",
    "aten::_nnpack_spatial_convolution",
)


def conv_backends(df: Any) -> Any:
    """Calls and time (µs) per convolution backend op in a trace: e.g. ``aten::_slow_conv2d_forward`` (ATen's
    native path, which it picks for an fp32 batch-1 convolution with a kernel of 3×3 or less and an input of at
    most 20,480 elements) against ``aten::mkldnn_convolution`` (oneDNN)."""
    df = _trace(df, "name", "dur")
    ops = df[df["name"].isin(CONV_BACKENDS)]
    return ops.groupby("name")["dur"].agg(["count", "sum"]).rename(columns={"sum": "total µs"})


def top_ops(df: Any, n: int = 10) -> Any:
    """CPU ops by total time (inclusive, µs), with their call counts."""
    check_int("n", n, hint="how many ops to list, e.g. 10")
    df = _trace(df, "cat", "name", "dur")
    ops = df[df["cat"] == "cpu_op"]
    table = ops.groupby("name")["dur"].agg(["count", "sum"]).rename(columns={"sum": "total µs"})
    return table.sort_values("total µs", ascending=False).head(n)


def sync_calls(df: Any) -> Any:
    """The events that read a value back to Python or make the CPU wait for the GPU (see SYNC_OPS)."""
    df = _trace(df, "name")
    return df[df["name"].isin(SYNC_OPS)]


def read_backs(df: Any) -> int:
    """How many values were read back to Python (one per .item(), bool(tensor), …)."""
    df = _trace(df, "name")
    return int((df["name"] == READ_BACK).sum())


def device_gaps(df: Any, min_gap_us: float = 1.0) -> Any:
    """Idle gaps on the GPU between consecutive kernels/copies (µs): a pandas Series, empty without a GPU."""
    df = _trace(df, "cat", "ts", "end")
    import pandas as pd

    work = df[df["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"])].sort_values("ts")
    if len(work) < 2:
        return pd.Series(dtype=float)
    busy_until = work["end"].cummax().shift(1)
    gaps = (work["ts"] - busy_until).dropna()
    return gaps[gaps >= min_gap_us]


def kernel_time(df: Any, ops: Any) -> float:
    """The device time (µs) of the GPU kernels launched from inside ``ops`` (rows of a trace from
    :func:`load_trace`, e.g. every ``aten::conv2d``): each launch (a ``cuda_runtime``/``cuda_driver`` event inside an
    op's range, on its thread) is matched to its kernel by the trace's ``correlation`` id. On a GPU this, not the
    ops' own (CPU) duration, is what the device spent on them: the CPU side is only the launch. 0.0 on a CPU trace."""
    df = _trace(df, "cat", "ts", "end", "tid", "args")
    ops = _trace(ops, "ts", "end", "tid", name="ops")
    import numpy as np

    launches = df[df["cat"].isin(["cuda_runtime", "cuda_driver"])]
    if launches.empty or ops.empty:
        return 0.0
    inside = np.zeros(len(launches), dtype=bool)
    for ts, end, tid in ops[["ts", "end", "tid"]].itertuples(index=False):
        inside |= ((launches["ts"] >= ts) & (launches["end"] <= end) & (launches["tid"] == tid)).to_numpy()
    ids = {a.get("correlation") for a in launches[inside]["args"]} - {None}
    kernels = df[(df["cat"] == "kernel") & df["args"].map(lambda a: a.get("correlation") in ids)]
    return float(kernels["dur"].sum())


def input_types(df: Any, op: str) -> set[str]:
    """The input dtypes recorded for ``op`` (needs ``record_shapes=True``), e.g. {'float', 'c10::BFloat16'}."""
    df = _trace(df, "name", "args")
    types: set[str] = set()
    for args in df[df["name"] == op]["args"]:
        types.update(t for t in args.get("Input type", []) if t)
    return types
