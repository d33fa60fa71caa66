"""helpers.mlperf: LoadGen tests of a tiny model through the adapter, read back from LoadGen's own files."""

import time

import numpy as np
import pytest
import torch

from helpers import mlperf

SAMPLES = torch.arange(40).float().unsqueeze(1)  # sample i is [i]
LABELS = (SAMPLES[:, 0] % 7).long()


def _tiny(samples):  # a "model" whose answer is known (i mod 7), and whose time LoadGen's defaults expect (~1 ms)
    time.sleep(1e-3)
    return (samples[:, 0] % 7).long().numpy()


@pytest.fixture
def sut():
    with mlperf.SUT(_tiny, SAMPLES, max_batch=8) as s:
        yield s


def test_single_stream_is_valid_and_read_from_the_summary(sut, tmp_path):
    summary = mlperf.run(sut, "SingleStream", min_duration=0.2, min_queries=64, folder=tmp_path)
    assert summary.valid and summary.why() == "VALID", summary.why()
    assert summary.scenario == "SingleStream" and summary.mode == "PerformanceOnly"
    assert summary.checks and all(summary.checks.values())
    assert 0 < summary.latencies["50.00"] <= summary.result == summary.latencies["90.00"] <= summary.latencies["99.00"]
    assert any("90.0th percentile estimate" in line for line in summary.early_stopping)
    assert summary.path == tmp_path / "mlperf_log_summary.txt"


def test_offline_is_valid_and_batches_its_one_query(tmp_path):
    sizes = []

    def predict(samples):
        sizes.append(len(samples))
        return _tiny(samples)  # ~16 000 samples/s at 16 a call: the one query of 4 000 outlasts min_duration

    with mlperf.SUT(predict, SAMPLES, max_batch=16) as sut:
        summary = mlperf.run(sut, "Offline", min_duration=0.2, expected_qps=20_000, folder=tmp_path)
    assert summary.valid, summary.why()
    assert summary.result > 0 and summary.metric == "samples/s"
    assert sum(sizes) >= 4000 and max(sizes) == 16  # expected_qps × min_duration samples, 16 at a time


def test_an_accuracy_run_logs_every_sample_once_with_what_predict_returned(sut, tmp_path):
    mlperf.run(sut, "Offline", mode="accuracy", expected_qps=1000, folder=tmp_path)
    logged = mlperf.read_accuracy(tmp_path)
    assert sorted(logged) == list(range(len(SAMPLES)))
    assert all(logged[i] == LABELS[i].item() for i in logged)


def test_server_batches_what_waits_and_reports_the_scheduled_rate(tmp_path):
    sizes = []

    def slow(samples):  # ~1 ms a call whatever the batch: at 1000 queries/s, queries wait and are batched
        sizes.append(len(samples))
        return _tiny(samples)

    with mlperf.SUT(slow, SAMPLES, max_batch=8) as sut:
        summary = mlperf.run(
            sut, "Server", min_duration=0.3, min_queries=300, target_qps=1000, latency_bound=0.5, folder=tmp_path
        )
    assert summary.scenario == "Server" and summary.result > 0
    assert sum(sizes) >= 300 and max(sizes) > 1  # every query answered; some answered together


def test_an_invalid_run_says_why_in_loadgens_words(sut, tmp_path):
    # MultiStream with far fewer queries than early stopping needs: INVALID, and the summary says so
    summary = mlperf.run(sut, "MultiStream", min_duration=0.05, min_queries=10, max_duration=0.1, folder=tmp_path)
    assert not summary.valid and summary.why().startswith("INVALID: ")
    assert "early stopping satisfied: no" in summary.why()
    assert any("662" in line for line in summary.early_stopping)


def test_a_failing_predict_ends_the_test_with_its_error_not_a_hang(tmp_path):
    def broken(samples):
        raise ZeroDivisionError("model bug")

    with mlperf.SUT(broken, SAMPLES) as sut, pytest.raises(RuntimeError, match="ZeroDivisionError: model bug"):
        mlperf.run(sut, "SingleStream", min_duration=0.05, min_queries=5, folder=tmp_path)


def test_a_predict_that_returns_the_wrong_count_is_refused(tmp_path):
    with mlperf.SUT(lambda s: np.zeros(1), SAMPLES, max_batch=4) as sut:
        with pytest.raises(RuntimeError, match="one integer per sample"):
            mlperf.run(sut, "Offline", min_duration=0.05, expected_qps=100, folder=tmp_path)


def test_bad_arguments_get_one_line(sut, tmp_path):
    with pytest.raises(ValueError, match="scenario"):
        mlperf.run(sut, "Interactive", folder=tmp_path)
    with pytest.raises(ValueError, match="target_qps"):
        mlperf.run(sut, "Server", latency_bound=0.1, folder=tmp_path)
    with pytest.raises(ValueError, match="expected_qps"):
        mlperf.run(sut, "Offline", folder=tmp_path)
    with pytest.raises(ValueError, match="non-empty"):
        mlperf.SUT(_tiny, [])
    with pytest.raises(FileNotFoundError, match="run a test there first"):
        mlperf.read_summary(tmp_path / "nothing")
    sut.close()
    with pytest.raises(TypeError, match="not closed"):
        mlperf.run(sut, "SingleStream", folder=tmp_path)
