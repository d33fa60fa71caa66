"""helpers.mlperf: LoadGen tests of a tiny model through the adapter, read back from LoadGen's own files."""

import functools
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
    assert summary.valid, summary.why()
    assert summary.why() == "VALID", summary.why()
    assert summary.scenario == "SingleStream"
    assert summary.mode == "PerformanceOnly"
    assert summary.checks
    assert all(summary.checks.values())
    assert 0 < summary.latencies["50.00"] <= summary.raw == summary.latencies["90.00"] <= summary.latencies["99.00"]
    # the published result is early stopping's estimate of the p90: never below the measured one
    estimate = next(line for line in summary.early_stopping if "90.0th percentile estimate" in line)
    assert summary.result == int(estimate.rsplit(":", 1)[1]) / 1e9 >= summary.raw
    assert summary.path == tmp_path / "mlperf_log_summary.txt"


def test_offline_is_valid_and_batches_its_one_query(tmp_path):
    sizes = []

    def predict(samples):
        sizes.append(len(samples))
        return _tiny(samples)  # ~16 000 samples/s at 16 a call: the one query of 4 000 outlasts min_duration

    with mlperf.SUT(predict, SAMPLES, max_batch=16) as sut:
        summary = mlperf.run(sut, "Offline", min_duration=0.2, expected_qps=20_000, folder=tmp_path)
    assert summary.valid, summary.why()
    assert summary.result > 0
    assert summary.metric == "samples/s"
    assert sum(sizes) >= 4000
    assert max(sizes) == 16  # expected_qps × min_duration samples, 16 at a time


def test_an_accuracy_run_logs_every_sample_once_with_what_predict_returned(sut, tmp_path):
    mlperf.run(sut, "Offline", mode="accuracy", expected_qps=1000, folder=tmp_path)
    logged = mlperf.read_accuracy(tmp_path)
    assert sorted(logged) == list(range(len(SAMPLES)))
    assert all(logged[i] == LABELS[i].item() for i in logged)


def test_queries_needed_is_loadgens_binomial_test():
    assert mlperf.queries_needed(0) == mlperf.EARLY_STOPPING_QUERIES["Server"] == 459
    assert mlperf.queries_needed(1) == 662
    assert mlperf.queries_needed(2) > 662  # each miss costs queries


def test_a_performance_run_logs_a_share_of_its_answers_as_test01_checks_them(tmp_path):
    answered = []

    def predict(samples):
        answered.extend(samples[:, 0].long().tolist())
        return _tiny(samples)

    with mlperf.SUT(predict, SAMPLES, max_batch=8) as sut:
        summary = mlperf.run(
            sut, "SingleStream", min_duration=0.2, min_queries=64, accuracy_log_probability=0.5, folder=tmp_path
        )
        with pytest.raises(ValueError, match="from 0 to 1"):
            mlperf.run(sut, "SingleStream", accuracy_log_probability=1.5, folder=tmp_path)
    logged = mlperf.read_accuracy(tmp_path, every=True)
    assert summary.valid
    assert 0 < len(logged) < len(answered)  # a share of the answers, not every one
    assert summary.fields["accuracy_log_probability"].startswith("0.5")
    assert all(value == LABELS[index].item() for index, value in logged)  # what predict returned, repeats included


def test_server_batches_what_waits_and_reports_the_scheduled_rate(tmp_path):
    sizes = []

    def slow(samples):  # ~1 ms a call whatever the batch: at 1000 queries/s, queries wait and are batched
        sizes.append(len(samples))
        return _tiny(samples)

    with mlperf.SUT(slow, SAMPLES, max_batch=8) as sut:
        summary = mlperf.run(
            sut, "Server", min_duration=0.3, min_queries=300, target_qps=1000, latency_bound=0.5, folder=tmp_path
        )
    assert summary.scenario == "Server"
    assert summary.result > 0
    assert sum(sizes) >= 300
    assert max(sizes) > 1  # every query answered; some answered together


def test_an_invalid_run_says_why_in_loadgens_words(sut, tmp_path):
    # MultiStream with far fewer queries than early stopping needs: INVALID, and the summary says so
    summary = mlperf.run(sut, "MultiStream", min_duration=0.05, min_queries=10, max_duration=0.1, folder=tmp_path)
    assert not summary.valid
    assert summary.why().startswith("INVALID: ")
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


def test_an_llm_is_served_with_token_latencies_and_its_greedy_tokens(tmp_path):
    from helpers import llm, llm_serving

    model = llm.GPT(llm.GPTConfig(vocab_size=256, dim=32, n_layer=1, n_head=2, max_seq_len=64)).eval()
    corpus = torch.randint(0, 256, (500,), generator=torch.Generator().manual_seed(0))
    requests = llm_serving.make_requests(corpus, rate=100, duration=0.2, prompt_len=(4, 12), new_len=(2, 6), seed=1)
    with mlperf.LLMSUT(model, requests, slots=4, max_len=32) as sut:
        summary = mlperf.run(
            sut,
            "Server",
            target_qps=200,
            ttft_bound=1.0,
            tpot_bound=1.0,
            min_duration=0.2,
            min_queries=40,
            folder=tmp_path,
        )
    assert summary.scenario == "Server"
    assert summary.ttft
    assert summary.tpot
    assert 0 < summary.ttft["50.00"] <= summary.ttft["99.00"]
    assert summary.tpot["50.00"] > 0  # LoadGen measured both token latencies
    assert float(summary.fields["Completed tokens per second"]) > 0
    assert sut.answers
    assert sut.engine is not None
    for index, tokens in sut.answers.items():  # what LoadGen was answered is the model's greedy decoding
        r = requests[index]
        alone, _ = llm.generate(model, torch.tensor([r.prompt]), r.max_new)
        assert tokens == alone[0].tolist()


def test_serve_live_takes_requests_while_it_runs_and_reports_first_and_last_tokens():
    import queue
    import threading

    from helpers import llm, llm_serving

    model = llm.GPT(llm.GPTConfig(vocab_size=256, dim=32, n_layer=1, n_head=2, max_seq_len=64)).eval()
    inbox, firsts, dones, out = queue.Queue(), {}, {}, []
    engine = threading.Thread(
        target=lambda: out.append(
            llm_serving.serve_live(
                model, inbox, slots=2, max_len=32, on_first=firsts.__setitem__, on_done=dones.__setitem__
            )
        )
    )
    engine.start()
    prompts = {f"r{i}": llm_serving.Request(i, 0.0, (1 + i, 2, 3), 3 + i) for i in range(5)}
    for tag, request in prompts.items():  # more requests than slots, arriving while it runs
        inbox.put((tag, request))
        time.sleep(0.005)
    inbox.put(None)
    engine.join(timeout=30)
    assert not engine.is_alive()
    assert len(out[0].traces) == 5
    for tag, request in prompts.items():
        alone, _ = llm.generate(model, torch.tensor([request.prompt]), request.max_new)
        assert dones[tag] == alone[0].tolist()
        assert firsts[tag] == dones[tag][0]


def test_threads_against_processes_in_rounds():
    import functools

    from helpers import processes

    with processes.Workers(functools.partial(_sleeper, 0.002), 2) as workers:
        cmp, latencies = processes.compare(workers, processes.sizes(2), window=0.05, rounds=3)
    assert cmp.labels == list(processes.sizes(2))
    assert all(cmp[label].n == 3 for label in cmp.labels)
    one, two = latencies["1 process × 2 threads"], latencies["2 processes × 1 thread"]
    assert len(one) >= 3
    assert len(two) > len(one)  # two processes did about twice the calls of one
    assert min(one) >= 0.002


def _sleeper(seconds):  # a picklable factory: one "inference" sleeps
    return functools.partial(time.sleep, seconds)


def test_workers_that_cannot_start_say_so_in_one_line():
    from helpers import processes

    with pytest.raises(RuntimeError, match="did not start") as info:
        processes.Workers(_broken_factory, 1)
    assert "\n" not in str(info.value)


def _broken_factory():
    raise RuntimeError("no model here")
