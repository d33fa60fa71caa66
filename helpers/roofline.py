"""This machine's limits, measured: peak matmul FLOP/s per dtype (and int8 OP/s), memory bandwidth,
host→device bandwidth, per-op dispatch/launch latency; and where a workload sits against them (the roofline).

A kernel that does ``F`` floating-point operations and moves ``B`` bytes has arithmetic intensity
``I = F / B``. It cannot run faster than ``min(peak_flops, I × bandwidth)``: below the *ridge point*
``peak_flops / bandwidth`` it is memory-bound, above it compute-bound. Tiny kernels are bound by neither:
they are overhead-bound (launch or dispatch latency).

**What a roof is here.** An *achievable* peak measured with PyTorch on this machine, not a datasheet number:
the compute roof of a dtype is the best of several square matmul sizes (each size probed first, so a dtype
this hardware emulates in software is not run at a size that would take minutes), the memory roof the best of
large copies beyond the caches. Like STREAM, a roof is computed from the *fastest* sample (what the machine
has shown it can do); workloads placed against it are timed by their median. Other code can beat a roof
(a library's convolution, data that stays in a cache): :meth:`Roofline.place` then clamps the placement and
says why in one generated line, never as an achievement.

**One roofline per machine.** :func:`measure_roofline` stores what it measured, with each roof's spread,
in ``<outputs>/roofline/<machine_id>.json`` (atomically); :func:`get_roofline` reuses it and re-measures
only when it is missing, was measured with other settings (torch version, threads, a quick-mode roof in
full mode), is noisy, or ``refresh=True``. A re-measurement replaces a stored roof when it is clean and the
stored one was noisy, or when both are clean and they disagree beyond their spread (:func:`choose_roof`): a roof
is a measurement, not a record high that one lucky or noisy reading would fix for good.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .checks import check_callable, check_choice, check_instance, check_int, check_ints, check_number
from .device import DeviceLike, _slug, choose_device, cpu_features, last_level_cache_bytes, machine_id
from .fp32 import FLAGS, exact_fp32, fp32_flags, set_fp32_flags
from .modes import course_mode, pick
from .paths import outputs_dir, write_atomic
from .timing import MIN_ROUNDS, MIN_SAMPLES, Measurement, benchmark, fit_to_budget, format_seconds, timed_call

_DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "int8": torch.int8,
}

#: Where notebook 00 records the roofline, and the names of its records: every reader uses these.
ROOF_NOTEBOOK = "00_environment"
ROOF_EXPERIMENT = "roofline"
BANDWIDTH_VARIANT = "memory bandwidth"
DISPATCH_VARIANT = "dispatch latency"
#: Version of the stored-roofline file; a file of another version is re-measured.
STORE_VERSION = 2
#: A stored roof that was noisy is re-measured at most this many times (a busy machine stays busy).
MAX_REMEASURES = 2
#: Each sample of a compute roof lasts at least this long (several calls of a short kernel): a sub-millisecond
#: kernel timed one call at a time jitters by more than the 10 % that flags a measurement noisy.
ROOF_SAMPLE_TIME = 5e-3
#: A placement below this fraction of its roof (and not overhead-bound) gets ``advice``: where the time went.
FAR_BELOW_ROOF = 0.3


def matmul_variant(dtype: str) -> str:
    """The record variant of a matmul roof: ``'matmul fp32'``."""
    check_choice("dtype", dtype, list(_DTYPES), hint="pass a dtype name the roofline measures")
    return f"matmul {dtype}"


def h2d_variant(kind: str) -> str:
    """The record variant of a host→device roof: ``'host to device pinned'``."""
    check_choice("kind", kind, ("pinned", "pageable"), hint="pass the kind of host memory copied")
    return f"host to device {kind}"


def default_dtypes(device: DeviceLike = None) -> list[str]:
    """The matmul dtypes worth a roof: fp32, bf16 and int8 on a CPU; also tf32 and fp16 on a GPU."""
    if choose_device(device).type == "cuda":
        return ["fp32", "tf32", "bf16", "fp16", "int8"]
    return ["fp32", "bf16", "int8"]


def default_sizes(device: DeviceLike = None) -> list[int]:
    """Square matmul sizes whose best is the compute roof (each is probed before it is timed)."""
    if choose_device(device).type == "cpu":
        return pick([256, 512, 1024], [256, 512, 1024, 2048])
    return pick([1024, 2048, 4096], [2048, 4096, 8192])


@contextmanager
def _matmul_precision(dtype_name: str) -> Iterator[None]:
    """tf32 is fp32 storage with TensorFloat-32 tensor-core math; every other dtype is timed with TF32 off (the
    convolution switch too: cuDNN's default for fp32 convolutions is TF32, which would make the fp32 roof a TF32
    one on a GPU). Both kinds of switch (legacy and per-op, :mod:`helpers.fp32`) are set so they agree, and put
    back as they were afterwards."""
    saved = fp32_flags()
    if dtype_name == "tf32":
        set_fp32_flags({"legacy cublas": True, "legacy cudnn": True, **dict.fromkeys(FLAGS, "tf32")})
    else:
        exact_fp32()
    try:
        yield
    finally:
        set_fp32_flags(saved)


#: The two layouts a float matmul is timed in: ``x @ w.T`` (what an nn.Linear runs, ``F.linear``) and row-major
#: ``a @ b``. Libraries pick different kernels for them: on a CPU without bf16/fp16 units ``a @ b`` can fall into
#: a generic kernel many times slower (notebook 02 shows it), while in fp32 it is often the faster one.
LAYOUTS = ("x @ w.T", "a @ b")


def _matmul_call(dtype: str, n: int, dev: torch.device, layout: str = LAYOUTS[0]) -> Callable[[], Any]:
    if dtype == "int8":  # int8 × int8 → int32, the product int8 inference runs on (torchao, ORT's U8S8)
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8, device=dev)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8, device=dev)
        return lambda: torch._int_mm(a, b)
    a = torch.randn(n, n, device=dev).to(_DTYPES[dtype])
    w = torch.randn(n, n, device=dev).to(_DTYPES[dtype])
    if layout == LAYOUTS[0]:
        return lambda: torch.nn.functional.linear(a, w)
    return lambda: torch.mm(a, w)


def matmul_flops(
    dtype: str = "fp32",
    device: DeviceLike = None,
    n: int | None = None,
    repeats: int | None = None,
    budget: float | None | str = "default",
    layout: str = LAYOUTS[0],
) -> tuple[float, Measurement]:
    """Achieved FLOP/s (int8: OP/s) of one ``n×n`` matmul (``2·n³`` operations) in ``layout`` (one of
    :data:`LAYOUTS`; int8 is ``torch._int_mm``), from its fastest sample, and the timing behind it.
    ``n`` defaults to the largest of :func:`default_sizes`."""
    check_choice("dtype", dtype, sorted(_DTYPES), "pick one of those names.")
    check_choice("layout", layout, LAYOUTS, "pick one of the two layouts.")
    dev = choose_device(device)
    n = default_sizes(dev)[-1] if n is None else check_int("n", n, 1, hint="pass a positive matrix size.")
    repeats = repeats if repeats is not None else pick(5, 15)
    call = _matmul_call(dtype, n, dev, layout)
    name = f"matmul {n}×{n} {dtype}" + (f" ({layout})" if dtype != "int8" else "")
    with _matmul_precision(dtype), torch.inference_mode():
        m = benchmark(
            call, label=name, device=dev, repeats=repeats, warmup=2, budget=budget, min_sample_time=ROOF_SAMPLE_TIME
        )
    return 2 * n**3 / m.min, m


def _conv_case(dtype: str, dev: torch.device) -> tuple[Callable[[], Any], float, str]:
    """A 3×3 convolution in ``dtype``, channels-last (the layout conv libraries are fastest in): the call, its
    FLOPs (direct algorithm) and a label. oneDNN / cuDNN convolutions can beat the best square GEMM."""
    n, c, hw = (pick(2, 8), 64, pick(28, 56)) if dev.type == "cpu" else (pick(8, 32), 256, 56)
    x = torch.randn(n, c, hw, hw, device=dev).to(_DTYPES[dtype]).contiguous(memory_format=torch.channels_last)
    w = torch.randn(c, c, 3, 3, device=dev).to(_DTYPES[dtype]).contiguous(memory_format=torch.channels_last)
    return (
        (lambda: torch.nn.functional.conv2d(x, w, padding=1)),
        2.0 * n * c * hw * hw * c * 9,
        f"conv 3×3 {c}→{c} ch, {n}×{hw}×{hw}",
    )


def _roof_sizes(dtype: str, dev: torch.device, sizes: list[int] | None) -> list[int]:
    """:func:`matmul_roof`'s checked sizes (default: :func:`default_sizes`)."""
    check_choice("dtype", dtype, sorted(_DTYPES), "pick one of those names.")
    if sizes is not None:
        check_ints("sizes", sizes, hint="square matmul sizes to probe, e.g. [256, 512, 1024]")
    sizes = list(sizes or default_sizes(dev))
    for n in sizes:
        check_int("size", n, 1, hint="pass positive matrix sizes, e.g. [256, 512, 1024].")
    if dtype == "int8" and dev.type == "cuda" and any(n <= 16 or n % 8 for n in sizes):
        raise ValueError(
            f"sizes={sizes} is not allowed for int8 on a GPU: torch._int_mm needs sizes above 16 that "
            "are multiples of 8."
        )
    return sizes


def matmul_roof(
    dtype: str = "fp32",
    device: DeviceLike = None,
    sizes: list[int] | None = None,
    budget: float | None = None,
    conv: bool = True,
) -> dict[str, Any]:
    """The compute roof of ``dtype``: the best FLOP/s over square matmuls of ``sizes`` (default
    :func:`default_sizes`), in the faster of the two :data:`LAYOUTS` (both are probed), and, for fp32 and bf16
    (fp16 too on a GPU) with ``conv``, a 3×3 convolution (the
    course's CNNs run on oneDNN / cuDNN convolutions, which can beat the best GEMM). Sizes are probed from the
    smallest with one call each (:func:`helpers.timing.fit_to_budget`) and only those whose call fits
    ``budget / MIN_SAMPLES`` are timed: fp16 on a CPU without fp16 units is never run at a size that would
    take a minute. Returns ``{"flops", "measurement", "size" (the best matmul's n), "source" (the label of the
    best kernel), "predicted" ({size: seconds per call} of the sizes not run)}``; ``flops`` is NaN when this
    device cannot run the dtype (int8 matmul on MPS)."""
    dev = choose_device(device)
    budget = pick(0.5, 1.5) if budget is None else check_number("budget", budget, positive=True)
    sizes = _roof_sizes(dtype, dev, sizes)
    none = {"flops": math.nan, "measurement": None, "size": None, "source": None, "predicted": {}}
    probes = {}
    try:
        with _matmul_precision(dtype), torch.inference_mode():
            for layout in LAYOUTS[:1] if dtype == "int8" else LAYOUTS:
                probes[layout] = fit_to_budget(
                    lambda n, lay=layout: _matmul_call(dtype, n, dev, lay),
                    sizes,
                    limit=budget / MIN_SAMPLES,
                    device=dev,
                )
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, NotImplementedError):  # this backend has no such matmul
        return none

    def rate(layout: str) -> float:  # the probe's FLOP/s at the largest size this layout ran
        n = max(probes[layout].timed)
        return 2 * n**3 / probes[layout].timed[n]

    layout = max(probes, key=rate)  # only the faster layout is timed at every size
    probe = probes[layout]
    best = dict(none, predicted=probe.predicted)
    for n in [s for s, t in probe.timed.items() if t <= probe.limit]:
        flops, m = matmul_flops(dtype, dev, n=n, budget=budget, layout=layout)
        if not flops <= best["flops"]:  # also replaces the initial NaN
            best.update(
                flops=flops,
                measurement=m,
                size=n,
                source=f"matmul {n}×{n}" + (f", {layout}" if dtype != "int8" else ""),
            )
    if best["measurement"] is None:  # even the smallest size was too slow for the budget: its probe call is the roof
        n, seconds = next(iter(probe.timed.items()))
        best.update(
            flops=2 * n**3 / seconds,
            size=n,
            source=f"matmul {n}×{n} (one probe call)",
            measurement=Measurement(
                samples=(seconds,),
                label=f"matmul {n}×{n} {dtype} (probe)",
                device=str(dev),
                budget=budget,
                budget_limited=True,
            ),
        )
    if conv and (dtype in ("fp32", "bf16") or (dtype == "fp16" and dev.type == "cuda")):
        call, flops, label = _conv_case(dtype, dev)
        with _matmul_precision(dtype), torch.inference_mode():
            first = fit_to_budget(lambda _: call, [1], limit=budget / MIN_SAMPLES, device=dev)
            if first.size is not None:
                m = benchmark(
                    call,
                    label=f"{label} {dtype}",
                    device=dev,
                    warmup=2,
                    budget=budget,
                    min_sample_time=ROOF_SAMPLE_TIME,
                )
                if flops / m.min > best["flops"]:
                    best.update(flops=flops / m.min, measurement=m, source=label)
    return best


#: The number formats the speed table sets beside fp32, and the kernels it times them in.
SPEED_DTYPES = ("bf16", "fp16", "int8")
SPEED_KERNELS = ("matmul", "conv")


def _speed_cases(dev: torch.device) -> tuple[dict[str, tuple[str, str, Callable[[], Any]]], dict[str, str]]:
    """The candidates of the speed table: ``{label: (kernel, dtype, call)}`` and each kernel's description. The
    matmul is ``x @ w.T`` (what ``nn.Linear`` runs; int8 ``torch._int_mm``), the convolution a channels-last 3×3
    (what the course's CNNs run); int8 has no convolution in PyTorch's eager CPU kernels."""
    n = pick(256, 512) if dev.type == "cpu" else pick(2048, 4096)
    cases: dict[str, tuple[str, str, Callable[[], Any]]] = {}
    for dtype in ("fp32", *SPEED_DTYPES):
        cases[f"matmul {dtype}"] = ("matmul", dtype, _matmul_call(dtype, n, dev))
    conv_label = ""
    for dtype in ("fp32", "bf16", "fp16"):
        call, _flops, conv_label = _conv_case(dtype, dev)
        cases[f"conv {dtype}"] = ("conv", dtype, call)
    return cases, {"matmul": f"matmul {n}×{n} (x @ w.T; int8: torch._int_mm)", "conv": conv_label}


def _speed_session(dev: torch.device, budget: float) -> dict[str, Any]:
    """One session of the speed table (see :func:`dtype_speeds`): the verdict of each dtype against fp32, per kernel."""
    from .verdict import time_together

    cases, kernels = _speed_cases(dev)
    limit = budget / MIN_ROUNDS / 2  # one call longer than this would not fit the rounds of a session
    probe: dict[str, float] = {}
    speed: dict[str, dict[str, Any]] = {k: {} for k in SPEED_KERNELS}
    with _matmul_precision("fp32"), torch.inference_mode():
        for label, (kernel, dtype, call) in list(cases.items()):
            try:
                cold = timed_call(call, device=dev)[0]  # a dtype emulated in software can take seconds a call
                probe[label] = cold if cold > limit else timed_call(call, device=dev)[0]
            except (RuntimeError, NotImplementedError):  # no such kernel on this device
                cases.pop(label)
                speed[kernel][dtype] = {"outcome": "no kernel", "ratio": math.nan, "how": "PyTorch has no kernel"}
        slow = [label for label in cases if probe[label] > limit and not label.endswith("fp32")]
        for label in slow:  # too slow for a session's rounds: a few single calls, alternated with fp32's
            kernel, dtype, call = cases.pop(label)
            speed[kernel][dtype] = _single_calls(call, cases[f"{kernel} fp32"][2], probe[label], dev)
        cmp = time_together(
            {label: call for label, (_k, _d, call) in cases.items()},
            baseline="matmul fp32",
            device=dev,
            budget=budget,
            min_sample_time=ROOF_SAMPLE_TIME,
        )
    for label, (kernel, dtype, _call) in cases.items():
        if dtype == "fp32":
            continue
        v = cmp.verdict(label, against=f"{kernel} fp32")
        speed[kernel][dtype] = {"outcome": v.outcome, "ratio": v.ratio, "low": v.low, "high": v.high}
        speed[kernel][dtype]["how"] = "interleaved with fp32"
    return {"speed": speed, "kernels": kernels, "comparison": cmp}


#: Single calls a dtype too slow for a session's rounds gets, alternated with fp32's (the fewest for which the
#: verdict's Mann–Whitney interval reaches 95 %), and the longest one call may take for them to be made at all.
SLOW_CALLS, SLOW_CALL_LIMIT = 4, 2.0


def _single_calls(call: Callable[[], Any], fp32: Callable[[], Any], probe: float, dev: torch.device) -> dict[str, Any]:
    """A dtype emulated in software (fp16 without fp16 units): :data:`SLOW_CALLS` single calls alternated with the
    fp32 kernel's, judged by the verdict as independent calls; a call beyond :data:`SLOW_CALL_LIMIT` seconds is
    not repeated, and its one call leaves the verdict undecided."""
    from .verdict import verdict

    how = f"single calls of about {format_seconds(probe)}, alternated with fp32's: too slow for a session's rounds"
    if probe > SLOW_CALL_LIMIT:
        return {"outcome": "undecided", "ratio": math.nan, "low": math.nan, "high": math.nan,
                "how": f"one call of {format_seconds(probe)}: too slow to repeat"}  # fmt: skip
    slow_t, fp32_t = [], []
    for _ in range(SLOW_CALLS):
        slow_t.append(timed_call(call, device=dev)[0])
        fp32_t.append(timed_call(fp32, device=dev)[0])
    v = verdict(slow_t, fp32_t, independent="single calls, alternated", min_samples=SLOW_CALLS)
    return {"outcome": v.outcome, "ratio": v.ratio, "low": v.low, "high": v.high, "how": how}


def dtype_speeds(device: DeviceLike = None, budget: float | None = None) -> dict[str, Any]:
    """What each number format costs on this machine, **measured**: bf16, fp16 and int8 matmuls and bf16/fp16
    3×3 convolutions against fp32, all timed together in one session (:func:`helpers.verdict.time_together`;
    a dtype whose one call is too slow for the session's rounds, fp16 without fp16 units, is judged from that
    call). A CPU's feature flags say which units it has, not whether PyTorch's kernels for a shape use them:
    this table is what every sentence about a dtype on this machine is generated from. Noise stops it
    (:func:`helpers.verdict.settle`): a busy session is measured once more, then left undecided.

    Returns ``{"speed": {kernel: {dtype: {"outcome", "ratio" (× fp32's speed: above 1 faster), "low", "high",
    "how"}}}, "kernels": {kernel: what was timed}, "undecided": reason or None}``."""
    from .verdict import busy_reason, settle

    dev = choose_device(device)
    budget = pick(2.0, 4.0) if budget is None else check_number("budget", budget, positive=True)
    settled = settle(
        lambda: _speed_session(dev, budget),
        what="what each number format costs here",
        flagged=lambda r: busy_reason(r["comparison"]),
    )
    result = {"speed": settled.value["speed"], "kernels": settled.value["kernels"], "undecided": settled.reason}
    if settled.reason:
        for entries in result["speed"].values():
            for entry in entries.values():
                if entry["outcome"] in ("faster", "slower", "within noise") and "interleaved" in entry["how"]:
                    entry["outcome"] = "undecided"
    return result


def flags_clause(dtype: str, faster: bool, features: dict[str, Any] | None = None) -> str:
    """What a CPU's flags said about ``dtype`` beside what was measured (``faster``: measured faster than fp32),
    as a clause: agreement, or the disagreement and what to learn from it (units are not kernels)."""
    from .device import cpu_dtype_support

    has, why = cpu_dtype_support(features)[dtype]
    units = why.removeprefix("hardware units: ")
    if has and faster:
        return (
            f"faster than fp32, as this CPU's {units} allow (the flags say the units are there; the speed is measured)"
        )
    if has:
        return (
            f"this CPU advertises {units}, yet PyTorch's {dtype} kernels for these shapes are not faster than fp32 "
            "here: a CPU's units are not a library's kernels, so measure, do not infer from the flags"
        )
    if has is False and faster:
        return f"faster although the CPU advertises no {dtype} units ({why})"
    if has is False:
        return f"as its flags predict: {why}"
    return "this platform does not say which units it has; the measurement decides"


def flags_against(verdict: Any, dtype: str, device: DeviceLike = None) -> str:
    """One sentence for a notebook's own comparison of ``dtype`` against fp32 (a :class:`helpers.verdict.Verdict`
    of this run): its verdict, and on a CPU what the CPU's flags said beside it (:func:`flags_clause`)."""
    check_choice("dtype", dtype, SPEED_DTYPES, hint="one of the dtypes the speed table measures")
    if choose_device(device).type != "cpu":
        return f"{verdict.candidate}: {verdict.phrase()} (this session)."
    return f"{verdict.candidate}: {verdict.phrase()} (this session); {flags_clause(dtype, verdict.faster)}."


def speed_table(rf: Roofline) -> Any:
    """The measured speed of each number format against fp32 (:func:`dtype_speeds`, stored with ``rf``) as a
    table, one row per dtype: what a CPU advertises beside it, each kernel's speed as a multiple of fp32's with its
    verdict. :meth:`Roofline.dtype_line` says the same in a sentence."""
    import pandas as pd

    check_instance("rf", rf, Roofline, hint="pass this machine's roofline, e.g. roofline.get_roofline(device)")
    from .device import cpu_dtype_support

    advertised = cpu_dtype_support(rf.cpu_features or None) if rf.device.startswith("cpu") else {}
    rows = {}
    for dtype in SPEED_DTYPES:
        row: dict[str, Any] = {}
        if advertised:
            has, why = advertised[dtype]
            row["CPU advertises"] = (
                why.removeprefix("hardware units: ") if has else ("no units" if has is False else "?")
            )
        for kernel in SPEED_KERNELS:
            entry = rf.speed(dtype, kernel)
            if entry is None:
                row[f"{kernel} × fp32"] = "—"
            elif entry["outcome"] == "no kernel" or not math.isfinite(entry["ratio"]):
                row[f"{kernel} × fp32"] = "no kernel" if entry["outcome"] == "no kernel" else "undecided (one call)"
            else:
                row[f"{kernel} × fp32"] = f"{entry['ratio']:.2f}× ({entry['outcome']})"
        rows[dtype] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def memory_bandwidth(
    device: DeviceLike = None,
    nbytes: int | None = None,
    repeats: int | None = None,
    budget: float | None | str = "default",
    flush_cache: bool = False,
) -> tuple[float, Measurement]:
    """Achieved main-memory bandwidth (bytes/s) of a large copy: it reads ``nbytes`` and writes ``nbytes``.

    The default buffer is far larger than the caches (at least 256 MiB, and twice the reported last-level
    cache up to 1 GiB) so the copy really goes to DRAM / HBM; a smaller one measures a cache instead, unless
    ``flush_cache=True`` (the cache is overwritten before each sample, as ``triton.testing.do_bench`` does).
    """
    dev = choose_device(device)
    if nbytes is None:
        nbytes = beyond_cache_bytes(dev, pick(256, 512) * 2**20) if dev.type == "cpu" else pick(256, 1024) * 2**20
    check_int("nbytes", nbytes, maximum=2**40, hint="pass the buffer size in bytes, e.g. 512 * 2**20")
    if nbytes < 2**20:
        raise ValueError(f"nbytes={nbytes} is too small to measure bandwidth; pass at least 1 MiB (2**20).")
    repeats = repeats if repeats is not None else pick(5, 20)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    m = benchmark(
        dst.copy_,
        src,
        label=f"copy {nbytes / 2**20:.0f} MiB",
        device=dev,
        repeats=repeats,
        warmup=2,
        budget=budget,
        flush_cache=flush_cache,
    )
    return 2 * src.numel() * 4 / m.min, m


def beyond_cache_bytes(device: DeviceLike = None, minimum: int = 256 * 2**20, cap: int = 2**30) -> int:
    """A buffer size that lives in main memory, not in a cache: at least ``minimum``, and on a CPU twice the
    OS-reported last-level cache, up to ``cap`` (a VM may report the host's whole cache)."""
    check_int("minimum", minimum, maximum=2**44, hint="pass a size in bytes, e.g. 256 * 2**20")
    check_int("cap", cap, minimum=minimum, maximum=2**44, hint="pass a size in bytes at least `minimum`")
    if choose_device(device).type != "cpu":
        return minimum
    return max(minimum, min(2 * (last_level_cache_bytes() or 0), cap))


#: A copy counts as served by a cache when it runs this many times faster than the largest copy (main memory).
CACHE_GAIN = 1.3


def default_cache_sweep() -> list[int]:
    """Buffer sizes (bytes) of the bandwidth sweep whose knee is the effective last-level cache (a copy touches
    twice its buffer: the source and the destination)."""
    return [s * 2**20 for s in pick([4, 16, 64, 256], [2, 4, 8, 16, 32, 64, 128, 256, 512])]


def cache_knee(buffer_bytes: list[int], bandwidths: list[float], main_memory: float | None = None) -> dict[str, Any]:
    """The effective last-level cache, from a sweep of copies of growing buffers (each touches twice its buffer):
    the largest copy still served at least :data:`CACHE_GAIN` × faster than main memory, and the next size, the
    first at main memory's speed. Main memory's speed is the better of the sweep's largest copy and
    ``main_memory`` (the memory roof: the best a large copy has shown here): one slow draw of the largest copy
    (another tenant on the memory bus) would otherwise make every copy above it look cache-served. Returns
    ``{"fast_up_to": touched bytes or None (no copy ran faster than main memory), "slow_from": touched bytes or
    None (even the largest ran from a cache: the sweep stopped short), "gain": the fast copy's speed over main
    memory's}``."""
    if len(buffer_bytes) != len(bandwidths) or len(buffer_bytes) < 2:
        raise ValueError("cache_knee needs two or more buffer sizes, each with its measured bandwidth (bytes/s).")
    order = sorted(range(len(buffer_bytes)), key=lambda i: buffer_bytes[i])
    sizes, bws = [buffer_bytes[i] for i in order], [bandwidths[i] for i in order]
    plateau = max(bws[-1], main_memory or 0.0)
    fast = [i for i, bw in enumerate(bws) if bw >= CACHE_GAIN * plateau]
    if not fast:
        return {"fast_up_to": None, "slow_from": 2 * sizes[0], "gain": max(bws) / plateau}
    last = fast[-1]
    if last == len(sizes) - 1:  # only with a slower roof than the largest copy: the sweep stopped short
        return {"fast_up_to": 2 * sizes[last], "slow_from": None, "gain": bws[last] / plateau}
    return {"fast_up_to": 2 * sizes[last], "slow_from": 2 * sizes[last + 1], "gain": bws[last] / plateau}


def measure_cache(
    device: DeviceLike = None, buffer_bytes: list[int] | None = None, main_memory: float | None = None
) -> dict[str, Any]:
    """The bandwidth sweep and its knee (:func:`cache_knee`), under the course's noise rule
    (:func:`helpers.verdict.settle`: a busy sweep is measured once more, then left undecided). Returns the knee
    with ``"sizes"`` (buffer bytes), ``"bytes_per_s"`` and ``"undecided"`` (None, or why)."""
    from .verdict import settle

    dev = choose_device(device)
    sizes = list(buffer_bytes or default_cache_sweep())

    def sweep() -> list[tuple[float, Measurement]]:
        return [memory_bandwidth(dev, nbytes=n, repeats=pick(3, 5), budget=pick(0.2, 0.5)) for n in sizes]

    settled = settle(sweep, what="the effective cache", flagged=lambda runs: _knee_noise(sizes, runs, main_memory))
    bws = [bw for bw, _m in settled.value]
    knee = cache_knee(sizes, bws, main_memory)
    return {**knee, "sizes": sizes, "bytes_per_s": bws, "undecided": settled.reason}


def reconsider_cache(rf: Roofline, buffer_bytes: list[int], measurements: list[Any], store: bool = True) -> str:
    """A finer bandwidth sweep of this run (notebook 00's): its knee becomes ``rf``'s effective cache, stored for
    later notebooks unless ``store=False``, unless the sweep was disturbed (busy, or mostly noisy: then the stored
    knee stands). ``measurements`` are :func:`memory_bandwidth`'s ``(bytes/s, Measurement)`` pairs. Returns one
    sentence (:meth:`Roofline.cache_line`)."""
    check_instance("rf", rf, Roofline, hint="pass the roofline, e.g. roofline.get_roofline(device)")
    if len(buffer_bytes) != len(measurements):
        raise ValueError("pass one (bytes/s, Measurement) pair per buffer size, as memory_bandwidth returns them.")
    if not rf.device.startswith("cpu"):  # a GPU's curve rises with size (launches), its L2 is what the driver says
        return rf.cache_line()
    reason = _knee_noise(list(buffer_bytes), measurements, rf.bandwidth)
    if reason:
        return f"the sweep was disturbed ({reason}), so it does not move the stored cache: " + rf.cache_line()
    bws = [bw for bw, _m in measurements]
    knee = cache_knee(list(buffer_bytes), bws, rf.bandwidth)
    rf.cache_sweep = {**knee, "sizes": list(buffer_bytes), "bytes_per_s": bws}
    rf.cache_sweep["undecided"] = None
    rf.cache_bytes = _effective_cache(rf)
    if store:
        save_roofline(rf)
    return rf.cache_line()


def _knee_noise(buffer_bytes: list[int], runs: list[Any], main_memory: float | None = None) -> str | None:
    """Why a sweep cannot place the knee, or None: the machine was busy during any copy, or one of the two copies
    the knee lies between (or the largest, main memory's speed) is noisy. A small copy's own jitter elsewhere in the
    sweep moves nothing the knee rests on."""
    from .verdict import busy_reason, noise_reason

    measurements = [m for _bw, m in runs]
    if reason := busy_reason(measurements):
        return reason
    knee = cache_knee(buffer_bytes, [bw for bw, _m in runs], main_memory)
    touched = {knee["fast_up_to"], knee["slow_from"], 2 * max(buffer_bytes)} - {None}
    bracket = [m for n, m in zip(buffer_bytes, measurements, strict=True) if 2 * n in touched]
    return noise_reason(bracket)


def _effective_cache(rf: Roofline) -> int | None:
    sweep = rf.cache_sweep
    if not rf.device.startswith("cpu"):
        return rf.cache_bytes  # a GPU's L2, as the driver reports it
    if not sweep or sweep.get("undecided"):
        return None  # not measured, or undecided: unknown (the OS's figure is shown beside it, unverified)
    return sweep.get("fast_up_to") or 0


def cache_bytes(device: DeviceLike = None) -> int | None:
    """The last cache before main memory: the GPU's L2, or the CPU's last level as the OS reports it."""
    dev = choose_device(device)
    if dev.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)) or None
    return last_level_cache_bytes() if dev.type == "cpu" else None


def h2d_bandwidth(
    nbytes: int | None = None, pinned: bool = True, repeats: int | None = None, device: DeviceLike = "cuda"
) -> tuple[float, Measurement]:
    """Host→device copy bandwidth (bytes/s), from pinned or pageable host memory. Needs a CUDA GPU."""
    if not torch.cuda.is_available():
        raise ValueError(
            "host→device bandwidth needs a CUDA GPU and this machine has none: on a CPU the data is already "
            "where the compute is. Use load_reference(...) to see a GPU's result."
        )
    dev = choose_device(device)
    if dev.type != "cuda":
        raise ValueError(f"host→device bandwidth is measured into a CUDA device, not {dev}; use device='cuda'.")
    nbytes = nbytes if nbytes is not None else pick(64, 256) * 2**20
    repeats = repeats if repeats is not None else pick(5, 20)
    host = torch.empty(nbytes // 4, dtype=torch.float32).uniform_()
    if pinned:
        host = host.pin_memory()
    dst = torch.empty(host.shape, dtype=host.dtype, device=dev)
    kind = "pinned" if pinned else "pageable"
    m = benchmark(dst.copy_, host, label=f"H2D {nbytes / 2**20:.0f} MiB {kind}", device=dev, repeats=repeats)
    return host.numel() * 4 / m.min, m


def dispatch_latency(device: DeviceLike = None, repeats: int | None = None) -> tuple[float, Measurement]:
    """Seconds per tiny op (``torch.add`` of two one-element tensors, allocating its output): framework dispatch
    on a CPU, kernel-launch latency on a GPU. No real work is done, so it is the cost of a typical small op — not
    a strict floor: an op that writes into a preallocated output (``out=``) skips the allocation and can cost less."""
    dev = choose_device(device)
    a, b = torch.zeros(1, device=dev), torch.ones(1, device=dev)
    repeats = repeats if repeats is not None else pick(10, 30)
    with torch.inference_mode():
        m = benchmark(
            torch.add,
            a,
            b,
            label="tiny op (1-element add)",
            device=dev,
            repeats=repeats,
            min_sample_time=pick(2e-3, 10e-3),
        )
    return m.median, m


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte moved."""
    check_number("flops", flops, minimum=0, hint="pass the FLOPs of the work, e.g. 2 * m * n * k")
    check_number("nbytes", nbytes, positive=True, hint="pass the bytes the work moves (a positive number)")
    return flops / nbytes


def matmul_cost(m: int, n: int, k: int, bytes_per_element: int = 4) -> tuple[float, float]:
    """(FLOPs, bytes) of ``(m×k) @ (k×n)``: reads both inputs and writes the output once."""
    for name, value in (("m", m), ("n", n), ("k", k), ("bytes_per_element", bytes_per_element)):
        check_int(name, value, maximum=2**40, hint="pass a matrix size (a positive integer)")
    return 2.0 * m * n * k, float(bytes_per_element * (m * k + k * n + m * n))


def elementwise_cost(
    numel: int, flops_per_element: int = 1, inputs: int = 1, bytes_per_element: int = 4
) -> tuple[float, float]:
    """(FLOPs, bytes) of a pointwise op on ``numel`` elements reading ``inputs`` tensors, writing one."""
    check_int("numel", numel, maximum=2**50, hint="pass the number of elements, e.g. x.numel()")
    check_int("flops_per_element", flops_per_element, minimum=0)
    check_int("inputs", inputs)
    check_int("bytes_per_element", bytes_per_element)
    return float(flops_per_element * numel), float(bytes_per_element * numel * (inputs + 1))


@dataclass
class Roofline:
    """Measured limits of one device. Bandwidth in bytes/s, peaks in FLOP/s (int8: OP/s), latency in seconds.

    ``spread`` is each limit's relative IQR (IQR / median of the measurement behind it), ``noisy`` the limits
    whose measurement was noisy (or budget-limited), ``sizes`` the best matmul size of each dtype, ``sources``
    the kernel each compute roof came from (a matmul or a convolution), ``cache_bytes`` the
    last cache before main memory (for explaining placements above a roof), ``origin`` where this object
    came from (``"measured"`` or ``"stored"``)."""

    device: str
    machine_id: str
    peak_flops: dict[str, float]
    bandwidth: float
    dispatch_latency: float
    h2d_bandwidth: dict[str, float] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list, repr=False)
    spread: dict[str, float] = field(default_factory=dict)
    noisy: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    cache_bytes: int | None = None
    mode: str = "full"
    torch: str = ""
    threads: int = 0
    cpu_features: dict[str, Any] = field(default_factory=dict)
    measured_at: str = ""
    remeasures: int = 0
    origin: str = "measured"
    choices: dict[str, str] = field(default_factory=dict)
    dtype_speed: dict[str, Any] = field(default_factory=dict)
    reported_cache_bytes: int | None = None
    cache_sweep: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a zero or negative limit would divide by zero or place every point wrongly (NaN: not measured yet)
        if not isinstance(self.peak_flops, dict) or not all(isinstance(k, str) for k in self.peak_flops):
            raise ValueError("peak_flops must be a dict of dtype name → FLOP/s, e.g. {'fp32': 1e11}.")
        limits = [("bandwidth", self.bandwidth), ("dispatch_latency", self.dispatch_latency)]
        limits += [(f"peak_flops[{k!r}]", v) for k, v in self.peak_flops.items()]
        for name, value in limits:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or value <= 0 or value == math.inf:
                raise ValueError(
                    f"Roofline {name}={value!r}: a measured limit must be a positive number; measure the roofline "
                    "again (roofline.get_roofline) or pass the measured value."
                )

    def _peak(self, dtype: str) -> float:
        if dtype not in self.peak_flops or not math.isfinite(self.peak_flops[dtype]):
            raise ValueError(f"no peak measured for {dtype!r}; measured: {sorted(self.peak_flops)}.")
        return self.peak_flops[dtype]

    def speed(self, dtype: str, kernel: str = "matmul") -> dict[str, Any] | None:
        """The measured speed of ``dtype`` against fp32 in ``kernel`` (:func:`dtype_speeds`): ``{"outcome",
        "ratio", "low", "high", "how"}``, or None where it was not measured."""
        return self.dtype_speed.get("speed", {}).get(kernel, {}).get(dtype)

    def pays(self, dtype: str, than: str = "fp32") -> bool:
        """Whether ``dtype`` is faster than fp32 here: from the measured speed table (:func:`dtype_speeds`, a
        matmul or a convolution measured *faster*), where it was measured against fp32; else from the roofs (this
        ``dtype``'s compute roof above ``than``'s beyond both spreads). A CPU that advertises bf16 units can still
        run PyTorch's bf16 kernels slower than fp32: that is what this measures. False when unmeasured."""
        check_choice("dtype", dtype, _DTYPES, hint="a dtype the roofline measures")
        check_choice("than", than, _DTYPES, hint="a dtype the roofline measures")
        if than == "fp32" and self.dtype_speed.get("speed"):
            return any((self.speed(dtype, k) or {}).get("outcome") == "faster" for k in SPEED_KERNELS)
        a, b = self.peak_flops.get(dtype, math.nan), self.peak_flops.get(than, math.nan)
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return a * (1 - self.spread.get(dtype, 0.0)) > b * (1 + self.spread.get(than, 0.0))

    def faster_dtypes(self) -> list[str]:
        """The number formats measured faster than fp32 here (in a matmul or a convolution)."""
        return [d for d in SPEED_DTYPES if self.pays(d)]

    def dtype_line(self, dtype: str) -> str:
        """One generated sentence on what ``dtype`` costs here: what the CPU advertises (a GPU: its tensor cores),
        beside what was measured, and what to read from a disagreement."""
        check_choice("dtype", dtype, SPEED_DTYPES, hint="one of the dtypes the speed table measures")
        measured = []
        for kernel in SPEED_KERNELS:
            entry = self.speed(dtype, kernel)
            if entry is None:
                continue
            if entry["outcome"] == "no kernel" or not math.isfinite(entry["ratio"]):
                measured.append(f"{kernel}: {entry['how']}")
                continue
            word = {"faster": "faster", "slower": "slower", "within noise": "within noise"}
            verdict = word.get(entry["outcome"], "undecided")
            extra = "" if "interleaved" in entry.get("how", "") else f"; {entry['how']}"
            measured.append(f"{kernel} {entry['ratio']:.2f}× fp32's speed ({verdict}{extra})")
        if not measured:
            return f"{dtype}: not measured on this machine yet (roofline.dtype_speeds measures it)."
        said = "; ".join(measured)
        if not self.device.startswith("cpu"):
            return f"{dtype}: PyTorch's {said}."
        return f"{dtype}: PyTorch's {said}: {flags_clause(dtype, self.pays(dtype), self.cpu_features or None)}."

    def mfu(self, achieved_flops: float, dtype: str = "fp32") -> float | None:
        """Model FLOP/s utilisation: ``achieved_flops`` as a share of this machine's ``dtype`` compute roof.
        None where that roof is unmeasured, or where the work went faster than it (a library's own kernels can
        beat the kernels the roof was measured with): that roof then does not bound it, and no share is claimed."""
        check_choice("dtype", dtype, _DTYPES, hint="a dtype the roofline measures")
        check_number("achieved_flops", achieved_flops, positive=True, hint="FLOPs per image times images per second")
        peak = self.peak_flops.get(dtype, math.nan)
        if not math.isfinite(peak):
            return None
        share = achieved_flops / peak
        return share if share <= 1.0 else None

    def _bandwidth(self) -> float:
        """The bandwidth, checked again where it is used (a field can be changed after the constructor)."""
        bw = self.bandwidth
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or bw <= 0 or bw == math.inf:  # NaN: unmeasured
            raise ValueError(f"this roofline's bandwidth is {bw!r}: a measured bandwidth is a positive number.")
        return bw

    def ridge_point(self, dtype: str = "fp32") -> float:
        """Arithmetic intensity (FLOP/byte) where memory-bound turns into compute-bound."""
        return self._peak(dtype) / self._bandwidth()

    def attainable(self, intensity: float, dtype: str = "fp32") -> float:
        """The roofline: the best FLOP/s a kernel of this intensity can reach here."""
        intensity = check_number("intensity", intensity, minimum=0.0, hint="FLOPs per byte moved, ≥ 0")
        return min(self._peak(dtype), intensity * self._bandwidth())

    def place(
        self, flops: float, nbytes: float, seconds: float, dtype: str = "fp32", busy: bool = False
    ) -> dict[str, Any]:
        """Where a measured workload sits: its intensity, achieved FLOP/s and bytes/s, the bound that applies,
        the fraction of that bound it reached (``fraction_of_bound``, raw, and ``shown_fraction``, clamped to 1
        for display), and, when it is above its roof, ``explanation``: one generated line saying why. ``busy``
        (the measurement's ``.busy``): the machine was busy while it was timed, and ``advice`` leads with that."""
        check_number("seconds", seconds, positive=True, hint="use a Measurement's median")
        intensity = arithmetic_intensity(flops, nbytes)
        bound = "memory" if intensity < self.ridge_point(dtype) else "compute"
        attainable = self.attainable(intensity, dtype)
        achieved = flops / seconds
        fraction = achieved / attainable
        placed = {
            "intensity_flop_per_byte": intensity,
            "achieved_flops": achieved,
            "achieved_bytes_per_s": nbytes / seconds,
            "bound": bound,
            "attainable_flops": attainable,
            "fraction_of_bound": fraction,
            "shown_fraction": min(fraction, 1.0),
            "above_roof": fraction > 1.0,
            # Short *and* far from its roof: the fixed cost of launching it dominates. A short op that already
            # reaches half its roof (a large add on a GPU that streams 4 TB/s) is limited by that roof instead.
            "overhead_bound": seconds < 10 * self.dispatch_latency and fraction < 0.5,
        }
        placed["explanation"] = self.explain_above_roof(placed, nbytes, dtype) if fraction > 1.0 else None
        placed["advice"] = _advice(placed)
        if busy and placed["advice"]:
            placed["advice"] = (
                "the machine was busy while this was timed, so read the rest only after a re-run on a quiet machine: "
                + placed["advice"]
            )
        return placed

    def explain_above_roof(self, placed: dict[str, Any], nbytes: float, dtype: str = "fp32") -> str:
        """Why a placement is above its roof, for its own bound and device (one line)."""
        if not isinstance(placed, dict) or not {"fraction_of_bound", "bound"} <= set(placed):
            raise ValueError("placed must be what rf.place(flops, nbytes, seconds) returned.")
        pct = f"{placed['fraction_of_bound']:.0%}"
        gpu = self.device.startswith("cuda")
        cpu = self.device.startswith("cpu")
        cache, memory = ("L2 cache", "HBM") if gpu else ("CPU caches", "DRAM") if cpu else ("caches", "memory")
        if placed["bound"] == "memory":
            if self.cache_bytes and nbytes <= self.cache_bytes:
                why = (
                    f"its {_mib(nbytes)} of traffic fits in the {cache} ({_mib(self.cache_bytes)}), so it is "
                    f"served from there, faster than the {memory} roof"
                )
            else:
                why = (
                    "the memory roof is a large copy (it counts one read and one write per byte copied"
                    + (
                        "; a CPU's write-allocate also reads each line it writes, so a copy really moves half again "
                        "what it counts and an add, with two reads per write, a third more: an add can reach about "
                        "1.1× the copy's counted rate"
                        if cpu
                        else ""
                    )
                    + "), so a read-heavy kernel can stream faster than the copy that set the roof"
                )
        else:
            source = self.sources.get(dtype) or (f"matmul {self.sizes[dtype]}²" if dtype in self.sizes else None)
            roof = f"the {dtype} roof is this machine's best measured kernel" + (f" ({source})" if source else "")
            if gpu:
                cause = (
                    "TF32 or other tensor-core math enabled for 'fp32' work, or a FLOP count that assumes the "
                    "direct algorithm where the library used Winograd or FFT convolutions"
                )
            else:
                cause = (
                    "another library's kernel (oneDNN, MLAS, a Winograd convolution) or another shape that "
                    "runs faster, or a FLOP count that assumes the direct algorithm"
                )
            why = f"{roof}; beyond it: {cause}. A compute roof is not a cache effect"
        if (placed["bound"] == "memory" and "bandwidth" in self.noisy) or (
            placed["bound"] == "compute" and dtype in self.noisy
        ):
            why += "; the roof's own measurement was noisy"
        return f"at {pct} of its {placed['bound']} roof (drawn at 100 % on the plot): {why}."

    def fits_in_cache(self, nbytes: float) -> bool | None:
        """Whether a working set of ``nbytes`` is served by the last cache before main memory, by the knee this
        machine measured (:func:`cache_knee`): True up to the largest copy that ran faster than main memory, False
        from the first that did not, None in between (it straddles the knee). Without a decided knee: False beyond
        the cache the OS reports (an upper bound), None below it."""
        sweep = self.cache_sweep
        if self.device.startswith("cpu"):
            if not sweep or sweep.get("undecided"):
                # no decided knee: only the OS's figure is known, and it is an upper bound (a VM's is often the
                # host's whole cache): beyond it, not in cache; below it, unknown
                reported = self.reported_cache_bytes
                return False if reported and nbytes > reported else None
            fast, slow = sweep.get("fast_up_to"), sweep.get("slow_from")
            if fast and nbytes <= fast:
                return True
            if slow is not None and nbytes >= slow:
                return False
            return None
        return None if not self.cache_bytes else nbytes <= self.cache_bytes

    def cache_line(self) -> str:
        """One generated sentence: the effective last-level cache this machine measured (the knee of its
        bandwidth sweep), beside what the OS or driver reports."""
        reported = self.reported_cache_bytes
        os_says = f"the OS reports {_mib(reported)}" if reported else "the OS reports no cache size"
        if not self.device.startswith("cpu"):
            return f"the last cache before memory: {_mib(self.cache_bytes or 0)} of L2 (as the driver reports it)."
        sweep = self.cache_sweep
        if not sweep:
            return f"the effective cache is not measured yet (roofline.measure_cache); {os_says}, unverified."
        if sweep.get("undecided"):
            return f"the effective cache is undecided ({sweep['undecided']}); {os_says}, unverified."
        fast, slow, gain = sweep.get("fast_up_to"), sweep.get("slow_from"), sweep.get("gain", math.nan)
        if not fast:
            return (
                f"no copy of the sweep (from {_mib(slow or 0)} touched) ran {CACHE_GAIN:.1f}× faster than the "
                f"largest: no cache effect above that size here; {os_says}."
            )
        text = f"effective last-level cache: copies touching up to {_mib(fast)} ran {gain:.1f}× faster than main memory"
        text += f", from {_mib(slow)} at its speed (the knee of this machine's sweep)" if slow else ""
        if reported and slow and reported >= slow:
            return text + f"; {os_says}, more than this machine gets (in a VM, often the host's whole cache)."
        return text + f"; {os_says}."

    def is_noisy(self) -> bool:
        return bool(self.noisy)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("measurements")
        data["peak_flops"] = {k: (v if math.isfinite(v) else None) for k, v in self.peak_flops.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Roofline:
        """The inverse of :meth:`to_dict`; a field of the wrong type raises ``ValueError``."""
        if not isinstance(data, dict) or not isinstance(data.get("peak_flops"), dict):
            raise ValueError("a stored roofline is a dict with a peak_flops dict")
        known = {f for f in cls.__dataclass_fields__ if f != "measurements"}
        kwargs = {k: v for k, v in data.items() if k in known}
        try:
            kwargs["peak_flops"] = {
                str(k): (math.nan if v is None else float(v)) for k, v in data["peak_flops"].items()
            }
            for key in ("bandwidth", "dispatch_latency"):
                kwargs[key] = float(kwargs[key])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a stored roofline's limits must be numbers ({type(exc).__name__}: {exc}).") from None
        for key, kind in (
            ("h2d_bandwidth", dict),
            ("spread", dict),
            ("sizes", dict),
            ("sources", dict),
            ("choices", dict),
            ("cpu_features", dict),
            ("dtype_speed", dict),
            ("cache_sweep", dict),
            ("noisy", list),
            ("remeasures", int),
            ("threads", int),
            ("mode", str),
            ("torch", str),
        ):
            if key in kwargs and not isinstance(kwargs[key], kind):
                raise ValueError(f"a stored roofline's {key} must be a {kind.__name__}")
        return cls(**kwargs)

    def table(self) -> Any:
        import pandas as pd

        rows = [
            {
                "limit": f"compute {k}" + (f" ({self.sources[k]})" if self.sources.get(k) else ""),
                "value": v / 1e9,
                "unit": "GOP/s" if k == "int8" else "GFLOP/s",
                "spread (IQR/median)": self.spread.get(k),
            }
            for k, v in self.peak_flops.items()
        ]
        rows.append(
            {
                "limit": BANDWIDTH_VARIANT,
                "value": self.bandwidth / 1e9,
                "unit": "GB/s",
                "spread (IQR/median)": self.spread.get("bandwidth"),
            }
        )
        rows += [
            {"limit": f"host→device ({k})", "value": v / 1e9, "unit": "GB/s"} for k, v in self.h2d_bandwidth.items()
        ]
        rows.append(
            {
                "limit": "dispatch/launch latency",
                "value": self.dispatch_latency * 1e6,
                "unit": "µs/op",
                "spread (IQR/median)": self.spread.get("dispatch"),
            }
        )
        rows += [
            {"limit": f"ridge point {k}", "value": self.ridge_point(k), "unit": "FLOP/byte"}
            for k, v in self.peak_flops.items()
            if math.isfinite(v) and k != "int8"
        ]
        sheet = datasheet(self.machine_id)
        if sheet:  # the speed of light beside what this machine showed
            for row, key in zip(rows, [*self.peak_flops, "bandwidth"], strict=False):
                row["datasheet"] = sheet.get(key, math.nan) / 1e9
        return pd.DataFrame(rows).set_index("limit").round(3)

    def records(self) -> list[dict[str, Any]]:
        """The roofline as result records (``experiment``, ``variant``, ``dtype``, ``metrics``), with the
        course's names: pass each to a :class:`helpers.results.Recorder` (``rf.record(rec)`` does)."""
        out = [
            {
                "experiment": ROOF_EXPERIMENT,
                "variant": matmul_variant(k),
                "dtype": k,
                "metrics": {"flops": v, "spread": self.spread.get(k)},
            }
            for k, v in self.peak_flops.items()
            if math.isfinite(v)
        ]
        out.append(
            {
                "experiment": ROOF_EXPERIMENT,
                "variant": BANDWIDTH_VARIANT,
                "metrics": {"bytes_per_s": self.bandwidth, "spread": self.spread.get("bandwidth")},
            }
        )
        out.append(
            {
                "experiment": ROOF_EXPERIMENT,
                "variant": DISPATCH_VARIANT,
                "metrics": {"seconds": self.dispatch_latency, "spread": self.spread.get("dispatch")},
            }
        )
        out += [
            {"experiment": ROOF_EXPERIMENT, "variant": h2d_variant(k), "metrics": {"bytes_per_s": v}}
            for k, v in self.h2d_bandwidth.items()
        ]
        return out

    def record(self, recorder: Callable[..., Any]) -> None:
        """Record every roof with ``recorder`` (a :class:`helpers.results.Recorder`)."""
        check_callable("recorder", recorder, hint="pass a helpers.Recorder, e.g. helpers.Recorder('00_environment')")
        for r in self.records():
            recorder(**r)


def _advice(placed: dict[str, Any]) -> str | None:
    """One line on where the time went when a placement is far below its roof (``FAR_BELOW_ROOF``), or None."""
    pct = f"{placed['fraction_of_bound']:.0%}"
    if placed["overhead_bound"]:
        return (
            f"overhead-bound: at {pct} of its roof, its time is close to the fixed cost of dispatching one op; "
            "fewer, bigger ops would shorten it, more FLOP/s or bandwidth would not."
        )
    if placed["fraction_of_bound"] >= FAR_BELOW_ROOF:
        return None
    if placed["bound"] == "memory":
        return (
            f"at {pct} of the memory roof, far below it: the time went to something other than moving the "
            "counted bytes, most often a fresh output allocated on every call (on a CPU its pages are faulted "
            "in each time: pass out= a preallocated tensor), strided or gathered access, more work per byte "
            "than counted, or a busy machine (re-run it when the machine is quiet)."
        )
    return (
        f"at {pct} of the compute roof, far below it: the op is too small to fill this machine, its shape, "
        "layout or dtype has no fast kernel here, or the machine is busy."
    )


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def _spread(m: Measurement) -> float:
    return round(m.relative_iqr, 4)


#: Datasheet peaks of a few GPUs (dense, no sparsity): FLOP/s per dtype (fp32: the CUDA cores, since the course
#: runs fp32 without TF32; int8: OP/s) and memory bandwidth in bytes/s. From NVIDIA's product datasheets
#: (H100/H200 SXM, A100 SXM4, L4, T4). A measured roof above its datasheet figure is capped at it: a 3×3
#: convolution counted as direct can run as Winograd or FFT and do fewer FLOPs than counted.
DATASHEET: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67e12, "bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "int8": 1979e12, "bandwidth": 4.8e12},
    "H100 80GB HBM3": {
        "fp32": 67e12,
        "bf16": 989e12,
        "fp16": 989e12,
        "fp8": 1979e12,
        "int8": 1979e12,
        "bandwidth": 3.35e12,
    },
    "A100-SXM4-80GB": {"fp32": 19.5e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12, "bandwidth": 2.039e12},
    "L4": {"fp32": 30.3e12, "bf16": 121e12, "fp16": 121e12, "int8": 242e12, "bandwidth": 300e9},
    "T4": {"fp32": 8.1e12, "fp16": 65e12, "int8": 130e12, "bandwidth": 320e9},
}


def datasheet(machine: str) -> dict[str, float] | None:
    """The :data:`DATASHEET` entry of a machine id (``helpers.machine_id()``, e.g. ``'cuda-nvidia-h200'``), matched
    on the GPU's name, or None (a CPU, or a GPU not listed)."""
    if not isinstance(machine, str):
        raise TypeError(f"datasheet() needs a machine id such as 'cuda-nvidia-h200', got {type(machine).__name__}.")
    if not machine.startswith("cuda-"):
        return None
    # whole tokens of the slug: an L40S's id contains "l4" but is not an L4
    return next(
        (peaks for key, peaks in DATASHEET.items() if re.search(rf"(^|-){re.escape(_slug(key))}(-|$)", machine)), None
    )


def cap_at_datasheet(rf: Roofline, peaks: dict[str, float] | None) -> list[str]:
    """Cap each compute roof of ``rf`` above its datasheet peak at that peak (in place) and return one line per
    cap; ``rf.choices`` records it. Nothing happens without ``peaks``."""
    check_instance("rf", rf, Roofline, hint="pass a measured roofline")
    if peaks is not None and not isinstance(peaks, dict):
        raise TypeError(
            f"peaks must be a dict of dtype → datasheet FLOP/s (roofline.datasheet), or None; got {peaks!r}."
        )
    for name, limit in (peaks or {}).items():
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < math.inf:
            raise ValueError(f"peaks[{name!r}]={limit!r}: a datasheet peak is a positive number of FLOP/s.")
    lines = []
    for name, value in list(rf.peak_flops.items()):
        limit = (peaks or {}).get(name)
        if limit is None or not math.isfinite(value) or value <= limit:
            continue
        rf.peak_flops[name] = limit
        why = (
            f"capped at the datasheet's {limit / 1e12:,.1f} TFLOP/s (measured {value / 1e12:,.1f} from "
            f"{rf.sources.get(name, 'a matmul')}: a FLOP count above what the silicon can do)"
        )
        rf.choices[name] = why
        lines.append(f"roofline: {name}: {why}")
    return lines


def _measure(dev: torch.device, dtypes: list[str], parts: set[str]) -> Roofline:
    """Measure the compute roofs of ``dtypes`` and the ``parts`` among bandwidth, dispatch and h2d."""
    rf = Roofline(
        device=str(dev),
        machine_id=machine_id(dev),
        peak_flops={},
        bandwidth=math.nan,
        dispatch_latency=math.nan,
        cache_bytes=cache_bytes(dev),
        reported_cache_bytes=cache_bytes(dev),
        mode=course_mode(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        cpu_features=cpu_features() if dev.type == "cpu" else {},
        measured_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    for name in dtypes:
        check_choice("dtype", name, sorted(_DTYPES), "pick dtype names such as 'fp32', 'bf16', 'int8'.")
        roof = matmul_roof(name, dev)
        rf.peak_flops[name], m = roof["flops"], roof["measurement"]
        if m is not None:
            rf.measurements.append(m)
            rf.spread[name], rf.sizes[name], rf.sources[name] = _spread(m), roof["size"], roof["source"]
            rf.noisy += [name] if m.noisy or m.budget_limited or m.busy else []  # busy: measured under load
    for part, (value, m) in (
        ("bandwidth", memory_bandwidth(dev) if "bandwidth" in parts else (None, None)),
        ("dispatch", dispatch_latency(dev) if "dispatch" in parts else (None, None)),
    ):
        if m is None:
            continue
        rf.measurements.append(m)
        setattr(rf, "bandwidth" if part == "bandwidth" else "dispatch_latency", value)
        rf.spread[part] = _spread(m)
        rf.noisy += [part] if m.noisy or m.budget_limited or m.busy else []
    if "speed" in parts:
        rf.dtype_speed = dtype_speeds(dev)
    if "cache" in parts and dev.type == "cpu":
        rf.cache_sweep = measure_cache(dev, main_memory=rf.bandwidth or None)
        rf.cache_bytes = _effective_cache(rf)
    if dev.type == "cuda" and "h2d" in parts:
        for pinned in (True, False):
            rf.h2d_bandwidth["pinned" if pinned else "pageable"], m = h2d_bandwidth(pinned=pinned, device=dev)
            rf.measurements.append(m)
    return rf


def measure_roofline(device: DeviceLike = None, dtypes: list[str] | None = None, store: bool = True) -> Roofline:
    """Measure every limit above on ``device`` (sizes follow the course mode) and, with ``store``, save it
    for :func:`get_roofline`, merged with a compatible stored one by :func:`choose_roof` (``rf.choices`` says,
    for each limit, which value was kept and why, and one line per limit prints it)."""
    dev = choose_device(device)
    dtypes = _dtype_list(dtypes, dev)
    rf = _measure(dev, dtypes, {"bandwidth", "dispatch", "h2d", "speed", "cache"})
    for line in cap_at_datasheet(rf, datasheet(rf.machine_id)):
        print(line)
    if store:
        stored = load_roofline(dev)
        if stored is not None and _compatible(stored, dev, rf.mode):
            rf = _merge(stored, rf)
            rf.remeasures = 0 if not rf.noisy else stored.remeasures
            for name, choice in rf.choices.items():  # which value each roof now holds, and why
                print(f"roofline: {name}: kept {choice}")
        save_roofline(rf)
    return rf


def _dtype_list(dtypes: Any, dev: torch.device) -> list[str]:
    if dtypes is None:
        return default_dtypes(dev)
    if isinstance(dtypes, str) or not dtypes or not all(isinstance(d, str) for d in dtypes):
        raise ValueError(f"dtypes={dtypes!r} is not allowed: pass a list of names such as ['fp32', 'bf16'].")
    for name in dtypes:
        check_choice("dtype", name, sorted(_DTYPES), "pick dtype names such as 'fp32', 'bf16', 'int8'.")
    return list(dtypes)


def roofline_path(device: DeviceLike = None) -> Path:
    """Where this machine's stored roofline lives."""
    return outputs_dir() / "roofline" / f"{machine_id(device)}.json"


def reconsider_bandwidth(rf: Roofline, bandwidth: float, measurement: Measurement, store: bool = True) -> str:
    """Another measurement, in this run, of the memory roof's own quantity (a copy far beyond the caches, e.g. the
    largest of notebook 00's sweep), from its fastest sample as the roof is: the roof is what this machine has
    shown it can do, and other programs only slow a copy down, so the higher of the two stands. When it is the new
    one, ``rf`` is updated in place (value, spread, noise flag) and stored unless ``store=False``. (Across runs,
    :func:`choose_roof` decides instead: there a lower clean value can mean the machine changed.) Returns one
    sentence saying which value stands and why."""
    check_instance("rf", rf, Roofline, hint="pass the roofline, e.g. roofline.get_roofline(device)")
    check_number("bandwidth", bandwidth, positive=True, hint="pass bytes/s, e.g. memory_bandwidth(...)[0]")
    check_instance("measurement", measurement, Measurement, hint="pass memory_bandwidth(...)[1]")
    before = rf.bandwidth
    if math.isfinite(before) and bandwidth <= before:
        return (
            f"memory roof: {before / 1e9:,.1f} GB/s stands; {measurement.label} reached {bandwidth / 1e9:,.1f} GB/s "
            "(the roof is the best this machine has shown)"
        )
    noisy = measurement.noisy or measurement.busy
    rf.bandwidth = bandwidth
    rf.spread["bandwidth"] = measurement.iqr / measurement.median if measurement.median else math.inf
    rf.noisy = sorted({*rf.noisy} - {"bandwidth"} | ({"bandwidth"} if noisy else set()))
    rf.choices["bandwidth"] = f"raised by {measurement.label}, the best this machine has shown"
    if store:
        save_roofline(rf)
    return (
        f"memory roof: raised from {before / 1e9:,.1f} to {bandwidth / 1e9:,.1f} GB/s by {measurement.label} (the "
        "roof is the best this machine has shown)" + ("; stored for later notebooks" if store else "")
    )


def reconsider_compute(
    rf: Roofline, dtype: str, flops_per_s: float, measurement: Measurement, store: bool = True
) -> str:
    """Another kernel, in this run, that reached ``flops_per_s`` in ``dtype`` (from its fastest sample, as a roof
    is): the compute roof is the best this machine has shown, so the higher of the two stands, as in
    :func:`reconsider_bandwidth`. When it is the new one, ``rf`` is updated in place and stored unless
    ``store=False``. Returns one sentence saying which value stands and why."""
    check_instance("rf", rf, Roofline, hint="pass the roofline, e.g. roofline.get_roofline(device)")
    check_number("flops_per_s", flops_per_s, positive=True, hint="pass FLOP/s, e.g. flops / m.min")
    check_instance("measurement", measurement, Measurement, hint="pass the kernel's Measurement")
    if dtype not in rf.peak_flops:
        raise ValueError(f"no {dtype} compute roof to reconsider: pass one of {sorted(rf.peak_flops)}.")
    before = rf.peak_flops[dtype]
    if math.isfinite(before) and flops_per_s <= before:
        return (
            f"{dtype} compute roof: {before / 1e9:,.1f} GFLOP/s stands; {measurement.label} reached "
            f"{flops_per_s / 1e9:,.1f} GFLOP/s (the roof is the best this machine has shown)"
        )
    rf.peak_flops[dtype] = flops_per_s
    rf.spread[dtype] = measurement.iqr / measurement.median if measurement.median else math.inf
    noisy = measurement.noisy or measurement.busy
    rf.noisy = sorted({*rf.noisy} - {dtype} | ({dtype} if noisy else set()))
    rf.sources[dtype] = measurement.label
    rf.choices[dtype] = f"raised by {measurement.label}, the best this machine has shown"
    if store:
        save_roofline(rf)
    return (
        f"{dtype} compute roof: raised from {before / 1e9:,.1f} to {flops_per_s / 1e9:,.1f} GFLOP/s by "
        f"{measurement.label} (the roof is the best this machine has shown)"
        + ("; stored for later notebooks" if store else "")
    )


def save_roofline(rf: Roofline) -> Path:
    """Store ``rf`` for later notebooks (atomically: a reader never sees half a file)."""
    check_instance("rf", rf, Roofline, hint="pass a measured roofline (roofline.measure_roofline)")
    rf.__post_init__()  # its limits checked again: a field may have been changed since it was built
    data = {"version": STORE_VERSION, **rf.to_dict()}
    data.pop("origin", None)
    return write_atomic(roofline_path(rf.device), json.dumps(data, indent=1) + "\n")


def load_roofline(device: DeviceLike = None) -> Roofline | None:
    """This machine's stored roofline, or None when there is none (or it is unreadable, or of another version)."""
    path = roofline_path(device)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.pop("version", None) != STORE_VERSION:
            return None
        rf = Roofline.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    rf.origin = "stored"
    if rf.device.startswith("cpu"):  # the cache a stored sweep decided, or unknown (never the OS's figure)
        rf.cache_bytes = _effective_cache(rf)
    return rf


def _compatible(rf: Roofline, dev: torch.device, mode: str) -> bool:
    """Measured here with the same torch and threads, and with sizes at least as large as this mode's; on a CPU,
    on one with the same features (a cloud's "AMD EPYC" machine id covers CPUs with and without AVX-512 BF16)."""
    return (
        rf.machine_id == machine_id(dev)
        and torch.device(rf.device).type == dev.type
        and rf.torch == torch.__version__
        and rf.threads == torch.get_num_threads()
        and (rf.mode == "full" or mode == "quick")
        and (dev.type != "cpu" or rf.cpu_features == cpu_features())
    )


def _limit(rf: Roofline, name: str) -> float:
    """One limit by its noisy-list name: a dtype's peak FLOP/s, ``bandwidth`` or ``dispatch``."""
    if name == "bandwidth":
        return rf.bandwidth
    if name == "dispatch":
        return rf.dispatch_latency
    return rf.peak_flops.get(name, math.nan)


def _format_limit(name: str, value: float, spread: float | None) -> str:
    if not math.isfinite(value):
        return "nothing"
    text = (
        f"{value / 1e9:,.1f} GB/s"
        if name == "bandwidth"
        else f"{value * 1e6:.2f} µs/op"
        if name == "dispatch"
        else f"{value / 1e9:,.1f} G{'OP' if name == 'int8' else 'FLOP'}/s"
    )
    return text + (f" (spread {spread:.0%})" if spread is not None and math.isfinite(spread) else "")


#: Two clean measurements of one limit agree when they differ by less than their spread, or this fraction.
AGREE = 0.05


def choose_roof(
    old: float,
    old_spread: float | None,
    old_noisy: bool,
    new: float,
    new_spread: float | None,
    new_noisy: bool,
    higher_is_better: bool = True,
) -> tuple[bool, str]:
    """Which of two measurements of one limit to store: ``(take the new one, why)``. A roof is a measurement,
    not a record high: one lucky reading must not stick. A clean measurement beats a noisy one (noisy: a wide
    spread, a budget cut, or a machine found busy); of two clean ones the stored one stays unless the new one
    disagrees beyond their spread (then the machine is not what it was, and the new one replaces it); of two
    noisy ones, the better value (a higher bandwidth or FLOP/s, a lower latency: ``higher_is_better=False``),
    since other programs only ever slow a measurement down."""
    for name, value in (("old", old), ("new", new)):  # NaN: not measured; a negative limit is a bug
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name}={value!r}: a measured limit is a number ≥ 0, or NaN when not measured.")
    for name, value in (("old_spread", old_spread), ("new_spread", new_spread)):
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{name}={value!r}: a spread is a relative IQR ≥ 0, or None.")
    if not math.isfinite(new):
        return False, "nothing new was measured"
    if not math.isfinite(old):
        return True, "nothing was stored"
    if old_noisy != new_noisy:
        return (
            (True, "the new one is clean, the stored one was noisy")
            if old_noisy
            else (
                False,
                "the stored one is clean, the new one is noisy",
            )
        )
    spreads = [s for s in (old_spread, new_spread) if s is not None and math.isfinite(s)]
    if old_noisy:
        take = new > old if higher_is_better else new < old
        return take, "both noisy: the better one, since load only slows a measurement down"
    differ = abs(new / old - 1)
    allowed = max([AGREE, *spreads])
    if differ > allowed:
        return True, f"both clean, {differ:.0%} apart (beyond the {allowed:.0%} spread): the machine changed"
    return False, f"both clean and within {allowed:.0%} of each other"


def _choice_line(name: str, take: bool, why: str, new_value: float, old_value: float, stored_at: str) -> str:
    """What :func:`_merge` kept for limit ``name`` (this run's value or the stored one) and why, in its unit."""
    unit, scale = {"bandwidth": ("GB/s", 1e9), "dispatch": ("µs", 1e-6)}.get(
        name, ("GOP/s" if name == "int8" else "GFLOP/s", 1e9)
    )
    kept, other = (new_value, old_value) if take else (old_value, new_value)
    return (
        f"{kept / scale:,.1f} {unit} ({'this run' if take else 'stored ' + stored_at[:16]}) "
        f"over {other / scale:,.1f} ({'stored' if take else 'this run'}): {why}"
    )


def _set_limit(rf: Roofline, name: str, value: float) -> None:
    """Set limit ``name`` of ``rf`` (a dtype's peak, "bandwidth" or "dispatch")."""
    if name == "bandwidth":
        rf.bandwidth = value
    elif name == "dispatch":
        rf.dispatch_latency = value
    else:
        rf.peak_flops[name] = value


def _merge(old: Roofline, new: Roofline) -> Roofline:
    """Each limit ``new`` measured is stored or not by :func:`choose_roof` (with its spread, size, source and
    noise flag); a limit ``new`` did not measure is taken from ``old``. ``new.choices`` records, per limit
    measured again, which value was kept and why."""
    noisy = set(new.noisy)

    def keep_old(name: str) -> None:
        noisy.discard(name)
        if name in old.noisy:
            noisy.add(name)
        for table in ("spread", "sizes", "sources"):
            if name in getattr(old, table):
                getattr(new, table)[name] = getattr(old, table)[name]

    names = [*old.peak_flops, "bandwidth", "dispatch"]
    for name in names:
        old_value, new_value = _limit(old, name), _limit(new, name)
        take, why = choose_roof(
            old_value,
            old.spread.get(name),
            name in old.noisy,
            new_value,
            new.spread.get(name),
            name in new.noisy,
            higher_is_better=name != "dispatch",
        )
        sizes = (old.sources.get(name), new.sources.get(name))
        if all(sizes) and sizes[0] != sizes[1] and math.isfinite(old_value) and math.isfinite(new_value):
            # two kernels (another size or layout won each run): neither says the machine changed, and a roof is
            # the best this machine has shown, so the better one stands
            take = new_value < old_value if name == "dispatch" else new_value > old_value
            why = f"the two come from different kernels ({sizes[1]} this run, {sizes[0]} stored): the better stands"
        if math.isfinite(new_value) and math.isfinite(old_value):
            new.choices[name] = _choice_line(name, take, why, new_value, old_value, old.measured_at)
        if not take:
            _set_limit(new, name, old_value)
            keep_old(name)
    for kind, value in old.h2d_bandwidth.items():
        new.h2d_bandwidth.setdefault(kind, value)
    if not new.dtype_speed or (new.dtype_speed.get("undecided") and not old.dtype_speed.get("undecided")):
        new.dtype_speed = old.dtype_speed or new.dtype_speed  # a decided table is not replaced by an undecided one
    if old.cache_sweep and (
        not new.cache_sweep or (new.cache_sweep.get("undecided") and not old.cache_sweep.get("undecided"))
    ):
        new.cache_sweep, new.cache_bytes = old.cache_sweep, old.cache_bytes  # a decided knee is kept over an undecided
    new.noisy = sorted(noisy)
    new.mode = "full" if "full" in (old.mode, new.mode) else new.mode
    new.remeasures = old.remeasures
    return new


def get_roofline(device: DeviceLike = None, dtypes: list[str] | None = None, refresh: bool = False) -> Roofline:
    """This machine's roofline, measured once and reused: the stored one when it covers ``dtypes``, was
    measured with this torch and thread count and at least this mode's sizes, and is not noisy. A noisy one
    has only its noisy limits measured again (up to :data:`MAX_REMEASURES` times), each stored or not by
    :func:`choose_roof`; anything else is measured now. Prints one line saying which, so a learner knows where the
    numbers came from."""
    dev = choose_device(device)
    wanted = _dtype_list(dtypes, dev)
    stored = None if refresh else load_roofline(dev)
    if stored is None or not _compatible(stored, dev, course_mode()) or not set(wanted) <= set(stored.peak_flops):
        print("roofline: none stored for this machine and set-up yet: measuring it (notebook 00 shows how)")
        return measure_roofline(dev, dtypes=sorted(set(wanted) | set(stored.peak_flops if stored else [])))
    if not stored.dtype_speed:  # stored before the course measured what each dtype costs: measured now, kept
        print("roofline: measuring what each number format costs here (stored with the roofline)")
        stored.dtype_speed = dtype_speeds(dev)
        save_roofline(stored)
    if dev.type == "cpu" and not stored.cache_sweep:  # stored before the course measured the effective cache
        print("roofline: measuring the effective cache (the knee of a bandwidth sweep, stored with the roofline)")
        stored.reported_cache_bytes = cache_bytes(dev)
        stored.cache_sweep = measure_cache(dev, main_memory=stored.bandwidth or None)
        stored.cache_bytes = _effective_cache(stored)
        save_roofline(stored)
    if not stored.is_noisy() or stored.remeasures >= MAX_REMEASURES:
        note = (
            f" (noisy: {', '.join(stored.noisy)}; kept after {stored.remeasures} re-measurements)"
            if stored.is_noisy()
            else ""
        )
        print(
            f"roofline: this machine's stored one, measured {stored.measured_at} in {stored.mode} mode{note}; "
            "roofline.get_roofline(refresh=True) measures it again"
        )
        return stored
    print(f"roofline: the stored one is noisy ({', '.join(stored.noisy)}): measuring those again")
    again = _measure(dev, [n for n in stored.noisy if n in _DTYPES], set(stored.noisy))
    before = {n: (_limit(stored, n), stored.spread.get(n)) for n in stored.noisy}
    after = {n: (_limit(again, n), again.spread.get(n)) for n in stored.noisy}
    rf = _merge(stored, again)  # what was not measured again (NaN here) is taken from the stored one
    for name, (old, old_spread) in before.items():
        new, new_spread = after[name]
        print(
            f"roofline: {name} measured again: {_format_limit(name, new, new_spread)} against the stored "
            f"{_format_limit(name, old, old_spread)}; kept {rf.choices.get(name, 'the stored value')}"
        )
    rf.remeasures = stored.remeasures + 1 if rf.noisy else 0
    save_roofline(rf)
    return rf


def _roof_column(dtype: str) -> str:
    """A roof's column in the comparison table: int8 counts integer operations (GOP/s), the others FLOP/s."""
    return f"{dtype} {'GOP/s' if dtype == 'int8' else 'GFLOP/s'}"


def _reference_roof_cell(r: Any) -> dict[str, float]:
    """One recorded roofline row as ``{column: value}`` in :func:`compare_with_reference`'s units."""
    matmul_names = {matmul_variant(k): k for k in _DTYPES}
    h2d_names = {h2d_variant(k): k for k in ("pinned", "pageable")}
    variant = r["variant"]
    if variant in matmul_names:
        return {_roof_column(matmul_names[variant]): r["flops"] / 1e9}
    if variant == BANDWIDTH_VARIANT:
        return {"memory GB/s": r["bytes_per_s"] / 1e9}
    if variant == DISPATCH_VARIANT:
        return {"µs per tiny op": r["seconds"] * 1e6}
    if variant in h2d_names:
        return {f"H2D {h2d_names[variant]} GB/s": r["bytes_per_s"] / 1e9}
    return {}


def compare_with_reference(rf: Roofline | None = None) -> Any:
    """One row per machine: the rooflines recorded in ``data/reference/`` by notebook 00, plus ``rf`` (this
    machine, when given), in readable units."""
    if rf is not None:
        check_instance("rf", rf, Roofline, hint="pass this machine's roofline, or None")
    import pandas as pd

    from .results import load_reference, reference_note

    rows: dict[str, dict[str, float]] = {}
    ref = load_reference(notebook=ROOF_NOTEBOOK, experiment=ROOF_EXPERIMENT)
    for other in dict.fromkeys(ref.get("machine_id", [])):
        note = reference_note(str(other))
        if note:  # the same CPU model with other features: said, never shown as this machine
            print(note)
    for _, r in ref.iterrows():
        row = rows.setdefault(f"{r['machine_id']} (reference, {r['mode']} mode, {str(r['time'])[:10]})", {})
        row.update(_reference_roof_cell(r))
    if rf is not None:
        row = rows.setdefault(f"{rf.machine_id} (this run, {course_mode()} mode)", {})
        row.update({_roof_column(k): v / 1e9 for k, v in rf.peak_flops.items()})
        row["memory GB/s"] = rf.bandwidth / 1e9
        row["µs per tiny op"] = rf.dispatch_latency * 1e6
        row.update({f"H2D {k} GB/s": v / 1e9 for k, v in rf.h2d_bandwidth.items()})
    for machine in dict.fromkeys([*ref.get("machine_id", []), *([rf.machine_id] if rf is not None else [])]):
        sheet = datasheet(machine)
        if sheet:  # the speed of light beside the achievable roofs
            row = rows.setdefault(f"{machine} (datasheet)", {})
            row.update({_roof_column(k): v / 1e9 for k, v in sheet.items() if k != "bandwidth"})
            row["memory GB/s"] = sheet["bandwidth"] / 1e9
    table = pd.DataFrame.from_dict(rows, orient="index").round(2)
    for label, r in table.iterrows():
        missing = [c for c in table.columns if pd.isna(r[c])]
        if missing and "(reference" in label and label.startswith("cuda-"):  # a CPU has no tf32 or H2D at all
            print(f"{label}: no {', '.join(missing)}: that reference was measured before the course measured it")
    return table
