"""The verdict helper on synthetic samples: sessions (paired or refused), the paired and independent statistics,
their A/A and A/B rates, the practical-equivalence margin, too few samples, drift, the comparison object."""

import time

import numpy as np
import pytest
from conftest import one_line

from helpers.timing import MIN_ROUNDS, MIN_SAMPLES, Measurement, interleaved, new_session, plan
from helpers.verdict import (
    MARGIN,
    Comparison,
    Verdict,
    independent_interval,
    paired_interval,
    time_together,
    verdict,
    winner,
)

WHY = "synthetic independent samples"


def samples(median, spread=0.02, n=20, seed=0, session=None):
    rng = np.random.default_rng(seed)
    values = median * (1 + spread * rng.standard_normal(n)).clip(0.5)
    return Measurement.from_samples(values, label=f"{median}", session=session)


def pair(a_median, b_median, spread=0.02, n=20, seed=0, drift=None):
    """Two measurements of one session: per-round noise, and a drift both sides share."""
    rng = np.random.default_rng(seed)
    drift = np.ones(n) if drift is None else drift
    session = new_session("test")
    a = a_median * drift * np.exp(spread * rng.standard_normal(n))
    b = b_median * drift * np.exp(spread * rng.standard_normal(n))
    return (
        Measurement.from_samples(a, label="a", session=session),
        Measurement.from_samples(b, label="b", session=session),
    )


# -- one session, or a stated reason: otherwise no verdict ---------------------------------------------------


def test_two_sessions_are_not_compared_without_a_reason():
    fast, slow = samples(1.0, seed=1), samples(2.0, seed=2)  # no session: typed in, or two benchmark calls
    v = verdict(fast, slow)
    assert v.outcome == "separate sessions"
    assert not v.decided
    assert np.isnan(v.low)
    assert "separate sessions" in v.sentence()
    assert "time_together" in v.sentence()
    assert v.phrase() == "not compared with 2.0 (separate sessions)"
    a, _ = pair(1.0, 1.0)
    _, b = pair(1.0, 1.0)  # each from its own session
    assert verdict(a, b).outcome == "separate sessions"


def test_a_stated_reason_allows_independent_samples():
    v = verdict(samples(1.0, seed=1), samples(2.0, seed=2), independent="each is a fresh process")
    assert v.outcome == "faster"
    assert not v.paired
    assert "fresh process" in v.sentence()
    with pytest.raises(ValueError, match="independent") as info:
        verdict(samples(1.0), samples(2.0), independent=" ")
    assert one_line(info.value)


def test_one_session_is_compared_round_by_round():
    a, b = pair(1.0, 2.0)
    v = verdict(a, b)
    assert v.paired
    assert v.outcome == "faster"
    assert v.ratio == pytest.approx(2.0, rel=0.05)
    assert 1 < v.low <= v.ratio <= v.high
    assert "(interleaved)" in v.sentence()


def test_clear_loss_gives_the_interval_of_the_slowdown():
    a, b = pair(1.3, 1.0, seed=4)
    v = verdict(a, b)
    assert v.outcome == "slower"
    assert v.high < 1
    said = v.sentence()
    assert "slowdown" in said
    assert "speed-up" not in said
    low, high = (float(t) for t in said.split("interval ")[1].split("×")[0].split("–"))
    assert 1 < low <= 1 / v.ratio <= high


def test_interleaved_drift_cancels_in_the_paired_verdict():
    # Both candidates slow down 3× over the rounds (a laptop clocking down); b is always 5 % slower than a.
    a, b = pair(1e-3, 1.05e-3, spread=0.005, n=30, drift=np.linspace(1.0, 3.0, 30))
    paired = verdict(a, b)
    assert paired.paired
    assert paired.outcome == "faster"
    assert paired.ratio == pytest.approx(1.05, rel=0.01)
    unpaired = verdict(
        Measurement.from_samples(a.samples, label="a"), Measurement.from_samples(b.samples, label="b"), independent=WHY
    )
    assert not unpaired.paired, "drift hides the difference unpaired"
    assert unpaired.outcome == "within noise", "drift hides the difference unpaired"


# -- the statistic -------------------------------------------------------------------------------------------


def test_the_paired_interval_is_the_sign_test_interval():
    r = np.arange(1.0, 7.0)  # n = 6: the smallest n at 95 % (coverage 1 − 2/64), the interval is min–max
    assert paired_interval(r) == (3.5, 1.0, 6.0)
    assert np.isnan(paired_interval(r[:5])[1])  # n = 5 reaches only 93.75 %
    median, low, high = paired_interval(np.arange(1.0, 21.0))  # n = 20: ranks 6 and 15
    assert (median, low, high) == (10.5, 6.0, 15.0)


def test_one_outlier_does_not_flip_a_paired_verdict():
    a, b = pair(1.0, 1.3, n=MIN_ROUNDS, seed=3)  # the rounds a comparison takes at least
    before = verdict(a, b)
    wild = list(a.samples)
    wild[2] *= 50  # one round hit by a page fault storm
    hit = verdict(Measurement.from_samples(wild, label="a", session=a.session), b)
    assert before.outcome == hit.outcome == "faster"


@pytest.mark.parametrize(("n", "spread"), [(MIN_SAMPLES, 0.05), (10, 0.1), (20, 0.15)])
def test_aa_and_ab_rates_paired(n, spread):
    """The bar: the same function as two candidates called different ≤ 5 % of the time; a real 1.3× difference
    found ≥ 95 % of the time — with a round-to-round drift of ±20 % that both sides share."""
    rng = np.random.default_rng(n)
    aa = ab = 0
    trials = 400
    for t in range(trials):
        drift = np.exp(0.2 * rng.standard_normal(n))
        a, b = pair(1.0, 1.0, spread=spread, n=n, seed=10_000 + t, drift=drift)
        aa += verdict(a, b).decided
        a, b = pair(1.0, 1.3, spread=spread, n=n, seed=20_000 + t, drift=drift)
        ab += verdict(a, b).faster
    assert aa / trials <= 0.05, (aa / trials, ab / trials)
    assert ab / trials >= 0.95, (aa / trials, ab / trials)


def test_aa_and_ab_rates_independent():
    rng = np.random.default_rng(1)
    aa = ab = 0
    trials = 300
    for _ in range(trials):
        base = np.exp(0.05 * rng.standard_normal(10))
        aa += verdict(list(np.exp(0.05 * rng.standard_normal(10))), list(base), independent=WHY).decided
        ab += verdict(list(np.exp(0.05 * rng.standard_normal(10))), list(1.3 * base), independent=WHY).faster
    assert aa / trials <= 0.05, (aa / trials, ab / trials)
    assert ab / trials >= 0.95, (aa / trials, ab / trials)


def test_the_independent_interval_exact_and_approximate():
    b, c = np.array([2.0, 2.1, 1.9, 2.0, 2.05]), np.array([1.0, 1.02, 0.98, 1.0, 1.01])
    ratio, low, high = independent_interval(b, c)
    assert low <= ratio <= high
    assert ratio == pytest.approx(2.0, rel=0.03)
    assert np.isnan(independent_interval(b[:3], c[:3])[1])  # 3 against 3 cannot reach 95 %
    big_b, big_c = np.exp(np.random.default_rng(0).normal(0.1, 0.05, 40)), np.ones(40)
    ratio, low, high = independent_interval(big_b, big_c)  # the normal approximation, beyond 20 a side
    assert low < np.exp(0.1) < high
    huge = independent_interval(np.full(1000, 2.0) * np.linspace(0.99, 1.01, 1000), np.ones(1000))
    assert huge[1] <= 2.0 <= huge[2]  # a bootstrap of medians for request latencies by the thousand


def test_the_margin_keeps_a_tiny_certain_difference_within_noise():
    a, b = pair(1.0, 1.01, spread=0.001, n=40)  # 1 % apart, certainly: not a lesson's difference
    v = verdict(a, b)
    assert v.outcome == "within noise"
    assert v.low > 1
    assert v.ratio < 1 + MARGIN
    assert v.equivalent
    assert "same time within ±3%" in v.sentence()
    assert v.short() == "same within ±3%"
    assert verdict(a, b, margin=0).faster  # without the margin it is decided


def test_an_interval_off_1_that_reaches_the_margin_is_undecided_not_the_same():
    # 1.01-1.06x: excludes 1, so not "includes 1"; reaches past 1.03, so not "same within 3 %"; not clear of it
    v = Verdict("a", "b", "within noise", 1.03, 1.01, 1.06, 0.95, paired=True, n=(20, 20), min_samples=10)
    assert not v.equivalent
    assert not v.decided
    assert "includes 1" not in v.sentence()
    assert "undecided" in v.sentence()
    assert "more rounds" in v.sentence()
    assert v.short().startswith("undecided")
    assert "undecided against b" in v.phrase()
    inside = Verdict("a", "b", "within noise", 1.01, 0.98, 1.05, 0.95, paired=True, n=(20, 20), min_samples=10)
    assert "includes 1" in inside.sentence()
    assert inside.short() == "within noise"


def test_too_few_samples():
    a, b = pair(1.0, 2.0, n=MIN_SAMPLES - 1)
    v = verdict(a, b)
    assert v.outcome == "too few samples"
    assert np.isnan(v.low)
    assert str(MIN_SAMPLES) in v.sentence()
    assert v.phrase() == "too few samples to compare with b"
    zeros = Measurement.from_samples([0.0] * 10, label="below the timer", session="s")
    assert verdict(zeros, Measurement.from_samples([1.0] * 10, session="s")).outcome == "too few samples"
    with pytest.raises(ValueError, match="min_samples"):
        verdict(a, b, min_samples=1)


def test_the_same_samples_give_the_same_verdict():
    a, b = pair(1.0, 1.05, spread=0.1, seed=7)
    assert verdict(a, b) == verdict(a, b)


# -- interleaved, the planner and the comparison object --------------------------------------------------------


def test_interleaved_alternates_and_times_first_calls_apart():
    order = []
    ms = interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        warmup=0,
        repeats=MIN_ROUNDS,
        budget=None,
        min_sample_time=1e-9,
    )
    assert set(ms) == {"a", "b"}
    assert ms["a"].session == ms["b"].session
    assert ms["a"].n == ms["b"].n == MIN_ROUNDS
    assert ms["a"].first_call is not None
    rounds = order[2:]  # after the two first calls: one call per sample, the order rotating each round
    assert rounds[:4] == ["a", "b", "b", "a"]
    assert verdict(ms["a"], ms["b"]).paired


def test_interleaved_takes_the_minimum_rounds_even_when_a_call_outlasts_the_budget():
    ms = interleaved({"a": lambda: time.sleep(0.03), "b": lambda: time.sleep(0.03)}, warmup=0, budget=0.05)
    assert ms["a"].n == ms["b"].n == MIN_ROUNDS, "a comparison's minimum, not 'too few samples'"
    assert ms["a"].meta["over_budget_s"] > 0
    cmp = Comparison(measurements=ms, baseline="a")
    assert "beyond the" in cmp.note


def test_interleaved_stays_within_its_budget_past_the_minimum():
    start = time.perf_counter()
    ms = interleaved({"a": lambda: time.sleep(0.01), "b": lambda: time.sleep(0.01)}, repeats=1000, budget=0.3)
    assert time.perf_counter() - start < 0.02 + 0.3 + 1.0  # ignoring the budget: 20 s
    assert MIN_ROUNDS <= ms["a"].n < 1000
    assert ms["a"].n == ms["b"].n
    assert "over_budget_s" not in ms["a"].meta


def test_the_planner_fits_the_minimum_rounds_and_sizes_samples():
    p = plan([1e-5, 1e-4], remaining=1.0, min_sample_time=1e-3, min_rounds=MIN_ROUNDS)
    assert p.numbers == (100, 10)  # each sample lasts 1 ms
    assert p.rounds >= MIN_ROUNDS
    assert p.rounds * p.seconds_per_round <= 1.0
    slow = plan([0.5], remaining=1.0)  # a call too slow for the minimum: one call a sample, and fewer rounds
    assert slow.numbers == (1,)
    assert slow.rounds == 2
    assert plan([1e-6], remaining=float("inf")).rounds == float("inf")
    assert plan([1e-3], remaining=0.012, number=50).numbers == (2,)  # an asked number never runs past the budget


def test_time_together_returns_every_number_from_one_session():
    x = np.arange(20_000, dtype=np.float64)
    cmp = time_together({"slow": lambda: np.sort(np.tile(x, 4)), "fast": lambda: x.sum()}, budget=1.0)
    assert cmp.baseline == "slow"
    assert {m.session for m in cmp.measurements.values()} == {cmp["slow"].session}
    v = cmp.verdict("fast")
    assert v.paired
    assert v.ratio == cmp.speedup("fast")
    assert cmp.verdicts() == {"fast": v}
    best, against = cmp.winner()
    assert best == "fast"
    assert against[0].paired
    assert cmp.winner(among=["slow"]) == ("slow", [])  # the only allowed candidate wins without a verdict
    assert cmp.winner(among=["slow", "fast"])[0] == "fast"
    with pytest.raises(KeyError, match="not a candidate"):
        cmp.winner(among=["slow", "nope"])
    table = cmp.table()
    assert table.loc["slow", "verdict"] == "baseline"
    assert table.loc["fast", "verdict"] == v.short()
    with pytest.raises(KeyError, match="not a candidate"):
        cmp["missing"]
    with pytest.raises(ValueError, match="against itself"):
        cmp.verdict("slow")  # the baseline against the baseline: a mistake, not a tie
    with pytest.raises(ValueError, match="baseline"):
        time_together({"a": lambda: None, "b": lambda: None}, baseline="c")


def test_winner_in_one_session_is_decided_round_by_round():
    # 'b' has the lower median of raw samples only because its rounds fell in the machine's fast stretch;
    # round by round it is 10 % slower than 'a' every time
    session = new_session("test")
    drift = np.array([1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0])
    a = Measurement.from_samples(1.0 * drift, label="a", session=session)
    b = Measurement.from_samples(1.1 * np.roll(drift, 0), label="b", session=session)
    best, against = winner([b, a])
    assert best.label == "a"
    assert against[0].faster
    best, vs = winner([samples(2.0, seed=1), samples(1.0, seed=2)])  # separate sessions: no verdict
    assert best.label == "1.0"
    assert vs[0].outcome == "separate sessions"


@pytest.mark.parametrize("bad", [[], [1.0, -1.0], [float("nan")], "fast"])
def test_bad_input_is_refused_in_one_line(bad):
    with pytest.raises(ValueError) as info:
        verdict(bad, samples(1.0))
    assert one_line(info.value)


def test_bad_options_are_refused_in_one_line():
    for kwargs in ({"confidence": 1.5}, {"confidence": 0}, {"min_samples": 0}, {"resamples": 3}, {"margin": -1}):
        with pytest.raises(ValueError) as info:
            verdict(samples(1.0), samples(2.0), **kwargs)
        assert one_line(info.value)
    with pytest.raises(ValueError, match="two labelled callables"):
        interleaved({"a": lambda: None})
    with pytest.raises(ValueError, match="repeats"):
        interleaved({"a": lambda: None, "b": lambda: None}, repeats=0)
    asked_three = interleaved({"a": lambda: None, "b": lambda: None}, repeats=3, budget=None)
    assert asked_three["a"].n == MIN_ROUNDS  # the minimum is taken whatever repeats says
    with pytest.raises(ValueError, match="seed"):
        verdict(samples(1.0), samples(2.0), seed="x")
    with pytest.raises(ValueError, match="items"):
        interleaved({"a": lambda: None, "b": lambda: None}, items=0)


def test_a_setup_call_runs_before_each_sample_of_its_candidate_untimed():
    calls = []
    ms = interleaved(
        {"plain": lambda: calls.append("plain"), "after setup": lambda: calls.append("timed")},
        setup={"after setup": lambda: (calls.append("setup"), time.sleep(0.02))},
        warmup=2,
        budget=None,
        min_sample_time=1e-3,
    )
    timed = [i for i, c in enumerate(calls) if c == "timed"]  # every call, the first and warm-up ones too
    assert len(timed) == 1 + 2 + ms["after setup"].n
    assert all(calls[i - 1] == "setup" for i in timed)
    assert ms["after setup"].number == 1
    assert ms["after setup"].median < 0.01, "the setup's 20 ms are outside the timed region"
    with pytest.raises(ValueError, match="not a candidate"):
        interleaved({"a": lambda: None, "b": lambda: None}, setup={"c": lambda: None})


def test_cache_flusher_overwrites_twice_the_last_cache():
    from helpers.device import last_level_cache_bytes
    from helpers.timing import cache_flusher

    flush = cache_flusher("cpu")
    flush()
    assert flush.nbytes >= min(2 * (last_level_cache_bytes() or 64 * 2**20), 512 * 2**20)  # twice the last cache
    assert int(flush.buffer.abs().sum()) == 0  # it really overwrote the buffer


def test_a_comparison_judges_time_per_item_across_batch_sizes():
    x = np.arange(160_000, dtype=np.float64)  # 16× the work of the other: decided even beside a busy test run
    cmp = time_together(
        {"batch 4": lambda: np.sort(x), "batch 1": lambda: np.sort(x[:10_000])},
        items={"batch 4": 4, "batch 1": 1},
        budget=1.0,
    )
    per_call, per_item = cmp.verdict("batch 4", "batch 1"), cmp.verdict("batch 4", "batch 1", per_item=True)
    assert per_call.slower
    assert per_item.paired
    assert per_item.ratio > per_call.ratio
    no_items = time_together({"a": lambda: None, "b": lambda: None}, budget=0.2)
    with pytest.raises(ValueError, match="items"):
        no_items.verdict("b", per_item=True)


def test_too_few_samples_says_how_many_the_interval_needs():
    a = Measurement.from_samples([1.0, 1.1, 1.2], label="a")
    b = Measurement.from_samples([2.0, 2.1, 2.2], label="b")
    v = verdict(a, b, min_samples=3, independent="each is a fresh process")
    assert v.outcome == "too few samples", v.sentence()
    assert "at least 4 each" in v.sentence(), v.sentence()
    one = verdict(a, Measurement.from_samples([2.0], label="b"), min_samples=3, independent="fresh processes")
    assert "at least 4 each" in one.sentence(), one.sentence()  # below min_samples too: the real need, not 3


def test_independent_is_refused_for_the_samples_of_one_benchmark_run():
    """Two in-process benchmark runs of the same function were called different 9 times in 20 as independent
    samples (a step change inside one run moves all its samples): the run is the unit, so one run's samples are
    never passed as independent."""
    from helpers.timing import benchmark

    a = benchmark(lambda: sum(range(100)), repeats=6, budget=0.2)
    b = benchmark(lambda: sum(range(100)), repeats=6, budget=0.2)
    assert verdict(a, b).outcome == "separate sessions"
    with pytest.raises(ValueError, match="one benchmark run"):
        verdict(a, b, independent="two runs")


def test_a_stall_of_every_candidate_in_the_same_rounds_is_named_and_a_lone_tail_is_not():
    from helpers.timing import Measurement
    from helpers.verdict import stall_reason

    calm = [1e-3] * 40
    stalled = {n: Measurement(samples=tuple(calm[:10] + [9e-3, 8e-3] + calm[12:]), label=n) for n in "ab"}
    assert "round 11 to 12" in stall_reason(Comparison(measurements=stalled, baseline="a"))
    one_tail = {
        "a": Measurement(samples=tuple(calm[:10] + [9e-3] + calm[11:]), label="a"),
        "b": Measurement(samples=tuple(calm), label="b"),
    }
    assert stall_reason(Comparison(measurements=one_tail, baseline="a")) is None  # a candidate's own tail
