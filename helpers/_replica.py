"""The child side of :func:`helpers.coldstart.launch`: one fresh Python process that stands for a new server
replica. It is run as a script (``python helpers/_replica.py '<json>'``), never imported, and imports nothing
of the course's before the replica script does, so its clock sees what a real replica pays.

It stamps the wall clock (``time.time()``, comparable with the parent's) at each phase: interpreter up,
``import torch``, the device's start (the CUDA context on a GPU; nothing on a CPU), reading the input, the
replica script's ``load(artifacts, device)``, the first call, then checks the first answer
against the expected output (``torch.testing.assert_close``), runs the script's optional
``after_first(artifacts)`` (untimed: e.g. saving a compile cache for the next replica) and times steady-state
calls under a budget.
The last line of stdout is one JSON object (prefixed with ``REPLICA-RESULT``); a failure is a non-zero exit
status and one line on stderr that says what went wrong.
"""

import time

T_START = time.time()

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Run as a script, this file's folder (helpers/) is first on sys.path: take it off, so that the course's modules
# (helpers/profiling.py, helpers/timing.py, ...) can never shadow a library's module of the same name.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

MARKER = "REPLICA-RESULT "
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def fail(code: int, message: str) -> None:
    print(f"replica: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def count_files(folder: str | None) -> int:
    if not folder or not os.path.isdir(folder):
        return 0
    return sum(len(files) for _, _, files in os.walk(folder))


def peak_rss_mib() -> float | None:
    """This process's peak resident memory (VmHWM: unlike getrusage's maxrss, reset by exec, so not the
    parent's), or None where /proc is missing (macOS)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main() -> None:
    args = json.loads(sys.argv[1])
    caches_before = {name: count_files(os.environ.get(name)) for name in CACHE_VARIABLES}
    if args["expect_empty_cache"] and any(caches_before.values()):
        fail(3, f"the caches were to start empty and hold files: {caches_before}")

    import torch

    t_import = time.time()
    # fp32 means fp32 here too (the first answer is checked against a strict fp32 run): the course's one switch,
    # loaded from its file, which imports nothing but torch, so the replica's clock sees no course import
    spec = importlib.util.spec_from_file_location("course_fp32", Path(__file__).with_name("fp32.py"))
    fp32 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fp32)
    fp32.exact_fp32()
    device = torch.device(args["device"])
    if device.type == "cuda":  # the CUDA context (driver, memory pools) starts here, not inside a later phase
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)
    t_device = time.time()
    data = torch.load(args["data"], weights_only=True)
    inputs, expected = data["inputs"].to(device), data["expected"]
    t_read = time.time()

    namespace = runpy.run_path(args["script"])
    if not callable(namespace.get("load")):
        fail(4, f"{args['script']} defines no load(artifacts, device) function returning the model to call")
    model = namespace["load"](Path(args["artifacts"]), device)
    t_load = time.time()

    def call():
        with torch.inference_mode():
            out = model(inputs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out

    out = call()
    t_first = time.time()
    try:
        torch.testing.assert_close(out.detach().cpu().float(), expected.float(), rtol=args["rtol"], atol=args["atol"])
    except AssertionError as exc:
        fail(5, "the first answer differs from the expected output: " + " ".join(str(exc).split())[:300])
    error = float((out.detach().cpu().float() - expected.float()).abs().max())
    if callable(namespace.get("after_first")):  # e.g. save what the first call compiled, for the next replica
        namespace["after_first"](Path(args["artifacts"]))

    samples, spent = [], 0.0
    while len(samples) < args["max_repeats"] and (len(samples) < args["min_repeats"] or spent < args["budget"]):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
        spent += samples[-1]

    result = {
        "start": T_START,
        "import": t_import,
        "device": t_device,
        "read": t_read,
        "load": t_load,
        "first": t_first,
        "max_abs_error": error,
        "samples": samples,
        "caches_before": caches_before,
        "caches_after": {name: count_files(os.environ.get(name)) for name in CACHE_VARIABLES},
        "peak_rss_mib": peak_rss_mib(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "extra": namespace.get("REPORT", {}),
    }
    print(MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
    sys.stderr.flush()
    # A replica that has answered is done: skip the interpreter's teardown (seconds with torch's libraries
    # loaded), which is no part of what a replica costs to start.
    os._exit(0)
