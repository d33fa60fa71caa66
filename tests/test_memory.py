import pytest
import torch

from helpers import memory
from helpers.models import torchvision_model


def test_peak_counts_live_tensors_not_freed_ones():
    def two_in_a_row():
        a = torch.ones(2**20)  # 4 MiB
        del a
        b = torch.ones(2**20)  # reuses the budget: the peak stays 4 MiB
        return b.sum()

    assert 4 * 2**20 <= memory.peak_allocated_bytes(two_in_a_row, "cpu") < 4 * 2**20 + 1024

    def two_at_once():
        a, b = torch.ones(2**20), torch.ones(2**20)
        return (a + b).sum()

    assert memory.peak_allocated_bytes(two_at_once, "cpu") >= 12 * 2**20  # a, b and a + b alive together


def test_in_place_and_views_allocate_nothing():
    x = torch.ones(2**20)
    assert memory.peak_allocated_bytes(lambda: x.mul_(2).view(-1, 4).t(), "cpu") == 0


def test_peak_grows_with_the_batch_for_a_real_model():
    model = torchvision_model("resnet18", "cpu")
    with torch.inference_mode():
        small = memory.peak_allocated_bytes(lambda: model(torch.randn(1, 3, 64, 64)), "cpu")
        large = memory.peak_allocated_bytes(lambda: model(torch.randn(8, 3, 64, 64)), "cpu")
    assert 0 < small < large


def test_rss_growth_sees_a_large_touched_allocation():
    assert memory.rss_peak_growth(lambda: torch.ones(64 * 2**20 // 4).sum()) >= 16 * 2**20
    with pytest.raises(TypeError):
        memory.rss_peak_growth(None)
