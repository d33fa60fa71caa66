import mmap
import os

import pytest
import torch
from conftest import one_line

from helpers import memory
from helpers.models import torchvision_model


def test_peak_counts_live_tensors_not_freed_ones():
    def two_in_a_row():
        a = torch.ones(2**20)  # 4 MiB
        del a
        b = torch.ones(2**20)  # reuses the budget: the peak stays 4 MiB
        return b.sum()

    assert 4 * 2**20 <= memory.peak_allocated_bytes(two_in_a_row, "cpu") < 4 * 2**20 + 1024

    def two_at_once():
        a, b = torch.ones(2**20), torch.ones(2**20)
        return (a + b).sum()

    assert memory.peak_allocated_bytes(two_at_once, "cpu") >= 12 * 2**20  # a, b and a + b alive together


def test_in_place_and_views_allocate_nothing():
    x = torch.ones(2**20)
    assert memory.peak_allocated_bytes(lambda: x.mul_(2).view(-1, 4).t(), "cpu") == 0


def test_peak_grows_with_the_batch_for_a_real_model():
    model = torchvision_model("resnet18", "cpu")
    with torch.inference_mode():
        small = memory.peak_allocated_bytes(lambda: model(torch.randn(1, 3, 64, 64)), "cpu")
        large = memory.peak_allocated_bytes(lambda: model(torch.randn(8, 3, 64, 64)), "cpu")
    assert 0 < small < large


def test_oom_backoff_halves_the_batch_and_keeps_every_output():
    from helpers.oom import run_with_oom_backoff

    calls = []

    def limited(chunk):  # a simulated device that holds at most 5 items at a time
        calls.append(len(chunk))
        if len(chunk) > 5:
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")
        return chunk * 2

    x = torch.arange(23.0)
    result = run_with_oom_backoff(limited, x, batch=16)
    assert torch.equal(result.outputs, x * 2)
    assert result.batch == 4
    assert result.retries == [(16, 8), (8, 4)]
    assert calls[:3] == [16, 8, 4]
    assert max(calls[3:]) <= 4


def test_oom_backoff_gives_up_with_a_clear_message():
    from helpers.oom import run_with_oom_backoff

    def never_fits(chunk):
        raise torch.OutOfMemoryError("simulated")

    with pytest.raises(RuntimeError, match="even at batch 2") as info:
        run_with_oom_backoff(never_fits, torch.ones(8), batch=8, min_batch=2)
    assert one_line(info.value)
    with pytest.raises(ValueError, match="min_batch"):
        run_with_oom_backoff(lambda c: c, torch.ones(8), batch=2, min_batch=4)
    with pytest.raises(TypeError):
        run_with_oom_backoff(None, torch.ones(8), batch=2)


def test_oom_backoff_lets_other_errors_through():
    from helpers.oom import run_with_oom_backoff

    def broken(chunk):
        raise ValueError("a bug, not a memory problem")

    with pytest.raises(ValueError, match="a bug"):
        run_with_oom_backoff(broken, torch.ones(4), batch=2)


def test_cuda_memory_refuses_a_cpu():
    from helpers.memory import cuda_memory

    with pytest.raises(ValueError, match="psutil") as info:
        cuda_memory("cpu")
    assert one_line(info.value)


def test_with_memory_cap_raises_like_a_full_device_and_otherwise_returns():
    from helpers.oom import run_with_oom_backoff, with_memory_cap

    double = with_memory_cap(lambda x: x * 2, cap_bytes=4 * 10 * 4)  # room for a 40-element float32 output
    x = torch.arange(100.0)
    assert torch.equal(double(x[:10]), x[:10] * 2)
    with pytest.raises(torch.OutOfMemoryError, match="simulated"):
        double(x[:50])
    result = run_with_oom_backoff(double, x, batch=64)
    assert torch.equal(result.outputs, x * 2)
    assert result.batch <= 40


def test_oom_backoff_frees_after_each_failure_and_halves_the_failed_chunk(monkeypatch):
    import weakref

    from helpers import oom

    freed, failed_tensors = [], []
    monkeypatch.setattr(
        oom, "free_memory", lambda device=None: freed.append(all(ref() is None for ref in failed_tensors))
    )  # the failed attempt's tensors are gone by then

    def limited(chunk):
        scratch = torch.empty(1000)
        if len(chunk) > 2:
            failed_tensors.append(weakref.ref(scratch))
            raise torch.OutOfMemoryError("simulated")
        return chunk + 1

    x = torch.arange(19.0)  # chunks of 16 then a short last chunk of 3
    result = oom.run_with_oom_backoff(limited, x, batch=16)
    assert torch.equal(result.outputs, x + 1)
    assert result.retries[:3] == [(16, 8), (8, 4), (4, 2)]
    assert len(freed) == len(result.retries)
    assert all(freed)
    with pytest.raises(ValueError, match="no inputs"):
        oom.run_with_oom_backoff(limited, torch.empty(0), batch=4)


def test_the_snapshot_timeline_follows_allocations_and_frees():
    snapshot = {
        "device_traces": [
            [
                {"action": "alloc", "size": 100},
                {"action": "alloc", "size": 50},
                {"action": "free_requested", "size": 100},
                {"action": "free_completed", "size": 100},
                {"action": "segment_alloc", "size": 4096},
            ]
        ]
    }
    timeline = memory.snapshot_timeline(snapshot)
    assert timeline["live bytes"].tolist() == [100, 150, 50]
    with pytest.raises(ValueError, match="_snapshot"):
        memory.snapshot_timeline({"segments": []})


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="RssAnon and RssFile are Linux's /proc fields")
def test_loading_with_mmap_or_on_meta_holds_one_private_copy(tmp_path):
    """The three ways of loading a state dict all give a working model (the child runs it), and the invariants the
    notebook teaches hold, in private (anonymous) memory: a plain load holds two private copies while both live,
    a mapped file one private copy plus clean file pages, a mapped file assigned to a meta model no private copy
    (its pages are file-backed, read by the first forward)."""
    import torchvision

    path = tmp_path / "resnet18.pt"
    model = torchvision.models.resnet18()
    torch.save(model.state_dict(), path)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    got = {how: memory.load_memory(path, how) for how in ("torch.load", "torch.load(mmap=True)", "meta + assign")}
    assert all(list(stages) == list(memory.LOAD_STAGES) for stages in got.values()), got
    both = {how: stages["state dict loaded"] for how, stages in got.items()}
    assert both["torch.load"]["anon"] >= 1.8 * weights, both  # the model's weights and the loaded copy
    assert 0.8 * weights <= both["torch.load(mmap=True)"]["anon"] < 1.5 * weights, both  # the model's only
    assert both["meta + assign"]["anon"] < 0.2 * weights, both
    after = got["meta + assign"]["after the first forward"]
    assert after["file"] >= 0.8 * weights, after
    assert after["anon"] < 0.5 * weights, after  # read from the file, not copied
    with pytest.raises(ValueError, match="loading method"):
        memory.load_memory(path, "pickle")


def test_resident_memory_sees_a_private_allocation():
    before = memory.resident_memory()
    if before is None:
        pytest.skip("no /proc/self/status here")
    # 64 MiB of fresh private anonymous pages (MAP_SHARED would count as shmem), each written. A mapping of its
    # own, not malloc's: an allocator may hand back pages an earlier test freed and left resident (seen under xdist).
    block = mmap.mmap(-1, 64 * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1
    after = memory.resident_memory()
    assert after["anon"] - before["anon"] >= 48 * 2**20, (before, after)
    block.close()
