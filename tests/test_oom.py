"""helpers.oom: the one out-of-memory module behind batching's search and memory's back-off."""

import weakref

import pytest
import torch
from conftest import one_line

from helpers import batching, memory, oom


def test_each_function_has_one_home():
    for name in ("largest_fitting_batch", "FitSearch", "memory_capped"):
        assert not hasattr(batching, name), f"batching.{name}: import it from helpers.oom, its one home"
    for name in ("run_with_oom_backoff", "free_memory", "with_memory_cap", "BackoffResult"):
        assert not hasattr(memory, name), f"memory.{name}: import it from helpers.oom, its one home"


def test_search_and_backoff_free_through_the_one_rule(monkeypatch):
    freed = []
    monkeypatch.setattr(oom, "free_memory", lambda device=None: freed.append(device))

    def fits_up_to_5(chunk_or_batch):
        n = chunk_or_batch if isinstance(chunk_or_batch, int) else len(chunk_or_batch)
        if n > 5:
            raise torch.OutOfMemoryError("simulated")
        return chunk_or_batch

    search = oom.largest_fitting_batch(fits_up_to_5, limit=64)
    assert search.largest == 5
    assert len(freed) == sum(not ok for _, ok in search.attempts)
    freed.clear()
    result = oom.run_with_oom_backoff(fits_up_to_5, torch.arange(12.0), batch=8)
    assert torch.equal(result.outputs, torch.arange(12.0))
    assert result.retries == [(8, 4)]
    assert freed == [torch.device("cpu")]  # freed once, on the inputs' device


def test_the_failed_attempt_is_released_before_memory_is_freed(monkeypatch):
    refs = []
    released = []
    monkeypatch.setattr(oom, "free_memory", lambda device=None: released.append(refs[-1]() is None))

    def big_then_oom(b):
        scratch = torch.ones(1000)
        refs.append(weakref.ref(scratch))
        if b > 2:
            raise torch.OutOfMemoryError("simulated")

    assert oom.largest_fitting_batch(big_then_oom, limit=4).largest == 2  # 4 and then 3 ran out of memory
    assert released == [True, True]


def test_a_measured_cap_refuses_a_call_over_it_and_frees_its_result():
    capped = oom.with_memory_cap(lambda x: x * 2, cap_bytes=4 * 10 * 4)  # room for 40 float32 outputs
    x = torch.arange(100.0)
    assert torch.equal(capped(x[:40]), x[:40] * 2)
    kept = []

    def remember(v):
        out = v * 2
        kept.append(weakref.ref(out))
        return out

    refusing = oom.with_memory_cap(remember, cap_bytes=4 * 10 * 4)
    with pytest.raises(torch.OutOfMemoryError, match="simulated") as info:
        refusing(x[:41])
    assert one_line(info.value)
    assert "over the cap of 160" in str(info.value)
    del info
    assert kept[-1]() is None  # the refused call's output is not held anywhere


def test_a_returned_peak_cap_drives_the_search():
    capped = oom.with_memory_cap(lambda b: 1000 * b, 50_000, peak="returned")
    assert capped(50) == 50_000
    with pytest.raises(torch.OutOfMemoryError):
        capped(51)
    assert oom.largest_fitting_batch(capped).largest == 50
    assert oom.largest_fitting_batch(oom.memory_capped(lambda b: 1000 * b, 50_000)).largest == 50


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: oom.with_memory_cap(lambda x: x, 0), ValueError, "cap_bytes"),
        (lambda: oom.with_memory_cap(lambda x: x, True), ValueError, "cap_bytes"),
        (lambda: oom.with_memory_cap(lambda x: x, 10, peak="guessed"), ValueError, "peak"),
        (lambda: oom.with_memory_cap(None, 10), TypeError, "with_memory_cap"),
        (lambda: oom.largest_fitting_batch(lambda b: None, start=0), ValueError, "start"),
        (lambda: oom.largest_fitting_batch(lambda b: None, start=8, limit=4), ValueError, "limit"),
        (lambda: oom.run_with_oom_backoff(lambda c: c, torch.ones(4), batch=True), ValueError, "batch"),
    ],
)
def test_bad_arguments_get_one_line(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert one_line(info.value)


# -- a real CPU allocation failure (the CPU allocator raises RuntimeError, not torch.OutOfMemoryError) ----------


def _real_allocation(b: int) -> torch.Tensor:
    # 8 MiB at b=1, ×8 per step: 16 TiB at b=8, which no machine's allocator grants. torch.empty touches no page,
    # so the batches that do fit cost nothing.
    return torch.empty(2 ** (20 + 3 * b), dtype=torch.uint8)


def test_a_real_cpu_allocation_failure_is_recognised():
    with pytest.raises(RuntimeError) as info:
        _real_allocation(8)
    assert not isinstance(info.value, torch.OutOfMemoryError)
    assert oom.is_out_of_memory(info.value)
    assert not oom.is_out_of_memory(RuntimeError("shape mismatch"))


def test_the_search_survives_a_real_cpu_allocation_failure():
    search = oom.largest_fitting_batch(_real_allocation, start=1, limit=64, device="cpu")
    assert 1 <= search.largest < 8
    assert not search.hit_limit
    assert (8, False) in search.attempts, search.attempts


def test_the_back_off_survives_a_real_cpu_allocation_failure():
    def step(chunk):  # a chunk of more than 2 items asks for 16 TiB
        _real_allocation(8 if len(chunk) > 2 else 1)
        return chunk * 2

    x = torch.arange(10.0)
    result = oom.run_with_oom_backoff(step, x, batch=8, device="cpu")
    assert torch.equal(result.outputs, x * 2)
    assert result.retries


def test_other_runtime_errors_still_propagate():
    def broken(b):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes"):
        oom.largest_fitting_batch(broken, device="cpu")


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_a_capped_child_process_runs_a_small_batch_and_runs_out_of_memory_on_a_large_one():
    from functools import partial

    outcomes = oom.attempts_under_cap(partial(oom.torchvision_batches, "resnet18", 64), [8, 1024], 100 * 2**20)
    assert [o["batch"] for o in outcomes] == [8, 1024]
    assert outcomes[0] == {"batch": 8, "outcome": "ran", "error": ""}
    assert outcomes[1]["outcome"] != "ran"
    assert outcomes[1]["error"]  # the real failure, with what the library said


def test_a_capped_child_needs_a_picklable_builder():
    with pytest.raises(TypeError, match="build"):
        oom.attempts_under_cap("resnet18", [1], 2**20)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux only")
def test_the_search_runs_real_calls_under_a_real_cap_and_says_where_it_stopped():
    from functools import partial

    found = oom.largest_under_cap(partial(oom.torchvision_batches, "resnet18", 64), 48 * 2**20, limit=512)
    ran = [batch for batch, ok in found["attempts"] if ok]
    assert found["attempts"][0] == (1, True)
    assert found["largest"] == max(ran) < 512
    assert found["first_failure"]
    assert found["first_failure"][1]  # what the library said when memory ran out
    assert found["stopped"] is None or found["stopped"].startswith("RuntimeError")  # a failure not named OOM
