"""helpers.serving: the open-loop load generator (its schedule does not bend to a slow server), the summary of a
run, saturation, goodput and capacity, the simulation beside a run, the listening-socket check; and the Ray
behaviour notebook 12 relies on (a driver that fails stops its Ray node)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from helpers import serving
from helpers.batching import SampledLatency


class _Handler(http.server.BaseHTTPRequestHandler):
    delay = 0.0

    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length", 0))
        body = self.rfile.read(length)
        time.sleep(self.delay)
        answer = json.dumps({"echo": json.loads(body or b"null")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):  # quiet
        pass


class _SerialServer(http.server.HTTPServer):
    request_queue_size = 256  # a long accept queue: requests wait in it, one served at a time


def _serve(delay: float, threaded: bool):
    handler = type("Handler", (_Handler,), {"delay": delay})
    server = (http.server.ThreadingHTTPServer if threaded else _SerialServer)(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture
def fast_server():
    server, url = _serve(0.0, threaded=True)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture
def slow_server():
    server, url = _serve(0.05, threaded=False)  # serves 20 requests/s, one at a time
    yield url
    server.shutdown()
    server.server_close()


def test_poisson_arrivals_are_seeded_inside_the_run_and_at_the_rate():
    a = serving.poisson_arrivals(200, 10, seed=1)
    np.testing.assert_array_equal(a, serving.poisson_arrivals(200, 10, seed=1))
    assert not np.array_equal(a, serving.poisson_arrivals(200, 10, seed=2))
    assert np.all(np.diff(a) > 0)
    assert a[0] >= 0
    assert a[-1] < 10
    assert abs(len(a) - 2000) < 5 * np.sqrt(2000)  # Poisson count: within 5 standard deviations
    assert np.mean(np.diff(a)) == pytest.approx(1 / 200, rel=0.1)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"rate": 0, "duration": 1}, "rate"),
        ({"rate": 10, "duration": -1}, "duration"),
        ({"rate": 10, "duration": 1, "seed": -1}, "seed"),
    ],
)
def test_poisson_arrivals_refuses_bad_input_in_one_line(kwargs, words):
    with pytest.raises(ValueError, match=words):
        serving.poisson_arrivals(**kwargs)


def test_open_loop_refuses_bad_input_in_one_line(fast_server):
    with pytest.raises(ValueError, match="endpoint"):
        serving.open_loop("127.0.0.1:80", ["{}"], 10, 1)
    with pytest.raises(ValueError, match="list of request bodies"):
        serving.open_loop(fast_server, "{}", 10, 1)
    with pytest.raises(ValueError, match="json.dumps"):
        serving.open_loop(fast_server, [{"pixels": []}], 10, 1)
    with pytest.raises(ValueError, match="raise the rate"):
        serving.open_loop(fast_server, ["{}"], 0.01, 0.01)


def test_open_loop_answers_every_request_and_keeps_the_answers(fast_server):
    bodies = [json.dumps({"i": i}) for i in range(5)]
    run = serving.open_loop(fast_server, bodies, rate=100, duration=0.5, seed=4, label="fast")
    assert len(run.status) == len(serving.poisson_arrivals(100, 0.5, seed=4)) > 10
    assert run.ok.all()
    assert [a["echo"]["i"] for a in run.answers()] == [i % 5 for i in range(len(run.status))]  # cycled, in order
    assert np.all(run.done >= run.sent)
    assert np.all(run.latency > 0)
    assert run.cpu_seconds > 0
    assert run.wall_seconds > 0.5
    row = run.summary(p99_target=1.0)
    assert row["setting"] == "fast"
    assert row["requests"] == len(run.status)
    assert row["errors"] == 0
    assert row["p50 (ms)"] <= row["p95 (ms)"] <= row["p99 (ms)"]
    assert row["within target (req/s)"] == row["achieved (req/s)"] > 0
    assert row["meets p99 target"]


def test_a_slow_server_raises_latency_but_not_the_send_schedule(fast_server, slow_server):
    """No coordinated omission: the same schedule is sent on time to a server that keeps up and to one that
    does not (offered 40 req/s, it serves 20), and only the slow one's latencies grow."""
    fast = serving.open_loop(fast_server, ["{}"], rate=40, duration=1.5, seed=7)
    slow = serving.open_loop(slow_server, ["{}"], rate=40, duration=1.5, seed=7)
    np.testing.assert_array_equal(fast.scheduled, slow.scheduled)
    # sent when scheduled, answered or not: a generator that waited for answers (closed loop) would send at the
    # 20 req/s served: request k of 60 leaves at k/20 s, not k/40 s, a median lag near 0.75 s; 0.1 s leaves room
    # for a loaded 2-core machine's wake-ups
    assert np.median(slow.lag) < 0.1
    assert np.median(fast.lag) < 0.1
    assert slow.ok.all()
    assert np.median(slow.latency) > 5 * np.median(fast.latency)
    assert slow.latency[-5:].mean() > slow.latency[:5].mean() + 0.2  # the queue grew through the run
    assert slow.saturated()


def test_time_outs_and_connection_errors_are_counted_not_lost(slow_server):
    run = serving.open_loop(slow_server, ["{}"], rate=60, duration=0.5, timeout=0.05)
    assert (run.status == 0).any()
    row = run.summary(p99_target=0.05)
    assert row["timeouts"] == int((run.status == 0).sum())
    assert not row["meets p99 target"]
    assert run.saturated()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = serving.open_loop(f"http://127.0.0.1:{port}/", ["{}"], rate=20, duration=0.3)
    assert (refused.status == -1).all()
    assert refused.summary()["errors"] == len(refused.status)


def _run(status, latency, rate=10.0, duration=1.0):
    n = len(status)
    scheduled = np.linspace(0, duration * 0.9, n)
    return serving.LoadRun(
        url="http://x/",
        rate=rate,
        duration=duration,
        scheduled=scheduled,
        sent=scheduled + 0.001,
        done=scheduled + np.asarray(latency),
        status=np.asarray(status),
        bodies=["{}"] * n,
        cpu_seconds=0.1,
        wall_seconds=1.0,
    )


def test_summary_counts_each_kind_of_answer_and_the_goodput():
    run = _run([200] * 6 + [503, 503, 500, 0], [0.01, 0.02, 0.03, 0.2, 0.2, 0.2, 0.001, 0.001, 0.01, 10])
    row = run.summary(p99_target=0.05)
    assert (row["503"], row["errors"], row["timeouts"]) == (2, 1, 1)
    assert row["within target (req/s)"] == 3.0  # three 200s within 50 ms, over the 1 s run
    assert row["p50 (ms)"] == pytest.approx(115.0)
    assert not row["meets p99 target"]
    assert row["saturated"]  # it shed and timed out
    assert row["generator CPU (%)"] == 10.0


def test_a_run_that_shed_or_failed_requests_does_not_meet_the_target_however_fast_the_rest():
    fast = [0.001] * 99
    assert _run([200] * 100, fast + [0.001]).summary(p99_target=0.05)["meets p99 target"]
    for status in (503, 500, 0):
        assert not _run([200] * 99 + [status], fast + [0.001]).summary(p99_target=0.05)["meets p99 target"]


def test_a_steady_run_is_not_saturated_and_a_growing_queue_is():
    rng = np.random.default_rng(0)
    steady = _run([200] * 200, 0.01 + rng.exponential(0.002, 200))
    growing = _run([200] * 200, np.linspace(0.01, 1.0, 200) + rng.exponential(0.002, 200))
    assert not steady.saturated()
    assert growing.saturated()


def test_knee_goodput_and_capacity():
    rows = [
        {"offered (req/s)": 10, "saturated": False, "meets p99 target": True},
        {"offered (req/s)": 20, "saturated": False, "meets p99 target": True},
        {"offered (req/s)": 40, "saturated": True, "meets p99 target": False},
    ]
    assert serving.knee(rows) == 40
    assert serving.goodput(rows) == 20
    assert serving.knee(rows[:2]) is None
    blip = [{**rows[0], "saturated": True}, *rows[1:]]  # saturated once, below a rate that kept up: not the knee
    assert serving.knee(blip) == 40
    assert serving.knee([{**r, "saturated": True} for r in rows]) == 10
    assert serving.goodput([{**r, "meets p99 target": False} for r in rows]) == 0.0
    assert serving.machines_for(1000, 20) == 50
    assert serving.machines_for(1001, 20) == 51
    assert serving.cost_per_million(100, 0.36) == pytest.approx(1.0)  # 360 000 requests per $0.36-hour
    with pytest.raises(ValueError, match="meets p99 target"):
        serving.goodput([{"offered (req/s)": 1}])
    with pytest.raises(ValueError, match="saturated"):
        serving.knee([{"offered (req/s)": 1}])
    with pytest.raises(ValueError, match="no rate met the target"):
        serving.machines_for(1000, 0.0)


def test_batch_samples_feed_the_simulation_of_a_run():
    recorded = [(1, 0.001)] * 5 + [(4, 0.002)] * 4 + [(9, 0.01)]
    sizes, samples = serving.batch_service_samples(recorded, min_count=3)
    assert sizes == [1, 4]
    assert samples == [[0.001] * 5, [0.002] * 4]
    with pytest.raises(ValueError, match="recorded 20 times"):
        serving.batch_service_samples(recorded, min_count=20)
    with pytest.raises(ValueError, match="batch size"):
        serving.batch_service_samples([(0, 0.1)])
    run = _run([200] * 50, [0.01] * 50, rate=100.0)
    light = serving.predicted(run, 4, 0.002, SampledLatency(sizes, samples))
    heavy = serving.predicted(run, 4, 0.002, SampledLatency(sizes, [[s * 20 for s in v] for v in samples]))
    assert 0 < light["simulated p50 (ms)"] <= light["simulated p99 (ms)"]
    assert heavy["simulated p99 (ms)"] > light["simulated p99 (ms)"]  # slower service, longer queue
    assert 1 <= light["simulated mean batch"] <= 4


def test_listeners_tells_the_loopback_from_every_interface():
    code = (
        "import socket, sys, time; a = socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(); "
        "b = socket.socket(); b.bind(('0.0.0.0', 0)); b.listen(); print(a.getsockname()[1], b.getsockname()[1]); "
        "sys.stdout.flush(); time.sleep(30)"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as child:
        try:
            loop_port, any_port = map(int, child.stdout.readline().split())
            found = {r["port"]: r for r in serving.listeners(serving.child_processes())}
            assert found[loop_port]["loopback"]
            assert not found[any_port]["loopback"]
            assert found[loop_port]["pid"] == child.pid
        finally:
            child.kill()


def test_a_driver_that_fails_stops_its_ray_node():
    """Notebook 12 relies on it: when a cell fails, papermill (or a learner) shuts the kernel down, the
    interpreter exits, and Ray's exit hook stops every process of the node that driver started."""
    pytest.importorskip("ray")
    # the driver fails only once the parent has listed its node (it waits on stdin): no sleep to race against
    code = (
        "import ray, sys; ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, "
        "logging_level='ERROR'); print('up'); sys.stdout.flush(); sys.stdin.readline(); "
        "raise RuntimeError('a cell failed')"
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

    def names(processes):  # a short-lived helper may exit while being listed
        found = set()
        for p in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                found.add(p.name())
        return found

    with subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as driver:
        watchdog = threading.Timer(180, driver.kill)  # a stuck ray.init fails the test instead of hanging it
        watchdog.start()
        try:
            assert driver.stdout.readline().strip() == "up"
            node = psutil.Process(driver.pid).children(recursive=True)
            assert {"raylet", "gcs_server"} <= names(node), names(node)
            driver.stdin.write("fail now\n")
            driver.stdin.flush()
            assert driver.wait(timeout=60) == 1  # the exception ended it
            gone, alive = psutil.wait_procs(node, timeout=30)
            assert not alive, f"left running after the driver failed: {names(alive)}"
        finally:
            watchdog.cancel()
            if driver.poll() is None:
                driver.kill()


def test_latencies_of_all_count_every_request_sent():
    run = serving.LoadRun(
        url="http://x/",
        rate=10.0,
        duration=1.0,
        scheduled=np.array([0.0, 0.1, 0.2]),
        sent=np.array([0.0, 0.1, 0.2]),
        done=np.array([0.05, 0.3, 0.25]),
        status=np.array([200, 503, 0]),
        bodies=["{}", "", ""],
        cpu_seconds=0.1,
        wall_seconds=1.0,
    )
    assert serving.latencies_of_all(run, 2.0) == [pytest.approx(0.05), 2.0, 2.0]
    with pytest.raises(ValueError, match="time-out"):
        serving.latencies_of_all(run, 0)


def test_a_load_run_whose_columns_disagree_is_refused():
    good = _run([200, 200], [0.01, 0.02])
    with pytest.raises(ValueError, match="one scheduled time"):
        serving.LoadRun(**{**good.__dict__, "done": good.done[:1]})
    with pytest.raises(ValueError, match="after their sends"):
        serving.LoadRun(**{**good.__dict__, "done": good.sent - 0.5})
    with pytest.raises(ValueError, match="rate"):
        serving.LoadRun(**{**good.__dict__, "rate": -1.0})


def test_repeated_runs_summarize_to_one_row_that_counts_every_request():
    clean = [_run([200] * 20, [0.01 + 0.001 * i for i in range(20)]) for _ in range(5)]
    shed = _run([200] * 19 + [503], [0.01] * 20)
    row = serving.summarize_runs([*clean, shed], p99_target=0.05, extra=[{"mean batch": 2.0}] * 6)
    assert row["runs"] == 6
    assert row["requests"] == 120
    assert row["503"] == 1
    assert not row["meets p99 target"]  # one run shed a request: the point does not meet the target
    assert row["saturated"]  # and its queue was full: the point is saturated, though most runs kept up
    assert serving.summarize_runs(clean, p99_target=0.05)["meets p99 target"]
    assert row["mean batch"] == 2.0
    assert "–" in row["p99 lowest–highest (ms)"]
    assert serving.knee([row]) == 10.0
    assert serving.goodput([row]) == 0.0  # knee and goodput read such rows
    with pytest.raises(ValueError):
        serving.summarize_runs([], p99_target=0.05)


def test_the_generator_is_started_once_for_many_runs_and_is_not_an_engine_process(fast_server):
    first = serving.open_loop(fast_server, ["{}"], rate=50, duration=0.2)
    pid = serving.generator_pid()
    second = serving.open_loop(fast_server, ["{}"], rate=50, duration=0.2, seed=1)
    assert pid is not None
    assert serving.generator_pid() == pid
    assert first.ok.all()
    assert second.ok.all()
    assert len(first.status)
    assert len(second.status)  # the same process served both runs
    assert pid not in {p.pid for p in serving.child_processes()}
    assert serving.p99_of_all(first, 1.0) == pytest.approx(float(np.percentile(first.latency, 99)))
