import numpy as np
import pytest
import torch
from conftest import one_line

from helpers import batching, oom

BATCHES = [1, 2, 4, 8, 16, 32, 64]


def saturating(b):  # synthetic throughput: overhead-bound at small batches, saturating at 1000 items/s
    return 1000 * b / (b + 8)


def test_find_knee_on_a_synthetic_curve():
    thr = [saturating(b) for b in BATCHES]
    assert batching.find_knee(BATCHES, thr, within=0.2) == 32  # 800 ≥ 0.8 × 888.9, 16 gives 666
    assert batching.find_knee(BATCHES, thr, within=0.0) == 64
    assert batching.find_knee([1, 2, 4], [5.0, 10.0, 9.0], within=0.05) == 2  # the best need not be the last


def test_choose_batch_meets_the_target():
    p99 = [0.001 * (1 + b / 4) for b in BATCHES]  # 1.25 ms … 17 ms
    thr = [b / p for b, p in zip(BATCHES, p99, strict=True)]
    assert batching.choose_batch(BATCHES, p99, target=0.005) == 16
    assert batching.choose_batch(BATCHES, p99, target=0.005, throughputs=thr) == 16
    assert batching.choose_batch(BATCHES, p99, target=0.0001) is None
    noisy_thr = [1, 2, 9, 4, 5, 6, 7]
    assert batching.choose_batch(BATCHES, p99, target=0.005, throughputs=noisy_thr) == 4


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (([], []), {}),
        (([1, 2], [1.0]), {}),
        (([2, 1], [1.0, 2.0]), {}),
        (([1, 2], [1.0, 2.0]), {"within": 1.5}),
    ],
)
def test_knee_bad_input(args, kwargs):
    with pytest.raises(ValueError) as info:
        batching.find_knee(*args, **kwargs)
    assert one_line(info.value)


def test_oom_safe_search_with_a_simulated_limit():
    limit, seen = 700, []

    def try_batch(b):
        seen.append(b)
        if b > limit:
            raise torch.OutOfMemoryError(f"simulated OOM at {b}")

    result = oom.largest_fitting_batch(try_batch)
    assert result.largest == limit
    assert not result.hit_limit
    assert seen[:11] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # doubling, then bisection
    assert len(seen) <= 11 + 10
    assert all(ok == (b <= limit) for b, ok in result.attempts)


def test_memory_is_freed_after_the_failed_attempt_is_dropped(monkeypatch):
    import weakref

    from helpers import oom

    alive_at_free = []
    refs = []

    def try_batch(b):
        big = torch.ones(1000)
        refs.append(weakref.ref(big))
        if b > 1:
            raise torch.OutOfMemoryError("simulated")

    monkeypatch.setattr(oom, "free_memory", lambda device=None: alive_at_free.append(refs[-1]() is not None))
    oom.largest_fitting_batch(try_batch, limit=2)
    assert alive_at_free == [False]  # the failed attempt's tensor was already released when memory was freed


def test_oom_search_stops_at_the_limit_and_propagates_other_errors():
    assert oom.largest_fitting_batch(lambda b: None, limit=100).largest == 100
    with pytest.raises(ValueError, match="real bug"):
        oom.largest_fitting_batch(lambda b: (_ for _ in ()).throw(ValueError("real bug")))
    with pytest.raises(RuntimeError, match="does not fit"):
        oom.largest_fitting_batch(lambda b: (_ for _ in ()).throw(torch.OutOfMemoryError("x")))


def test_memory_cap_turns_measured_peaks_into_oom():
    capped = oom.memory_capped(lambda b: 1000 * b, cap_bytes=50_000)
    assert capped(50) == 50_000
    with pytest.raises(torch.OutOfMemoryError):
        capped(51)
    assert oom.largest_fitting_batch(capped).largest == 50


def test_latency_model_interpolates_and_extrapolates():
    service = batching.latency_model([1, 2, 4], [1.0, 1.5, 2.5])
    assert service(3) == pytest.approx(2.0)
    assert service(8) == pytest.approx(5.0)  # per-item time of the largest batch
    noisy = batching.latency_model([1, 2, 4], [1.0, 3.0, 2.0])  # a noisy dip never makes time negative
    assert noisy(100) == pytest.approx(50.0)


def test_stability_and_a_known_queue():
    service = batching.latency_model([1, 8], [0.01, 0.02])
    assert batching.is_stable(50, 1, service)
    assert not batching.is_stable(150, 1, service)
    assert batching.is_stable(150, 8, service)
    # max batch 1, no timeout, constant 10 ms service, arrivals at 50/s (M/D/1 at 50 % load):
    # the mean wait is rho / (2 mu (1 - rho)) = 0.5 / (2 * 100 * 0.5) = 5 ms, so the mean latency is 15 ms
    constant = batching.latency_model([1, 2], [0.01, 0.02])
    result = batching.simulate_server(rate=50, max_batch=1, timeout=0, service=constant, n_requests=40000)
    assert result.latencies.mean() == pytest.approx(0.015, rel=0.05)


def test_server_simulation_light_and_heavy_load():
    service = batching.latency_model([1, 64], [0.001, 0.001 + 63 * 0.0001])
    light = batching.simulate_server(rate=10, max_batch=32, timeout=0.002, service=service, n_requests=2000)
    assert light.batch_sizes.mean() < 1.2  # requests rarely meet: batches of one
    assert np.percentile(light.latencies, 50) == pytest.approx(0.002 + 0.001, rel=0.2)  # timeout + service
    heavy = batching.simulate_server(rate=20000, max_batch=32, timeout=0.002, service=service, n_requests=5000)
    assert heavy.batch_sizes.mean() > 30  # full batches
    capacity = 32 / service(32)
    assert heavy.throughput <= capacity * 1.01
    assert (heavy.latencies > 0).all()
    assert len(heavy.latencies) == 5000
    with pytest.raises(ValueError):
        batching.simulate_server(rate=0, max_batch=1, timeout=0, service=service)


def test_sweep_measures_every_batch():
    model = torch.nn.Linear(16, 4)
    table, ms = batching.sweep(
        model, lambda b: torch.randn(b, 16), [1, 2, 4], device="cpu", repeats=3, number=1, measure_memory=True
    )
    assert list(table.index) == [1, 2, 4]
    assert len(ms) == 3
    assert (table["samples"] == 3).all()
    assert all(m.number == 1 for m in ms)
    assert table.loc[4, "peak_bytes"] == 4 * 4 * 4  # the output of one call: 4 × 4 fp32
    assert table.loc[2, "throughput"] == pytest.approx(2 / table.loc[2, "p50"])
    with pytest.raises(ValueError):
        batching.sweep(model, lambda b: torch.randn(b, 16), [], device="cpu")


def test_lowest_p99_takes_the_smallest_setting_within_the_tie():
    assert batching.lowest_p99({1: 3e-3, 8: 1.005e-3, 64: 1e-3, 512: float("inf")}) == 8
    assert batching.lowest_p99({1: 3e-3, 8: 1.02e-3, 64: 1e-3}) == 64
    assert batching.lowest_p99({4: 2e-3, 2: 2e-3}, tie=0) == 2
    for bad in ({}, {1: float("nan")}, {1: -1.0}, {1: float("inf")}, [1e-3]):
        with pytest.raises(ValueError):
            batching.lowest_p99(bad)


def test_sampled_latency_draws_the_measured_tail_and_repeats_with_the_seed():
    fast = [1e-3] * 90 + [5e-3] * 10  # batch 1: a 10 % tail at 5 ms
    sampled = batching.SampledLatency([1, 4], [fast, [4e-3] * 100])
    draws = [sampled(1) for _ in range(2000)]
    assert min(draws) == pytest.approx(1e-3)
    assert max(draws) == pytest.approx(5e-3)
    assert 0.05 < sum(d > 2e-3 for d in draws) / len(draws) < 0.2  # the tail, at about its measured share
    assert sampled.median(1) == pytest.approx(1e-3)
    assert sampled(8) == pytest.approx(8e-3)  # beyond: proportional
    a = batching.simulate_server(500, 4, 1e-3, sampled, n_requests=2000, seed=3).latencies
    b = batching.simulate_server(500, 4, 1e-3, sampled, n_requests=2000, seed=3).latencies
    median_only = batching.simulate_server(500, 4, 1e-3, sampled.median, n_requests=2000, seed=3).latencies
    assert (a == b).all()
    assert np.percentile(a, 99) > np.percentile(median_only, 99)
    for bad in ([[1e-3]], [[1e-3], []], "ab"):
        with pytest.raises(ValueError):
            batching.SampledLatency([1, 4], bad)


def test_sampled_latency_draws_each_quantile_at_its_share_not_the_maximum_at_one_in_101():
    samples = list(np.linspace(1e-3, 2e-3, 199)) + [20e-3]  # one stall in 200 calls
    sampled = batching.SampledLatency([1], [samples])
    draws = np.array([sampled(1) for _ in range(40_000)])
    measured_p99 = np.percentile(samples, 99)
    assert 0.008 < (draws > measured_p99 * 1.0001).mean() < 0.012  # above the measured p99: 1 % of the draws
    assert 0.003 < (draws > 11e-3).mean() < 0.007  # the stall's half of the top stretch: its 0.5 %, not 1 %
    assert np.percentile(draws, 99) < 5e-3  # the p99 of the draws is near the measured one, not at the stall
    assert draws.max() <= 20e-3
    assert draws.min() >= 1e-3


def test_shape_buckets_are_powers_of_two_up_to_the_batch_and_at_most_eight():
    assert batching.shape_buckets(1) == [1]
    assert batching.shape_buckets(8) == [1, 2, 4, 8]
    assert batching.shape_buckets(48) == [1, 2, 4, 8, 16, 32, 48]
    assert batching.shape_buckets(1024) == [1, 16, 32, 64, 128, 256, 512, 1024]  # 1, then the largest
    assert batching.shape_buckets(64, most=3) == [1, 32, 64]
    assert batching.bucket_for(3, [1, 2, 4, 8]) == 4
    assert batching.bucket_for(8, [8, 1]) == 8
    with pytest.raises(ValueError, match="fits none of the buckets"):
        batching.bucket_for(9, [1, 2, 4, 8])
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError):
            batching.shape_buckets(bad)


def test_padded_sampled_latency_charges_a_partial_batch_its_bucket():
    sampled = batching.SampledLatency([1, 4, 8], [[1e-3] * 20, [2e-3] * 20, [6e-3] * 20], padded=True)
    assert sampled(3) == pytest.approx(2e-3)
    assert sampled(5) == pytest.approx(6e-3)
    assert sampled.median(5) == pytest.approx(6e-3)
    assert sampled.median(16) == pytest.approx(12e-3)  # the bucket's time; beyond
    plain = batching.SampledLatency([1, 4, 8], [[1e-3] * 20, [2e-3] * 20, [6e-3] * 20])
    assert plain(6) == pytest.approx(4e-3)  # not padded: interpolated
    result = batching.simulate_server(300, 8, 1e-3, sampled, n_requests=500)
    assert result.latencies.min() >= 1e-3 - 1e-12


def test_p99_over_seeds_pairs_settings_on_the_same_traces_and_ties_what_it_cannot_tell_apart():
    batches = [1, 2, 4, 8, 16, 32]
    service = batching.latency_model(batches, [1e-3 * (1 + b / 8) for b in batches])
    rate = 0.5 * 32 / service(32)  # half the capacity of full batches of 32
    cmp, unstable = batching.p99_over_seeds(rate, batches, 2e-3, service, n_requests=2000, seeds=6)
    assert unstable
    assert max(unstable) < min(cmp[label].meta["max_batch"] for label in cmp.labels)
    assert all(cmp[label].n == 6 for label in cmp.labels)
    assert len({cmp[label].session for label in cmp.labels}) == 1  # one session: the seeds are its rounds
    again, _ = batching.p99_over_seeds(rate, batches, 2e-3, service, n_requests=2000, seeds=6)
    assert [cmp[label].samples for label in cmp.labels] == [again[label].samples for label in again.labels]
    best, tied = batching.tied_settings(cmp)
    assert best in tied
    assert tied == sorted(tied)
    # every tied setting is within the noise of the best; every other one is decided against it
    decided = {cmp[v.baseline].meta["max_batch"] for v in cmp.winner()[1] if v.decided}
    assert decided.isdisjoint(tied)
    assert decided | set(tied) == {cmp[label].meta["max_batch"] for label in cmp.labels}
    with pytest.raises(ValueError, match="at least"):
        batching.p99_over_seeds(rate, batches, 2e-3, service, seeds=2)
    with pytest.raises(TypeError, match="Comparison"):
        batching.tied_settings({"max batch 1": cmp[cmp.labels[0]]})
    none, all_unstable = batching.p99_over_seeds(1e9, [1, 2], 0.0, service, seeds=6)
    assert none is None
    assert all_unstable == [1, 2]


def test_p99_over_seeds_compares_timeouts_at_one_max_batch():
    batches = [1, 2, 4, 8]
    service = batching.latency_model(batches, [1e-3 * (1 + b / 8) for b in batches])
    cmp, unstable = batching.p99_over_seeds(50.0, [8, 8, 8], [0.0, 1e-3, 1e-2], service, n_requests=1000, seeds=6)
    assert not unstable
    assert cmp.labels == ["timeout 0 s", "timeout 0.001 s", "timeout 0.01 s"]
    assert [cmp[label].meta["timeout"] for label in cmp.labels] == [0.0, 1e-3, 1e-2]
    assert cmp.verdict("timeout 0.01 s").slower  # waiting 10 ms for company at a light load only adds latency
    with pytest.raises(ValueError, match="one per max batch"):
        batching.p99_over_seeds(50.0, [8, 8], [0.0, 1e-3, 1e-2], service, seeds=6)


def test_capacity_at_target_finds_the_rate_where_a_constraint_binds_and_says_which():
    def service(b):
        return 0.001 + 0.0001 * b  # a full batch of 8: 1.8 ms, so the stability limit is 8 / 1.8 ms

    limit = 8 / service(8)
    by_ceiling = batching.capacity_at_target(service, 8, 0.0005, p99_target=1.0, ceiling=0.5, n_requests=3000)
    assert by_ceiling.binds == "the utilisation ceiling"
    assert by_ceiling.busy <= 0.5 < by_ceiling.busy + 0.05
    assert by_ceiling.stability_limit == pytest.approx(limit)
    assert 0 < by_ceiling.rate < limit
    by_target = batching.capacity_at_target(service, 8, 0.0005, p99_target=0.004, ceiling=1.0, n_requests=3000)
    assert by_target.binds == "the p99 target"
    assert by_target.p99 <= 0.004
    free = batching.capacity_at_target(service, 8, 0.0005, p99_target=10.0, ceiling=1.0, n_requests=3000)
    assert free.binds == "stability"
    assert free.rate == pytest.approx(limit, rel=0.01)
    impossible = batching.capacity_at_target(service, 8, 0.0005, p99_target=0.0005, ceiling=1.0, n_requests=3000)
    assert impossible.rate == 0
    assert "no rate" in impossible.sentence()
    with pytest.raises(ValueError, match="ceiling"):
        batching.capacity_at_target(service, 8, 0.0005, p99_target=0.01, ceiling=1.5)


def test_a_preemption_tail_is_named_and_an_ordinary_spread_is_not():
    from helpers.timing import Measurement

    quiet = [
        Measurement(samples=tuple([1e-4] * 198 + [1.6e-4, 1.7e-4]), label="b1"),
        Measurement(samples=tuple([2e-2] * 198 + [2.8e-2, 3e-2]), label="b2"),
    ]
    assert batching.tail_warning([1, 2], quiet) is None
    # the panel's case: a 142 µs call whose p99 is 8.5 ms (a few calls waited for a time slice)
    tail = quiet[:1] + [Measurement(samples=tuple([1.42e-4] * 196 + [8.5e-3] * 4), label="b2")]
    line = batching.tail_warning([1, 2], tail)
    assert line
    assert "batch 2" in line
    assert "batch 1" not in line
    assert "preemption" in line
    with pytest.raises(ValueError):
        batching.tail_warning([1, 2, 4], quiet)


def test_a_p99_target_is_met_only_within_its_order_statistic_bound_and_missed_only_beyond_the_interval():
    calls = [1e-3] * 290 + [2e-3] * 8 + [3e-3, 4e-3]  # 300 calls, p99 ≈ 2-3 ms, slowest 4 ms
    assert batching.P99_CALLS == 299
    assert 1 - 0.99**299 >= 0.95 > 1 - 0.99**298
    assert batching.p99_against(calls, 5e-3) == "meets"  # none of 300 over it
    assert batching.p99_against(calls[10:], 5e-3) == "undecided"  # 290 calls: their slowest vouches for less
    assert batching.p99_against(calls, 3.5e-3) == "undecided"  # the point p99 is under it, one call is not
    assert batching.p99_against(calls, 1.5e-3) == "misses"  # even the interval's low end (2 ms) is above
    assert batching.p99_against(calls[:50], 5e-3) == "undecided"  # 50 calls cannot vouch for a p99
    assert batching._lower_rank(200) == 195
    assert batching._lower_rank(9) == 8
    # one slow call does not block a batch for good: 473 calls allow one over the target, 628 two
    assert [batching.allowed_over(n) for n in (298, 299, 472, 473, 628)] == [None, 0, 0, 1, 2]
    assert batching.calls_to_meet(0) == 299
    assert batching.calls_to_meet(1) == 473
    assert batching.calls_to_meet(2) == 628
    one_slow = [1e-3] * 472 + [9e-3]
    assert batching.p99_against(one_slow[-300:], 5e-3) == "undecided"
    assert batching.p99_against(one_slow, 5e-3) == "meets"
    assert batching.p99_against([1e-3] * 471 + [9e-3] * 2, 5e-3) == "undecided"  # two over: 628 calls needed


def test_graphed_records_each_shape_once_and_replays_into_the_recorded_input():
    """The control flow of 09's CUDA-graph step, on a CPU: a stand-in recorder with llm.cuda_graph's interface (the
    replay holds its inputs, returns one output tensor overwritten each time)."""
    recorded = []

    def record(fn, x):
        recorded.append(len(x))
        out = fn(x)

        def replay():
            out.copy_(fn(x))
            return out

        replay.inputs = (x,)
        return replay

    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        run = batching.graphed(model, lambda b: torch.zeros(b, 3), [1, 2, 4, 8], record=record)
        assert recorded == [8, 1, 4, 2]
        assert run.shapes == (1, 2, 4, 8)  # largest and smallest first
        x = torch.randn(4, 3)
        torch.testing.assert_close(run(x), model(x))  # the batch was copied into the recorded input
        with pytest.raises(KeyError):
            run(torch.randn(3, 3))  # a size not recorded: the caller pads to a bucket (bucket_for)
        recorded.clear()
        assert batching.graphed(
            model,
            lambda b: torch.zeros(b, 3),
            [1, 2, 4, 8],
            budget_s=0.0,
            record=lambda fn, x: recorded.append(len(x)) or record(fn, x),
        ).shapes == (1, 8)
