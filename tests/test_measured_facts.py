"""Facts about the machine are measured, not read: what a dtype costs (the speed table beside the CPU's flags),
the cache that matters (the knee of a bandwidth sweep beside the OS's figure), machines told apart by the features
that decide results, and noise that stops a decision (measured once more, then undecided)."""

import pytest

from helpers import device as dv
from helpers import results
from helpers import roofline as rl
from helpers.timing import Measurement
from helpers.verdict import settle

AMX_XEON = {"capability": "AVX512", "avx512_bf16": True, "avx512_fp16": True, "vnni": True, "amx_tile": True}
PLAIN_XEON = {"capability": "AVX512", "avx512_bf16": False, "avx512_fp16": False, "vnni": True, "amx_tile": False}


def roof(features=None, speed=None, sweep=None, reported=None) -> rl.Roofline:
    rf = rl.Roofline("cpu", "t", {"fp32": 3e11, "bf16": 1.6e11}, 1e10, 2e-6, cpu_features=features or {})
    rf.dtype_speed = {"speed": speed or {}, "kernels": {}, "undecided": None}
    rf.cache_sweep, rf.reported_cache_bytes = sweep or {}, reported
    rf.cache_bytes = rl._effective_cache(rf)
    return rf


def entry(outcome, ratio):
    return {"outcome": outcome, "ratio": ratio, "low": ratio * 0.9, "high": ratio * 1.1, "how": "interleaved with fp32"}


def test_two_hosts_sold_under_one_name_get_two_ids(monkeypatch):
    ids = []
    for features in (AMX_XEON, PLAIN_XEON):
        monkeypatch.setattr(dv, "cpu_features", lambda f=features: f)
        monkeypatch.setattr(dv, "cpu_model", lambda: "Intel(R) Xeon(R) Processor")
        monkeypatch.setattr(dv, "usable_cpus", lambda: 2)
        ids.append(dv.machine_id("cpu"))
    assert ids == ["cpu-intel-xeon-2cpu-avx512-amx-bf16-fp16-vnni", "cpu-intel-xeon-2cpu-avx512-vnni"]
    assert dv.same_model_other_features(ids[0], ids[1])
    assert not dv.same_model_other_features(ids[1], ids[1])
    assert not dv.same_model_other_features("cpu-amd-epyc-2cpu-avx2", ids[1])
    note = results.reference_note(ids[0])  # this machine is the plain Xeon now
    assert note is not None
    assert "not this machine" in note
    assert "AMX" in note
    assert "\n" not in note
    assert results.reference_note("cuda-nvidia-h200") is None


def test_a_cpu_that_advertises_bf16_but_measures_slow_is_told_so():
    rf = roof(AMX_XEON, {"matmul": {"bf16": entry("slower", 0.55)}, "conv": {"bf16": entry("slower", 0.6)}})
    line = rf.dtype_line("bf16")
    assert "0.55× fp32's speed (slower)" in line
    assert "advertises" in line
    assert "yet" in line
    assert not rf.pays("bf16")
    assert rf.faster_dtypes() == []
    assert rf.peak_flops["bf16"] < rf.peak_flops["fp32"]  # the roof agrees; the table is what decides
    table = rl.speed_table(rf)
    assert table.loc["bf16", "matmul × fp32"] == "0.55× (slower)"
    assert table.loc["bf16", "CPU advertises"] != "no units"


def test_measured_speed_decides_over_the_flags_both_ways():
    fast = roof(PLAIN_XEON, {"matmul": {"int8": entry("faster", 3.5)}})
    assert fast.pays("int8")
    assert "VNNI" in fast.dtype_line("int8")
    assert "as this CPU's VNNI allow" in fast.dtype_line("int8")
    emulated = roof(PLAIN_XEON, {"matmul": {"bf16": entry("slower", 0.2)}})
    assert "as its flags predict" in emulated.dtype_line("bf16")
    surprise = roof(PLAIN_XEON, {"matmul": {"bf16": entry("faster", 1.4)}})
    assert surprise.pays("bf16")
    assert "although the CPU advertises no" in surprise.dtype_line("bf16")
    assert "not measured" in roof(PLAIN_XEON).dtype_line("fp16")


def test_the_speed_table_really_times_every_dtype_here():
    speeds = rl.dtype_speeds("cpu", budget=0.5)
    for dtype in rl.SPEED_DTYPES:
        got = speeds["speed"]["matmul"][dtype]
        assert got["outcome"] in ("faster", "slower", "within noise", "undecided", "no kernel")
        assert got["outcome"] == "no kernel" or got["ratio"] > 0
    assert set(speeds["speed"]["conv"]) == {"bf16", "fp16"}
    assert "matmul" in speeds["kernels"]["matmul"]


def test_the_cache_is_the_knee_of_the_sweep_not_the_vms_figure():
    mib = 2**20
    sizes = [s * mib for s in (4, 16, 32, 64, 256, 512)]
    bws = [50e9, 48e9, 40e9, 23e9, 22e9, 21e9]  # the knee between 32 and 64 MiB buffers
    knee = rl.cache_knee(sizes, bws)
    assert knee["fast_up_to"] == 64 * mib
    assert knee["slow_from"] == 128 * mib
    rf = roof(sweep={**knee, "undecided": None}, reported=260 * mib)  # a VM reports the host's L3
    assert rf.cache_bytes == 64 * mib
    assert rf.fits_in_cache(50 * mib) is True
    assert rf.fits_in_cache(130 * mib) is False
    assert rf.fits_in_cache(100 * mib) is None  # straddles the knee
    line = rf.cache_line()
    assert "64.0 MiB" in line
    assert "260.0 MiB" in line
    assert "more than this machine gets" in line
    flat = rl.cache_knee(sizes, [22e9] * 6)
    assert flat["fast_up_to"] is None
    assert "no cache effect" in roof(sweep={**flat, "undecided": None}).cache_line()
    undecided = roof(sweep={**knee, "undecided": "busy"}, reported=260 * mib)
    assert undecided.cache_bytes is None
    assert "undecided" in undecided.cache_line()  # never the OS figure
    assert undecided.fits_in_cache(50 * mib) is None
    assert undecided.fits_in_cache(1024 * mib) is False  # beyond what the OS reports: an upper bound


def test_a_disturbed_sweep_does_not_move_the_stored_cache():
    rf = roof(sweep={"fast_up_to": 2**26, "slow_from": 2**27, "gain": 2.0, "undecided": None}, reported=2**28)
    busy = {"usable_cpus": 2, "seconds": 1.0, "others_cpus": 1.5, "steal": 0.0, "loadavg": 3.0, "busy": True}
    runs = [(bw, Measurement(samples=(1e-3,) * 8, label=f"copy {i}", load=busy)) for i, bw in enumerate((5e10, 2e10))]
    line = rl.reconsider_cache(rf, [2**20, 2**29], runs, store=False)
    assert "disturbed" in line
    assert rf.cache_bytes == 2**26


def busy_measurement(label="m"):
    load = {"usable_cpus": 2, "seconds": 1.0, "others_cpus": 1.5, "steal": 0.0, "loadavg": 3.0, "busy": True}
    return Measurement(samples=(1e-3,) * 8, label=label, load=load)


def test_noise_stops_a_decision_after_one_more_measurement(capsys):
    import helpers

    calls = []

    def noisy():
        calls.append(1)
        return busy_measurement("sweep")

    settled = settle(noisy, what="the p99 target")  # quick mode (the tests'): a smoke test measures once
    assert len(calls) == 1
    assert not settled.decided
    assert "quick mode does not measure again" in settled.undecided()
    helpers.set_mode("full")
    calls.clear()
    settled = settle(noisy, what="the p99 target")
    assert len(calls) == 2
    assert not settled.decided
    assert settled.attempts == 2
    assert settled.undecided().startswith("undecided: the p99 target: sweep:")
    assert "busy" in settled.undecided()
    assert "re-measuring once" in capsys.readouterr().out
    quiet = settle(lambda: Measurement(samples=(1e-3,) * 8, label="q"), what="x")
    assert quiet.decided
    assert quiet.attempts == 1
    flaky = iter([busy_measurement(), Measurement(samples=(1e-3,) * 8)])
    assert settle(lambda: next(flaky), what="x").decided  # clean the second time: decided on that one
    with pytest.raises(ValueError):
        settle(lambda: 1, what=" ")


def test_machine_id_is_stable_and_names_this_cpus_features():
    mid = dv.machine_id("cpu")
    assert mid == dv.machine_id("cpu")
    assert mid.startswith("cpu-")
    assert all(f"-{t}" in mid for t in dv.feature_tags())


def test_a_dtype_too_slow_for_rounds_is_judged_on_alternated_single_calls():
    import time

    calls = []
    slow = rl._single_calls(lambda: time.sleep(0.02), lambda: calls.append(1), probe=0.02, dev=dv.choose_device("cpu"))
    assert slow["outcome"] == "slower"
    assert slow["ratio"] < 1
    assert len(calls) == rl.SLOW_CALLS
    never = rl._single_calls(lambda: calls.append("x"), lambda: None, probe=rl.SLOW_CALL_LIMIT + 1, dev=None)
    assert never["outcome"] == "undecided"
    assert "x" not in calls  # a call beyond the limit is not repeated
    rf = roof(PLAIN_XEON, {"matmul": {"fp16": never}})
    assert "too slow to repeat" in rf.dtype_line("fp16")
    assert "nan" not in rf.dtype_line("fp16")
    assert rl.speed_table(rf).loc["fp16", "matmul × fp32"] == "undecided (one call)"


def test_a_slow_draw_of_the_largest_copy_does_not_move_the_knee_up():
    # 00's sweep on a shared host (2026-12-07): the two largest copies ran at 59 % of the memory roof, so against
    # them every copy up to 128 MiB buffers looked cache-served; against the roof the knee is at 32 MiB buffers
    mib = 2**20
    sizes = [s * mib for s in (16, 32, 64, 128, 256, 512)]
    bws = [55.1e9, 44.1e9, 26.5e9, 23.0e9, 14.7e9, 14.6e9]
    assert rl.cache_knee(sizes, bws)["fast_up_to"] == 256 * mib  # the sweep's own tail as main memory
    knee = rl.cache_knee(sizes, bws, main_memory=24.5e9)  # the memory roof: the best large copy here
    assert knee["fast_up_to"] == 64 * mib
    assert knee["slow_from"] == 128 * mib
    assert knee["gain"] == pytest.approx(44.1 / 24.5)
