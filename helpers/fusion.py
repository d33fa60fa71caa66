"""Kernel fusion made visible: the kernels one call launches, the bytes it moves unfused and fused, and the
code ``torch.compile`` generated for it.

``count_kernels`` reads the kernels from ``torch.profiler``. On a GPU these are the device kernels CUPTI saw
(memory copies and fills counted apart), plus the CPU-side launch calls. On a CPU, a "kernel" is an aten op
called from Python or from compiled code (not from inside another aten op, and not a view or an allocation),
or one of Inductor's generated C++ kernels; the profiler sees those only when the function was compiled after
:func:`enable_cpu_kernel_profiling`.

``traffic`` (the bytes one eager call moves, unfused and ideally fused) is :func:`helpers.opcount.traffic`,
where all op, FLOP and byte accounting lives.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .checks import check_callable, check_instance, check_int
from .device import DeviceLike, choose_device, sync
from .profiling import quiet_profile

#: aten ops the profiler records that launch no kernel: views, metadata, allocations without initialisation
_NOT_KERNELS = {
    f"aten::{name}"
    for name in (
        "t",
        "transpose",
        "permute",
        "numpy_T",
        "view",
        "reshape",
        "_reshape_alias",
        "expand",
        "as_strided",
        "detach",
        "alias",
        "unsqueeze",
        "squeeze",
        "slice",
        "select",
        "narrow",
        "split",
        "chunk",
        "unbind",
        "empty",
        "empty_like",
        "empty_strided",
        "resolve_conj",
        "resolve_neg",
        "lift_fresh",
        "_unsafe_view",
        "flatten",
        "view_as",
        "expand_as",
        "contiguous",
    )
}
#: Inductor's generated C++ kernels, as recorded with ``cpp.enable_kernel_profile``
_CPP_KERNEL = re.compile(r"cpp_fused_\w+|cpp_kernel\w*")
#: The CUDA runtime and driver calls that launch a kernel, as prefixes: the profiler may add a version suffix
#: (``cudaLaunchKernel_v7000``, CUPTI's callback names) and the Ex/ExC variants share the stem.
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")


def enable_cpu_kernel_profiling() -> None:
    """Make Inductor's C++ kernels visible to the profiler (each records a ``graph_N_cpp_fused_*`` event).

    Call it before compiling: the setting is read when the code is generated. It adds one profiler hook per
    kernel call, negligible next to a kernel's work, and is part of the compile cache key."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True


@dataclass
class KernelCount:
    """The kernels one call ran, in order, and (on a GPU) how the CPU launched them."""

    device: str
    kernels: list[str]
    copies: list[str] = field(default_factory=list)  # GPU memcpy/memset, not counted as kernels
    launches: int = 0  # CPU-side kernel launch calls (GPU); with a CUDA graph, kernels run without one each
    graph_launches: int = 0  # cudaGraphLaunch calls (GPU)

    @property
    def n(self) -> int:
        return len(self.kernels)

    def by_name(self) -> Counter:
        return Counter(self.kernels)

    def short(self) -> list[str]:
        """The kernel names without template arguments and parameter lists (GPU kernels' names are long)."""
        return [short_kernel_name(k) for k in self.kernels]

    def __repr__(self) -> str:
        launches = ""
        if self.device == "cuda":
            launches = f", {self.launches} launch calls, {self.graph_launches} graph launches"
        return f"<KernelCount {self.n} kernels on {self.device}{launches}>"


def short_kernel_name(name: str) -> str:
    """``void at::native::elementwise_kernel<4, …>(int, …)`` → ``at::native::elementwise_kernel``."""
    check_instance("name", name, str, hint="pass a kernel name from a profiler table")
    name = name.removeprefix("void ").strip()
    cuts = [i for i in (name.find("<"), name.find("(")) if i > 0]
    return name[: min(cuts)].strip() if cuts else name


def _cpu_kernel(event: Any) -> bool:
    name = event.name
    if _CPP_KERNEL.search(name):
        return True
    if not name.startswith("aten::") or name in _NOT_KERNELS:
        return False
    parent = event.cpu_parent
    while parent is not None:  # called by another aten op: part of that op's kernel
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def count_kernels(fn: Callable[..., Any], *args: Any, device: DeviceLike = None, warmup: int = 1) -> KernelCount:
    """Run ``fn(*args)`` ``warmup`` times (a compiled function compiles here, unprofiled), then once under the
    profiler, and return the kernels that one call ran."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    check_callable("fn", fn, hint="count_kernels needs a function to call, e.g. count_kernels(model, x)")
    check_int(
        "warmup",
        warmup,
        minimum=0,
        hint="pass how many unprofiled calls come first, e.g. 1 (a compiled fn compiles in it)",
    )
    dev = choose_device(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with torch.inference_mode():
        for _ in range(warmup):
            fn(*args)
        sync(dev)
        # one profiling cycle; acc_events=True also stops torch 2.11 warning that cycles clear events
        options = {"acc_events": True} if "acc_events" in inspect.signature(profile).parameters else {}
        with quiet_profile(activities=activities, **options) as prof:
            fn(*args)
            sync(dev)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    if dev.type == "cuda":
        on_gpu = [e.name for e in events if e.device_type == DeviceType.CUDA]
        copies = [n for n in on_gpu if n.startswith(("Memcpy", "Memset"))]
        kernels = [n for n in on_gpu if not n.startswith(("Memcpy", "Memset"))]
        cpu_names = [e.name for e in events if e.device_type == DeviceType.CPU]
        return KernelCount(
            "cuda",
            kernels,
            copies,
            launches=sum(n.startswith(_LAUNCH_CALLS) for n in cpu_names),
            graph_launches=sum(n.startswith("cudaGraphLaunch") for n in cpu_names),
        )
    kernels = [e.name for e in events if _cpu_kernel(e)]
    compiled = any("CompiledFxGraph" in e.name for e in events)
    if compiled and not any(_CPP_KERNEL.search(n) for n in kernels):
        import torch._inductor.config as inductor_config

        if not inductor_config.cpp.enable_kernel_profile:
            raise RuntimeError(
                "The profiler cannot see inside this compiled function: call "
                "helpers.fusion.enable_cpu_kernel_profiling() before compiling it."
            )
    return KernelCount(dev.type, kernels, launches=len(kernels))


def generated_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """Compile-and-run ``fn`` (an uncompiled function: it is wrapped in ``torch.compile`` here) and return its
    result and the Python wrapper Inductor generated, kernels included. Resets Dynamo first (as
    ``torch._inductor.utils.run_and_get_code`` does), so call it before compiling anything you still need."""
    from torch._inductor.utils import run_and_get_code

    with torch.inference_mode():
        result, sources = run_and_get_code(torch.compile(fn), *args)
    return result, "\n".join(sources)


_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(cpp_pybinding|cpp|triton)\(", re.M)


def kernel_names(code: str) -> list[str]:
    """The generated kernels defined in Inductor's output code (C++ or Triton)."""
    check_instance("code", code, str, hint="pass the generated code, e.g. helpers.fusion.generated_code(fn, x)")
    return [m.group(1) for m in _KERNEL_DEF.finditer(code)]


def extern_calls(code: str) -> list[str]:
    """The library calls (cuBLAS/oneDNN GEMMs, convolutions) the generated code makes instead of a kernel."""
    check_instance("code", code, str, hint="pass the generated code, e.g. helpers.fusion.generated_code(fn, x)")
    return sorted(set(re.findall(r"extern_kernels\.(\w+)", code)))


def kernel_excerpt(code: str, max_lines: int = 30) -> str:
    """The first generated kernel's body, without the includes/imports and decorators around it."""
    check_instance("code", code, str, hint="pass the generated code, e.g. helpers.fusion.generated_code(fn, x)")
    check_int("max_lines", max_lines, hint="how many lines of the kernel to show, e.g. 30")
    match = _KERNEL_DEF.search(code)
    if not match:
        return "(no generated kernel: the compiled code only calls library kernels)"
    body = code[match.end() :]
    quote = re.search(r"r?'''", body)
    body = body[quote.end() :] if quote else body
    body = body.split("'''", 1)[0]
    start = re.search(r'^(extern "C"|@triton\.jit|def triton_)', body, re.M)
    lines = body[start.start() if start else 0 :].strip("\n").splitlines()
    boilerplate = (
        "@triton_heuristics",
        "@triton.jit",
        "std::atomic<int> inductor_cpu_integer_div_error",
        "inductor_cpu_integer_div_error_flag",
    )
    lines = [line for line in lines if line.strip() and not line.lstrip().startswith(boilerplate)]
    excerpt = "\n".join(lines[:max_lines])
    return excerpt + (f"\n    … ({len(lines) - max_lines} more lines)" if len(lines) > max_lines else "")


_ACTIVATIONS = ("gelu", "relu", "silu", "tanh", "sigmoid")


def _template_kernels(code: str) -> list[str]:
    """Generated GEMM templates: Triton's are named ``triton_tem_fused_<ops>``; Inductor's C++ GEMM template
    (CPU, used with ``freezing`` and ``max_autotune``) is a ``cpp_fused_<mm ops>`` kernel built on its micro-GEMM,
    with no library GEMM call left in the code."""
    names = kernel_names(code)
    triton = [n for n in names if "tem_fused" in n]
    library_gemm = {"mm", "addmm", "bmm", "baddbmm"} & set(extern_calls(code))
    cpp = [n for n in names if n.startswith("cpp_fused") and "mm" in n]
    return triton + (cpp if "micro_gemm" in code and not library_gemm else [])


def gemm_epilogue_fused(code: str) -> bool:
    """Whether the generated code computes a GEMM in a generated template with an activation fused into it:
    one kernel that does both (see :func:`_template_kernels` for how each backend's templates are recognised)."""
    return any(any(act in n for act in _ACTIVATIONS) for n in _template_kernels(code))


def describe_gemm(code: str) -> str:
    """One sentence on how the generated code does a GEMM followed by bias and activation."""
    names, externs = kernel_names(code), extern_calls(code)
    templates = _template_kernels(code)
    others = ", ".join(n for n in names if n not in templates) or "none"
    if gemm_epilogue_fused(code):
        return f"the GEMM is a generated template ({templates[0]}) with the activation fused into it"
    if templates:
        return f"the GEMM is a generated template ({templates[0]}); the activation is another kernel ({others})"
    if "addmm" in externs:
        return (
            "the GEMM is a library call with the bias folded in (addmm); the activation is a separate kernel "
            f"({others})"
        )
    if externs:
        return (
            f"the GEMM is a library call ({', '.join(externs)}); the bias add and the activation are fused "
            f"into one kernel after it ({others})"
        )
    return f"no GEMM found; generated kernels: {others}"
