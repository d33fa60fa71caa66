"""Busy-machine detection: simulated, and once with real load (two CPU-spinning processes)."""

import contextlib
import subprocess
import sys
import time

import pytest
import torch

from helpers import device
from helpers.timing import benchmark


def test_an_idle_load_is_not_busy_and_says_nothing():
    load = device.Load(usable_cpus=2, seconds=1.0, others_cpus=0.05, steal=0.0, loadavg=0.3)
    assert not load.busy
    assert load.reason() is None


def test_other_processes_or_steal_make_it_busy_and_say_why():
    others = device.Load(usable_cpus=2, seconds=1.0, others_cpus=1.8, steal=0.0, loadavg=3.9)
    assert others.busy
    assert "other processes used 1.8 of the 2 CPUs" in others.reason()
    assert "load average 3.9" in others.reason()
    stolen = device.Load(usable_cpus=4, seconds=1.0, others_cpus=0.0, steal=0.2, loadavg=None)
    assert stolen.busy
    assert "stole 20%" in stolen.reason()
    assert "VM" in stolen.reason()
    unknown = device.Load(usable_cpus=2, seconds=1.0, others_cpus=None, steal=None, loadavg=None)
    assert not unknown.busy  # counters unreadable: no claim either way


def test_machine_load_refuses_a_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        device.machine_load(0)


def test_benchmark_records_the_load_of_its_samples():
    m = benchmark(torch.mm, torch.randn(64, 64), torch.randn(64, 64), repeats=5, budget=0.2)
    assert m.load is not None
    assert m.load["usable_cpus"] == device.usable_cpus()
    assert m.load["seconds"] > 0


SPIN = "import time\nend = time.time() + 20\nwhile time.time() < end:\n    pass\n"
# Started through a parent that exits at once: the spinner is not this process's child (a child's work, like a
# DataLoader worker's, counts as this process's own), as another program on the machine would not be.
LAUNCH = (
    "import subprocess, sys\n"
    "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True,\n"
    "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nprint(p.pid)\n"
)


def _spinner() -> int:
    out = subprocess.run([sys.executable, "-c", LAUNCH, SPIN], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_own_threads_are_not_other_processes():
    import threading

    control = device.machine_load(1.0)  # what other programs on a shared CI machine use anyway
    stop = time.perf_counter() + 1.0
    worker = threading.Thread(target=lambda: [None for _ in iter(lambda: time.perf_counter() < stop, False)])
    meter = device.LoadMeter()
    worker.start()
    worker.join()
    load = meter.stop()
    assert load.others_cpus is not None, (load, control)
    assert control.others_cpus is not None, (load, control)
    # the worker's second of CPU counted as others would add about 1.0 CPU to what the control saw
    assert load.others_cpus < control.others_cpus + device.BUSY_OTHERS_SHARE * load.usable_cpus, (load, control)


def test_real_load_from_spinning_processes_is_detected():
    # one spinner per usable CPU (two on the course's 2-core machine): others use about half the CPU time
    import os
    import signal

    spinners = [_spinner() for _ in range(device.usable_cpus())]
    try:
        time.sleep(0.5)  # let them start spinning
        load = device.machine_load(1.0)
        assert load.busy, f"{len(spinners)} spinning processes on {device.usable_cpus()} CPUs were not detected: {load}"
        assert "other processes used" in load.reason()

        # A call of fixed wall time (CPU-bound, so it competes with the spinners): a kernel such as torch.mm gets
        # preempted during warm-up, its per-call estimate comes out inflated, and the samples then take a window
        # far shorter than the budget (58 ms in one CI run), too short for the tick counters to see the load.
        def work(seconds=0.02):
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass

        m = benchmark(work, device="cpu", repeats=20, min_sample_time=0.05, budget=1.0)
        assert m.load["seconds"] >= 0.5, m.load  # the premise: a window of most of the 1 s budget
        assert m.busy, m.load
        assert "the machine was busy" in m.summary(), m.load
    finally:
        for pid in spinners:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
