import math

import pytest
import torch
from conftest import one_line

from helpers import roofline as rl
from helpers.device import cpu_features
from helpers.timing import Measurement


def synthetic() -> rl.Roofline:
    return rl.Roofline(
        device="cpu",
        machine_id="test",
        peak_flops={"fp32": 100e9, "bf16": 400e9},
        bandwidth=10e9,
        dispatch_latency=2e-6,
    )


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
    assert placed["bound"] == "memory"
    assert placed["fraction_of_bound"] == pytest.approx(0.5)
    assert placed["achieved_bytes_per_s"] == pytest.approx(5e9)
    # a big matmul at 80 % of peak
    flops, nbytes = rl.matmul_cost(1024, 1024, 1024)
    assert flops == 2 * 1024**3
    assert nbytes == 4 * 3 * 1024**2
    placed = rf.place(flops, nbytes, seconds=flops / 80e9)
    assert placed["bound"] == "compute"
    assert placed["fraction_of_bound"] == pytest.approx(0.8)
    assert not placed["overhead_bound"]
    assert rf.place(1.0, 8.0, seconds=3e-6)["overhead_bound"]
    # short but at its roof (a large add on a fast GPU): roof-bound, not overhead-bound
    flops, nbytes = rl.elementwise_cost(1_000)
    seconds = nbytes / 9e9  # 0.9 µs, under 10 dispatches of 2 µs, at 90 % of the memory roof
    assert seconds < 10 * rf.dispatch_latency
    assert not rf.place(flops, nbytes, seconds=seconds)["overhead_bound"]


def test_advice_only_far_below_the_roof_and_says_where_the_time_went():
    rf = synthetic()
    flops, nbytes = rl.elementwise_cost(10_000_000)
    assert rf.place(flops, nbytes, seconds=nbytes / 5e9)["advice"] is None  # 50 %: the roof limits it
    slow = rf.place(flops, nbytes, seconds=nbytes / 1e9)["advice"]  # 10 % of the memory roof
    assert "10% of the memory roof" in slow
    assert "out=" in slow
    flops, nbytes = rl.matmul_cost(1024, 1024, 1024)
    assert "compute roof" in rf.place(flops, nbytes, seconds=flops / 10e9)["advice"]
    assert rf.place(1.0, 8.0, seconds=3e-6)["advice"].startswith("overhead-bound")


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
    assert m.n == 3
    assert m.median > 0
    assert flops == pytest.approx(2 * 128**3 / m.min)
    bw, m = rl.memory_bandwidth("cpu", nbytes=8 * 2**20, repeats=3)
    assert bw == pytest.approx(2 * 8 * 2**20 / m.min)
    latency, m = rl.dispatch_latency("cpu", repeats=3)
    assert latency == m.median
    assert math.isfinite(latency)
    assert latency > 0
    with pytest.raises(ValueError, match="1 MiB"):
        rl.memory_bandwidth("cpu", nbytes=1000)


def test_beyond_cache_is_at_least_the_minimum():
    size = rl.beyond_cache_bytes("cpu", 2**20)
    assert 2**20 <= size <= 2**30
    assert rl.beyond_cache_bytes("cpu", 2**20, cap=2**21) <= 2**21


def test_measure_roofline_quick():
    rf = rl.measure_roofline("cpu")
    assert set(rf.peak_flops) == {"fp32", "bf16", "int8"}
    assert rf.bandwidth > 0
    assert rf.dispatch_latency > 0
    assert not rf.h2d_bandwidth
    assert len(rf.measurements) == 5
    assert set(rf.spread) == {"fp32", "bf16", "int8", "bandwidth", "dispatch"}
    assert rf.sizes["fp32"] in rl.default_sizes("cpu")
    table = rf.table()
    assert rl.BANDWIDTH_VARIANT in table.index
    assert "ridge point fp32" in table.index
    assert rf.to_dict()["machine_id"] == rf.machine_id
    assert rl.roofline_path("cpu").exists(), "measure_roofline stores what it measured"


def test_the_compute_roof_is_the_best_of_its_sizes_and_the_conv(monkeypatch):
    from helpers.timing import Measurement

    achieved = {64: 10e9, 128: 30e9, 256: 20e9}
    monkeypatch.setattr(
        rl,
        "matmul_flops",
        lambda dtype, dev, n, budget, layout: (
            achieved[n],
            Measurement.from_samples([2 * n**3 / achieved[n]] * 5, label=f"matmul {n}×{n} {dtype}"),
        ),
    )
    # the sizes' probe calls are real: a budget whose per-call limit (budget / MIN_SAMPLES) a 256² matmul fits even
    # on a busy machine (another test beside it under pytest-xdist once made its first call take over 50 ms)
    roof = rl.matmul_roof("fp32", "cpu", sizes=[64, 128, 256], budget=6.0, conv=False)
    assert roof["flops"] == 30e9
    assert roof["size"] == 128
    assert roof["source"].startswith("matmul 128×128, ")
    assert roof["source"].split(", ")[1] in rl.LAYOUTS
    # a real conv against a 10 GFLOP/s GEMM (0.2 s per probe call)
    with_conv = rl.matmul_roof("fp32", "cpu", sizes=[64], budget=1.2)
    if with_conv["source"].startswith("matmul 64×64"):
        assert with_conv["flops"] == 10e9
    else:  # the convolution beat the GEMM: it is the roof, with its own measurement
        assert with_conv["source"].startswith("conv 3×3")
        assert with_conv["flops"] > 10e9
        assert with_conv["measurement"].label.startswith("conv 3×3")
    assert rl.matmul_roof("int8", "cpu", sizes=[64], budget=0.3)["source"].startswith("matmul")  # no int8 conv
    with pytest.raises(ValueError, match="size"):
        rl.matmul_roof("fp32", "cpu", sizes=[0])


def test_roof_is_stored_and_reused_not_remeasured(monkeypatch, capsys):
    stored = synthetic()
    stored.mode, stored.torch, stored.threads = "quick", torch.__version__, torch.get_num_threads()
    stored.cpu_features = cpu_features()
    stored.device, stored.machine_id = "cpu", rl.machine_id("cpu")
    stored.peak_flops["int8"] = 50e9
    rl.save_roofline(stored)

    def must_not_measure(*args, **kwargs):
        raise AssertionError("a stored, clean roofline must be reused, not measured again")

    monkeypatch.setattr(rl, "measure_roofline", must_not_measure)
    rf = rl.get_roofline("cpu")
    assert rf.origin == "stored"
    assert rf.peak_flops == stored.peak_flops
    assert rf.bandwidth == stored.bandwidth
    assert "stored" in capsys.readouterr().out
    monkeypatch.setenv("COURSE_MODE", "full")  # a quick-mode roof (smaller sizes) does not serve full mode
    with pytest.raises(AssertionError, match="reused"):
        rl.get_roofline("cpu")


def test_a_noisy_or_foreign_roof_is_measured_again_and_the_choice_is_said(monkeypatch, capsys):
    stored = synthetic()
    stored.mode, stored.torch, stored.threads = "quick", torch.__version__, torch.get_num_threads()
    stored.cpu_features = cpu_features()
    stored.device, stored.machine_id = "cpu", rl.machine_id("cpu")
    stored.peak_flops = {"fp32": 1e15, "bf16": 1.0, "int8": 1.0}  # an fp32 roof no CPU reaches: it must be kept
    stored.noisy = ["bandwidth"]
    rl.save_roofline(stored)
    rf = rl.get_roofline("cpu")
    assert rf.origin == "measured"
    assert rf.peak_flops["fp32"] == 1e15  # not measured again: the stored value
    said = [line for line in capsys.readouterr().out.splitlines() if "bandwidth measured again" in line]
    kept_new = rf.bandwidth != stored.bandwidth
    assert len(said) == 1
    assert ("(this run) over" if kept_new else "(stored ") in said[0].split("; kept ")[1]
    assert f"{rf.bandwidth / 1e9:,.1f} GB/s" in said[0]  # the printed line names the value the table shows
    again = rl.load_roofline("cpu")
    assert again.peak_flops["fp32"] == 1e15
    stored.torch = "0.0.0"  # another torch: not reused, and not merged either
    rl.save_roofline(stored)
    assert rl.get_roofline("cpu").peak_flops["fp32"] < 1e15


def test_a_stored_roof_is_a_measurement_not_a_record_high():
    # the probe's case: 47.8 GB/s stored (flagged noisy), then clean 32.7 GB/s: the clean one replaces it
    take, why = rl.choose_roof(47.8e9, 0.3, True, 32.7e9, 0.02, False)
    assert take
    assert "clean" in why
    assert not rl.choose_roof(32.7e9, 0.02, False, 47.8e9, 0.3, True)[0]  # a noisy high never replaces a clean one
    assert not rl.choose_roof(32.7e9, 0.02, False, 33.0e9, 0.02, False)[0]  # within the spread: stays, no wobble
    take, why = rl.choose_roof(
        32.7e9, 0.02, False, 25.0e9, 0.02, False
    )  # clean, beyond the spread: the machine changed
    assert take
    assert "apart" in why
    assert not rl.choose_roof(30e9, 0.4, True, 20e9, 0.1, True)[0]  # both noisy: the better value (load only slows)
    assert rl.choose_roof(20e9, 0.1, True, 30e9, 0.4, True)[0]
    assert rl.choose_roof(2e-6, 0.4, True, 1e-6, 0.4, True, higher_is_better=False)[0]  # a latency: the lower
    assert rl.choose_roof(math.nan, None, False, 20e9, 0.1, True)[0]
    assert not rl.choose_roof(1, 0, False, math.nan, 0, False)[0]


def test_a_roof_from_a_cpu_with_other_features_is_not_reused(monkeypatch):
    stored = synthetic()
    stored.mode, stored.torch, stored.threads = "quick", torch.__version__, torch.get_num_threads()
    stored.device, stored.machine_id = "cpu", rl.machine_id("cpu")
    stored.cpu_features = {**cpu_features(), "avx512_bf16": not cpu_features()["avx512_bf16"]}  # the same id
    rl.save_roofline(stored)
    assert rl.load_roofline("cpu").cpu_features == stored.cpu_features  # stored and read back
    measured = []
    monkeypatch.setattr(rl, "measure_roofline", lambda *a, **k: measured.append(1) or synthetic())
    rl.get_roofline("cpu")
    assert measured == [1], "a roof measured on a CPU with other features must be measured again"


@pytest.mark.parametrize(
    "text",
    [
        "{ half a file",
        "null",
        '"x"',
        '{"version": 2, "peak_flops": []}',
        '{"version": 2, "peak_flops": {"fp32": 1}, "bandwidth": "x"}',
        "[]",
    ],
)
def test_a_corrupt_stored_roof_is_ignored(text):
    path = rl.roofline_path("cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    assert rl.load_roofline("cpu") is None


def test_a_roof_that_stays_noisy_is_remeasured_at_most_max_remeasures_times(monkeypatch, capsys):
    stored = synthetic()
    stored.mode, stored.torch, stored.threads = "quick", torch.__version__, torch.get_num_threads()
    stored.cpu_features = cpu_features()
    stored.device, stored.machine_id = "cpu", rl.machine_id("cpu")
    stored.peak_flops["int8"] = 50e9
    stored.noisy = ["dispatch"]
    rl.save_roofline(stored)
    measured = []

    def still_noisy(dev, dtypes, parts):
        measured.append((tuple(dtypes), tuple(sorted(parts))))
        again = synthetic()
        again.peak_flops, again.bandwidth, again.noisy = {}, float("nan"), ["dispatch"]
        again.machine_id, again.mode = stored.machine_id, "quick"
        again.torch, again.threads, again.cpu_features = stored.torch, stored.threads, stored.cpu_features
        return again

    monkeypatch.setattr(rl, "_measure", still_noisy)
    for _ in range(rl.MAX_REMEASURES + 2):
        rf = rl.get_roofline("cpu")
    assert measured == [((), ("dispatch",))] * rl.MAX_REMEASURES, "only the noisy limit, and only so often"
    assert rf.peak_flops["fp32"] == stored.peak_flops["fp32"]
    assert rf.bandwidth == stored.bandwidth
    assert "kept after" in capsys.readouterr().out


def test_above_the_roof_is_clamped_and_explained_for_its_bound_and_device():
    rf = synthetic()
    rf.cache_bytes = 32 * 2**20
    small = rf.place(*rl.elementwise_cost(1000, 1, inputs=2), seconds=1e-7)  # 120 GB/s against a 10 GB/s roof
    assert small["above_roof"]
    assert small["shown_fraction"] == 1.0
    assert small["fraction_of_bound"] > 1
    assert "fits in the CPU caches" in small["explanation"]
    assert "drawn at 100 %" in small["explanation"]
    gemm = rf.place(*rl.matmul_cost(512, 512, 512), seconds=2 * 512**3 / 150e9)
    assert gemm["bound"] == "compute"
    assert "not a cache effect" in gemm["explanation"]
    assert "oneDNN" in gemm["explanation"]
    big = rf.place(*rl.elementwise_cost(2**24, 1, inputs=1), seconds=2 * 4 * 2**24 / 12e9)  # 128 MiB, not cached
    assert "copy" in big["explanation"]
    assert "write-allocate" in big["explanation"]
    rf.device = "cuda:0"
    assert "L2 cache" in rf.place(*rl.elementwise_cost(1000, 1, inputs=2), seconds=1e-7)["explanation"]
    assert "HBM" in rf.place(*rl.elementwise_cost(1000, 1, inputs=2), seconds=1e-7)["explanation"]
    assert "TF32" in rf.place(*rl.matmul_cost(512, 512, 512), seconds=2 * 512**3 / 150e9)["explanation"]
    assert rf.place(1e6, 8e6, seconds=1.0)["explanation"] is None


def test_roof_records_use_the_names_readers_parse():
    rf = synthetic()
    variants = {r["variant"] for r in rf.records()}
    assert {rl.matmul_variant("fp32"), rl.matmul_variant("bf16"), rl.BANDWIDTH_VARIANT, rl.DISPATCH_VARIANT} <= variants
    assert {r["experiment"] for r in rf.records()} == {rl.ROOF_EXPERIMENT}


def test_h2d_needs_a_gpu(no_gpu):
    with pytest.raises(ValueError, match="needs a CUDA GPU") as info:
        rl.h2d_bandwidth()
    assert one_line(info.value)


@pytest.mark.gpu(reason="host→device copies exist only with a GPU")
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
    assert any("(reference, full mode, 20" in name for name in table.index)


def test_a_second_measurement_of_the_memory_roof_in_one_run_raises_it_or_leaves_it():
    rf = synthetic()
    higher = Measurement.from_samples([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], label="copy 512 MiB")
    line = rl.reconsider_bandwidth(rf, 13e9, higher, store=False)  # the best this machine has shown
    assert rf.bandwidth == 13e9
    assert "raised" in line
    assert "copy 512 MiB" in line
    assert "bandwidth" not in rf.noisy
    lower = rl.reconsider_bandwidth(rf, 9e9, higher, store=False)  # load only slows a copy: the roof stands
    assert rf.bandwidth == 13e9
    assert "stands" in lower
    with pytest.raises(TypeError):
        rl.reconsider_bandwidth(rf, 13e9, "copy", store=False)


def test_a_faster_kernel_in_the_same_run_raises_the_compute_roof_or_leaves_it():
    rf = synthetic()
    mm = Measurement.from_samples([1.0, 1.01, 0.99, 1.0, 1.02, 0.98], label="matmul 256² fp32")
    line = rl.reconsider_compute(rf, "fp32", 150e9, mm, store=False)
    assert rf.peak_flops["fp32"] == 150e9
    assert "raised from 100.0 to 150.0" in line
    assert rf.sources["fp32"] == mm.label
    assert "stands" in rl.reconsider_compute(rf, "fp32", 120e9, mm, store=False)
    assert rf.peak_flops["fp32"] == 150e9
    with pytest.raises(ValueError, match="no fp8 compute roof"):
        rl.reconsider_compute(rf, "fp8", 1e12, mm, store=False)


def test_compute_roofs_are_capped_at_a_known_gpus_datasheet():
    sheet = rl.datasheet("cuda-nvidia-h200")
    assert sheet["fp32"] == 67e12
    assert sheet["bandwidth"] == 4.8e12
    assert rl.datasheet("cpu-amd-epyc-2cpu") is None
    assert rl.datasheet("cuda-unknown-gpu") is None
    assert rl.datasheet("cuda-nvidia-l40s") is None
    assert rl.datasheet("cuda-nvidia-l4")["fp32"] == 30.3e12
    rf = rl.Roofline("cuda", "cuda-nvidia-h200", {"fp32": 80e12, "bf16": 700e12}, 4e12, 5e-6)
    rf.sources["fp32"] = "conv 3×3"
    lines = rl.cap_at_datasheet(rf, sheet)
    assert rf.peak_flops == {"fp32": 67e12, "bf16": 700e12}
    assert len(lines) == 1
    assert "conv 3×3" in lines[0]
    assert "datasheet" in rf.table().columns
    assert rl.cap_at_datasheet(synthetic(), None) == []


def test_a_bandwidth_changed_after_construction_is_checked_where_it_is_used():
    rf = rl.Roofline(device="cpu", machine_id="t", peak_flops={"fp32": 1e11}, bandwidth=1e10, dispatch_latency=5e-6)
    rf.bandwidth = 0.0
    for call in (rf.ridge_point, lambda: rf.attainable(1.0)):
        with pytest.raises(ValueError, match="positive number"):
            call()


def test_a_roof_from_another_kernel_never_lowers_the_stored_one():
    # quick mode times smaller matmuls than full mode: its lower int8 roof is another kernel's, not a changed machine
    stored, new = synthetic(), synthetic()
    stored.peak_flops["int8"], new.peak_flops["int8"] = 1387e9, 692e9
    stored.sources["int8"], new.sources["int8"] = "matmul 2048×2048", "matmul 1024×1024"
    stored.spread["int8"] = new.spread["int8"] = 0.02
    merged = rl._merge(stored, new)
    assert merged.peak_flops["int8"] == 1387e9
    assert "different kernels" in merged.choices["int8"]
    same_kernel = synthetic()
    same_kernel.peak_flops["int8"], same_kernel.sources["int8"], same_kernel.spread["int8"] = (
        692e9,
        "matmul 2048×2048",
        0.02,
    )
    assert "different kernels" not in rl._merge(stored, same_kernel).choices["int8"]  # the usual rule decides
