"""The workshop agenda and the README's run-time map, generated from measured run times.

    .venv/bin/python scripts/agenda.py            # print both tables
    .venv/bin/python scripts/agenda.py --write    # replace them in TEACHING.md and README.md (between markers)
    .venv/bin/python scripts/agenda.py --check    # exit 1 if either file is out of date (a test runs this)

Run times come from ``data/reference/<machine>.env.json`` (``notebooks.<name>.full_seconds`` and
``quick_seconds``, measured by ``scripts/runtimes.py`` or ``scripts/full_run.py``): the course's CI Xeon, the
AVX2-only AMD EPYC (the slow case: no AVX-512, AMX or bf16/fp16 units, like most x86 laptops) and the H200.
The run-time map has one column per machine id (a CPU's id names the features that decide each dtype's cost, so
two hosts a cloud sells under one name get two columns).
A notebook's slot is derived from the notebook itself: the time to read its markdown (READ_WORDS_PER_MIN),
to run and read each code cell (MIN_PER_CODE_CELL), to do each exercise (MIN_PER_EXERCISE), plus its measured
run time, rounded up to 5 minutes. (Reviewers who worked through the course estimated 45–120 min per notebook;
the longest notebooks' slots come out above that. The course's total is the table's, never one written by hand.) Days
are packed in course order: a half day and a full day of the core (exercises as homework), and a multi-day
plan for the whole course.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "data" / "reference"
#: the course's CI reference CPU (the agenda's laptop slots use its quick-mode times) and the reference GPU
CPU, GPU = "cpu-intel-xeon-2cpu-avx512-amx-bf16-fp16-vnni", "cuda-nvidia-h200"
#: a CPU like most x86 laptops in what it lacks (AVX2 only: no AVX-512, no AMX, no bf16/fp16/VNNI units)
CPU_NO_AVX512 = "cpu-amd-epyc-2cpu-avx2"

#: how a notebook's time is estimated from its content: reading technical prose (with the numbers it
#: interprets), running a cell and reading its output, and one exercise with its self-check
READ_WORDS_PER_MIN = 150
MIN_PER_CODE_CELL = 2
MIN_PER_EXERCISE = 12
#: minutes of sessions in a teaching day (09:00–17:00 less a 60 min lunch and two 15 min breaks), a half day
FULL_DAY_SESSION_MINUTES = 360
HALF_DAY_SESSION_MINUTES = 210  # 09:00–12:45 less one 15 min break; a half day leaves the exercises as homework
#: what a GPU adds to each notebook's lesson ("no": the whole lesson runs on a CPU)
GPU_PARTS = {
    "00_environment": "partly: CUDA-event timing, the no-sync trap, TF32/fp16 roofs, host→device bandwidth",
    "01_bottlenecks": "partly: host↔device copies, awkward fp16 shapes",
    "02_precision_quantization": "partly: TF32, int4 and float8",
    "03_batch_sizing": "no (the OOM search is real on a GPU, simulated on a CPU)",
    "04_compilation_fusion": "partly: Triton code, CUDA graphs, reduce-overhead",
    "05_onnx_runtime": "partly: IO binding, the strict GPU session; TensorRT only after `make trt` (optional)",
    "06_async_pipelines": "yes for streams, pinned copies and the async trap; the pipeline lesson runs on a CPU",
    "07_memory": "partly: allocator statistics, empty_cache, snapshots",
    "08_profiling": "partly: device timelines, NVTX and Nsight",
    "09_capstone": "partly: CUDA graphs, TensorRT, GPU energy (NVML), the 48×48 model",
    "10_llm_decoding": "partly: CUDA graphs (reduce-overhead), the flash/efficient/cuDNN attention kernels",
    "11_shipping": "no (on a GPU the package and the caches hold Triton kernels instead of C++)",
    "12_serving": "no; on a GPU one replica per GPU (not run on the reference GPU machine: no serving engine there)",
    "13_llm_serving": "partly: bf16 with a compiled step for the engine; speed-ups where decoding is memory-bound",
    "14_mlperf": "no (on a GPU the same scenarios run the 48×48 model; the idle-gap and threads lessons are the CPU's)",
}
#: the core, in teaching order: what a half day takes first (00 and 01 set up every later notebook)
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


def machines(kind: str) -> list[str]:
    """The machine ids with measured run times of one kind (``cpu`` or ``cuda``), the course's CI reference first."""
    found = sorted(p.name.removesuffix(".env.json") for p in REFERENCE.glob(f"{kind}-*.env.json"))
    return sorted(found, key=lambda m: m != CPU)


def column_label(machine: str) -> str:
    """A column heading: the CPU's name, its CPUs and the features in its id; a GPU's name."""
    path = REFERENCE / f"{machine}.env.json"
    env = json.loads(path.read_text()).get("environment", {}) if path.exists() else {}
    if machine.startswith("cuda-"):
        return str(env.get("gpu") or machine.removeprefix("cuda-"))
    tags = re.sub(r"^cpu-.*?-\d+cpu-?", "", machine).replace("-", " ")
    name = str(env.get("cpu") or "CPU").replace("(R)", "").replace(" Processor", "")
    return f"{name}, {env.get('usable_cpus', '?')} CPUs, {tags.upper() or 'no AVX2'}"


def runtime_table() -> str:
    """One column per CPU machine id (quick / full) and per GPU (full): a figure is shown only under the id of
    the machine that measured it (the id names the CPU features that decide what each dtype costs)."""
    cpus, gpus = machines("cpu"), machines("cuda")
    head = [f"quick / full, {column_label(m)}" for m in cpus] + [f"full, {column_label(m)}" for m in gpus]
    lines = [
        "| # | notebook | " + " | ".join(head) + " | GPU needed for the full lesson? |",
        "|---|---|" + "---|" * len(head) + "---|",
    ]
    tables = {m: runtimes(m) for m in cpus + gpus}
    for name in notebooks():
        cells = [
            f"{minutes(tables[m].get(name, {}).get('quick_seconds'))} / "
            f"{minutes(tables[m].get(name, {}).get('full_seconds'))}"
            for m in cpus
        ]
        cells += [minutes(tables[m].get(name, {}).get("seconds")) for m in gpus]
        lines.append(
            f"| {name[:2]} | {name[3:].replace('_', ' ')} | " + " | ".join(cells) + f" | {GPU_PARTS.get(name, '–')} |"
        )
    ids = ", ".join(f"`{m}`" for m in cpus + gpus)
    return "\n".join([*lines, "", f"Machine ids, in column order: {ids} (`helpers.machine_id()` names yours)."])


def content(name: str) -> dict[str, int]:
    """What a notebook asks of a learner: words of markdown, code cells, exercises."""
    import re

    nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    cells = nb["cells"]
    markdown = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return {
        "words": len(markdown.split()),
        "code_cells": sum(c["cell_type"] == "code" for c in cells),
        "exercises": len(set(re.findall(r"^answer_(\d+) = None", code, re.M))),
    }


def run_seconds(name: str, mode: str) -> tuple[float, str]:
    """The notebook's measured run time for a session: full mode on the H200 (GPU days) or quick mode on the
    2-core CPU (laptops), with where it was measured."""
    cpu, gpu = runtimes(CPU), runtimes(GPU)
    if mode == "gpu" and name in gpu:
        return gpu[name]["seconds"], "full mode on the H200"
    if mode == "gpu":
        return cpu.get(name, {}).get("full_seconds", 600), "full mode on the 2-core CPU: no GPU run yet"
    return cpu.get(name, {}).get("quick_seconds", 60), "quick mode on the 2-core CPU"


def slot(name: str, mode: str, exercises: bool = True) -> int:
    """Minutes for a notebook: reading, cells, exercises (unless left as homework) and its run time, rounded
    up to 5."""
    c = content(name)
    work = c["words"] / READ_WORDS_PER_MIN + c["code_cells"] * MIN_PER_CODE_CELL
    work += c["exercises"] * MIN_PER_EXERCISE if exercises else 0
    return 5 * math.ceil((work + run_seconds(name, mode)[0] / 60) / 5)


def pack(names: list[str], mode: str, budget: int, exercises: bool = True) -> list[list[str]]:
    """Notebooks in course order, into sessions of at most ``budget`` minutes (one notebook per session if
    it alone is longer)."""
    days: list[list[str]] = [[]]
    used = 0
    for name in names:
        length = slot(name, mode, exercises)
        if days[-1] and used + length > budget:
            days.append([])
            used = 0
        days[-1].append(name)
        used += length
    return days


def agenda(
    names: list[str], mode: str, breaks: dict[int, tuple[str, int]], start_h: int = 9, exercises: bool = True
) -> str:
    lines = ["| time | notebook | slot | of which running it |", "|---|---|---|---|"]
    clock = start_h * 60
    for i, name in enumerate(names):
        run, where = run_seconds(name, mode)
        length = slot(name, mode, exercises)
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


def estimate_table() -> str:
    lines = [
        "| # | notebook | words | code cells | exercises | slot, laptop (quick) | slot, GPU (full) |",
        "|---|---|---|---|---|---|---|",
    ]
    total = {"cpu": 0, "gpu": 0}
    for name in notebooks():
        c = content(name)
        cpu, gpu = slot(name, "cpu"), slot(name, "gpu")
        total["cpu"] += cpu
        total["gpu"] += gpu
        lines.append(
            f"| {name[:2]} | {name[3:].replace('_', ' ')} | {c['words']} | {c['code_cells']} | {c['exercises']} "
            f"| {cpu} min | {gpu} min |"
        )
    lines.append(f"| | **whole course** | | | | **{total['cpu'] / 60:.1f} h** | **{total['gpu'] / 60:.1f} h** |")
    return "\n".join(lines)


def _breaks(day: list[str]) -> dict[int, tuple[str, int]]:
    """A break after the first third, lunch near the middle, a break before the end (by notebook index)."""
    n = len(day)
    marks = {max(0, n // 3 - 1): ("break", 15), max(0, n // 2): ("lunch", 60), max(0, (3 * n) // 4): ("break", 15)}
    return {i: v for i, v in sorted(marks.items()) if i < n - 1}


def agenda_block() -> str:
    core = pack(HALF_DAY, "cpu", HALF_DAY_SESSION_MINUTES, exercises=False)[0]
    rest = [n[:2] for n in notebooks() if n not in core]
    half = agenda(core, "cpu", {0: ("break", 15)} if len(core) > 1 else {}, exercises=False)
    day = pack(HALF_DAY, "gpu", FULL_DAY_SESSION_MINUTES, exercises=False)[0]  # the core again, more of it
    full = agenda(day, "gpu", _breaks(day), exercises=False)
    full_rest = [n[:2] for n in notebooks() if n not in day]
    full_day = pack(notebooks(), "gpu", FULL_DAY_SESSION_MINUTES)  # the whole course, exercises in class
    plan = "\n".join(
        f"| day {i + 1} | {', '.join(n[:2] for n in day)} | {sum(slot(n, 'gpu') for n in day) / 60:.1f} h |"
        for i, day in enumerate(full_day)
    )
    return (
        "Minutes per notebook, estimated from what it asks of a learner: reading its markdown at "
        f"{READ_WORDS_PER_MIN} words a minute, {MIN_PER_CODE_CELL} min per code cell (run it, read its output), "
        f"{MIN_PER_EXERCISE} min per exercise, plus its measured run time, rounded up to 5 min.\n\n"
        f"{estimate_table()}\n\n"
        f"**Half day** (laptops, quick mode; {HALF_DAY_SESSION_MINUTES} min of sessions: the core, as much as "
        f"fits, exercises left as homework)\n\n{half}\n\nHomework after a half day: the exercises of "
        f"{', '.join(n[:2] for n in core)}, then notebooks {', '.join(rest)}.\n\n"
        f"**Full day** (a GPU per participant, full mode; {FULL_DAY_SESSION_MINUTES} min of sessions: the core, as "
        f"much as fits, exercises left as homework)\n\n{full}\n\nHomework after a full day: the exercises of "
        f"{', '.join(n[:2] for n in day)}, then notebooks {', '.join(full_rest)}.\n\n"
        f"**The whole course** (a GPU per participant, full mode; days of {FULL_DAY_SESSION_MINUTES} min of "
        f"sessions, in course order)\n\n| day | notebooks | sessions |\n|---|---|---|\n{plan}"
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
