"""The workshop agenda and the README's run-time map, generated from measured run times.

    .venv/bin/python scripts/agenda.py            # print both tables
    .venv/bin/python scripts/agenda.py --write    # replace them in TEACHING.md and README.md (between markers)
    .venv/bin/python scripts/agenda.py --check    # exit 1 if either file is out of date (a test runs this)

Run times come from ``data/reference/<machine>.env.json`` (``notebooks.<name>.full_seconds`` and
``quick_seconds``, measured by ``scripts/runtimes.py`` or ``scripts/full_run.py``): the course's CI Xeon, the
AVX2-only AMD EPYC (the slow case: no AVX-512, AMX or bf16/fp16 units, like most x86 laptops) and the H200.
A slot in the agenda is the notebook's measured run time plus fixed teaching time (introduction and
discussion) and exercise time, rounded up to 5 minutes.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "data" / "reference"
CPU, GPU = "cpu-intel-xeon-2cpu", "cuda-nvidia-h200"
#: a CPU like most x86 laptops in what it lacks (AVX2 only: no AVX-512, no AMX, no bf16/fp16/VNNI units)
CPU_NO_AVX512 = "cpu-amd-epyc-2cpu"

#: minutes of teaching around each notebook (explaining, discussing results) and for its exercises: the half
#: day keeps to the core (one exercise per notebook, 10 min), the full day leaves room for every exercise (15 min)
HALF_DAY_MINUTES = {"talk": 20, "exercises": 10}
FULL_DAY_MINUTES = {"talk": 20, "exercises": 15}
#: what a GPU adds to each notebook's lesson ("no": the whole lesson runs on a CPU)
GPU_PARTS = {
    "00_environment": "partly: CUDA-event timing, the no-sync trap, TF32/fp16 roofs, host→device bandwidth",
    "01_bottlenecks": "partly: host↔device copies, awkward fp16 shapes",
    "02_precision_quantization": "partly: TF32, int4 and float8",
    "03_batch_sizing": "no (the OOM search is real on a GPU, simulated on a CPU)",
    "04_compilation_fusion": "partly: Triton code, CUDA graphs, reduce-overhead",
    "05_onnx_runtime": "partly: IO binding, TensorRT (onnxruntime-gpu must find CUDA on that machine)",
    "06_async_pipelines": "yes for streams, pinned copies and the async trap; the pipeline lesson runs on a CPU",
    "07_memory": "partly: allocator statistics, empty_cache, snapshots",
    "08_profiling": "partly: device timelines, NVTX and Nsight",
    "09_capstone": "partly: CUDA graphs, GPU energy (NVML); the steps reorder on a GPU",
    "10_llm_decoding": "partly: CUDA graphs (reduce-overhead), the flash/efficient/cuDNN attention kernels",
}
HALF_DAY = ["00_environment", "01_bottlenecks", "02_precision_quantization", "04_compilation_fusion"]
MARKS = {
    "TEACHING.md": ("<!-- agenda:start -->", "<!-- agenda:end -->"),
    "README.md": ("<!-- runtimes:start -->", "<!-- runtimes:end -->"),
}


def runtimes(machine: str) -> dict[str, dict[str, float]]:
    path = REFERENCE / f"{machine}.env.json"
    return json.loads(path.read_text())["notebooks"] if path.exists() else {}


def notebooks() -> list[str]:
    return sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def runtime_table() -> str:
    cpu, gpu, plain = runtimes(CPU), runtimes(GPU), runtimes(CPU_NO_AVX512)
    lines = [
        "| # | notebook | quick, CPU (cold caches) | full, CPU | quick / full, AVX2-only CPU | full, H200 "
        "| GPU needed for the full lesson? |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in notebooks():
        quick = minutes(cpu.get(name, {}).get("quick_seconds"))
        full = minutes(cpu.get(name, {}).get("full_seconds"))
        slow = plain.get(name, {})
        weak = f"{minutes(slow.get('quick_seconds'))} / {minutes(slow.get('full_seconds'))}"
        on_gpu = minutes(gpu.get(name, {}).get("seconds"))
        lines.append(
            f"| {name[:2]} | {name[3:].replace('_', ' ')} | {quick} | {full} | {weak} | {on_gpu} "
            f"| {GPU_PARTS.get(name, '–')} |"
        )
    return "\n".join(lines)


def slot(seconds: float, talk: int, exercises: int) -> int:
    return 5 * math.ceil((talk + exercises + seconds / 60) / 5)


def agenda(
    names: list[str], mode: str, minutes_per: dict[str, int], breaks: dict[int, tuple[str, int]], start_h: int = 9
) -> str:
    cpu, gpu = runtimes(CPU), runtimes(GPU)
    lines = ["| time | notebook | slot | of which running it |", "|---|---|---|---|"]
    clock = start_h * 60
    for i, name in enumerate(names):
        if mode == "gpu" and name in gpu:
            run, where = gpu[name]["seconds"], "full mode on the H200"
        elif mode == "gpu":
            run, where = cpu.get(name, {}).get("full_seconds", 600), "full mode on the 2-core CPU: no GPU run yet"
        else:
            run, where = cpu.get(name, {}).get("quick_seconds", 60), "quick mode on the 2-core CPU"
        length = slot(run, **minutes_per)
        lines.append(
            f"| {clock // 60:02d}:{clock % 60:02d} | {name[:2]} {name[3:].replace('_', ' ')} | {length} min "
            f"| {minutes(run)} ({where}) |"
        )
        clock += length
        if i in breaks:
            label, pause = breaks[i]
            lines.append(f"| {clock // 60:02d}:{clock % 60:02d} | {label} | {pause} min | |")
            clock += pause
    lines.append(f"| {clock // 60:02d}:{clock % 60:02d} | end | | |")
    return "\n".join(lines)


def agenda_block() -> str:
    half = agenda(HALF_DAY, "cpu", HALF_DAY_MINUTES, {1: ("break", 15)})
    full = agenda(notebooks(), "gpu", FULL_DAY_MINUTES, {1: ("break", 15), 4: ("lunch", 60), 7: ("break", 15)})
    return (
        f"**Half day** (laptops, quick mode; {HALF_DAY_MINUTES['talk']} min of teaching and "
        f"{HALF_DAY_MINUTES['exercises']} of exercises per notebook: the core of the course)\n\n{half}\n\n"
        f"**Full day** (a GPU per participant, full mode; {FULL_DAY_MINUTES['talk']} min of teaching and "
        f"{FULL_DAY_MINUTES['exercises']} of exercises per notebook)\n\n{full}"
    )


def main(argv: list[str] | None = None) -> int:
    from generated_blocks import main as sync

    blocks = {
        REPO / "TEACHING.md": (*MARKS["TEACHING.md"], agenda_block()),
        REPO / "README.md": (*MARKS["README.md"], runtime_table()),
    }
    return sync(__doc__.split("\n")[0], blocks, "scripts/agenda.py", argv)


if __name__ == "__main__":
    sys.exit(main())
