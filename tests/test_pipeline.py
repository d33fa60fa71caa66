"""helpers.pipeline: prefetchers keep order and errors, overlap really happens, nothing is left running."""

import threading
import time

import pytest
import torch
from conftest import one_line

from helpers import pipeline


def slow(n, delay=0.02):
    for i in range(n):
        time.sleep(delay)
        yield i


def test_thread_prefetcher_keeps_order_and_loads_ahead():
    produced = [threading.Event() for _ in range(6)]

    def items():
        for i in range(6):
            produced[i].set()
            yield i

    seen = []
    for item in pipeline.ThreadPrefetcher(items(), depth=2):
        if item + 1 < 6:
            # while the consumer still holds item i, item i+1 is loaded: that is the overlap (no clock involved)
            assert produced[item + 1].wait(timeout=5), f"item {item + 1} was not loaded ahead"
        seen.append(item)
    assert seen == list(range(6))


def test_thread_prefetcher_raises_the_loaders_error_at_its_place():
    def broken():
        yield 1
        raise OSError("corrupt JPEG")

    seen = []
    with pytest.raises(OSError, match="corrupt JPEG"):
        for item in pipeline.ThreadPrefetcher(broken()):
            seen.append(item)
    assert seen == [1]


@pytest.mark.parametrize("source", [lambda: slow(1000, delay=0.001), lambda: [1, 2, 3]])
def test_thread_prefetcher_stops_its_thread_when_the_consumer_stops_early(source):
    def loaders() -> set[threading.Thread]:  # only the prefetcher's threads: others may come and go meanwhile
        return {t for t in threading.enumerate() if t.name == "ThreadPrefetcher"}

    before = loaders()
    iterator = iter(pipeline.ThreadPrefetcher(source(), depth=2))
    assert next(iterator) in (0, 1)
    started = loaders() - before
    assert len(started) == 1, "the prefetcher loads in one thread of its own"
    time.sleep(0.05)  # let the loader fill the queue and block on it
    iterator.close()  # what a `break` out of a for loop does, once the generator is collected
    (thread,) = started
    thread.join(timeout=10)
    assert not thread.is_alive(), "the loader thread outlived the consumer"


def test_thread_prefetcher_bad_depth():
    with pytest.raises(ValueError, match="depth") as info:
        pipeline.ThreadPrefetcher([1, 2], depth=0)
    assert one_line(info.value)


def test_cuda_prefetcher_refuses_a_cpu_device():
    with pytest.raises(ValueError, match="ThreadPrefetcher") as info:
        pipeline.CudaPrefetcher([torch.ones(2)], device="cpu")
    assert one_line(info.value)


@pytest.mark.gpu(reason="CUDA streams need a GPU")
def test_cuda_prefetcher_delivers_the_same_batches_on_the_gpu():
    batches = [(torch.randn(4, 8).pin_memory(), torch.arange(4)) for _ in range(5)]
    out = list(pipeline.CudaPrefetcher(batches, "cuda"))
    assert len(out) == 5
    assert all(x.is_cuda and y.is_cuda for x, y in out)
    for (x, y), (gx, gy) in zip(batches, out, strict=True):
        assert torch.equal(x, gx.cpu())
        assert torch.equal(y, gy.cpu())


def test_to_device_follows_nested_batches():
    batch = {"x": torch.ones(2), "pair": (torch.zeros(1), "label")}
    moved = pipeline.to_device(batch, "cpu")
    assert torch.equal(moved["x"], batch["x"])
    assert moved["pair"][1] == "label"


def test_overlap_seconds():
    copies = [(0, 10), (20, 30)]
    kernels = [(5, 12), (8, 25)]  # merged: (5, 25)
    assert pipeline.overlap_seconds(copies, kernels) == 5 + 5
    assert pipeline.overlap_seconds(copies, []) == 0
    assert pipeline.overlap_seconds([(0, 4)], [(0, 4)]) == 4


def test_dataloader_workers_are_counted_and_then_gone():
    import gc

    from torch.utils.data import DataLoader

    before = {p.pid for p in pipeline.child_processes()}  # e.g. a compiler's helper processes
    loader = DataLoader(list(range(8)), batch_size=2, num_workers=2, persistent_workers=True)
    assert sum(len(b) for b in loader) == 8
    assert len(pipeline.child_processes(exclude=before)) == 2
    del loader
    gc.collect()
    assert pipeline.wait_for_children(exclude=before) == []


def test_uint8_photos_normalised_on_the_device_equal_the_float_pipeline():
    from helpers.data import PhotoDataset, normalize_on_device

    floats, raw = PhotoDataset(size=32), PhotoDataset(size=32, normalize=False)
    assert raw[0].dtype == torch.uint8
    assert floats[0].dtype == torch.float32
    batch = torch.stack([raw[i] for i in range(3)])
    torch.testing.assert_close(normalize_on_device(batch), torch.stack([floats[i] for i in range(3)]))
    from helpers.data import imagenet_stats

    assert imagenet_stats("cpu")[0] is imagenet_stats("cpu")[0]  # made once per device, not per batch
    with pytest.raises(ValueError, match="uint8 batch"):
        normalize_on_device(batch.float())


def test_the_worker_watch_sees_only_what_started_after_it():
    from torch.utils.data import DataLoader

    watch = pipeline.WorkerWatch()
    loader = DataLoader(list(range(8)), batch_size=2, num_workers=1, persistent_workers=True)
    list(loader)
    assert len(watch.alive()) >= 1
    del loader
    import gc

    gc.collect()
    assert watch.none_left()


def test_overlap_never_exceeds_the_time_either_side_ran():
    # two copies over the same 10 s, against a kernel running throughout: 10 s of overlap, not 20
    assert pipeline.overlap_seconds([(0, 10), (0, 10)], [(0, 10)]) == 10
    for bad in ([(2.0, 1.0)], [(float("nan"), 1.0)], [(1.0,)]):
        with pytest.raises(ValueError, match="not an interval"):
            pipeline.overlap_seconds(bad, [(0, 1)])
