import math
import time

import numpy as np
import pytest
import torch
from conftest import one_line

from helpers.timing import Measurement, benchmark, compare, format_rate, format_seconds


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# -- timing a workload of known duration --------------------------------------------------------------------
# Each workload lasts *at least* its nominal time, so the lower bound is exact; the upper bound is generous
# (a busy machine slows things down, it never speeds them up), so these cannot flake.

def test_sleep_of_known_duration():
    m = benchmark(time.sleep, 0.02, warmup=1, repeats=5)
    assert m.number == 1
    assert all(s >= 0.02 for s in m.samples)
    assert 0.02 <= m.median < 0.5


def test_busy_wait_of_known_duration():
    m = benchmark(spin, 0.005, warmup=1, repeats=7)
    assert 0.005 <= m.median < 0.25
    assert m.min >= 0.005


def test_tiny_workload_is_batched_and_every_call_runs():
    calls = []
    m = benchmark(lambda: calls.append(1), warmup=2, repeats=4, min_sample_time=2e-3)
    assert m.number > 1, "a call far below the timer's resolution must be repeated within a sample"
    assert len(calls) == 1 + 2 + 4 * m.number


def test_fixed_number_is_respected():
    calls = []
    m = benchmark(lambda: calls.append(1), warmup=0, repeats=3, number=7)
    assert m.number == 7 and m.n == 3 and len(calls) == 1 + 21


def test_first_call_is_timed_apart():
    state = {"first": True}

    def slow_first_call():
        if state["first"]:
            state["first"] = False
            time.sleep(0.2)

    m = benchmark(slow_first_call, warmup=1, repeats=5)
    assert m.first_call is not None and m.first_call >= 0.2
    assert m.median < 0.05 and m.max < 0.2


def test_max_time_stops_early_but_keeps_three_samples():
    m = benchmark(time.sleep, 0.01, warmup=0, repeats=1000, max_time=0.05)
    assert 3 <= m.n < 50


def test_torch_workload_and_items_give_throughput():
    x = torch.randn(64, 64)
    m = benchmark(torch.mm, x, x, items=64, repeats=5, label="mm")
    assert m.device == "cpu" and m.timer == "perf_counter"
    assert m.throughput == pytest.approx(64 / m.median)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA events exist only on a GPU")
def test_cuda_uses_events():
    x = torch.randn(256, 256, device="cuda")
    m = benchmark(torch.mm, x, x, repeats=5)
    assert m.timer == "cuda events" and m.median > 0


# -- statistics ---------------------------------------------------------------------------------------------

def test_statistics_match_numpy():
    rng = np.random.default_rng(0)
    samples = rng.lognormal(mean=-7, sigma=0.3, size=101)
    m = Measurement.from_samples(samples)
    assert m.n == 101
    assert m.median == pytest.approx(np.median(samples))
    assert m.iqr == pytest.approx(np.percentile(samples, 75) - np.percentile(samples, 25))
    assert m.p95 == pytest.approx(np.percentile(samples, 95))
    assert m.mean == pytest.approx(samples.mean())
    assert m.min <= m.p25 <= m.median <= m.p75 <= m.p95 <= m.p99 <= m.max


def test_statistics_agree_with_torch_utils_benchmark():
    from torch.utils.benchmark import Measurement as TorchMeasurement
    from torch.utils.benchmark.utils.common import TaskSpec

    raw = [0.010, 0.011, 0.012, 0.013, 0.020, 0.011, 0.012]
    tm = TorchMeasurement(number_per_run=1, raw_times=raw, task_spec=TaskSpec(stmt="pass", setup="pass"))
    m = Measurement.from_torch(tm, label="converted", device="cpu")
    assert m.timer == "torch.utils.benchmark" and m.label == "converted" and m.device == "cpu"
    assert m.median == pytest.approx(tm.median)
    assert m.iqr == pytest.approx(tm.iqr)
    assert m.noisy == (not tm.meets_confidence(0.1))


def test_noise_flag():
    steady = Measurement.from_samples([1.0, 1.01, 0.99, 1.0, 1.02])
    noisy = Measurement.from_samples([1.0, 2.0, 1.0, 3.0, 1.5, 2.5])
    assert not steady.noisy and "noisy" not in repr(steady)
    assert noisy.noisy and "noisy" in repr(noisy)


def test_to_dict_is_json_ready():
    import json

    m = Measurement.from_samples([0.001, 0.002, 0.003], label="x", items=4, first_call=0.5)
    data = json.loads(json.dumps(m.to_dict()))
    assert data["median"] == pytest.approx(0.002) and data["samples"] == [0.001, 0.002, 0.003]
    assert data["throughput"] == pytest.approx(2000)


# -- units --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "text"), [
    (1.234e-3, "1.23 ms"), (1.5e-6, "1.50 µs"), (12.0, "12.0 s"), (2.5e-8, "25.0 ns"),
    (0.99999, "1.00 s"), (123.456, "123 s"), (0.0, "0.00 ns"),
])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_format_rate_and_repr_units():
    assert format_rate(123456.0) == "123k items/s"
    assert format_rate(2.5e9, "FLOP") == "2.5G FLOP/s"
    m = Measurement.from_samples([2e-3, 2e-3, 2e-3], label="conv", items=8, first_call=1.5)
    text = repr(m)
    assert "conv" in text and "2.00 ms" in text and "first call 1.50 s" in text and "items/s" in text


def test_compare_speedups_come_from_medians():
    slow = Measurement.from_samples([2.0, 2.0, 2.0], label="eager")
    fast = Measurement.from_samples([0.5, 0.5, 0.5], label="compiled")
    table = compare([slow, fast], baseline="eager")
    assert table.loc["eager", "speed-up"] == 1.0
    assert table.loc["compiled", "speed-up"] == 4.0
    assert "speed-up" not in compare([slow, fast], baseline=None).columns
    with pytest.raises(ValueError, match="baseline"):
        compare([slow, fast], baseline="missing")
    with pytest.raises(ValueError, match="baseline"):
        compare([slow, fast], baseline=5)


# -- bad input ----------------------------------------------------------------------------------------------

def test_non_callable_is_refused_with_a_hint():
    with pytest.raises(TypeError, match="callable") as info:
        benchmark(torch.ones(3))
    assert one_line(info.value) and "benchmark(model, x)" in str(info.value)


@pytest.mark.parametrize("kwargs", [
    {"repeats": 0}, {"warmup": -1}, {"number": 0}, {"items": 0}, {"repeats": 2.5},
    {"min_sample_time": 0}, {"max_time": -1},
])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError) as info:
        benchmark(lambda: None, **kwargs)
    assert one_line(info.value)


def test_cuda_without_gpu_is_refused(no_gpu):
    with pytest.raises(ValueError, match="no usable CUDA GPU") as info:
        benchmark(lambda: None, device="cuda")
    assert one_line(info.value)


@pytest.mark.parametrize("samples", [[], [1.0, -1.0], [math.nan]])
def test_bad_samples_are_refused(samples):
    with pytest.raises(ValueError):
        Measurement.from_samples(samples)


def test_timed_call_returns_the_result_and_the_time():
    from helpers.timing import timed_call

    seconds, out = timed_call(lambda x: (time.sleep(0.01), x * 2)[1], torch.ones(3))
    assert seconds >= 0.01 and torch.equal(out, torch.full((3,), 2.0))
    assert out.is_inference()  # run under inference_mode, as a served model is
    with pytest.raises(TypeError, match="callable"):
        timed_call(None)
