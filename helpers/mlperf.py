"""MLPerf's LoadGen (``mlcommons-loadgen``), the course's way: a system under test, one call per test, and the
numbers read back from LoadGen's own ``mlperf_log_summary.txt``, never from the course's timer.

- :class:`SUT` — a ``predict`` function (a batch of samples → one integer result per sample) and the samples it
  serves, as LoadGen's system under test and query sample library. Offline and MultiStream queries arrive as lists
  and run ``max_batch`` samples at a time; Server queries arrive one by one from LoadGen's clock and go through a
  queue to a worker thread that takes what is waiting, up to ``max_batch`` (dynamic batching with no fill wait);
  SingleStream queries run as they arrive. Each sample's result goes back to LoadGen as its response bytes, which
  an accuracy run logs.
- :func:`run` — one LoadGen test (a scenario, performance or accuracy mode, the durations and bounds), written
  to its own folder; returns the :class:`Summary` LoadGen wrote.
- :func:`read_summary` / :func:`read_accuracy` — a test's summary (the result, VALID or INVALID and why, the
  early-stopping estimates, the latency percentiles) and an accuracy run's logged results.
"""

from __future__ import annotations

import json
import math
import queue
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .checks import check_callable, check_choice, check_int, check_number
from .paths import ensure_dir, output_subdir

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline")
#: What each scenario's result is, as MLPerf reports it.
METRIC = {
    "SingleStream": "p90 latency, early-stopping estimate",
    "MultiStream": "p99 query latency, early-stopping estimate",
    "Server": "completed samples/s at the latency bound",
    "Offline": "samples/s",
}
#: What MLPerf publishes for each scenario since v2.0 (SingleStream, MultiStream) and v5.0 (Server), as the
#: submission checker reads it: the summary line, a pattern over its early-stopping lines or its fields; and the raw
#: statistic LoadGen prints beside it.
_PUBLISHED = {
    "SingleStream": (r"^Early stopping 90\.0th percentile estimate: (\d+)", r"^90\.0th percentile latency \(ns\)$"),
    "MultiStream": (r"^Early stopping 99\.0th percentile estimate: (\d+)", r"^99\.0th percentile latency \(ns\)$"),
    "Server": (r"^Completed samples per second$", r"^Scheduled samples per second$"),
    "Offline": (r"^Samples per second$", r"^Samples per second$"),
}
#: The fewest queries LoadGen 6.0's early stopping accepts when no query misses its bound (what its summary asks
#: for when fewer ran): a shorter run is INVALID whatever its duration.
EARLY_STOPPING_QUERIES = {"SingleStream": 64, "MultiStream": 662, "Server": 459}


def queries_needed(over: int = 0, percentile: float = 0.99, confidence: float = 0.99) -> int:
    """The fewest queries early stopping accepts when ``over`` of them miss the bound: LoadGen's binomial test
    (``loadgen/early_stopping.cc``), the smallest n for which at most ``over`` of n beyond the ``percentile`` has a
    chance below ``1 - confidence``. ``queries_needed(0)`` is Server's 459; each query over the bound costs more."""
    n = over + 1
    while (
        sum(math.comb(n, k) * (1 - percentile) ** k * percentile ** (n - k) for k in range(over + 1)) >= 1 - confidence
    ):
        n += 1
    return n


def _loadgen() -> Any:
    try:
        import mlperf_loadgen
    except ImportError as exc:  # pragma: no cover - pinned in requirements.txt
        raise ImportError("mlcommons-loadgen is not installed: run `make setup` (requirements.txt pins it).") from exc
    return mlperf_loadgen


class SUT:
    """``predict(samples[indices])`` → one integer result per sample, served to LoadGen (see the module's text).
    Use it in a ``with`` block (or call :meth:`close`): LoadGen's handles and the Server worker are released there."""

    def __init__(self, predict: Callable[[Any], Any], samples: Sequence[Any], max_batch: int = 1, name: str = "sut"):
        check_callable("predict", predict, hint="pass a function: a batch of samples -> one integer per sample")
        if isinstance(samples, (str, bytes)) or not hasattr(samples, "__getitem__") or len(samples) == 0:
            raise ValueError("samples must be a non-empty tensor or array of the inputs LoadGen's queries index.")
        self.predict, self.samples, self.name = predict, samples, name
        self.max_batch = check_int("max_batch", max_batch, hint="the most samples one predict call may take")
        lg = _loadgen()
        self._lg, self._server = lg, False
        self._queue: queue.Queue[Any] = queue.Queue()
        self.errors: list[BaseException] = []
        self.sut = lg.ConstructSUT(self._issue, self._flush)
        n = len(samples)
        self.qsl = lg.ConstructQSL(n, n, lambda idx: None, lambda idx: None)  # every sample already in memory

    # LoadGen's callbacks --------------------------------------------------------------------------------------
    def _issue(self, query_samples: list[Any]) -> None:
        if self._server:
            for q in query_samples:
                self._queue.put(q)
            return
        for i in range(0, len(query_samples), self.max_batch):
            self._complete(query_samples[i : i + self.max_batch])

    def _flush(self) -> None:
        pass

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._complete(batch)
                    return
                batch.append(nxt)
            self._complete(batch)

    def _complete(self, query_samples: list[Any]) -> None:
        lg = self._lg
        try:
            out = np.asarray(self.predict(self.samples[[q.index for q in query_samples]]), dtype=np.int64)
            if out.shape != (len(query_samples),):
                raise ValueError(
                    f"predict returned shape {out.shape} for {len(query_samples)} samples: return one "
                    "integer per sample (e.g. logits.argmax(1))."
                )
        except BaseException as exc:  # LoadGen would wait for ever for these samples: answer them, keep the error
            self.errors.append(exc)
            out = np.full(len(query_samples), -1, dtype=np.int64)
        responses = [lg.QuerySampleResponse(q.id, out[i : i + 1].ctypes.data, 8) for i, q in enumerate(query_samples)]
        lg.QuerySamplesComplete(responses)  # LoadGen copies the bytes before this returns

    def _run(self, start_test: Callable[[], None], server: bool) -> None:
        """Run LoadGen's test. Server queries are served on *this* thread while the test runs in another: a model
        called from a Python worker thread ran ~1.6× slower than from the thread that warmed it up, on the course's
        CPU (PyTorch's OpenMP gives each calling thread its own intra-op pool), which would be a handicap of the
        harness, not of the model. The other scenarios run each query in LoadGen's issue thread, as it arrives."""
        if not server:
            start_test()
            return
        self._server = True

        def test() -> None:
            try:
                start_test()
            except BaseException as exc:  # pragma: no cover - LoadGen reports through its logs
                self.errors.append(exc)
            finally:
                self._queue.put(None)  # every query was answered (LoadGen waits for them): the serving loop ends

        runner = threading.Thread(target=test, name=f"{self.name}-loadgen", daemon=True)
        runner.start()
        try:
            self._serve()
        except BaseException:  # an interrupt, say: answer what LoadGen still waits for, so that its test can end
            while (item := self._queue.get()) is not None:
                self._lg.QuerySamplesComplete(
                    [self._lg.QuerySampleResponse(item.id, 0, 0)]
                    if hasattr(item, "id")
                    else [self._lg.QuerySampleResponse(item[0], 0, 0)]
                )
            raise
        finally:
            runner.join()
            self._server = False

    def close(self) -> None:
        if self.sut is not None:
            self._lg.DestroyQSL(self.qsl)
            self._lg.DestroySUT(self.sut)
            self.sut = self.qsl = None

    def __enter__(self) -> SUT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LLMSUT(SUT):
    """A language model behind LoadGen, with token latencies: each sample is a :class:`helpers.llm_serving.Request`
    (its prompt and how many tokens to generate); queries go to :func:`helpers.llm_serving.serve_live`'s
    continuous-batching engine in a worker thread, its first token is reported with ``FirstTokenComplete`` (LoadGen's
    TTFT) and its last with ``QuerySamplesComplete`` and the token count (LoadGen's TPOT). Every test runs it as a
    server: LoadGen's queries arrive on LoadGen's clock. ``engine`` holds the last run's
    :class:`~helpers.llm_serving.EngineRun`, ``answers`` each sample's tokens."""

    def __init__(
        self, model: Any, requests: Sequence[Any], slots: int = 8, step: Any = None, max_len: int | None = None
    ):
        from . import llm_serving

        if not requests or not all(isinstance(r, llm_serving.Request) for r in requests):
            raise ValueError(
                "requests must be a non-empty list of helpers.llm_serving.Request (make_requests makes them)."
            )
        super().__init__(lambda samples: samples, list(requests), max_batch=1, name="llm")
        self.model, self.slots, self.step, self.max_len = model, check_int("slots", slots), step, max_len
        self.engine: Any = None
        self.answers: dict[int, list[int]] = {}
        self._index: dict[int, int] = {}
        self._outstanding: set[int] = set()
        self._lock = threading.Lock()

    def _issue(self, query_samples: list[Any]) -> None:
        for q in query_samples:
            with self._lock:
                self._index[q.id] = q.index
                self._outstanding.add(q.id)
            self._queue.put((q.id, self.samples[q.index]))

    def _first(self, tag: int, token: int) -> None:
        first = np.array([token], dtype=np.int64)
        self._lg.FirstTokenComplete([self._lg.QuerySampleResponse(tag, first.ctypes.data, 8)])

    def _done(self, tag: int, tokens: list[int]) -> None:
        out = np.asarray(tokens, dtype=np.int64)
        with self._lock:
            self._outstanding.discard(tag)
            self.answers[self._index.pop(tag)] = tokens
        self._lg.QuerySamplesComplete([self._lg.QuerySampleResponse(tag, out.ctypes.data, out.nbytes, len(out))])

    def _serve(self) -> None:
        from . import llm_serving

        try:
            self.engine = llm_serving.serve_live(
                self.model,
                self._queue,
                slots=self.slots,
                step=self.step,
                max_len=self.max_len,
                on_first=self._first,
                on_done=self._done,
            )
        except BaseException as exc:  # answer what is left, or LoadGen waits for ever
            self.errors.append(exc)
            while True:
                with self._lock:
                    pending = list(self._outstanding)
                    self._outstanding.clear()
                for tag in pending:
                    self._lg.QuerySamplesComplete([self._lg.QuerySampleResponse(tag, 0, 0, 0)])
                item = self._queue.get()
                if item is None:
                    return
                with self._lock:
                    self._outstanding.add(item[0])

    def _run(self, start_test: Callable[[], None], server: bool) -> None:
        super()._run(start_test, server=True)  # an LLM is always served as queries arrive


@dataclass
class Summary:
    """What LoadGen wrote in ``mlperf_log_summary.txt``: ``result``, the statistic MLPerf publishes (:data:`METRIC`:
    for SingleStream and MultiStream LoadGen's early-stopping estimate of the percentile, in seconds, NaN where too
    few queries ran for one; for Server the completed samples per second), ``raw``, the statistic LoadGen prints
    beside it (the measured percentile; the scheduled samples per second), ``valid``, the checks behind it, early
    stopping's lines and
    the latency percentiles (s), keyed ``"50.00"``, ``"90.00"``, ``"99.00"``…; with token latencies also ``ttft``
    and ``tpot`` (s)."""

    scenario: str
    mode: str
    valid: bool
    result: float
    raw: float = math.nan
    checks: dict[str, bool] = field(default_factory=dict)
    early_stopping: list[str] = field(default_factory=list)
    recommendations: list[str] = field(default_factory=list)
    latencies: dict[str, float] = field(default_factory=dict)
    ttft: dict[str, float] = field(default_factory=dict)
    tpot: dict[str, float] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    @property
    def metric(self) -> str:
        return METRIC.get(self.scenario, "result")

    def why(self) -> str:
        """``VALID`` or ``INVALID: <each check that failed>``, in LoadGen's words."""
        if self.valid:
            return "VALID"
        failed = [name for name, ok in self.checks.items() if not ok]
        return "INVALID: " + ("; ".join(f"{name.lower()}: no" for name in failed) or "see the summary file")

    def row(self) -> dict[str, Any]:
        latency = self.latencies
        return {
            "scenario": self.scenario,
            "result": self.result,
            "metric": self.metric,
            "raw": self.raw,
            "p50 (s)": latency.get("50.00"),
            "p90 (s)": latency.get("90.00"),
            "p99 (s)": latency.get("99.00"),
            "verdict": self.why(),
        }


_LINE = re.compile(r"^\s*([^:*]+?)\s*:\s*(.*?)\s*$")


def _summary_sections(text: str) -> tuple[dict[str, str], list[str], list[str]]:
    """A LoadGen summary's ``key : value`` fields (the first of each key), its early-stopping lines (prefixed with
    TTFT/TPOT where a run has token latencies) and its recommendations."""
    fields: dict[str, str] = {}
    early: list[str] = []
    recs: list[str] = []
    section, prefix = None, ""
    for line in text.splitlines():
        stripped = line.strip()
        if "Early Stopping Result" in stripped:  # also "TTFT …" and "TPOT …" in a run with token latencies
            section, prefix = early, stripped.split("Early Stopping Result")[0].strip()
        elif stripped.startswith("Recommendations"):
            section, prefix = recs, ""
        elif stripped.startswith("*") and section is not None:
            line = stripped.lstrip("* ").strip()
            section.append(f"{prefix}: {line}" if prefix and section is early else line)
        elif stripped.startswith("=") or not stripped:
            section = None
        elif section is not None and not _LINE.match(line):
            section[-1:] = [f"{section[-1]} {stripped}"] if section else [stripped]  # a bullet's continuation
        elif m := _LINE.match(line):
            fields.setdefault(m.group(1), m.group(2))
    return fields, early, recs


def read_summary(folder: str | Path) -> Summary:
    """Parse ``<folder>/mlperf_log_summary.txt`` (see :class:`Summary`)."""
    path = Path(folder) / "mlperf_log_summary.txt"
    if not path.is_file():
        raise FileNotFoundError(f"no LoadGen summary at {path}: run a test there first (helpers.mlperf.run).")
    fields, early, recs = _summary_sections(path.read_text())
    scenario = fields.get("Scenario", "")
    mode = fields.get("Mode", "")
    checks = {k: v.lower() == "yes" for k, v in fields.items() if k.endswith("satisfied")}
    latencies, ttft, tpot = {}, {}, {}
    for key, value in fields.items():
        for pattern, into in (
            (r"^(\d+\.\d\d) percentile latency \(ns\)$", latencies),
            (r"^(\d+\.\d\d) percentile first token latency \(ns\)$", ttft),
            (r"^(\d+\.\d\d) percentile time to output token \(ns\)$", tpot),
        ):
            if m := re.match(pattern, key):
                into[m.group(1)] = float(value) / 1e9
    published, raw_key = _PUBLISHED.get(scenario, (None, None))

    def field_value(pattern: str | None) -> float:
        for key, value in fields.items():
            if pattern and re.match(pattern, key):
                return float(value) / (1e9 if "(ns)" in key else 1.0)
        return math.nan

    raw = field_value(raw_key)
    if scenario in ("SingleStream", "MultiStream"):  # the estimate, from its early-stopping line (ns)
        found = [re.match(published, line) for line in early]
        result = next((float(m.group(1)) / 1e9 for m in found if m), math.nan)
    else:
        result = field_value(published)
    return Summary(
        scenario=scenario,
        mode=mode,
        valid=fields.get("Result is") == "VALID",
        result=result,
        raw=raw,
        checks=checks,
        early_stopping=early,
        recommendations=recs,
        latencies=latencies,
        ttft=ttft,
        tpot=tpot,
        fields=fields,
        path=path,
    )


def read_accuracy(folder: str | Path, every: bool = False) -> Any:
    """A run's logged results: ``{sample index: the integer predict returned}`` (the last one logged where a sample
    was issued more than once), or with ``every=True`` each logged ``(sample index, result)`` pair in log order
    (a performance run with ``accuracy_log_probability`` logs a random share of its answers, repeats included)."""
    path = Path(folder) / "mlperf_log_accuracy.json"
    if not path.is_file():
        raise FileNotFoundError(f"no LoadGen accuracy log at {path}: run a test with mode='accuracy' there first.")
    pairs = [
        (int(entry["qsl_idx"]), int(np.frombuffer(bytes.fromhex(entry["data"]), dtype=np.int64)[0]))
        for entry in json.loads(path.read_text() or "[]")
    ]
    return pairs if every else dict(pairs)


def run(
    sut: SUT,
    scenario: str,
    *,
    name: str | None = None,
    mode: str = "performance",
    min_duration: float = 1.0,
    min_queries: int = 1,
    target_qps: float | None = None,
    latency_bound: float | None = None,
    expected_latency: float | None = None,
    expected_qps: float | None = None,
    samples_per_query: int = 8,
    ttft_bound: float | None = None,
    tpot_bound: float | None = None,
    max_duration: float = 120.0,
    accuracy_log_probability: float = 0.0,
    folder: str | Path | None = None,
) -> Summary:
    """Run one LoadGen test of ``sut`` and return its summary. ``min_duration`` (s) and ``min_queries`` are the
    run's minimums (MLPerf's own are 600 s and scenario-sized counts; a course run names what it used).
    Server needs ``target_qps`` (Poisson arrivals) and ``latency_bound`` (s, at p99), or, for an :class:`LLMSUT`,
    ``ttft_bound`` and ``tpot_bound`` (s, at p99: LoadGen's token latencies); Offline issues one query of
    ``expected_qps × min_duration`` samples; MultiStream queries hold ``samples_per_query`` samples.
    ``mode="accuracy"`` runs every sample once and logs each result (:func:`read_accuracy`); a performance run
    logs each answer with ``accuracy_log_probability`` (MLPerf's TEST01 checks those against the accuracy run's,
    with a seed of its own: here seed 0, so a rerun logs the same queries). LoadGen stops
    issuing after ``max_duration`` seconds (it still waits for the queries it issued). Logs go to
    ``folder`` (default ``<outputs>/mlperf/<name or scenario>``)."""
    lg = _loadgen()
    check_instance_sut(sut)
    check_choice("scenario", scenario, SCENARIOS, hint="one of MLPerf's four scenarios")
    check_choice("mode", mode, ("performance", "accuracy"))
    min_duration = check_number("min_duration", min_duration, positive=True, hint="seconds, e.g. 1.0")
    check_int("min_queries", min_queries, hint="the fewest queries the run may issue")
    check_int("samples_per_query", samples_per_query, hint="MLPerf's MultiStream uses 8")
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.PerformanceOnly if mode == "performance" else lg.TestMode.AccuracyOnly
    settings.min_duration_ms = int(min_duration * 1000)
    max_duration = check_number("max_duration", max_duration, minimum=min_duration, hint="seconds ≥ min_duration")
    settings.max_duration_ms = int(max_duration * 1000)
    settings.min_query_count = min_queries
    share = check_number("accuracy_log_probability", accuracy_log_probability, minimum=0, hint="a share, e.g. 0.1")
    if share > 1:
        raise ValueError(f"accuracy_log_probability={share}: a share of the answers, from 0 to 1 (e.g. 0.1).")
    settings.accuracy_log_probability = share
    tokens = isinstance(sut, LLMSUT)
    if scenario == "Server":
        qps = check_number("target_qps", target_qps, positive=True, hint="the Poisson arrival rate, per second")
        settings.server_target_qps = qps
        if not tokens:
            bound = check_number("latency_bound", latency_bound, positive=True, hint="the p99 bound in seconds")
            settings.server_target_latency_ns = int(bound * 1e9)
    if tokens:
        hint = "seconds, at p99 (MLPerf's Llama-2-70B Server: 2.0 and 0.2)"
        settings.use_token_latencies = True
        settings.ttft_latency = int(check_number("ttft_bound", ttft_bound, positive=True, hint=hint) * 1e9)
        settings.tpot_latency = int(check_number("tpot_bound", tpot_bound, positive=True, hint=hint) * 1e9)
    if scenario == "Offline":
        settings.offline_expected_qps = check_number(
            "expected_qps", expected_qps, positive=True, hint="samples per second you expect: sizes the one query"
        )
    if expected_latency is not None:
        ns = int(check_number("expected_latency", expected_latency, positive=True, hint="seconds") * 1e9)
        settings.single_stream_expected_latency_ns = ns
        settings.multi_stream_expected_latency_ns = ns
    settings.multi_stream_samples_per_query = samples_per_query
    out = Path(folder) if folder is not None else output_subdir("mlperf") / (name or f"{scenario}-{mode}")
    ensure_dir(out)
    for stale in out.glob("mlperf_log_*"):
        stale.unlink()  # a test that fails to write must not leave an earlier test's summary to be read
    log = lg.LogSettings()
    log.log_output.outdir = str(out)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False  # the trace (MBs per run) is for debugging; its logger thread would compete for cores
    sut.errors.clear()
    from .progress import timed

    with timed(f"LoadGen {scenario} ({mode})", min_duration):
        sut._run(lambda: lg.StartTestWithLogSettings(sut.sut, sut.qsl, settings, log), server=scenario == "Server")
    if sut.errors:
        exc = sut.errors[0]
        raise RuntimeError(f"predict failed during the LoadGen test ({type(exc).__name__}: {exc})") from exc
    if mode == "accuracy":
        return Summary(scenario=scenario, mode="AccuracyOnly", valid=True, result=math.nan, path=out)
    return read_summary(out)


def check_instance_sut(sut: Any) -> None:
    if not isinstance(sut, SUT) or sut.sut is None:
        raise TypeError("sut must be an open helpers.mlperf.SUT (made with SUT(predict, samples), not closed).")
