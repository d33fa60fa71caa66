import copy

import pytest
import torch

from helpers import harness, models
from helpers.data import load_digits
from helpers.models import digits_classifier
from helpers.timing import MIN_ROUNDS
from helpers.verdict import time_together


def test_model_size_counts_what_is_shipped():
    model = torch.nn.Linear(100, 100)
    size = harness.model_size_bytes(model)
    assert 4 * (100 * 100 + 100) <= size < 4 * (100 * 100 + 100) + 4096
    assert harness.model_size_bytes(copy.deepcopy(model).half()) < 0.6 * size
    with pytest.raises(TypeError):
        harness.model_size_bytes(lambda x: x)


def test_agreement():
    ref = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    assert harness.agreement(ref, ref) == {"max_abs_diff": 0.0, "top1_agreement": 1.0}
    flipped = torch.tensor([[1.0, 2.5], [0.0, 3.0]])
    assert harness.agreement(ref, flipped) == {"max_abs_diff": 3.0, "top1_agreement": 0.5}
    with pytest.raises(ValueError):
        harness.agreement(ref, ref[:1])


def test_evaluate_checks_fp32_and_bf16_then_time_together_times_them():
    model = digits_classifier("cpu")
    x, y = load_digits("test")
    ref = harness.predict(model, x)
    row, call = harness.evaluate(
        "fp32", model, model=model, bench_input=x[:64], test_images=x, test_labels=y, reference_logits=ref
    )
    assert row["accuracy"] >= 0.95
    assert row["top1_agreement"] == 1.0
    assert row["max_abs_diff"] == 0.0
    assert row["accuracy"] == models.accuracy(model, x, y)  # the one definition of accuracy
    assert row["size_bytes"] > 100_000
    assert row["first_call_s"] > 0
    assert "median_s" not in row  # nothing timed yet
    torch.testing.assert_close(call(), model(x[:64]))  # the call times the variant on the benchmark batch
    bf16 = copy.deepcopy(model).bfloat16()
    row16, call16 = harness.evaluate(
        "bf16",
        bf16,
        model=bf16,
        bench_input=x[:64],
        test_images=x,
        test_labels=y,
        reference_logits=ref,
        prepare=lambda t: t.bfloat16(),
    )
    assert row16["accuracy"] >= 0.93
    assert row16["top1_agreement"] >= 0.95
    assert 0 < row16["max_abs_diff"] < 1.0
    assert row16["peak_mem_bytes"] > 0
    cmp = time_together({"fp32": call, "bf16": call16}, items=64, budget=0.5)
    cols = harness.timing_columns(cmp)
    assert list(cols.index) == ["fp32", "bf16"]
    assert cols.loc["fp32", "verdict"] == "baseline"
    assert cols.loc["bf16", "speed-up"] == cmp.speedup("bf16")
    assert cols.loc["bf16", "samples"] >= MIN_ROUNDS
    assert cols.loc["bf16", "verdict"] == cmp.verdict("bf16").short()
    assert cols.loc["fp32", "items_per_s"] > 0
    with pytest.raises(TypeError, match="Comparison"):
        harness.timing_columns({"fp32": cmp["fp32"]})


def test_a_compiled_closure_is_known_as_compiled():
    model = torch.nn.Linear(4, 4)

    def run(x):
        return model(x)

    assert not harness.is_compiled(model)
    assert not harness.is_compiled(run)
    run.compiled = True
    assert harness.is_compiled(run)
    assert harness.is_compiled(torch.compile(model))


def test_predict_pads_the_last_batch_to_one_shape():
    shapes = []

    def fn(x):
        shapes.append(tuple(x.shape))
        return x.flatten(1)[:, :3] * 2

    images = torch.randn(10, 1, 2, 2)
    out = harness.predict(fn, images, batch_size=4, pad=True)
    assert shapes == [(4, 1, 2, 2)] * 3
    torch.testing.assert_close(out, images.flatten(1)[:, :3] * 2)
    assert harness.predict(fn, images, batch_size=4).shape == (10, 3)


def test_pareto_front():
    rows = [
        {"v": "fp32", "median_s": 1.0, "size_bytes": 4, "accuracy": 0.99},
        {"v": "bf16", "median_s": 0.5, "size_bytes": 2, "accuracy": 0.98},
        {"v": "slow", "median_s": 2.0, "size_bytes": 4, "accuracy": 0.99},  # fp32 is as good and faster
        {"v": "int8", "median_s": 0.6, "size_bytes": 1, "accuracy": 0.98},
        {"v": "broken", "median_s": None, "size_bytes": 1, "accuracy": 0.1},
    ]
    assert harness.pareto_front(rows) == [True, True, False, True, False]
    assert harness.pareto_front([]) == []


def test_a_row_with_a_nan_criterion_is_never_optimal_and_dominates_nothing():
    rows = [
        {"median_s": 1.0, "size_bytes": 10, "accuracy": 0.9},
        {"median_s": float("nan"), "size_bytes": 1, "accuracy": 1.0},
        {"median_s": 2.0, "size_bytes": 5, "accuracy": 0.95},
    ]
    assert harness.pareto_front(rows) == [True, False, True]
    with pytest.raises(ValueError, match="NaN or infinite logits"):
        harness.agreement(torch.ones(2, 3), torch.full((2, 3), float("nan")))
    with pytest.raises(ValueError, match="one row per image"):
        harness.predict(lambda x: x[:1], torch.ones(4, 2), batch_size=2)


def test_a_parity_check_fails_an_all_zero_output_of_a_model_with_small_outputs():
    from helpers.harness import assert_close_to_scale

    torch.manual_seed(0)
    expected = 3e-5 * torch.randn(4, 10)  # a randomly initialised network's tiny logits
    zeros = torch.zeros_like(expected)
    torch.testing.assert_close(zeros, expected, rtol=1e-4, atol=1e-4)  # a fixed atol lets nothing pass for parity
    with pytest.raises(AssertionError):
        assert_close_to_scale(zeros, expected, rtol=1e-4, atol=1e-4)
    assert_close_to_scale(expected * (1 + 1e-6), expected, rtol=1e-4, atol=1e-4)  # a faithful output passes
    big = 20 * torch.randn(4, 10)
    with pytest.raises(AssertionError):
        assert_close_to_scale(big + 2e-4, big, rtol=0, atol=1e-4)  # the scale is capped at 1: never looser than atol
