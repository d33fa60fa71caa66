import math
import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import one_line

from helpers.timing import Measurement, benchmark, format_rate, format_seconds
from helpers.verdict import compare


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
    m = benchmark(lambda: calls.append(1), warmup=2, repeats=4, min_sample_time=2e-3, budget=None)  # no stall cuts it
    assert m.number > 1, "a call far below the timer's resolution must be repeated within a sample"
    assert len(calls) == 1 + 2 + 4 * m.number


def test_fixed_number_is_respected():
    calls = []
    m = benchmark(lambda: calls.append(1), warmup=0, repeats=3, number=7, budget=None)  # clamping: tested below
    assert m.number == 7
    assert m.n == 3
    assert len(calls) == 1 + 21


def test_first_call_is_timed_apart():
    state = {"first": True}

    def slow_first_call():
        if state["first"]:
            state["first"] = False
            time.sleep(0.2)

    m = benchmark(slow_first_call, warmup=1, repeats=5)
    assert m.first_call is not None
    assert m.first_call >= 0.2
    assert m.median < 0.05
    assert m.max < 0.2


# -- the time budget (these run in quick mode, set by conftest; each passes its budget explicitly) ------------


def test_budget_stops_early_with_enough_samples_for_a_verdict():
    # 0.3 s holds about 29 sleeps of 10 ms: MIN_SAMPLES (5) still fit if a loaded VM wakes each one 50 ms late
    start = time.perf_counter()
    m = benchmark(time.sleep, 0.01, warmup=0, repeats=1000, budget=0.3)
    assert 3 <= m.n < 50
    assert not m.budget_limited
    assert m.budget == 0.3  # ignoring the budget: 1000 samples, 10 s
    assert time.perf_counter() - start < 0.3 + 0.01 + 1.0  # the budget, the first call, slack for a busy machine


def test_default_budget_follows_the_mode(monkeypatch):
    from helpers.timing import DEFAULT_BUDGET, default_budget

    assert default_budget() == DEFAULT_BUDGET[0]  # quick
    monkeypatch.setenv("COURSE_MODE", "full")
    assert default_budget() == DEFAULT_BUDGET[1]
    m = benchmark(time.sleep, 0.001, repeats=3)
    assert m.budget == DEFAULT_BUDGET[1]


def test_a_call_longer_than_the_budget_gives_one_sample_and_says_so():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.3)

    start = time.perf_counter()
    m = benchmark(slow, warmup=5, repeats=20, budget=0.05)  # a call six times the budget
    assert len(calls) == 2
    assert m.n == 1
    assert m.first_call >= 0.3
    assert m.budget_limited
    assert "budget-limited" in m.summary()
    assert "budget" in m.advice  # the first call, then one timed sample
    assert time.perf_counter() - start < 2 * 0.3 + 1.5  # 20 samples would be 6 s


def test_explicit_number_and_repeats_never_run_past_the_budget():
    start = time.perf_counter()
    m = benchmark(time.sleep, 0.02, warmup=1, repeats=100, number=20, budget=0.2)  # 20 calls = 0.4 s a sample
    elapsed = time.perf_counter() - start
    assert m.number < 20, "an explicit number is clamped to fit the budget"
    assert m.meta["number_asked"] == 20, "an explicit number is clamped to fit the budget"
    assert elapsed < 0.02 * 2 + 0.2 + 0.5, f"ran {elapsed:.2f} s against a 0.2 s budget"


def test_a_compiling_first_call_does_not_cost_the_samples():
    state = {"first": True}

    def compile_then_fast():
        if state["first"]:
            state["first"] = False
            time.sleep(0.3)  # longer than the whole budget, like a torch.compile
        time.sleep(0.001)

    m = benchmark(compile_then_fast, warmup=2, repeats=20, budget=0.2)
    assert m.first_call >= 0.3, m
    assert not m.budget_limited, m
    assert m.n >= 5, m


def test_budget_none_runs_every_repeat():
    m = benchmark(time.sleep, 0.002, warmup=0, repeats=30, number=1, budget=None)
    assert m.n == 30
    assert m.budget is None
    assert not m.budget_limited


def test_probe_never_runs_a_size_predicted_over_the_limit(monkeypatch):
    import helpers.timing as timing

    ran = []

    def fake_timed_call(fn, *args, **kwargs):  # a fake clock: a size-n call takes 1e-3·(n/10)³ s
        return fn(), None

    monkeypatch.setattr(timing, "timed_call", fake_timed_call)

    def make(n):
        return lambda: (ran.append(n), 1e-3 * (n / 10) ** 3)[1]

    probe = timing.fit_to_budget(make, [10, 20, 40, 80], limit=0.05, exponent=3)
    assert probe.size == 20
    assert set(probe.timed) == {10, 20}
    assert set(ran) == {10, 20}, "the 40 and 80 calls (64 ms and 512 ms predicted) must not run"
    assert probe.predicted[40] == pytest.approx(0.064)
    assert probe.predicted[80] == pytest.approx(0.512)
    assert "not run" in probe.summary()
    ran.clear()
    slow = timing.fit_to_budget(lambda n: lambda: (ran.append(n), 1.0)[1], [10, 20], limit=0.05)
    assert slow.size is None, "a cold call over the limit is the probe: no second call"
    assert ran == [10], "a cold call over the limit is the probe: no second call"
    with pytest.raises(ValueError, match="exponent"):
        timing.fit_to_budget(make, [10], exponent="3")
    with pytest.raises(ValueError, match="sizes"):
        timing.fit_to_budget(make, [])


def test_first_call_and_samples_share_the_callers_autograd_state():
    from helpers.timing import timed_call

    seen = []
    record = lambda: seen.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))  # noqa: E731
    benchmark(record, warmup=1, repeats=2, budget=None)
    assert set(seen) == {(True, False)}, "benchmark must not change the caller's autograd state"
    seen.clear()
    with torch.no_grad():
        benchmark(record, warmup=1, repeats=2, budget=None)
        timed_call(record)
    assert set(seen) == {(False, False)}
    seen.clear()
    benchmark(record, warmup=1, repeats=2, budget=None, inference_mode=True)
    timed_call(record, inference_mode=True)
    assert set(seen) == {(False, True)}, "inference_mode=True applies to the first call and every sample"


def test_flush_cache_takes_one_call_per_sample_and_flushes_outside_the_clock():
    from helpers.timing import _CacheFlusher

    flusher = _CacheFlusher(torch.device("cpu"))
    flush_s = min(benchmark(flusher, repeats=3, budget=None, warmup=1).samples)
    x = torch.randn(1024)
    m = benchmark(torch.add, x, 1.0, repeats=5, budget=None, flush_cache=True)
    assert m.cache_flushed
    assert m.number == 1
    assert m.n == 5
    assert m.median < flush_s / 5, f"a sample ({m.median:.2e} s) must not contain the flush ({flush_s:.2e} s)"


def test_torch_workload_and_items_give_throughput():
    x = torch.randn(64, 64)
    m = benchmark(torch.mm, x, x, items=64, repeats=5, label="mm")
    assert m.device == "cpu"
    assert m.timer == "perf_counter"
    assert m.throughput == pytest.approx(64 / m.median)


@pytest.mark.gpu(reason="CUDA events exist only on a GPU")
def test_cuda_uses_events():
    x = torch.randn(256, 256, device="cuda")
    m = benchmark(torch.mm, x, x, repeats=5)
    assert m.timer == "cuda events"
    assert m.median > 0


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
    assert m.timer == "torch.utils.benchmark"
    assert m.label == "converted"
    assert m.device == "cpu"
    assert m.median == pytest.approx(tm.median)
    assert m.iqr == pytest.approx(tm.iqr)
    assert m.noisy == (not tm.meets_confidence(0.1))


def test_noise_flag():
    steady = Measurement.from_samples([1.0, 1.01, 0.99, 1.0, 1.02])
    noisy = Measurement.from_samples([1.0, 2.0, 1.0, 3.0, 1.5, 2.5])
    assert not steady.noisy
    assert "noisy" not in repr(steady)
    assert steady.advice is None
    assert noisy.noisy
    assert "noisy" in repr(noisy)
    assert "IQR" in noisy.advice
    assert "re-run" in noisy.advice


def test_noise_says_why_a_fastest_sample_far_below_the_median():
    # the review's case: every sample waited for a time slice (~13.6 ms) except one (6.4 µs); a tight IQR
    delayed = Measurement.from_samples([13.6e-3, 13.7e-3, 6.4e-6, 13.5e-3, 13.6e-3, 13.6e-3])
    assert delayed.relative_iqr < 0.1
    assert delayed.noisy
    assert "fastest sample" in delayed.advice
    assert "delayed" in delayed.advice


def test_noise_says_the_machine_was_busy():
    busy_load = {"usable_cpus": 2, "seconds": 1.0, "others_cpus": 1.6, "steal": 0.0, "loadavg": 3.1, "busy": True}
    m = Measurement.from_samples([1.0, 1.01, 0.99, 1.0], load=busy_load)
    assert m.busy
    assert m.noisy
    assert "other processes used 1.6 of the 2 CPUs" in m.summary()
    assert "close other programs" in m.advice


def test_a_mostly_noisy_table_says_so_once(capsys):
    from helpers.verdict import noise_note

    noisy = [Measurement.from_samples([1.0, 2.0, 1.0, 3.0], label=str(i)) for i in range(3)]
    steady = Measurement.from_samples([1.0, 1.0, 1.0, 1.0], label="ok")
    assert noise_note([steady, noisy[0]]) is None
    note = noise_note([steady, *noisy])
    assert note.startswith("⚠ 3 of 4 rows are noisy")
    assert "re-run" in note
    compare([steady, *noisy])
    assert capsys.readouterr().out.count("rows are noisy") == 1


def test_sweep_warning_names_a_drop_that_is_beyond_noise():
    from helpers.verdict import sweep_warning

    def m(t):
        return Measurement.from_samples(t * (1 + 0.01 * np.sin(np.arange(9))))

    assert sweep_warning([1, 2, 4], [m(1e-3), m(2e-3), m(4e-3)]) is None
    text = sweep_warning([1, 2, 4], [m(1e-3), m(2e-3), m(1e-3)])
    assert "2 → 4" in text
    assert "1 → 2" not in text
    assert sweep_warning([1, 2], [m(1e-3), m(1.001e-3)]) is None  # within noise: not called a drop
    assert "not drift" not in text  # sizes timed apart: the drop may be a busy machine

    def together(t):  # sizes of one session (time_together): judged round by round
        return Measurement(samples=tuple(t * (1 + 0.01 * np.sin(np.arange(10)))), session="sweep")

    text = sweep_warning([1, 2, 4], [together(1e-3), together(2e-3), together(1e-3)])
    assert "2 → 4" in text
    assert "one session, so this is not drift" in text
    assert sweep_warning([1, 2, 4], [together(1e-3), together(2e-3), together(4e-3)]) is None


def test_to_dict_is_json_ready():
    import json

    m = Measurement.from_samples([0.001, 0.002, 0.003], label="x", items=4, first_call=0.5)
    data = json.loads(json.dumps(m.to_dict()))
    assert data["median"] == pytest.approx(0.002)
    assert data["samples"] == [0.001, 0.002, 0.003]
    assert data["throughput"] == pytest.approx(2000)


# -- units --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1.234e-3, "1.23 ms"),
        (1.5e-6, "1.50 µs"),
        (12.0, "12.0 s"),
        (2.5e-8, "25.0 ns"),
        (0.99999, "1.00 s"),
        (123.456, "123 s"),
        (0.0, "0.00 ns"),
    ],
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_format_rate_and_repr_units():
    assert format_rate(123456.0) == "123k items/s"
    assert format_rate(2.5e9, "FLOP") == "2.5G FLOP/s"
    m = Measurement.from_samples([2e-3, 2e-3, 2e-3], label="conv", items=8, first_call=1.5)
    text = repr(m)
    assert "conv" in text
    assert "2.00 ms" in text
    assert "first call 1.50 s" in text
    assert "items/s" in text


def test_compare_judges_one_session_and_refuses_separate_ones():
    slow = Measurement.from_samples([2.0, 2.1, 1.9, 2.0, 2.0, 2.05], label="eager", session="s")
    fast = Measurement.from_samples([0.5, 0.51, 0.49, 0.5, 0.5, 0.52], label="compiled", session="s")
    table = compare([slow, fast], baseline="eager")
    assert table.loc["eager", "speed-up"] == 1.0
    assert table.loc["eager", "verdict"] == "baseline"
    assert table.loc["compiled", "speed-up"] == pytest.approx(4.0, rel=0.03)
    assert table.loc["compiled", "verdict"].endswith("faster")
    assert "–" in table.loc["compiled", "interval"]
    other = Measurement.from_samples([0.5] * 6, label="another cell")  # another session: not compared
    row = compare([slow, other]).loc["another cell"]
    assert row["verdict"] == "separate sessions"
    assert pd.isna(row["speed-up"])
    assert row["interval"] == ""
    why = "synthetic independent samples"
    assert compare([slow, other], independent=why).loc["another cell", "verdict"].endswith("faster")
    few = Measurement.from_samples([0.5, 0.5, 0.5], label="three samples", session="s")
    assert compare([slow, few], independent=why).loc["three samples", "verdict"] == "too few samples"
    assert "speed-up" not in compare([slow, fast], baseline=None).columns
    with pytest.raises(ValueError, match="baseline"):
        compare([slow, fast], baseline="missing")
    with pytest.raises(ValueError, match="baseline"):
        compare([slow, fast], baseline=5)


# -- bad input ----------------------------------------------------------------------------------------------


def test_non_callable_is_refused_with_a_hint():
    with pytest.raises(TypeError, match="callable") as info:
        benchmark(torch.ones(3))
    assert one_line(info.value)
    assert "benchmark(model, x)" in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"repeats": 0},
        {"warmup": -1},
        {"number": 0},
        {"items": 0},
        {"repeats": 2.5},
        {"min_sample_time": 0},
        {"budget": -1},
        {"budget": 0},
        {"budget": math.inf},
        {"budget": True},
        {"budget": "long"},
    ],
)
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
    assert seconds >= 0.01
    assert torch.equal(out, torch.full((3,), 2.0))
    assert not out.is_inference()  # the caller's autograd state, as benchmark's
    assert timed_call(lambda x: x * 2, torch.ones(3), inference_mode=True)[1].is_inference()
    with pytest.raises(TypeError, match="callable"):
        timed_call(None)
