"""The bottleneck doctor classifies constructed cases whose regime is known by construction."""

import pytest
import torch
from conftest import one_line

from helpers import doctor, roofline


@pytest.fixture(scope="module")
def rf() -> roofline.Roofline:
    # This machine's roofline, measured small: the cases below sit far from every threshold.
    peak, _ = roofline.matmul_flops("fp32", "cpu", n=256, repeats=5)
    bandwidth, _ = roofline.memory_bandwidth("cpu", nbytes=64 * 2**20, repeats=3)
    latency, _ = roofline.dispatch_latency("cpu", repeats=5)
    return roofline.Roofline("cpu", "test", {"fp32": peak}, bandwidth, latency)


def tiny_ops(x):
    for _ in range(100):
        x = x + 1
    return x


def test_count_ops_counts_ops_flops_and_bytes():
    w = torch.randn(64, 32)
    counts = doctor.count_ops(lambda x: torch.relu(x @ w), torch.randn(8, 64))
    assert counts.ops == 2 and counts.by_op == {"mm": 1, "relu": 1}
    assert counts.flops == 2 * 8 * 64 * 32 + 8 * 32  # matmul + one per relu output
    assert counts.bytes == 4 * ((8 * 64 + 64 * 32 + 8 * 32) + (8 * 32 + 8 * 32))
    views = doctor.count_ops(lambda x: x.t().reshape(-1), torch.randn(4, 4))
    assert views.bytes < 4 * 16 * 3  # a view moves nothing; only the reshape's copy of a transposed tensor


def test_loop_of_tiny_ops_is_overhead_bound(rf):
    d = doctor.diagnose(tiny_ops, torch.randn(1, 16), rf)
    assert d.regime == "overhead", d.explain()
    assert d.counts.ops == 100 and d.dispatch_share > 0


def test_large_elementwise_op_is_memory_bound(rf):
    d = doctor.diagnose(lambda x: x * 2 + 1, torch.randn(4, 2**21), rf)
    assert d.regime == "memory", d.explain()
    assert d.counts.intensity < 1


def test_large_matmul_is_compute_bound(rf):
    w = torch.randn(1024, 1024)
    d = doctor.diagnose(lambda x: x @ w, torch.randn(256, 1024), rf)
    assert d.regime == "compute", d.explain()
    assert d.counts.intensity > rf.ridge_point()
    assert "compute-bound" in d.explain() and d.row()["regime"] == "compute"


def test_diagnose_batches_table(rf):
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()
    diagnoses, table = doctor.diagnose_batches(model, lambda b: torch.randn(b, 32), [1, 4], rf, repeats=3)
    assert [d.batch for d in diagnoses] == [1, 4] and list(table.index) == [1, 4]
    assert set(table["regime"]) <= {"overhead", "memory", "compute"}


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
