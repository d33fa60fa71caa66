"""Time to the first correct answer in a fresh process: what a new server replica pays before it can serve.

:func:`launch` starts a **new Python interpreter** (``sys.executable helpers/_replica.py``) that runs a replica
script, a small file with a ``load(artifacts, device)`` function returning the model to call (eager weights, a
``torch.compile`` wrapper, an AOTInductor package, an ONNX Runtime session...). The child stamps the wall clock
at each phase (interpreter up, ``import torch``, the device's start, reading the input, ``load``, first call),
checks its first answer against the expected output with ``torch.testing.assert_close`` *in the child*, then
times steady-state calls. The parent stamps the launch, so **first answer** = launch → first output, interpreter
start-up included.

Compile caches: each launch gets its own ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` (new, empty folders
by default, and the child refuses to run if they hold a file), or the folders of an earlier launch
(``cache=earlier.cache``) for a warm-cache replica. :func:`launches` repeats a launch ``n`` times, each with
fresh empty caches unless told otherwise, so the first answers form a :class:`~helpers.timing.Measurement` the
verdict can judge.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .checks import check_instance, check_int, check_number
from .device import choose_device
from .paths import atomic_path, check_file_name, ensure_dir, output_subdir
from .timing import Measurement

RUNNER = Path(__file__).with_name("_replica.py")
MARKER = "REPLICA-RESULT "
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
#: The phases of a first answer. "start device" is the CUDA context's creation on a GPU (about nothing on a CPU),
#: kept apart so it is not counted in a phase of the replica's own work.
PHASES = ("interpreter start", "import torch", "start device", "read input", "load", "first call")


@dataclass(frozen=True)
class Cache:
    """The two compile-cache folders one replica used (``inductor``: ``TORCHINDUCTOR_CACHE_DIR``,
    ``triton``: ``TRITON_CACHE_DIR``)."""

    inductor: Path
    triton: Path

    def env(self) -> dict[str, str]:
        return {"TORCHINDUCTOR_CACHE_DIR": str(self.inductor), "TRITON_CACHE_DIR": str(self.triton)}

    def files(self) -> int:
        return sum(len(fs) for d in (self.inductor, self.triton) if d.is_dir() for _, _, fs in os.walk(d))

    def mib(self) -> float:
        sizes = (
            os.path.getsize(Path(r) / f)
            for d in (self.inductor, self.triton)
            if d.is_dir()
            for r, _, fs in os.walk(d)
            for f in fs
        )
        return sum(sizes) / 2**20


def empty_cache(name: str | None = None) -> Cache:
    """Two new, empty cache folders under ``<outputs>/coldstart/caches/`` (a unique name unless one is given;
    a given name that already holds files is refused)."""
    if name is not None:
        check_file_name("name", name)
    root = output_subdir("coldstart") / "caches" / (name or f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:8]}")
    cache = Cache(ensure_dir(root / "inductor"), ensure_dir(root / "triton"))
    if cache.files():
        raise ValueError(f"{root} already holds compile-cache files: pass a new name, or none for a unique one.")
    return cache


@dataclass(frozen=True)
class Launch:
    """One fresh process. ``first_answer``: seconds from the launch to the first output (checked against the
    expected one in the child); ``phases``: where those seconds went; ``steady``: the calls timed after it."""

    label: str
    first_answer: float
    phases: dict[str, float]
    steady: Measurement
    max_abs_error: float
    cache: Cache | None
    cache_files: tuple[int, int]  # before and after, both folders together
    peak_rss_mib: float | None  # None where /proc is missing (macOS)
    extra: dict[str, Any] = field(default_factory=dict)


def _write_input(inputs: torch.Tensor, expected: torch.Tensor) -> Path:
    """The batch and its expected output, for the child to read: in the outputs folder (never the caller's
    artifacts folder, which may be read-only or shared), under a name of its own for each launch."""
    path = ensure_dir(output_subdir("coldstart") / "inputs") / f"input-{uuid.uuid4().hex[:12]}.pt"
    with atomic_path(path) as tmp:
        torch.save({"inputs": inputs.detach().cpu(), "expected": expected.detach().cpu()}, tmp)
    return path


def launch(
    script: str | os.PathLike[str],
    *,
    inputs: torch.Tensor,
    expected: torch.Tensor,
    artifacts: str | os.PathLike[str],
    label: str | None = None,
    cache: Cache | None = None,
    expect_empty_cache: bool | None = None,
    device: str = "cpu",
    rtol: float = 1e-4,
    atol: float = 1e-5,
    budget: float = 0.5,
    min_repeats: int = 5,
    max_repeats: int = 500,
    timeout: float = 600,
    env: Mapping[str, str] | None = None,
) -> Launch:
    """Run ``script`` (a file defining ``load(artifacts, device) -> model``) in a new interpreter on ``inputs``,
    check its first answer against ``expected`` there, and return the :class:`Launch`. ``cache`` is the compile cache to
    use (default: a new empty one, asserted empty in the child); ``budget`` seconds of steady-state calls
    follow (at least ``min_repeats``)."""
    script, artifacts = Path(script), Path(artifacts)
    if not script.is_file():
        raise FileNotFoundError(f"no replica script at {script}: write one that defines load(artifacts, device) first.")
    if not artifacts.is_dir():
        raise FileNotFoundError(f"artifacts={str(artifacts)!r} is not a folder: pass the folder the script loads from.")
    for name, value in (("inputs", inputs), ("expected", expected)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{name} must be a tensor (the model's input and its eager output), not {type(value).__name__}."
            )
    if inputs.dim() == 0:
        raise ValueError("inputs must have a batch dimension (a 0-d tensor has none): pass e.g. x[None].")
    device = str(choose_device(device))  # one line now for "cuda" without a GPU, not a dead replica later
    if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TypeError("env must map names to strings, e.g. {'GPT_COMPILE': 'whole'}.")
    check_number("timeout", timeout, positive=True, hint="seconds the replica may take, e.g. 600")
    check_number("rtol", rtol, minimum=0, hint="e.g. 1e-4")
    check_number("atol", atol, minimum=0, hint="e.g. 1e-5")
    check_number("budget", budget, minimum=0, hint="seconds of steady-state calls after the first, e.g. 0.5")
    check_int("min_repeats", min_repeats, 1)
    check_int("max_repeats", max_repeats, min_repeats, hint="at least min_repeats")
    fresh = cache is None
    cache = cache or empty_cache()
    expect_empty = fresh if expect_empty_cache is None else expect_empty_cache
    files_before = cache.files()
    if expect_empty and files_before:
        raise ValueError(f"the cache at {cache.inductor.parent} is not empty: pass cache=None for a new one.")
    args = {
        "script": str(script.resolve()),
        "artifacts": str(artifacts.resolve()),
        "device": device,
        "data": str(_write_input(inputs, expected)),
        "expect_empty_cache": expect_empty,
        "rtol": rtol,
        "atol": atol,
        "budget": budget,
        "min_repeats": min_repeats,
        "max_repeats": max_repeats,
    }
    child_env = {**os.environ, **(env or {}), **cache.env()}
    start = time.time()
    try:
        done = subprocess.run(
            [sys.executable, str(RUNNER), json.dumps(args)],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise TimeoutError(
            f"the replica {script.name} gave no answer within {timeout:.0f} s: raise timeout=."
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"the replica {script.name} failed (exit status {done.returncode}): {tail}")
    r = json.loads(lines[-1][len(MARKER) :])
    stamps = [start, r["start"], r["import"], r["device"], r["read"], r["load"], r["first"]]
    phases = {name: b - a for name, a, b in zip(PHASES, stamps, stamps[1:], strict=False)}
    label = label or script.stem
    steady = Measurement.from_samples(
        r["samples"], label=label, device=device, items=int(inputs.shape[0]), meta={"fresh process": True}
    )
    return Launch(
        label=label,
        first_answer=r["first"] - start,
        phases=phases,
        steady=steady,
        max_abs_error=r["max_abs_error"],
        cache=cache,
        cache_files=(files_before, cache.files()),
        peak_rss_mib=r["peak_rss_mib"],
        extra=r["extra"],
    )


@dataclass(frozen=True)
class ColdStart:
    """``n`` launches of one replica: the first answers as a Measurement (one sample per launch), the
    steady state as one (the median of each launch's calls), and the launches themselves."""

    label: str
    launches: tuple[Launch, ...]

    @property
    def first_answer(self) -> Measurement:
        return Measurement.from_samples(
            [x.first_answer for x in self.launches], label=self.label, meta={"one sample per fresh process": True}
        )

    @property
    def steady(self) -> Measurement:
        """One sample per launch: the median of that launch's steady-state calls. Calls within one process are
        not independent samples of another process's speed (each process has its own memory layout, clock and
        neighbours), so pooling them would make a verdict's interval far too narrow."""
        first = self.launches[0].steady
        return Measurement.from_samples(
            [x.steady.median for x in self.launches],
            label=self.label,
            device=first.device,
            items=first.items,
            meta={"one sample per launch": True},
        )

    def phase(self, name: str) -> float:
        """The median over launches of one phase's seconds (the mean of the middle two for an even count, like
        :attr:`first_answer`'s median)."""
        return float(statistics.median(x.phases[name] for x in self.launches))


def launches(
    script: str | os.PathLike[str], n: int, *, cache: Cache | None = None, earlier: Sequence[Launch] = (), **kwargs: Any
) -> ColdStart:
    """``n`` launches of ``script`` (:func:`launch`'s arguments), each with new empty caches unless ``cache`` is
    given (then all use it, warm). ``earlier``: launches of the same replica already made, counted in the ``n``."""
    check_int("n", n, 1, hint="how many fresh processes to start, e.g. 3")
    if len(earlier) > n:
        raise ValueError(f"earlier holds {len(earlier)} launches, more than n={n}: pass n ≥ len(earlier).")
    from .progress import bar

    fresh = []
    with bar(total=n - len(earlier), desc=f"{kwargs.get('label') or script}: fresh processes", unit="launch") as shown:
        for _ in range(n - len(earlier)):
            fresh.append(launch(script, cache=cache, **kwargs))
            shown.update(1)
    runs = tuple(earlier) + tuple(fresh)
    return ColdStart(label=kwargs.get("label") or runs[0].label, launches=runs)


def table(rows: Sequence[ColdStart], sizes: Mapping[str, float] | None = None) -> Any:
    """One row per replica: median first answer and its phases, steady-state median, artifact size (MiB, from
    ``sizes`` by label), peak memory and the first answer's largest error."""
    import pandas as pd

    from .timing import format_seconds

    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError("rows must be a non-empty list of ColdStart results (what coldstart.launches returns).")
    for row in rows:
        check_instance("a row", row, ColdStart, hint="pass what coldstart.launches returns")
    out = []
    for row in rows:
        out.append(
            {
                "replica": row.label,
                "launches": len(row.launches),
                "first answer": format_seconds(row.first_answer.median),
                **{phase: format_seconds(row.phase(phase)) for phase in PHASES},
                "steady-state median": format_seconds(row.steady.median),
                "artifact MiB": None if sizes is None or row.label not in sizes else round(sizes[row.label], 2),
                "peak RSS MiB": None if None in (rss := [x.peak_rss_mib for x in row.launches]) else round(max(rss)),
                "max |error|": max(x.max_abs_error for x in row.launches),
            }
        )
    return pd.DataFrame(out).set_index("replica")


def plot(rows: Sequence[ColdStart], title: str = "") -> Any:
    """Stacked bars: each replica's median first answer split into its phases."""
    from . import plotting

    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError("rows must be a non-empty list of ColdStart results (what coldstart.launches returns).")
    for row in rows:
        check_instance("a row", row, ColdStart, hint="pass what coldstart.launches returns")

    fig, ax = plotting.subplots(figsize=(8.5, 0.5 * len(rows) + 1.6))
    left = [0.0] * len(rows)
    labels = [row.label for row in rows]
    for i, phase in enumerate(PHASES):
        widths = [row.phase(phase) for row in rows]
        ax.barh(labels, widths, left=left, color=plotting.PALETTE[i % len(plotting.PALETTE)], label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        ax.annotate(f" {total:.1f} s", (total, y), va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from launch to the first correct answer (each phase: its median over launches)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig
