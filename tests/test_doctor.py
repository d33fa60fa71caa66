"""The bottleneck doctor classifies constructed cases whose regime is known by construction."""

import numpy as np
import pytest
import torch
from conftest import one_line

from helpers import doctor, opcount, roofline
from helpers.timing import Measurement, new_session
from helpers.verdict import Comparison


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # One thread: multi-threaded kernels on a shared machine wait for their slowest thread, which makes
    # timings jumpy; one thread is slowed evenly by other load, so measurements and roofs stay comparable.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def judged_as_if_quiet(request, monkeypatch):
    """The cases below test the doctor's classification: under pytest-xdist the other worker keeps this machine
    busy, and a busy session is (rightly) left undecided. Busy is judged as quiet here, except by the test that
    checks the busy rule itself; ``settled`` still retries a case timed while the machine was busy."""
    if "busy" not in request.node.name:
        monkeypatch.setattr(doctor, "busy_reason", lambda value: None)


@pytest.fixture(scope="module")
def rf(one_thread) -> roofline.Roofline:
    # This machine's roofline, measured small: a roof is the best the machine does, so each from its fastest
    # sample (a median let one busy second of the other test workers set a ridge of 0.6 FLOP/byte, 20× too
    # low, once in four runs): the cases sit far from every threshold.
    _, mm = roofline.matmul_flops("fp32", "cpu", n=512, repeats=7)
    _, copy = roofline.memory_bandwidth("cpu", nbytes=64 * 2**20, repeats=5)
    latency, _ = roofline.dispatch_latency("cpu", repeats=5)
    peak, bandwidth = 2 * 512**3 / min(mm.samples), 2 * 64 * 2**20 / min(copy.samples)
    rf = roofline.Roofline("cpu", "test", {"fp32": peak}, bandwidth, latency)
    # a decided knee at 1 MiB: the cases below (MiB-sized working sets) are judged against main memory, whatever
    # this machine's real caches are (a working set under 1 MiB is judged against a copy of its size)
    rf.cache_sweep = {"fast_up_to": 2**20, "slow_from": 2**21, "gain": 2.0, "undecided": None}
    return rf


def settled(fn, x, rf, attempts=3, expect=None, **kwargs):
    """A shared CI machine can be busy while the doctor times: run it again, up to ``attempts`` times, and judge
    the first diagnosis timed on a machine not found busy (or the last one). With ``expect``, also run it again
    while the regime differs: a case whose timing other test workers can tip (a loop of 100 dispatches against a
    dispatch cost measured at another moment) must be classified right in one of the attempts, not in the first."""
    for _ in range(attempts):
        d = doctor.diagnose(fn, x, rf, **kwargs)
        timed = [m for m in (d.time, d.time_doubled, d.time_quadrupled) if m is not None]
        if not any(m.busy for m in timed) and (expect is None or d.regime == expect):
            break
    return d


def tiny_ops(x):
    for _ in range(100):
        x = x + 1
    return x


def test_count_ops_counts_ops_flops_and_bytes():
    w = torch.randn(64, 32)
    counts = opcount.count_ops(lambda x: torch.relu(x @ w), torch.randn(8, 64))
    assert counts.ops == 2
    assert counts.by_op == {"mm": 1, "relu": 1}
    assert counts.flops == 2 * 8 * 64 * 32 + 8 * 32  # matmul + one per relu output
    assert counts.bytes == 4 * ((8 * 64 + 64 * 32 + 8 * 32) + (8 * 32 + 8 * 32))
    views = opcount.count_ops(lambda x: x.t().reshape(-1), torch.randn(4, 4))
    assert views.bytes == 4 * 16 * 2  # the views move nothing; the reshape of a transposed tensor copies it once
    assert counts.kernels == 2
    assert views.ops > views.kernels == 1  # only the copy runs a kernel
    dst = torch.empty(100)
    assert opcount.count_ops(lambda x: dst.copy_(x), torch.randn(100)).bytes == 800  # read src, write dst
    assert opcount.count_ops(lambda x: torch.relu_(x), torch.randn(100)).bytes == 800  # read, write in place
    out = torch.empty(100)
    assert opcount.count_ops(lambda x: torch.add(x, x, out=out), torch.randn(100)).bytes == 800


def test_count_ops_counts_reads_back_to_python():
    def reads(x):
        return [float(v.sum()) for v in x]

    assert opcount.count_ops(reads, torch.randn(3, 4)).host_reads == 3
    assert opcount.count_ops(lambda x: x.sum(dim=1), torch.randn(3, 4)).host_reads == 0


@pytest.mark.timing
def test_loop_of_tiny_ops_is_overhead_bound(rf):
    d = settled(tiny_ops, torch.randn(1, 16), rf, expect="overhead")
    assert d.regime == "overhead", d.explain()
    assert d.counts.ops == 100
    assert d.dispatch_share > 0


@pytest.mark.timing
def test_large_elementwise_op_is_memory_bound(rf):
    # in place, so the op is timed and not the allocator; clamp keeps the values finite across calls
    d = settled(lambda x: x.clamp_(-1, 1).mul_(0.5), torch.randn(4, 2**21), rf)
    assert d.regime == "memory", d.explain()
    assert d.counts.intensity < 1
    assert d.explained > doctor.EXPLAINED_MIN


@pytest.mark.timing
def test_transposed_copy_is_memory_bound(rf):
    d = settled(lambda x: x.t().contiguous(), torch.randn(2048, 2048), rf, batch_dim=0)
    assert d.regime == "memory", d.explain()


@pytest.mark.timing
def test_matrix_vector_product_with_large_weights_is_memory_bound(rf):
    w = torch.randn(4096, 2048)
    d = settled(lambda x: x @ w.t(), torch.randn(1, 2048), rf)
    assert d.regime == "memory", d.explain()  # every weight is read for 2 FLOPs


@pytest.mark.timing
def test_large_matmul_is_compute_bound(rf):
    w = torch.randn(1024, 1024)
    d = settled(lambda x: x @ w, torch.randn(256, 1024), rf)
    assert d.regime == "compute", d.explain()
    assert d.counts.intensity > rf.ridge_point()
    assert "compute-bound" in d.explain()
    assert d.row()["regime"] == "compute"


@pytest.mark.timing
def test_diagnose_batches_table(rf):
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()
    diagnoses, table = doctor.diagnose_batches(model, lambda b: torch.randn(b, 32), [1, 4], rf, repeats=3)
    assert [d.batch for d in diagnoses] == [1, 4]
    assert list(table.index) == [1, 4]
    # three tiny ops (a 32×16 matmul, its bias, a ReLU) at 0.43 FLOP/byte: below the ridge, so never
    # compute-bound (overhead or memory depends on how the time grew on this machine, measured: not asserted)
    assert [d.counts.flops for d in diagnoses] == [2 * 32 * 16 * b + 16 * b for b in (1, 4)]  # matmul + ReLU
    assert list(table["ops/call"]) == [3, 3]
    assert (table["FLOP/byte"] < table["ridge"]).all()
    assert (table["% compute roof"] < 5).all()
    assert "compute" not in set(table["regime"]), [d.explain() for d in diagnoses]


def test_doctor_bad_input(rf):
    with pytest.raises(TypeError):
        doctor.diagnose("model", torch.randn(2, 3), rf)
    with pytest.raises(ValueError) as info:
        doctor.diagnose(torch.relu, torch.tensor(1.0), rf)
    assert one_line(info.value)
    with pytest.raises(ValueError):
        doctor.diagnose(torch.relu, torch.randn(2, 3), rf, batch_dim=5)
    with pytest.raises(ValueError):
        doctor.diagnose_batches(torch.relu, lambda b: torch.randn(b, 3), [0], rf)


def test_working_set_counts_weights_input_and_output():
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 8)
    weights = 4 * (8 * 4 + 4 + 4 * 2 + 2)
    assert doctor.working_set_bytes(mlp, x, mlp(x)) == weights + 4 * 3 * 8 + 4 * 3 * 2
    assert doctor.working_set_bytes(lambda t: t, x) == 4 * 3 * 8  # a function has no weights


@pytest.mark.timing
def test_cache_resident_call_is_judged_against_the_cache_and_doubled_twice(rf):
    cached = roofline.Roofline(rf.device, "test", rf.peak_flops, rf.bandwidth, rf.dispatch_latency, cache_bytes=2**30)
    cached.cache_sweep = {"fast_up_to": 2**30, "slow_from": 2**31, "gain": 4.0, "undecided": None}  # a decided knee
    mlp = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    d = doctor.diagnose(mlp, torch.randn(1, 784), cached)
    assert d.cache_resident
    assert d.memory_roof >= rf.bandwidth
    assert d.working_set_bytes < 2**20
    assert d.time_quadrupled.items == 4
    assert d.growth_again > 0
    assert "fits in the" in d.explain()
    assert "and ×2 again" in d.row()
    tiny = roofline.Roofline(rf.device, "test", rf.peak_flops, rf.bandwidth, rf.dispatch_latency)
    tiny.cache_sweep = {"fast_up_to": None, "slow_from": 2**16, "gain": 1.0, "undecided": None}  # no cache effect
    assert not doctor.diagnose(mlp, torch.randn(1, 784), tiny).cache_resident  # judged against main memory
    unknown = roofline.Roofline(rf.device, "test", rf.peak_flops, rf.bandwidth, rf.dispatch_latency)
    unknown.cache_sweep = {"undecided": "busy"}  # no knee decided: a copy of the working set's size decides
    d = doctor.diagnose(mlp, torch.randn(1, 784), unknown)
    assert d.cache_resident == ("was copied here" in d.explain())  # and it says it measured it


def test_python_reads_counts_reads_a_cpu_tensor_needs_no_copy_for():
    x = torch.randn(4, 3)
    before = {name: (name in vars(torch.Tensor), getattr(torch.Tensor, name)) for name in opcount.READ_METHODS}

    def per_row(t):
        return [row.sum().item() for row in t] + [float(t.max())]

    assert opcount.python_reads(per_row, x) == {"item": 4, "__float__": 1}
    assert opcount.python_reads(lambda t: t.sum(dim=1).tolist(), x) == {"tolist": 1}
    assert opcount.python_reads(lambda t: t * 2, x) == {}
    with pytest.raises(RuntimeError):
        opcount.python_reads(lambda t: (t.sum().item(), t.reshape(5)), x)
    after = {name: (name in vars(torch.Tensor), getattr(torch.Tensor, name)) for name in opcount.READ_METHODS}
    assert after == before  # every method restored exactly, after a normal run and after an error


def _sizes(seconds_by_batch, jitter=0.01):
    """Three candidates of one session, batch B, 2B and 4B, with the given time per call and a little noise."""
    session = new_session("test")
    rng = np.random.default_rng(0)
    measured = {
        f"batch {b}": Measurement.from_samples(
            t * np.exp(jitter * rng.standard_normal(20)), label=f"batch {b}", session=session, items=b
        )
        for b, t in seconds_by_batch.items()
    }
    return Comparison(measurements=measured, baseline="batch 1")


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ((1.0, 1.0), "free"),  # the call takes no more time at twice the batch
        ((1.0, 1.5), "shared"),  # more time, less per item
        ((1.0, 2.0), "proportional"),  # the same time per item
        ((1.0, 2.4), "more per item"),  # a kernel switch: each item costs more at the bigger size
    ],
)
def test_doubling_is_judged_by_paired_verdicts_not_a_threshold(times, expected):
    sizes = _sizes({1: times[0], 2: times[1]})
    assert doctor.doubling(sizes, "batch 1", "batch 2") == expected


def test_a_doubling_within_the_noise_is_free_whatever_its_ratio_of_medians():
    sizes = _sizes({1: 1.0, 2: 1.2}, jitter=0.8)  # 20 % apart (37 % in medians), the samples spread far wider
    assert sizes["batch 2"].median / sizes["batch 1"].median > 1.3  # what a fixed 1.3 threshold would have judged
    assert doctor.doubling(sizes, "batch 1", "batch 2") == "free"


def test_an_incomplete_flop_count_is_said_and_not_called_memory_bound(rf):
    layer = torch.nn.TransformerEncoderLayer(128, 4, 512, batch_first=True).eval()  # the fused fast path
    x = torch.randn(2, 64, 128)
    with torch.inference_mode():
        counts = opcount.count_ops(layer, x)
    d_model, ff, tokens = 128, 512, 2 * 64
    analytic = 2 * tokens * (4 * d_model * d_model + 2 * d_model * ff) + 2 * 2 * 2 * 64 * 64 * d_model
    assert not counts.flops_complete
    assert "_transformer_encoder_layer_fwd" in counts.uncounted
    assert counts.flops < analytic / 20  # one FLOP per output element of the fused op: far too low
    d = doctor.diagnose(layer, x, rf, repeats=3)
    assert d.regime in ("undetermined", "overhead"), d.explain()
    assert d.regime != "memory", d.explain()
    assert "FLOP count is incomplete" in d.explain()
    assert d.row()["FLOPs counted"] == "incomplete"


def test_flop_counts_match_flopcountermode_and_an_analytic_count():
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    x = torch.randn(8, 64)
    counts = opcount.count_ops(mlp, x)
    assert counts.flops_complete
    assert counts.flops == 2 * 8 * (64 * 256 + 256 * 10) + 8 * 256  # the two matmuls (addmm) + one per ReLU output
    resnet = torchvision.models.resnet18().eval()
    image = torch.randn(1, 3, 64, 64)
    with FlopCounterMode(display=False) as mode, torch.inference_mode():
        resnet(image)
    with torch.inference_mode():
        counted = opcount.count_ops(resnet, image)
    assert counted.flops_complete
    assert counted.flops >= mode.get_total_flops() > 0.9 * counted.flops
    lstm = torch.nn.LSTM(32, 64)
    assert not opcount.count_ops(lambda t: lstm(t)[0], torch.randn(5, 2, 32)).flops_complete


def test_added_items_dearer_or_cheaper_only_off_the_line_of_a_fixed_cost_plus_a_cost_per_item():
    on_line = _sizes({1: 1.0, 2: 1.5, 4: 2.5})  # 0.5 fixed + 0.5 per item: growth 1.5 then 1.67, the line itself
    assert doctor.reversed_order(on_line, "batch 1", "batch 2", "batch 4") is None
    fixed_only = _sizes({1: 1.0, 2: 1.0, 4: 1.0})
    assert doctor.reversed_order(fixed_only, "batch 1", "batch 2", "batch 4") is None
    same = _sizes({1: 1.0, 2: 2.0, 4: 4.0})
    assert doctor.reversed_order(same, "batch 1", "batch 2", "batch 4") is None
    fills_up = _sizes({1: 1.0, 2: 1.2, 4: 2.4})  # 0.2 added by the first doubling, 1.2 by the second: 3× per item
    assert doctor.reversed_order(fills_up, "batch 1", "batch 2", "batch 4") == "dearer"
    cheaper = _sizes({1: 1.0, 2: 2.0, 4: 2.4})  # the second doubling's items cost far less: a kernel switch
    assert doctor.reversed_order(cheaper, "batch 1", "batch 2", "batch 4") == "cheaper"


def test_bytes_that_are_mostly_weights_get_weight_advice_not_fusion(rf):
    assert "weight-only int8" in doctor.fewer_bytes(rf, 0.9)
    assert "fuse ops" not in doctor.fewer_bytes(rf, 0.9)
    assert "fuse ops" in doctor.fewer_bytes(rf, 0.1)


def test_compute_advice_names_only_formats_measured_faster_here(rf):
    slow = roofline.Roofline("cpu", "t", dict(rf.peak_flops), rf.bandwidth, rf.dispatch_latency)
    entry = {"outcome": "slower", "ratio": 0.55, "low": 0.5, "high": 0.6, "how": "interleaved with fp32"}
    slow.dtype_speed = {"speed": {"matmul": {"bf16": entry}}, "kernels": {}, "undecided": None}
    advice = doctor.faster_math(slow, torch.device("cpu"))
    assert "No number format ran faster" in advice
    assert "bf16" not in advice
    fast = dict(entry, outcome="faster", ratio=1.8)
    slow.dtype_speed["speed"]["matmul"]["bf16"] = fast
    assert "bf16 (matmul 1.8× fp32 measured here)" in doctor.faster_math(slow, torch.device("cpu"))
    slow.dtype_speed["speed"]["matmul"]["bf16"] = entry  # slower again: the memory advice says so
    assert "0.55× fp32's speed here" in doctor.fewer_bytes(slow)
    assert "measure it" in doctor.fewer_bytes(slow)
    slow.dtype_speed["speed"]["matmul"]["bf16"] = fast
    assert "store bf16" in doctor.fewer_bytes(slow)


@pytest.mark.timing
def test_counted_flops_past_the_ridge_are_compute_bound_even_when_some_are_uncounted(rf):
    w = torch.randn(1024, 1024)
    lstm = torch.nn.LSTM(4, 4)
    tiny = torch.randn(1, 1, 4)

    def call(x):  # a large matmul (counted) beside a fused op FlopCounterMode has no formula for
        return x @ w, lstm(tiny)[0]

    d = settled(call, torch.randn(256, 1024), rf)
    assert not d.counts.flops_complete
    assert d.counts.intensity > rf.ridge_point()
    assert d.regime in ("compute", "overhead"), d.explain()
    assert d.regime != "undetermined"
    assert "undetermined" not in d.explain()


def test_a_busy_session_leaves_the_regime_undecided(rf, monkeypatch):
    monkeypatch.setattr(doctor, "busy_reason", lambda value: "other processes used 1.5 of the 2 CPUs")
    d = doctor.diagnose(lambda x: x * 2, torch.randn(4, 16), rf, repeats=3)
    assert d.regime == "busy"
    assert d.explain().startswith("batch 4: undecided (busy).\n  · undecided: the regime")
    assert "overhead-bound" not in d.explain()


def assert_label_follows_numbers(d, rf):
    """The regime a diagnosis prints is the one its own numbers say (the rules of the doctor's docstring)."""
    fixed = min(1.0, max(0.0, 2.0 - d.growth))
    text = d.explain()
    if d.regime == "compute":
        assert d.explained >= doctor.EXPLAINED_MIN, text
        assert d.counts.intensity >= d.ridge_point, text
    elif d.regime == "inefficient":
        assert d.explained < doctor.EXPLAINED_MIN, text
        assert d.counts.intensity >= d.ridge_point, text
        assert "Use faster math" not in text
    elif d.regime == "overhead":
        assert d.dispatch_share >= doctor.OVERHEAD_SHARE or (d.explained < doctor.EXPLAINED_MIN and fixed >= 0.5), text
    elif d.regime == "memory":
        assert d.counts.flops_complete, text
        assert d.counts.intensity < d.ridge_point, text
    else:
        assert d.regime == "undetermined", text
        assert not d.counts.flops_complete, text
    if "Use faster math" in text:  # only the formats this roofline measured faster than fp32
        named = text.split("Use faster math:")[1].split(".")[0]
        assert all(dtype in rf.faster_dtypes() for dtype in ("bf16", "fp16", "int8") if f"{dtype} (" in named), text


@pytest.mark.timing
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v3_small"])
def test_outside_vision_models_get_the_regime_their_numbers_say(rf, name):
    import torchvision

    model = getattr(torchvision.models, name)().eval()
    d = settled(model, torch.randn(1, 3, 64, 64), rf, repeats=5)
    assert d.counts.flops_complete
    assert d.counts.flops > 0
    assert_label_follows_numbers(d, rf)
    assert d.working_set_bytes > sum(p.numel() * 4 for p in model.parameters())  # activations counted too


@pytest.mark.timing
@pytest.mark.parametrize("fast_path", [True, False])
def test_a_transformer_layer_with_and_without_its_fused_fast_path(rf, fast_path):
    layer = torch.nn.TransformerEncoderLayer(128, 4, 512, batch_first=True).eval()
    x = torch.randn(2, 32, 128)
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(fast_path)
    try:
        d = settled(layer, x, rf, repeats=5)
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
    # the fused layer has no FLOP formula; unfused, its projections are counted (addmm) and only the CPU's
    # scaled-dot-product kernel is not
    assert ("_transformer_encoder_layer_fwd" in d.counts.uncounted) is fast_path
    assert fast_path or d.counts.by_op.get("addmm", 0) >= 3
    assert_label_follows_numbers(d, rf)
    if fast_path:
        assert d.regime in ("undetermined", "overhead"), d.explain()


def test_a_call_whose_time_follows_the_batch_far_from_the_compute_roof_is_not_compute_bound(rf, monkeypatch):
    w = torch.randn(256, 256)
    monkeypatch.setattr(rf, "peak_flops", {"fp32": 1e15})  # roofs this call reaches a tiny fraction of,
    monkeypatch.setattr(rf, "bandwidth", 1e14)  # with the ridge (10 FLOP/byte) below the call's intensity (43)
    d = settled(lambda x: x @ w, torch.randn(256, 256), rf, repeats=5)
    assert d.counts.intensity > d.ridge_point
    assert d.explained < doctor.EXPLAINED_MIN
    assert d.regime in ("inefficient", "overhead"), d.explain()
    assert "Use faster math" not in d.explain()
    assert_label_follows_numbers(d, rf)
