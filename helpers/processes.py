"""Threads against processes on a CPU (notebook 14): the same model served by one process with N intra-op threads,
by N processes with one each, or by N processes with two each (twice as many busy threads as cores), timed in rounds.

- :class:`Workers` — persistent worker processes (``spawn``: no inherited OpenMP state), each with its own copy
  of the model from a picklable ``factory``; :meth:`Workers.run` tells the first ``processes`` of them to use
  ``threads`` intra-op threads and call the model back to back for ``window`` seconds, all starting together.
- :func:`compare` — configurations in rounds (every configuration once per round, in turn): a
  :class:`helpers.verdict.Comparison` of seconds per inference (the machine's throughput, inverted), paired by
  round, and each configuration's per-call latencies.
- :func:`digits_resnet_call` — the factory of notebook 14: the capstone's ResNet-10 on one digit.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Any

from .checks import check_callable, check_int, check_number

#: how long a worker may take to start (import torch, build its model) or to answer a round, in seconds
START_TIMEOUT = 120.0


def digits_resnet_call(size: int, batch: int = 1) -> Callable[[], Any]:
    """The capstone's ResNet-10 (trained weights, CPU) on ``batch`` held-out digits at ``size`` pixels."""
    import torch

    from .data import load_digits_raw, upscale_digits
    from .models import digits_resnet

    model = digits_resnet("cpu").eval()
    x = upscale_digits(load_digits_raw("test")[0][:batch], size)

    def call() -> Any:
        with torch.inference_mode():
            return model(x)

    return call


def _worker(conn: Any, factory: Callable[[], Callable[[], Any]]) -> None:  # pragma: no cover - runs in a child
    import torch

    call = factory()
    call()
    conn.send("ready")
    while (order := conn.recv()) is not None:
        threads, start_at, window = order
        torch.set_num_threads(threads)
        call()  # untimed, with the new thread count
        while time.time() < start_at:  # every process starts at the same wall-clock time
            time.sleep(0.0002)
        latencies, end = [], time.perf_counter() + window
        while (begin := time.perf_counter()) < end:
            call()
            latencies.append(time.perf_counter() - begin)
        conn.send(latencies)


def _answer(pipe: Any, timeout: float) -> Any:
    """What a worker sent within ``timeout`` seconds, or None (nothing, or the worker died)."""
    try:
        return pipe.recv() if pipe.poll(timeout) else None
    except (EOFError, OSError):
        return None


class Workers:
    """``n`` worker processes, each holding ``factory()`` (a zero-argument callable: one inference). Use it in a
    ``with`` block; :meth:`close` ends them (and kills one that does not end)."""

    def __init__(self, factory: Callable[[], Callable[[], Any]], n: int) -> None:
        check_callable("factory", factory, hint="pass a picklable function that builds the model, e.g. a partial")
        check_int("n", n, maximum=256, hint="how many worker processes, e.g. the number of cores")
        ctx = multiprocessing.get_context("spawn")
        self._pipes, self._procs = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, factory), daemon=True)
            proc.start()
            child.close()  # the child's end lives in the child only: its death is then an EOF here, not a silence
            self._pipes.append(parent)
            self._procs.append(proc)
        for i, pipe in enumerate(self._pipes):
            if _answer(pipe, START_TIMEOUT) != "ready":
                self.close()
                raise RuntimeError(
                    f"worker {i} did not start within {START_TIMEOUT:g} s: its model could not be built (run the "
                    "factory here to see why), or a script started workers outside `if __name__ == '__main__':`."
                )

    def run(self, processes: int, threads: int, window: float) -> list[list[float]]:
        """Each of the first ``processes`` workers calls its model back to back for ``window`` seconds with
        ``threads`` intra-op threads, all starting together; returns each worker's per-call latencies (s)."""
        check_int("processes", processes, maximum=len(self._pipes), hint=f"at most the {len(self._pipes)} workers")
        check_int("threads", threads, maximum=1024, hint="intra-op threads per process")
        window = check_number("window", window, positive=True, hint="seconds each round runs")
        start_at = time.time() + 0.1 + 0.02 * processes  # time for every worker to read its order
        for pipe in self._pipes[:processes]:
            pipe.send((threads, start_at, window))
        out = []
        for i, pipe in enumerate(self._pipes[:processes]):
            answer = _answer(pipe, window + START_TIMEOUT)
            if not isinstance(answer, list):
                raise RuntimeError(f"worker {i} did not answer a {window:g} s round within {START_TIMEOUT:g} s more.")
            out.append(answer)
        return out

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)
        self._pipes, self._procs = [], []

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compare(
    workers: Workers, configs: dict[str, tuple[int, int]], *, window: float, rounds: int
) -> tuple[Any, dict[str, list[float]]]:
    """Run every configuration ``{label: (processes, threads)}`` once per round, in turn, for ``rounds`` rounds.
    Returns a :class:`helpers.verdict.Comparison` whose samples are seconds per inference of the whole machine
    (``window`` ÷ inferences done by all its processes; lower is better, paired by round; the first label is the
    baseline) and each configuration's per-call latencies over every round."""
    from .timing import Measurement, new_session
    from .verdict import Comparison

    if not isinstance(configs, dict) or not configs:
        raise ValueError("configs must be a non-empty {label: (processes, threads)} dict.")
    check_int("rounds", rounds, minimum=3, hint="rounds of every configuration, e.g. 6")
    session = new_session("interleaved")
    per_inference: dict[str, list[float]] = {label: [] for label in configs}
    latencies: dict[str, list[float]] = {label: [] for label in configs}
    for _ in range(rounds):
        for label, (processes, threads) in configs.items():
            calls = workers.run(processes, threads, window)
            done = sum(len(c) for c in calls)
            per_inference[label].append(window / max(done, 1))
            latencies[label].extend(t for c in calls for t in c)
    measurements = {
        label: Measurement(samples=tuple(s), label=label, session=session, items=1)
        for label, s in per_inference.items()
    }
    return Comparison(measurements=measurements, baseline=next(iter(configs))), latencies


def sizes(cores: int) -> dict[str, tuple[int, int]]:
    """The three configurations notebook 14 compares on ``cores`` cores: all threads in one process, one thread
    in each of ``cores`` processes, and ``cores`` processes of two threads each (oversubscribed twice over). Two,
    not ``cores`` each (what PyTorch's default gives every process): on 16 cores, 256 spinning threads made one
    round of a 0.15 s window last tens of seconds on the course's GPU machine; twice over already shows the cost."""
    check_int("cores", cores, minimum=2, hint="the cores this process may use (helpers.device.usable_cpus()), ≥ 2")
    return {
        f"1 process × {cores} threads": (1, cores),
        f"{cores} processes × 1 thread": (cores, 1),
        f"{cores} processes × 2 threads (oversubscribed)": (cores, 2),
    }


__all__: Sequence[str] = ["Workers", "compare", "digits_resnet_call", "sizes"]
