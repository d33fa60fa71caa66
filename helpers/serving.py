"""Measuring a served model under load (notebook 12): an open-loop load generator, the latency summary of one
run, saturation, goodput, notebook 03's simulation beside the measurement, and checks on the serving engine's
processes (which addresses they listen on, whether any is left after shutdown).

**Open loop.** :func:`open_loop` sends requests at Poisson arrival times fixed *before* the run starts
(:func:`poisson_arrivals`) and never waits for an answer before sending the next request. A closed-loop client
(send, wait, send) slows down exactly when the server does, so it never sees the queue a real user population
builds: its latencies hide the overload (*coordinated omission*). Here each request's latency is measured from
its **scheduled** send time, so even a late send (the generator itself busy) counts against the server; the
lateness is reported apart (``send lag``) so a generator that cannot keep up is seen, not hidden.

The generator runs in its **own process** (``helpers/_loadgen.py``, asyncio + aiohttp, unlimited
connections), so the notebook's kernel and the engine's driver do not share its interpreter lock; its CPU time is
measured and reported, because on a 2-core machine it competes with the server it measures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checks import check_instance, check_int, check_number

#: The generator, run as a script in its own interpreter (it imports neither torch nor helpers: it starts fast).
GENERATOR = Path(__file__).with_name("_loadgen.py")


def poisson_arrivals(rate: float, duration: float, seed: int = 0) -> np.ndarray:
    """Send times (seconds from the start) of a Poisson process at ``rate`` requests/s over ``duration`` s: the
    gaps are independent exponential draws of mean ``1/rate``, as when many users act independently."""
    check_number("rate", rate, positive=True, hint="pass the offered load in requests per second, e.g. 50")
    check_number("duration", duration, positive=True, hint="pass the run's length in seconds, e.g. 5")
    check_int("seed", seed, minimum=0, hint="pass a non-negative integer seed")
    rng = np.random.default_rng(seed)
    expected = rate * duration
    gaps = rng.exponential(1 / rate, int(expected + 10 * math.sqrt(expected) + 10))
    times = np.cumsum(gaps)
    return times[times < duration]


@dataclass
class LoadRun:
    """One open-loop run: per request its scheduled and actual send times, completion time (seconds from the
    run's start), HTTP status (``0`` for a time-out, ``-1`` for a connection error) and the start of its body."""

    url: str
    rate: float
    duration: float
    scheduled: np.ndarray
    sent: np.ndarray
    done: np.ndarray
    status: np.ndarray
    bodies: list[str]
    cpu_seconds: float
    wall_seconds: float
    label: str = ""

    def __post_init__(self) -> None:
        """A run whose columns disagree, or whose answers come before their sends, cannot give latencies."""
        check_number("rate", self.rate, positive=True, hint="the offered load in requests per second")
        check_number("duration", self.duration, positive=True, hint="the run's length in seconds")
        columns = {name: np.asarray(getattr(self, name), dtype=np.float64) for name in ("scheduled", "sent", "done")}
        n = len(columns["scheduled"])
        if any(c.ndim != 1 or len(c) != n for c in columns.values()) or len(self.status) != n or len(self.bodies) != n:
            raise ValueError("a LoadRun needs one scheduled time, send time, completion, status and body per request.")
        answered = np.isfinite(columns["done"]) & np.isfinite(columns["sent"])
        if np.any(columns["done"][answered] < columns["sent"][answered]) or np.any(columns["sent"] < 0):
            raise ValueError("a LoadRun's completions must come after their sends, at times ≥ 0 from the run's start.")

    @property
    def latency(self) -> np.ndarray:
        """Seconds from each request's *scheduled* send to its answer (queueing + service + transport)."""
        return self.done - self.scheduled

    @property
    def lag(self) -> np.ndarray:
        """How late the generator sent each request (actual − scheduled send time)."""
        return self.sent - self.scheduled

    @property
    def ok(self) -> np.ndarray:
        return self.status == 200

    def answers(self) -> list[Any]:
        """The JSON answers of the successful requests, in request order (``None`` where one was not 200)."""
        return [json.loads(b) if s == 200 else None for b, s in zip(self.bodies, self.status, strict=True)]

    def saturated(self) -> bool:
        """Whether the queue grew during the run: the successful requests' latencies, in send order and cut in
        thirds, rise from each third to the next by the verdict helper (a growing queue raises them throughout; a
        pause in a stable run lifts one stretch only); or requests timed out; or the server shed load (503)."""
        from .verdict import verdict

        if (self.status == 0).any() or (self.status == 503).any():
            return True
        lat = self.latency[self.ok]
        if len(lat) < 30:
            return False
        a, b, c = np.array_split(lat, 3)
        why = "each third is separate requests of one run"  # not rounds of one session: independent samples
        return verdict(list(b), list(a), independent=why).slower and verdict(list(c), list(b), independent=why).slower

    def summary(self, p99_target: float | None = None) -> dict[str, Any]:
        """One row: offered and achieved rate, latency percentiles (ms) of the successful requests, errors,
        time-outs, 503s, the generator's CPU use and send lag, and with ``p99_target`` (seconds) the requests per
        second answered successfully within it and whether the run's p99 met it (:func:`goodput` reads that)."""
        ok = self.ok
        lat = self.latency[ok] * 1e3
        span = max(float(self.done[ok].max() - self.scheduled[0]) if ok.any() else self.duration, self.duration)

        def pct(q: float) -> float:
            return float(np.percentile(lat, q)) if len(lat) else math.nan

        row: dict[str, Any] = {
            "setting": self.label,
            "offered (req/s)": round(self.rate, 1),
            "achieved (req/s)": round(float(ok.sum()) / span, 1),
            "p50 (ms)": round(pct(50), 2),
            "p95 (ms)": round(pct(95), 2),
            "p99 (ms)": round(pct(99), 2),
            "requests": len(self.status),
            "503": int((self.status == 503).sum()),
            "errors": int(((self.status != 200) & (self.status != 503) & (self.status != 0)).sum()),
            "timeouts": int((self.status == 0).sum()),
            "saturated": self.saturated(),
            "generator CPU (%)": round(100 * self.cpu_seconds / max(self.wall_seconds, 1e-9), 1),
            "p99 send lag (ms)": round(float(np.percentile(self.lag, 99)) * 1e3, 2) if len(self.lag) else math.nan,
        }
        if p99_target is not None:
            check_number("p99_target", p99_target, positive=True, hint="pass the latency target in seconds, e.g. 0.05")
            within = ok & (self.latency <= p99_target)
            row["within target (req/s)"] = round(float(within.sum()) / span, 1)
            clean = not (row["timeouts"] or row["503"] or row["errors"])  # every request answered, none given up
            row["meets p99 target"] = bool(len(lat)) and clean and pct(99) <= p99_target * 1e3
        return row


_generator: subprocess.Popen[str] | None = None


def _run_generator(spec: Path, out: Path, limit: float) -> None:
    """One run by the generator process, started once and kept for the next runs (``_loadgen.py --serve``: its
    Python and aiohttp start once, not once per run). A generator that dies or overruns ``limit`` seconds is
    stopped and the run fails in one line with its error."""
    import select

    global _generator
    if _generator is None or _generator.poll() is not None:
        _generator = subprocess.Popen(
            [sys.executable, str(GENERATOR), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    proc = _generator
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdin.write(f"{spec} {out}\n")
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], limit)
    answer = proc.stdout.readline() if ready else ""
    if answer.strip() != "done" or not out.exists():
        proc.kill()
        proc.wait()
        error = proc.stderr.read().strip()[-800:]
        why = f"no answer within {limit:.0f} s" if not ready else f"exit {proc.returncode}"
        raise RuntimeError(f"the load generator failed ({why}): {error}")


def generator_pid() -> int | None:
    """The process id of the load generator this process keeps for its runs, or None while there is none."""
    return _generator.pid if _generator is not None and _generator.poll() is None else None


def _check_bodies(bodies: Any) -> list[str]:
    if isinstance(bodies, (str, bytes)) or not isinstance(bodies, Sequence) or not bodies:
        raise ValueError("pass bodies as a non-empty list of request bodies (JSON strings), e.g. [json.dumps(x)].")
    if not all(isinstance(b, str) for b in bodies):
        raise ValueError("every body must be a str (a JSON document): pass json.dumps(payload) for each request.")
    return list(bodies)


def open_loop(
    url: str,
    bodies: Sequence[str],
    rate: float,
    duration: float,
    *,
    seed: int = 0,
    timeout: float = 10.0,
    label: str = "",
) -> LoadRun:
    """POST ``bodies`` (cycled, JSON) to ``url`` at Poisson times of ``rate`` per second for ``duration`` seconds,
    from a separate process that never waits for an answer before the next send; waits for every answer (or
    its ``timeout``) and returns the run. See the module's docstring for why."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"url={url!r} is not allowed: pass the endpoint, e.g. 'http://127.0.0.1:8000/digits'.")
    bodies = _check_bodies(bodies)
    offsets = poisson_arrivals(rate, duration, seed)
    check_number("timeout", timeout, positive=True, hint="pass the per-request time-out in seconds, e.g. 10")
    if len(offsets) == 0:
        raise ValueError(f"rate × duration = {rate * duration:.2g} requests: raise the rate or the duration.")
    with tempfile.TemporaryDirectory(prefix="loadgen-") as tmp:
        spec = Path(tmp) / "spec.json"
        out = Path(tmp) / "result.json"
        spec.write_text(  # the bodies the run sends (cycled from the first): not the whole list every run
            json.dumps({"url": url, "bodies": bodies[: len(offsets)], "offsets": offsets.tolist(), "timeout": timeout})
        )
        _run_generator(spec, out, limit=duration + timeout + 60)
        r = json.loads(out.read_text())
    return LoadRun(
        url=url,
        rate=float(rate),
        duration=float(duration),
        scheduled=offsets,
        sent=np.asarray(r["sent"]),
        done=np.asarray(r["done"]),
        status=np.asarray(r["status"], dtype=int),
        bodies=r["bodies"],
        cpu_seconds=float(r["cpu"]),
        wall_seconds=float(r["wall"]),
        label=label,
    )


# --- notebook 03's simulation beside the measured server ------------------------------------------------------


def batch_service_samples(
    batches: Iterable[tuple[int, float]], min_count: int = 3
) -> tuple[list[int], list[list[float]]]:
    """Group (batch size, seconds) pairs recorded inside the server into the sizes seen at least ``min_count``
    times and their samples, ascending: what :class:`helpers.batching.SampledLatency` takes."""
    check_int("min_count", min_count, hint="pass how many samples a batch size needs, e.g. 3")
    groups: dict[int, list[float]] = {}
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError("batches must be a list of (batch size, seconds) pairs, as the server records them.")
    batches = list(batches)
    if not all(isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in batches):
        raise ValueError("batches must be (batch size, seconds) pairs, e.g. [(8, 0.004), (3, 0.002)].")
    for size, seconds in batches:
        check_int("batch size", size, hint="record the size of each batch the server ran")
        check_number("seconds", seconds, positive=True, hint="record each batch's compute time in seconds")
        groups.setdefault(int(size), []).append(float(seconds))
    sizes = sorted(s for s, v in groups.items() if len(v) >= min_count)
    if not sizes:
        raise ValueError(f"no batch size was recorded {min_count} times: run more requests before simulating.")
    return sizes, [groups[s] for s in sizes]


def predicted(
    run: LoadRun, max_batch: int, timeout: float, service: Any, n_requests: int | None = None, seed: int = 0
) -> dict[str, float]:
    """Notebook 03's :func:`~helpers.batching.simulate_server` at the run's offered rate, with the server's own
    batch settings and its measured per-batch compute times (``service``): p50/p99 (ms) it predicts."""
    from .batching import simulate_server

    if n_requests is not None:
        check_int("n_requests", n_requests, hint="requests to simulate, or None for the run's own count")
    n = n_requests or max(len(run.status), 200)
    sim = simulate_server(run.rate, max_batch, timeout, service, n_requests=n, seed=seed)
    steady = sim.latencies[len(sim.latencies) // 10 :]
    return {
        "simulated p50 (ms)": round(float(np.percentile(steady, 50)) * 1e3, 2),
        "simulated p99 (ms)": round(float(np.percentile(steady, 99)) * 1e3, 2),
        "simulated mean batch": round(float(sim.batch_sizes.mean()), 2),
    }


# --- capacity -----------------------------------------------------------------------------------------------


def goodput(rows: Sequence[Mapping[str, Any]]) -> float:
    """The highest offered rate (req/s) among summary rows (same setting, made with a ``p99_target``) that met
    the target (p99 within it, nothing shed, failed or timed out): the load this setting carries at that
    target, at the resolution of the rates swept. 0 if none did."""
    if not rows or any("meets p99 target" not in r for r in rows):
        raise ValueError("pass LoadRun.summary(p99_target=...) rows: each needs 'meets p99 target'.")
    met = [float(r["offered (req/s)"]) for r in rows if r["meets p99 target"]]
    return max(met) if met else 0.0


def knee(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The lowest offered rate (req/s) among summary rows of one setting from which the server was saturated at
    every higher rate swept too (its queue grew, or it shed or lost requests: :meth:`LoadRun.saturated`); ``None``
    if the highest rate swept was not saturated. A single saturated run below rates that kept up (a noisy short
    run) is not the knee: saturation must hold from there on."""
    if not rows or any("saturated" not in r or "offered (req/s)" not in r for r in rows):
        raise ValueError("pass LoadRun.summary() rows of one setting: each needs 'offered (req/s)' and 'saturated'.")
    found = None
    for r in sorted(rows, key=lambda r: float(r["offered (req/s)"]), reverse=True):
        if not r["saturated"]:
            break
        found = float(r["offered (req/s)"])
    return found


def summarize_runs(
    runs: Sequence[LoadRun], p99_target: float, extra: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """One row for repeated runs of one setting at one offered rate (each its own trace): the median over the runs
    of each run's figures (:meth:`LoadRun.summary`), their lowest and highest p99, the requests, 503s, errors and
    time-outs of all of them, ``saturated`` when any run shed or timed out a request (its queue was full) or most
    runs' queues grew (:meth:`LoadRun.saturated`), and ``meets p99 target`` when the median run's
    p99 is within the target and no run shed, failed or timed out a request. ``extra``: one dict of numbers per
    run (e.g. its mean batch), averaged into the row. :func:`knee` and :func:`goodput` read such rows."""
    if not runs or not all(isinstance(r, LoadRun) for r in runs):
        raise ValueError("pass the LoadRuns of one setting and rate, e.g. compare_runs(...).results[label].")
    rows = [r.summary(p99_target) for r in runs]
    row: dict[str, Any] = {"setting": rows[0]["setting"], "offered (req/s)": rows[0]["offered (req/s)"]}
    for key in ("achieved (req/s)", "p50 (ms)", "p95 (ms)", "p99 (ms)", "within target (req/s)", "generator CPU (%)"):
        row[key] = round(float(np.nanmedian([r[key] for r in rows])), 2)
    row["p99 lowest–highest (ms)"] = f"{min(r['p99 (ms)'] for r in rows):g}–{max(r['p99 (ms)'] for r in rows):g}"
    for key in ("requests", "503", "errors", "timeouts"):
        row[key] = int(sum(r[key] for r in rows))
    row["runs"] = len(rows)
    clean = not (row["timeouts"] or row["503"] or row["errors"])
    # a run that shed or gave up a request had a full queue: the point is saturated; else most runs' queues grew
    row["saturated"] = bool(row["timeouts"] or row["503"]) or sum(r["saturated"] for r in rows) > len(rows) / 2
    row["meets p99 target"] = clean and row["p99 (ms)"] <= p99_target * 1e3
    for key in {k for e in extra for k in e}:
        row[key] = round(float(np.mean([e[key] for e in extra if key in e])), 2)
    return row


def p99_of_all(run: LoadRun, timeout: float) -> float:
    """A run's p99 over every request it sent (:func:`latencies_of_all`: a request not answered with 200 counts at
    the client's ``timeout``): the one number per run that repeated runs of a load are compared on."""
    return float(np.percentile(latencies_of_all(run, timeout), 99))


def latencies_of_all(run: LoadRun, timeout: float) -> list[float]:
    """Every request sent in ``run``, in send order: its latency if it was answered with 200, else ``timeout``
    (a 503, an error or a request the client gave up on is a miss, counted at the longest wait the client
    accepts). Two runs on the same arrival trace (same seed, rate and duration) then compare request for request,
    none left out because it was not answered."""
    check_number("timeout", timeout, positive=True, hint="pass the client's time-out in seconds, e.g. 2.0")
    check_instance("run", run, LoadRun, hint="pass what serving.open_loop returned")
    return [float(t) if ok else float(timeout) for t, ok in zip(run.latency, run.ok, strict=True)]


def machines_for(load: float, per_machine: float) -> int:
    """Machines needed to carry ``load`` req/s when one machine carries ``per_machine`` req/s at the target."""
    check_number("load", load, positive=True, hint="pass the target load in requests per second")
    if not isinstance(per_machine, int | float) or per_machine <= 0 or not math.isfinite(per_machine):
        raise ValueError(
            f"per_machine={per_machine!r}: no rate met the target on one machine, so no count of machines does; "
            "lower the offered rates of the sweep or loosen the target."
        )
    return math.ceil(load / per_machine)


def cost_per_million(per_machine: float, dollars_per_hour: float) -> float:
    """Dollars per million requests for one machine carrying ``per_machine`` req/s at ``dollars_per_hour``."""
    check_number("per_machine", per_machine, positive=True, hint="pass the goodput of one machine in req/s")
    check_number("dollars_per_hour", dollars_per_hour, positive=True, hint="pass the machine's price, e.g. 0.10")
    return dollars_per_hour / (per_machine * 3600) * 1e6


# --- the engine's processes -----------------------------------------------------------------------------------


def child_processes() -> list[Any]:
    """This process's descendants that are alive (a locally started engine's head, workers and replicas); the
    course's own load generator, kept for the next run (:func:`open_loop`), is not one of them."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        if p.pid == generator_pid():
            continue
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def listeners(processes: Iterable[Any]) -> list[dict[str, Any]]:
    """Each listening TCP socket of ``processes``: process name, pid, address, port, and whether it is on the
    loopback only (127.0.0.0/8 or ::1, IPv4-mapped included)."""
    import ipaddress

    import psutil

    if isinstance(processes, (str, bytes)) or not isinstance(processes, Iterable):
        raise TypeError("processes must be a list of psutil.Process objects, e.g. pipeline.child_processes().")
    processes = list(processes)
    if not all(isinstance(p, psutil.Process) for p in processes):
        raise TypeError("processes must be psutil.Process objects, e.g. pipeline.child_processes(), not pids.")
    rows = []
    for p in processes:
        try:
            conns = p.net_connections(kind="inet")
            name = p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status != psutil.CONN_LISTEN:
                continue
            ip = ipaddress.ip_address(c.laddr.ip.split("%")[0])
            mapped = getattr(ip, "ipv4_mapped", None)
            loopback = (mapped or ip).is_loopback
            rows.append(
                {"process": name, "pid": p.pid, "address": c.laddr.ip, "port": c.laddr.port, "loopback": loopback}
            )
    return rows
