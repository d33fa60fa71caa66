"""helpers.opcount: the one op/FLOP/byte accounting behind doctor.count_ops and fusion.traffic."""

import pytest
import torch

from helpers import doctor, fusion, opcount


def test_counts_have_one_home():
    assert not hasattr(fusion, "traffic"), "import them from helpers.opcount"
    assert not hasattr(doctor, "python_reads"), "import them from helpers.opcount"
    assert doctor.count_ops is opcount.count_ops  # what the doctor uses, not a second path for notebooks


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.relu(x * 2.0 + 1.0) * 0.5,
        torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval(),
        lambda x: x.t().reshape(-1),
        lambda x: (x.sum(-1), x.amax(-1)),
    ],
)
def test_both_byte_rules_agree_where_they_overlap(fn):
    x = torch.randn(16, 16)
    counts, moved = opcount.count_ops(fn, x), opcount.traffic(fn, x)
    assert counts.bytes == moved.unfused  # the per-op rule, counted once for both
    assert counts.kernels == len(moved.ops)
    assert moved.fused <= moved.unfused  # the fused rule is a floor


def test_a_matmul_has_its_textbook_flops_and_bytes():
    m, k, n = 8, 64, 32
    a, b = torch.randn(m, k), torch.randn(k, n)
    counts = opcount.count_ops(torch.mm, a, b)
    assert counts.by_op == {"mm": 1}
    assert counts.kernels == 1
    assert counts.flops == 2 * m * k * n  # a multiply and an add per term
    assert counts.bytes == 4 * (m * k + k * n + m * n)  # read A and B, write C, fp32
    assert counts.intensity == pytest.approx(2 * m * k * n / (4 * (m * k + k * n + m * n)))


def test_a_pointwise_op_is_one_flop_per_element_and_three_tensors_of_traffic():
    x = torch.randn(1000, dtype=torch.float16)
    counts = opcount.count_ops(torch.add, x, x)
    assert counts.flops == 1000  # the estimate for ops FlopCounterMode does not count
    assert counts.bytes == 2 * (1000 + 1000)  # the same tensor twice is read once; the output written once
    moved = opcount.traffic(lambda v: (v + 1) * 3, x)
    assert moved.unfused == 2 * 1000 * 4
    assert moved.fused == 2 * 1000 * 2
    assert moved.intermediate == 2 * 1000 * 2


def test_the_counter_follows_storages_only_when_asked():
    with opcount.OpCounter() as plain:
        torch.randn(10) * 2
    with opcount.OpCounter(fused=True) as fused:
        torch.randn(10) * 2
    assert plain.bytes == fused.bytes
    assert not plain.alive
    assert not plain.written
    assert fused.alive
    assert fused.written
