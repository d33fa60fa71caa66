"""Busy-machine detection: simulated, and once with real load (two CPU-spinning processes)."""

import subprocess
import sys
import time

import pytest
import torch

from helpers import device
from helpers.timing import benchmark


def test_an_idle_load_is_not_busy_and_says_nothing():
    load = device.Load(usable_cpus=2, seconds=1.0, others_cpus=0.05, steal=0.0, loadavg=0.3)
    assert not load.busy and load.reason() is None


def test_other_processes_or_steal_make_it_busy_and_say_why():
    others = device.Load(usable_cpus=2, seconds=1.0, others_cpus=1.8, steal=0.0, loadavg=3.9)
    assert others.busy and "other processes used 1.8 of the 2 CPUs" in others.reason()
    assert "load average 3.9" in others.reason()
    stolen = device.Load(usable_cpus=4, seconds=1.0, others_cpus=0.0, steal=0.2, loadavg=None)
    assert stolen.busy and "stole 20%" in stolen.reason() and "VM" in stolen.reason()
    unknown = device.Load(usable_cpus=2, seconds=1.0, others_cpus=None, steal=None, loadavg=None)
    assert not unknown.busy  # counters unreadable: no claim either way


def test_machine_load_refuses_a_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        device.machine_load(0)


def test_benchmark_records_the_load_of_its_samples():
    m = benchmark(torch.mm, torch.randn(64, 64), torch.randn(64, 64), repeats=5, budget=0.2)
    assert m.load is not None and m.load["usable_cpus"] == device.usable_cpus()
    assert m.load["seconds"] > 0


SPIN = "import time\nend = time.time() + 20\nwhile time.time() < end:\n    pass\n"


def test_real_load_from_two_spinning_processes_is_detected():
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    try:
        time.sleep(0.5)  # let them start spinning
        load = device.machine_load(1.0)
        assert load.busy, f"two spinning processes on {device.usable_cpus()} CPUs were not detected: {load}"
        assert "other processes used" in load.reason()
        m = benchmark(torch.mm, torch.randn(128, 128), torch.randn(128, 128), repeats=20, budget=0.5)
        assert m.busy and "the machine was busy" in m.summary(), m.load
    finally:
        for p in spinners:
            p.kill()
            p.wait()
