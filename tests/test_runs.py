"""Load runs judged on repeated runs (helpers.runs), on a synthetic server whose truth is known: a single FIFO queue
fed Poisson arrivals (the same trace for every candidate of a replicate), each request's service time drawn around
its mean (CV 0.3), each run a little faster or slower than the next (3 %), each replicate's machine speed shared by
its candidates (10 %). Identical policies (A/A) must be called different in under 5 % of trials; a policy whose
service is 20 % slower (A/B) must be found in over 95 %. The requests of one run, judged as independent samples,
call the A/A pair different far more often: why the run is the unit."""

import numpy as np
import pytest

from helpers import runs as rn
from helpers.serving import poisson_arrivals
from helpers.timing import Measurement
from helpers.verdict import run_interval, verdict

TRIALS = 200


@pytest.fixture(autouse=True)
def _full_mode():
    """These tests judge the verdicts on runs: full mode's replicates (quick mode's are a smoke test)."""
    import helpers

    helpers.set_mode("full")


def test_quick_mode_takes_its_few_replicates_and_says_too_few():
    import helpers

    helpers.set_mode("quick")
    compared = rn.compare_runs({"A": lambda r: 0.01, "B": lambda r: 0.02}, float, statistic_name="s")
    assert rn.replicates() == rn.QUICK_RUNS < rn.MIN_RUNS
    assert compared.measurement("B").n == rn.QUICK_RUNS
    assert compared.verdict("B").outcome == "too few samples"
    with pytest.raises(ValueError):
        rn.compare_runs({"A": lambda r: 1, "B": lambda r: 1}, float, statistic_name="x", runs=1)


def synthetic_run(trace_seed, rng, slower=1.0, drift=1.0, rate=50.0, duration=2.0, service=0.01):
    arrivals = poisson_arrivals(rate, duration, trace_seed)
    work = service * slower * drift * np.exp(rng.normal(0, 0.03)) * rng.lognormal(-0.045, 0.3, len(arrivals))
    done, free = np.empty(len(arrivals)), 0.0
    for i, (a, w) in enumerate(zip(arrivals, work, strict=True)):
        free = max(free, a) + w
        done[i] = free
    return done - arrivals


def trial(seed, slower):
    rng = np.random.default_rng(seed)
    drifts = np.exp(rng.normal(0, 0.1, rn.MIN_RUNS))
    candidates = {
        "A": lambda r: synthetic_run(1000 * seed + r, rng, drift=drifts[r]),
        "B": lambda r: synthetic_run(1000 * seed + r, rng, slower=slower, drift=drifts[r]),
    }
    compared = rn.compare_runs(candidates, np.mean, statistic_name="mean latency", runs=rn.MIN_RUNS)
    assert all(len(v) == rn.MIN_RUNS for v in compared.values.values())  # every candidate ran every replicate
    one_run = verdict(list(compared.results["B"][0]), list(compared.results["A"][0]), independent="one run's requests")
    return compared.verdict("B"), one_run


@pytest.fixture(scope="module")
def rates():
    aa = [trial(s, 1.0) for s in range(TRIALS)]
    ab = [trial(s, 1.2) for s in range(TRIALS)]
    return {
        "A/A called different": np.mean([v.decided for v, _ in aa]),
        "A/A called different, one run's requests": np.mean([o.decided for _, o in aa]),
        "A/B found": np.mean([v.slower for v, _ in ab]),
    }


def test_identical_policies_are_called_different_in_under_5_percent(rates):
    assert rates["A/A called different"] <= 0.05, rates


def test_a_real_20_percent_difference_is_found_in_over_95_percent(rates):
    assert rates["A/B found"] >= 0.95, rates


def test_the_requests_of_one_run_are_not_independent_samples(rates):
    assert rates["A/A called different, one run's requests"] > 2 * rates["A/A called different"], rates


def test_candidates_alternate_on_the_same_traces():
    calls = []
    compared = rn.compare_runs(
        {name: (lambda r, n=name: calls.append((n, r)) or 0.01 * (r + 1)) for name in ("A", "B", "C")},
        lambda run: run,
        statistic_name="seconds",
    )
    assert [r for _, r in calls] == [r for r in range(rn.MIN_RUNS) for _ in range(3)]  # a replicate at a time
    assert [n for n, _ in calls[:6]] == ["A", "B", "C", "B", "C", "A"]  # the order rotates
    v = compared.verdict("B")
    assert v.unit == "run"
    assert v.outcome == "within noise"
    assert "6 runs each" in v.sentence()
    assert compared.table().loc["A", "verdict"] == "baseline"


def test_compare_runs_refuses_what_it_cannot_judge():
    with pytest.raises(ValueError):
        rn.compare_runs({"A": lambda r: 1}, float, statistic_name="x")
    with pytest.raises(ValueError):
        rn.compare_runs({"A": lambda r: 1, "B": lambda r: 1}, float, statistic_name="x", runs=3)
    with pytest.raises(ValueError):
        rn.compare_runs({"A": lambda r: 0.0, "B": lambda r: 1.0}, float, statistic_name="x")


def test_run_interval_is_students_t_on_log_ratios():
    ratio, low, high = run_interval([1.0, 1.1, 0.9, 1.05, 0.95, 1.0])
    assert low < ratio < high
    assert low < 1 < high
    assert np.isnan(run_interval([1.2, 1.3])[1])  # two runs: no interval


def test_a_sweep_whose_p99_falls_with_load_is_flagged():
    rising = [[0.010 + 0.001 * i for i in range(6)], [0.020 + 0.001 * i for i in range(6)]]
    assert rn.rising_with_load([10, 20], rising) is None
    falling = [[0.050 + 0.001 * i for i in range(6)], [0.020 + 0.001 * i for i in range(6)]]
    line = rn.rising_with_load([10, 20], falling)
    assert line is not None
    assert "10 → 20" in line
    assert "\n" not in line


def test_runs_measurements_pair_by_replicate():
    compared = rn.compare_runs({"A": lambda r: 0.01, "B": lambda r: 0.02}, float, statistic_name="s")
    m = compared.measurement("B")
    assert isinstance(m, Measurement)
    assert m.timer == "runs"
    assert m.samples == (0.02,) * rn.MIN_RUNS
    assert compared.verdict("B").slower
    assert compared.winner()[0] == "A"


def test_a_run_verdict_off_1_but_inside_the_margin_band_says_undecided_not_within_noise():
    compared = rn.compare_runs(
        {"A": lambda r: 1.0, "B": lambda r: [1.9, 1.2, 2.6, 1.05, 1.5, 3.0][r]}, float, statistic_name="s"
    )
    v = compared.verdict("B")
    if v.high < 1 and v.outcome == "within noise":  # the case the wording is for
        assert "undecided" in v.sentence()
        assert "excludes 1" in v.sentence()
        assert "undecided" in v.short()
    from helpers.verdict import Verdict

    made = Verdict("B", "A", "within noise", 0.55, 0.31, 0.99, 0.95, True, (6, 6), 6, unit="run")
    assert made.sentence().startswith("B against A is undecided")
    assert "within noise" not in made.sentence()
    assert made.short().startswith("undecided")
    assert made.phrase().startswith("undecided against A")
