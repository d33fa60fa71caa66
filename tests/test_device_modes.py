import os

import pytest
import torch
from conftest import one_line

from helpers.device import choose_device, environment_report, machine_id, sync
from helpers.modes import course_mode, pick


def test_default_device_is_what_is_there():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and torch.backends.mps.is_available():
        expected = "mps"
    assert choose_device().type == expected


def test_cpu_can_always_be_chosen():
    assert choose_device("cpu") == torch.device("cpu")
    assert choose_device(torch.device("cpu")) == torch.device("cpu")
    sync("cpu")  # a no-op that must not raise


def test_cuda_without_a_gpu_says_what_to_do(no_gpu):
    for asked in ("cuda", "cuda:0", torch.device("cuda")):
        with pytest.raises(ValueError, match="use device='cpu'") as info:
            choose_device(asked)
        assert one_line(info.value)
    with pytest.raises(ValueError):
        sync("cuda")


@pytest.mark.parametrize("bad", ["tpu", "gpu", "", 3.5])
def test_unknown_devices_are_refused(bad):
    with pytest.raises(ValueError) as info:
        choose_device(bad)
    assert one_line(info.value)


def test_environment_report_and_machine_id():
    report = environment_report()
    for key in ("machine_id", "device", "python", "torch", "torchvision", "cpu", "usable_cpus", "torch_threads"):
        assert report[key] not in (None, ""), key
    assert report["torch"] == torch.__version__
    mid = machine_id()
    assert mid == report["machine_id"]
    assert mid == machine_id()
    assert mid.startswith(choose_device().type + "-")
    assert all(c.isalnum() or c == "-" for c in mid)


def test_cache_line_is_a_plausible_power_of_two():
    from helpers.device import cache_line_bytes

    line = cache_line_bytes()
    assert 16 <= line <= 512
    assert line & (line - 1) == 0


def test_mode_reads_the_environment(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "quick")
    assert course_mode() == "quick"
    assert pick(1, 2) == 1
    monkeypatch.setenv("COURSE_MODE", "FULL")
    assert course_mode() == "full"
    assert pick(1, 2) == 2
    monkeypatch.delenv("COURSE_MODE")
    assert course_mode() == "full"


def test_set_mode_decides_without_touching_the_environment(monkeypatch):
    from helpers import set_mode

    monkeypatch.setenv("COURSE_MODE", "full")
    assert set_mode("quick") == "quick"
    assert course_mode() == "quick"
    assert pick(1, 2) == 1
    assert os.environ["COURSE_MODE"] == "full"  # the notebook's MODE wins; the environment is left alone
    assert set_mode(" Full ") == "full"
    assert pick(1, 2) == 2
    for bad in ("fast", "", 1, True):
        with pytest.raises(ValueError, match="MODE = 'quick'") as info:
            set_mode(bad)
        assert one_line(info.value)
    assert course_mode() == "full"  # a refused value changes nothing
    monkeypatch.setenv("COURSE_MODE", "quick")
    assert set_mode(None) == "quick"
    assert course_mode() == "quick"  # None: back to COURSE_MODE


def test_unknown_mode_says_what_to_do(monkeypatch):
    monkeypatch.setenv("COURSE_MODE", "fast")
    with pytest.raises(ValueError, match="COURSE_MODE=quick") as info:
        course_mode()
    assert one_line(info.value)
    with pytest.raises(ValueError):
        pick(1, 2, mode="medium")


def test_torch_threads_sets_and_puts_back():
    from helpers.device import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"), torch_threads(0):
        pass
