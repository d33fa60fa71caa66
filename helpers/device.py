"""Choose the device, wait for it, and describe the machine a notebook runs on."""

from __future__ import annotations

import os
import platform
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

DeviceLike = str | torch.device | None


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def choose_device(prefer: DeviceLike = None) -> torch.device:
    """Return the device to run on: CUDA if present, then Apple MPS, then the CPU.

    ``prefer`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``, a ``torch.device``) forces a choice and is
    checked: asking for a GPU that is not there raises instead of failing later inside a kernel.
    ``torch.cuda.is_available()`` is the test used, because ``torch.accelerator.current_accelerator()``
    reports cuda on a CUDA build of torch even when the machine has no GPU.
    """
    if prefer is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(prefer)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={prefer!r} is not a device; use 'cpu', 'cuda', 'cuda:N' or 'mps'.") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                "device='cuda' was asked for but this machine has no usable CUDA GPU; "
                "use device='cpu' or choose_device() to pick what is there."
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={prefer!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s); "
                "use 'cuda:0' or another index below that."
            )
    elif device.type == "mps" and not _mps_available():
        raise ValueError("device='mps' was asked for but MPS is not available; use device='cpu'.")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={prefer!r} is not supported by the course; use 'cpu', 'cuda' or 'mps'.")
    return device


def sync(device: DeviceLike = None) -> None:
    """Wait until all queued work on ``device`` has finished (a no-op on the CPU, which runs eagerly).

    GPU kernels are launched asynchronously: without this, a timer stops when the launch returns, not when
    the work is done.
    """
    device = choose_device(device) if not isinstance(device, torch.device) else device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's marketing name, read from /proc/cpuinfo on Linux (falls back to ``platform``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def usable_cpus() -> int:
    """CPUs this process may run on (respects container/affinity limits, unlike ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def last_level_cache_bytes() -> int | None:
    """Size of the CPU's largest cache as the OS reports it (Linux sysfs), or None where unknown.

    In a VM this is often the host's cache, not what the guest effectively gets: measure (notebook 00 does).
    """
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            size = int(digits) * scale
            best = size if best is None else max(best, size)
    return best


def cache_line_bytes() -> int:
    """The CPU's cache-line size (Linux sysfs); 64 where the OS does not say (the common value)."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size").read_text().strip())
    except (OSError, ValueError):
        return 64


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    text = re.sub(r"\b(cpu|processor|with radeon graphics|\d+-core)\b", "", text)
    text = re.sub(r"@.*$", "", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def machine_id(device: DeviceLike = None) -> str:
    """A short, stable name for this machine and device, used to file results: ``cuda-nvidia-h200``,
    ``cpu-intel-xeon-platinum-8375c-2cpu``."""
    device = choose_device(device)
    if device.type == "cuda":
        return "cuda-" + _slug(torch.cuda.get_device_name(device))
    if device.type == "mps":
        return "mps-" + _slug(platform.machine())
    return f"cpu-{_slug(cpu_model())}-{usable_cpus()}cpu"


def _driver_version() -> str | None:
    try:
        import pynvml  # from nvidia-ml-py

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU, or no NVML: the report just says so
        return None


def environment_report(device: DeviceLike = None) -> dict[str, Any]:
    """What machine am I on: versions, device, CPU, threads and memory, as a flat dict."""
    import psutil

    device = choose_device(device)
    report: dict[str, Any] = {
        "machine_id": machine_id(device),
        "device": str(device),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "os": f"{platform.system()} {platform.release()}",
        "cpu": cpu_model(),
        "usable_cpus": usable_cpus(),
        "torch_threads": torch.get_num_threads(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "last_level_cache_mib": (lambda c: round(c / 2**20, 1) if c else None)(last_level_cache_bytes()),
    }
    try:
        import torchvision

        report["torchvision"] = torchvision.__version__
    except ImportError:  # pragma: no cover - torchvision is pinned
        report["torchvision"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        report.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_compute_capability=f"{props.major}.{props.minor}",
            gpu_multiprocessors=props.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
            driver=_driver_version(),
        )
    else:
        report.update(gpu=None, driver=None)
    return report
