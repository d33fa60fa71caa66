import math

import pytest
import torch
from conftest import one_line

from helpers import roofline as rl


def synthetic() -> rl.Roofline:
    return rl.Roofline(device="cpu", machine_id="test", peak_flops={"fp32": 100e9, "bf16": 400e9},
                       bandwidth=10e9, dispatch_latency=2e-6)


def test_ridge_point_and_attainable():
    rf = synthetic()
    assert rf.ridge_point("fp32") == pytest.approx(10.0)
    assert rf.ridge_point("bf16") == pytest.approx(40.0)
    assert rf.attainable(1.0) == pytest.approx(10e9)  # memory roof
    assert rf.attainable(1000.0) == pytest.approx(100e9)  # compute roof
    assert rf.attainable(10.0) == pytest.approx(100e9)  # the ridge


def test_place_memory_and_compute_bound_work():
    rf = synthetic()
    # a pointwise op on 1M fp32 elements: 1 FLOP per 8 bytes, at half the bandwidth
    flops, nbytes = rl.elementwise_cost(1_000_000)
    assert (flops, nbytes) == (1e6, 8e6)
    placed = rf.place(flops, nbytes, seconds=nbytes / 5e9)
    assert placed["bound"] == "memory" and placed["fraction_of_bound"] == pytest.approx(0.5)
    assert placed["achieved_bytes_per_s"] == pytest.approx(5e9)
    # a big matmul at 80 % of peak
    flops, nbytes = rl.matmul_cost(1024, 1024, 1024)
    assert flops == 2 * 1024**3 and nbytes == 4 * 3 * 1024**2
    placed = rf.place(flops, nbytes, seconds=flops / 80e9)
    assert placed["bound"] == "compute" and placed["fraction_of_bound"] == pytest.approx(0.8)
    assert not placed["overhead_bound"]
    assert rf.place(1.0, 8.0, seconds=3e-6)["overhead_bound"]
    # short but at its roof (a large add on a fast GPU): roof-bound, not overhead-bound
    flops, nbytes = rl.elementwise_cost(1_000)
    seconds = nbytes / 9e9  # 0.9 µs, under 10 dispatches of 2 µs, at 90 % of the memory roof
    assert seconds < 10 * rf.dispatch_latency
    assert not rf.place(flops, nbytes, seconds=seconds)["overhead_bound"]


def test_roofline_bad_input():
    rf = synthetic()
    with pytest.raises(ValueError, match="no peak measured") as info:
        rf.ridge_point("fp8")
    assert one_line(info.value)
    with pytest.raises(ValueError):
        rf.place(1.0, 1.0, seconds=0)
    with pytest.raises(ValueError):
        rl.arithmetic_intensity(1.0, 0)
    with pytest.raises(ValueError):
        rl.matmul_flops("int3")


def test_measurements_are_real_and_positive():
    flops, m = rl.matmul_flops("fp32", "cpu", n=128, repeats=3)
    assert m.n == 3 and m.median > 0
    assert flops == pytest.approx(2 * 128**3 / m.min)
    bw, m = rl.memory_bandwidth("cpu", nbytes=8 * 2**20, repeats=3)
    assert bw == pytest.approx(2 * 8 * 2**20 / m.min)
    latency, m = rl.dispatch_latency("cpu", repeats=3)
    assert latency == m.median and math.isfinite(latency) and latency > 0
    with pytest.raises(ValueError, match="1 MiB"):
        rl.memory_bandwidth("cpu", nbytes=1000)


def test_beyond_cache_is_at_least_the_minimum():
    size = rl.beyond_cache_bytes("cpu", 2**20)
    assert 2**20 <= size <= 2**30
    assert rl.beyond_cache_bytes("cpu", 2**20, cap=2**21) <= 2**21


def test_measure_roofline_quick():
    rf = rl.measure_roofline("cpu")
    assert set(rf.peak_flops) == {"fp32", "bf16"}
    assert rf.bandwidth > 0 and rf.dispatch_latency > 0 and not rf.h2d_bandwidth
    assert len(rf.measurements) == 4
    table = rf.table()
    assert "memory bandwidth" in table.index and "ridge point fp32" in table.index
    assert rf.to_dict()["machine_id"] == rf.machine_id


def test_h2d_needs_a_gpu(no_gpu):
    with pytest.raises(ValueError, match="needs a CUDA GPU") as info:
        rl.h2d_bandwidth()
    assert one_line(info.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host→device copies exist only with a GPU")
def test_h2d_on_gpu():
    bw, m = rl.h2d_bandwidth(nbytes=16 * 2**20, repeats=3)
    assert bw == pytest.approx(16 * 2**20 / m.min)
    with pytest.raises(ValueError, match="device='cuda'"):
        rl.h2d_bandwidth(device="cpu")


def test_compare_with_reference_has_this_run_and_the_shipped_machines():
    table = rl.compare_with_reference(synthetic())
    assert "test (this run, quick mode)" in table.index
    assert table.loc["test (this run, quick mode)", "fp32 GFLOP/s"] == 100.0
    assert table.loc["test (this run, quick mode)", "memory GB/s"] == 10.0
    assert any("(reference, full mode)" in name for name in table.index)
