"""The verdict helper on synthetic samples: a clear win, a clear loss, overlap, too few samples, drift."""

import numpy as np
import pytest
from conftest import one_line

from helpers.timing import Measurement, interleaved
from helpers.verdict import MIN_SAMPLES, verdict, winner


def samples(median, spread=0.02, n=20, seed=0):
    rng = np.random.default_rng(seed)
    return Measurement.from_samples(median * (1 + spread * rng.standard_normal(n)).clip(0.5), label=f"{median}")


def test_clear_win():
    v = verdict(samples(1.0, seed=1), samples(2.0, seed=2))
    assert v.outcome == "faster" and v.faster and not v.slower
    assert v.ratio == pytest.approx(2.0, rel=0.05) and 1 < v.low <= v.ratio <= v.high
    assert "faster" in v.sentence() and "interval" in v.sentence() and v.short().endswith("faster")


def test_clear_loss():
    v = verdict(samples(1.3, seed=3), samples(1.0, seed=4))
    assert v.outcome == "slower" and v.slower and v.high < 1
    assert "1.29× slower" in v.sentence() or "1.30× slower" in v.sentence() or "1.31× slower" in v.sentence()


def test_overlap_is_within_noise_even_at_a_ratio_a_threshold_would_call():
    # the review's case: a 0.97× step inside a 7–8 % IQR was called a regression
    v = verdict(samples(1.03, spread=0.08, n=12, seed=5), samples(1.0, spread=0.08, n=12, seed=6))
    assert v.outcome == "within noise" and v.low < 1 < v.high and not v.decided
    assert "within noise" in v.sentence()


def test_too_few_samples():
    v = verdict(samples(1.0, n=MIN_SAMPLES - 1), samples(2.0))
    assert v.outcome == "too few samples" and np.isnan(v.low)
    assert str(MIN_SAMPLES) in v.sentence()
    assert verdict(samples(1.0, n=3), samples(2.0, n=3), min_samples=3).outcome == "faster"


def test_identical_and_zero_samples():
    same = samples(1.0)
    assert verdict(same, same).outcome == "within noise"
    zeros = Measurement.from_samples([0.0] * 10, label="below the timer")
    assert verdict(zeros, samples(1.0)).outcome == "too few samples"
    with pytest.raises(ValueError, match="min_samples"):
        verdict(samples(1.0), samples(2.0), min_samples=1)


def test_a_decided_interval_near_one_is_printed_with_three_digits():
    a = Measurement.from_samples(1.0 + 1e-4 * np.sin(np.arange(40)), label="a")
    b = Measurement.from_samples(1.006 + 1e-4 * np.cos(np.arange(40)), label="b")
    v = verdict(a, b)
    assert v.outcome == "faster" and "1.00–1.01" not in v.interval and v.interval.count(".") == 2


def test_the_same_samples_give_the_same_verdict():
    a, b = samples(1.0, spread=0.1, seed=7), samples(1.05, spread=0.1, seed=8)
    assert verdict(a, b) == verdict(a, b)


def test_interleaved_drift_cancels_in_the_paired_verdict():
    # Both candidates slow down 3× over the rounds (a laptop clocking down); b is always 5 % slower than a.
    drift = np.linspace(1.0, 3.0, 30)
    noise = 1 + 0.005 * np.sin(np.arange(30))
    group = "g"
    a = Measurement.from_samples(1e-3 * drift * noise, label="a", group=group)
    b = Measurement.from_samples(1.05e-3 * drift * noise[::-1], label="b", group=group)
    paired = verdict(a, b)
    assert paired.paired and paired.outcome == "faster" and paired.ratio == pytest.approx(1.05, rel=0.01)
    unpaired = verdict(Measurement.from_samples(a.samples, label="a"), Measurement.from_samples(b.samples, label="b"))
    assert not unpaired.paired and unpaired.outcome == "within noise", "drift hides the difference unpaired"


def test_interleaved_alternates_and_times_first_calls_apart():
    order = []
    ms = interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        warmup=0,
        repeats=6,
        budget=None,
        min_sample_time=1e-9,
    )
    assert set(ms) == {"a", "b"} and ms["a"].group == ms["b"].group and ms["a"].n == ms["b"].n == 6
    assert ms["a"].first_call is not None
    rounds = order[2:]  # after the two first calls: one call per sample, the order rotating each round
    assert rounds[:4] == ["a", "b", "b", "a"]
    assert verdict(ms["a"], ms["b"]).paired


def test_winner_names_the_fastest_with_its_verdicts():
    best, vs = winner([samples(2.0, seed=1), samples(1.0, seed=2), samples(1.01, seed=3)])
    assert best.label == "1.0" and len(vs) == 2 and vs[0].outcome == "faster" and vs[1].outcome == "within noise"


@pytest.mark.parametrize("bad", [[], [1.0, -1.0], [float("nan")], "fast"])
def test_bad_input_is_refused_in_one_line(bad):
    with pytest.raises(ValueError) as info:
        verdict(bad, samples(1.0))
    assert one_line(info.value)


def test_bad_options_are_refused_in_one_line():
    for kwargs in ({"confidence": 1.5}, {"confidence": 0}, {"min_samples": 0}, {"resamples": 3}):
        with pytest.raises(ValueError) as info:
            verdict(samples(1.0), samples(2.0), **kwargs)
        assert one_line(info.value)
    with pytest.raises(ValueError, match="two labelled callables"):
        interleaved({"a": lambda: None})
    with pytest.raises(ValueError, match="seed"):
        verdict(samples(1.0), samples(2.0), seed="x")
    with pytest.raises(ValueError, match="items"):
        interleaved({"a": lambda: None, "b": lambda: None}, items=0)


def test_interleaved_stays_within_its_budget():
    import time

    start = time.perf_counter()
    ms = interleaved({"a": lambda: time.sleep(0.01), "b": lambda: time.sleep(0.01)}, repeats=1000, budget=0.3)
    assert time.perf_counter() - start < 0.02 + 0.3 + 1.0  # ignoring the budget: 20 s
    assert 1 <= ms["a"].n < 1000 and ms["a"].n == ms["b"].n


def test_phrase_names_the_baseline_for_every_outcome():
    from helpers.verdict import verdict

    fast, slow = [1.0] * 10, [2.0] * 10
    assert verdict(fast, slow).phrase().endswith("faster than baseline")
    assert verdict(fast, fast).phrase() == "within noise of baseline"
    assert verdict([1.0], slow).phrase() == "too few samples to compare with baseline"


def test_a_slowdown_is_given_with_the_interval_of_the_slowdown():
    v = verdict([2.0, 2.1, 1.9, 2.0, 2.05], [1.0, 1.02, 0.98, 1.0, 1.01], candidate_label="x", baseline_label="y")
    said = v.sentence()
    assert v.slower and "slowdown" in said and "speed-up" not in said
    low, high = (float(t) for t in said.split("interval ")[1].split("×")[0].split("–"))
    assert 1 < low <= 1 / v.ratio <= high
