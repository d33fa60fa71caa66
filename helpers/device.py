"""Choose the device, wait for it, and describe the machine a notebook runs on."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
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


def _cgroup_cpu_limit() -> float | None:
    """The CPUs a cgroup v2 quota allows (``cpu.max``: quota / period, e.g. ``docker --cpus=2``), or None."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity (``os.sched_getaffinity``), capped by a cgroup v2 CPU quota
    where one is set (containers), unlike ``os.cpu_count``; the CPU count on macOS and Windows."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_limit()
    return max(1, min(n, math.ceil(quota))) if quota else n


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """PyTorch's intra-op threads set to ``n`` inside the block, put back after it (None: leave them as they are).
    The setting is the process's: a loader thread started inside the block runs its torch ops on ``n`` threads
    too, so ``torch_threads(1)`` around a model and a loader thread leaves one core to each on a 2-core CPU."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n={n!r}: pass how many threads PyTorch may use (1 or more), or None to leave them.")
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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


@lru_cache(maxsize=1)
def _cpuinfo_flags() -> frozenset[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (Linux), or None where there is no such file."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(("flags", "features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _sysctl(name: str) -> bool | None:
    """A boolean ``sysctl`` feature on macOS (``hw.optional.arm.FEAT_FP16``), or None where it is unknown."""
    if platform.system() != "Darwin":
        return None
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out == "1" if out in ("0", "1") else None


def _torch_cpu_flag(name: str) -> bool | None:
    probe = getattr(torch.cpu, name, None)
    try:
        return bool(probe()) if probe is not None else None
    except Exception:  # a torch build without that probe on this platform
        return None


@lru_cache(maxsize=1)
def cpu_features() -> dict[str, Any]:
    """What this CPU accelerates, as far as torch and the OS can tell (None: unknown on this platform).

    ``capability`` is the vector ISA torch's CPU kernels were dispatched to (``AVX2``, ``AVX512``,
    ``DEFAULT`` on ARM). The rest decide whether a dtype's matmul runs on hardware units or in software:
    AVX512-BF16 and AMX for bf16, AVX512-FP16 and AMX-FP16 for fp16 (torch does not report AVX512-FP16:
    it is read from /proc/cpuinfo), VNNI (AVX512-VNNI or AVX-VNNI) and AMX for int8; on Apple silicon the
    ``FEAT_FP16``/``FEAT_BF16`` sysctls.
    """
    flags = _cpuinfo_flags()
    has = (lambda *names: any(n in flags for n in names)) if flags is not None else (lambda *names: None)
    vnni = _torch_cpu_flag("_is_vnni_supported")
    arm = platform.machine().lower() in ("arm64", "aarch64")
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "avx512_bf16": _torch_cpu_flag("_is_avx512_bf16_supported"),
        "avx512_fp16": has("avx512_fp16"),
        "vnni": vnni if vnni else (has("avx512_vnni", "avx_vnni") if flags is not None else vnni),
        "amx_tile": _torch_cpu_flag("_is_amx_tile_supported"),
        "amx_fp16": _torch_cpu_flag("_is_amx_fp16_supported"),
        "arm_fp16": (
            None
            if not arm
            else _sysctl("hw.optional.arm.FEAT_FP16")
            if platform.system() == "Darwin"
            else has("fphp", "asimdhp")
        ),
        "arm_bf16": (
            None if not arm else _sysctl("hw.optional.arm.FEAT_BF16") if platform.system() == "Darwin" else has("bf16")
        ),
    }


def cpu_dtype_support(features: dict[str, Any] | None = None) -> dict[str, tuple[bool | None, str]]:
    """For bf16, fp16 and int8 matmuls on this CPU: ``(expected fast?, why)``, decided from :func:`cpu_features`
    before anything is timed. ``None``: this platform does not say; the measurement decides."""
    f = cpu_features() if features is None else features
    if not isinstance(f, dict):
        raise ValueError(f"features={features!r} is not allowed: pass cpu_features()'s dict, or nothing.")

    def decide(units: list[tuple[str, str]], missing: str) -> tuple[bool | None, str]:
        found = [label for key, label in units if f.get(key)]
        if found:
            return True, "hardware units: " + ", ".join(found)
        if all(f.get(key) is None for key, _ in units):
            return None, "this platform does not report the features that decide it"
        return False, missing

    return {
        "bf16": decide(
            [("amx_tile", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("arm_bf16", "ARM BF16")],
            "no AMX, AVX512-BF16 or ARM BF16: bf16 is converted to fp32 in software",
        ),
        "fp16": decide(
            [("amx_fp16", "AMX-FP16"), ("avx512_fp16", "AVX512-FP16"), ("arm_fp16", "ARM FP16")],
            "no AMX-FP16, AVX512-FP16 or ARM FP16: fp16 math is emulated, often far slower than fp32",
        ),
        "int8": decide(
            [("amx_tile", "AMX"), ("vnni", "VNNI")], "no VNNI or AMX: int8 dot products take several instructions each"
        ),
    }


#: Another process using more than this share of the CPUs we run on, or the hypervisor stealing more than
#: this share of their time, makes a CPU timing untrustworthy (samples wait for a time slice).
BUSY_OTHERS_SHARE = 0.25
BUSY_STEAL_SHARE = 0.05


@dataclass(frozen=True)
class Load:
    """How busy the CPUs this process may run on were during a window of ``seconds``.

    ``others_cpus``: CPUs' worth of time used by *other* processes (all CPU time on our CPUs minus this
    process's own); ``steal``: the share of our CPUs' time the hypervisor gave to other VMs (Linux only);
    ``loadavg``: the OS's 1-minute load average (it includes this process)."""

    usable_cpus: int
    seconds: float
    others_cpus: float | None
    steal: float | None
    loadavg: float | None

    @property
    def busy(self) -> bool:
        return bool(
            (self.others_cpus is not None and self.others_cpus > BUSY_OTHERS_SHARE * self.usable_cpus)
            or (self.steal is not None and self.steal > BUSY_STEAL_SHARE)
        )

    def reason(self) -> str | None:
        """One line saying why the machine counts as busy, or None when it does not."""
        if not self.busy:
            return None
        parts = []
        if self.others_cpus is not None and self.others_cpus > BUSY_OTHERS_SHARE * self.usable_cpus:
            parts.append(f"other processes used {self.others_cpus:.1f} of the {self.usable_cpus} CPUs")
        if self.steal is not None and self.steal > BUSY_STEAL_SHARE:
            parts.append(f"the hypervisor stole {self.steal:.0%} of the CPU time (another VM on the same host)")
        if self.loadavg is not None:
            parts.append(f"load average {self.loadavg:.1f}")
        return "the machine was busy: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "usable_cpus": self.usable_cpus,
            "seconds": round(self.seconds, 4),
            "others_cpus": self.others_cpus,
            "steal": self.steal,
            "loadavg": self.loadavg,
            "busy": self.busy,
        }


class LoadMeter:
    """Measure :class:`Load` over a window: ``meter = LoadMeter(); ...work...; load = meter.stop()``.
    Reads two counters at each end (no sleeping), so it can wrap a benchmark.

    "Others" is all CPU time on the CPUs this process may use, minus this process's own and its children's
    (DataLoader workers, compile workers). The OS counts in clock ticks (10 ms on Linux), so a reading is
    uncertain by a few ticks per CPU: that margin is subtracted first, so a short window can miss a busy
    machine but never calls an idle one busy."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        try:
            self._cpus: list[int] | None = sorted(os.sched_getaffinity(0))
        except AttributeError:  # macOS, Windows
            self._cpus = None
        try:
            self._tick = 1.0 / os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            self._tick = 0.01
        self._start = self._read()

    def _own(self) -> float:
        t = self._proc.cpu_times()
        own = t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
        for child in self._proc.children(recursive=True):
            try:
                c = child.cpu_times()
                own += c.user + c.system
            except self._psutil.Error:  # it ended between the listing and the reading
                pass
        return own

    def _read(self) -> tuple[float, float | None, float | None, float, int]:
        wall = time.perf_counter()
        try:
            per_cpu = self._psutil.cpu_times(percpu=True)
            if self._cpus is not None and max(self._cpus) < len(per_cpu):
                per_cpu = [per_cpu[i] for i in self._cpus]
            busy = sum(
                t.user + getattr(t, "nice", 0.0) + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
                for t in per_cpu
            )
            steal = sum(t.steal for t in per_cpu) if hasattr(per_cpu[0], "steal") else None
            own = self._own()
        except Exception:  # counters unreadable (a sandbox, Windows): no load figure, never a failed timing
            return wall, None, None, 0.0, 0
        return wall, busy, steal, own, len(per_cpu)

    def stop(self) -> Load:
        (w0, b0, s0, o0, n0), (w1, b1, s1, o1, n1) = self._start, self._read()
        seconds = max(w1 - w0, 1e-9)
        ncpu = max(n0, n1, 1)
        margin = (2 * ncpu + 4) * self._tick  # tick rounding of the CPU counters and of our own times
        others = None if b0 is None or b1 is None else max(0.0, (b1 - b0) - (o1 - o0) - margin) / seconds
        steal = None if s0 is None or s1 is None else max(0.0, s1 - s0 - 2 * ncpu * self._tick) / (seconds * ncpu)
        try:
            loadavg = os.getloadavg()[0]
        except (AttributeError, OSError):
            loadavg = None
        return Load(
            usable_cpus=usable_cpus(),
            seconds=seconds,
            others_cpus=None if others is None else round(others, 3),
            steal=None if steal is None else round(steal, 4),
            loadavg=loadavg,
        )


def machine_load(interval: float = 0.5) -> Load:
    """How busy this machine is right now: watch the CPUs for ``interval`` seconds while this process
    sleeps. A pre-flight check before timing (notebook 00 prints it; ``benchmark`` measures the same over
    each of its own measurements)."""
    import numbers

    if not (isinstance(interval, numbers.Real) and not isinstance(interval, bool) and 0 < interval <= 60):
        raise ValueError(f"interval={interval!r} is not allowed: pass a number of seconds between 0 and 60.")
    meter = LoadMeter()
    time.sleep(interval)
    return meter.stop()


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    text = re.sub(r"\b(cpu|processor|with radeon graphics|\d+-core)\b", "", text)
    text = re.sub(r"@.*$", "", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def feature_tags(features: dict[str, Any] | None = None) -> list[str]:
    """The CPU features that decide a result, as short tags (``["avx512", "amx", "bf16", "fp16", "vnni"]``): the
    vector ISA torch dispatched to, then AMX and the bf16, fp16 and int8 (VNNI) units. Two CPUs of one marketing
    name ("Intel Xeon Processor", "AMD EPYC") can differ in every one of them, and so in every dtype's speed."""
    f = cpu_features() if features is None else features
    isa = str(f.get("capability") or "").lower()
    tags = [isa] if isa in ("avx2", "avx512") else []
    wanted = (("amx", ("amx_tile",)), ("bf16", ("avx512_bf16", "arm_bf16")), ("fp16", ("avx512_fp16", "arm_fp16")))
    tags += [tag for tag, keys in wanted if any(f.get(k) for k in keys)]
    return tags + (["vnni"] if f.get("vnni") else [])


def machine_id(device: DeviceLike = None) -> str:
    """A short, stable name for this machine and device, used to file results: ``cuda-nvidia-h200``,
    ``cpu-intel-xeon-2cpu-avx512-amx-bf16-fp16-vnni``. A CPU's id names its model, its usable CPUs and the
    features that decide what each dtype costs (:func:`feature_tags`), so two hosts a cloud sells under one
    name get two ids, and a reference is never shown as "this machine" when it was another."""
    device = choose_device(device)
    if device.type == "cuda":
        return "cuda-" + _slug(torch.cuda.get_device_name(device))
    if device.type == "mps":
        return "mps-" + _slug(platform.machine())
    return "-".join([f"cpu-{_slug(cpu_model())}-{usable_cpus()}cpu", *feature_tags()])


def same_model_other_features(reference_id: str, this_id: str) -> bool:
    """Whether two machine ids name the same CPU model and core count with other features (a reference from
    another host sold under this machine's name)."""
    base = re.compile(r"^(cpu-.*?-\d+cpu)(-|$)")
    a, b = base.match(reference_id), base.match(this_id)
    return bool(a and b and a.group(1) == b.group(1) and reference_id != this_id)


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
    """What machine am I on: versions, device, CPU, threads and memory, as a flat dict (stored with every result).

    For a bug report to PyTorch, ``python -m torch.utils.collect_env`` gives the full environment."""
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
        "cpu_features": cpu_features(),
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
