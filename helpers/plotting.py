"""One visual style for every notebook: comparison bars with error bars, throughput/latency against batch,
the roofline, and the cumulative waterfall. Each function returns the matplotlib ``Figure``."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from .checks import check_instance, check_ints, check_numbers
from .roofline import Roofline
from .timing import Measurement, check_measurements, time_unit
from .verdict import verdict

STYLE = {
    "figure.figsize": (7.5, 4.0),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titleweight": "bold",
    "font.size": 10,
}
GOOD, BAD, NEUTRAL = "#2a9d8f", "#e76f51", "#577590"
SAME = "#adb5bd"  # within noise of the step before
UNDECIDED = "#ffffff"  # too few samples, or timed in separate sessions: drawn white with a hatch, never as "same"
PALETTE = [NEUTRAL, GOOD, "#f4a261", "#8e6c8a", "#e9c46a", "#264653", BAD]


@contextlib.contextmanager
def style() -> Iterator[None]:
    """The course's look for the figures made inside the block, leaving the learner's own matplotlib settings
    (``rcParams``) as they were: ``with plotting.style(): fig, ax = plt.subplots()``.

    Only the keys of :data:`STYLE` are set and restored. ``plt.style.context`` restores *every* setting on
    exit, ``interactive`` included: when the block is where pyplot first starts Jupyter's inline backend (which
    turns ``interactive`` on), leaving it turns it off again, and from then on no figure a cell makes is shown."""
    saved = {key: plt.rcParams[key] for key in STYLE}
    plt.rcParams.update(STYLE)
    try:
        yield
    finally:
        plt.rcParams.update(saved)


def subplots(*args: Any, **kwargs: Any) -> Any:
    """``plt.subplots(...)`` in the course's look (:func:`style`); draw on the axes it returns as usual."""
    with style():
        return plt.subplots(*args, **kwargs)


def _styled(fn: Any) -> Any:
    """Run a plotting function inside :func:`style`."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with style():
            return fn(*args, **kwargs)

    return wrapper


_time_unit = time_unit


@_styled
def bars(measurements: Sequence[Measurement], title: str = "", ax: Any = None, log: bool = False) -> Any:
    """Median time of each measurement, with its interquartile range as the error bar."""
    check_measurements("measurements", measurements)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots()
    scale, unit = _time_unit(max(m.median for m in measurements))
    med = np.array([m.median for m in measurements]) / scale
    low = med - np.array([m.p25 for m in measurements]) / scale
    high = np.array([m.p75 for m in measurements]) / scale - med
    labels = [m.label or f"#{i}" for i, m in enumerate(measurements)]
    colors = [BAD if m.noisy else PALETTE[i % (len(PALETTE) - 1)] for i, m in enumerate(measurements)]
    ax.barh(labels, med, xerr=[low, high], color=colors, capsize=4)
    ax.invert_yaxis()
    noisy = " (red: a noisy measurement)" if any(m.noisy for m in measurements) else ""
    ax.set_xlabel(f"median time per call ({unit}); whiskers show the IQR{noisy}")
    if log:
        ax.set_xscale("log")
    for y, (value, upper) in enumerate(zip(med, med + high, strict=True)):  # past the whisker, not over it
        ax.annotate(f" {value:.3g} {unit}", (upper, y), va="center", fontsize=9)
    ax.set_title(title)
    fig.tight_layout()
    return fig


@_styled
def vs_batch(batches: Sequence[int], measurements: Sequence[Measurement], title: str = "", label: str = "") -> Any:
    """Two panels: throughput (items/s) and latency per batch (median with p25–p95 band) against batch."""
    check_ints("batches", batches, hint="pass the batch sizes measured, e.g. [1, 2, 4]")
    check_measurements("measurements", measurements)
    if len(batches) != len(measurements):
        raise ValueError("vs_batch() needs one Measurement per batch size, and at least one.")
    if any(m.median <= 0 for m in measurements):
        raise ValueError("vs_batch() needs measurements with a positive median (a throughput divides by it).")
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(11, 4))
    b = np.asarray(batches)
    thr = np.array([n / m.median for n, m in zip(batches, measurements, strict=True)])
    scale, unit = _time_unit(max(m.median for m in measurements))
    ax_t.plot(b, thr, "o-", color=GOOD, label=label or None)
    ax_t.set(xscale="log", xlabel="batch size", ylabel="throughput (items/s)", title="throughput")
    ax_t.set_xscale("log", base=2)
    ax_l.plot(b, [m.median / scale for m in measurements], "o-", color=NEUTRAL, label="median")
    ax_l.fill_between(
        b,
        [m.p25 / scale for m in measurements],
        [m.p95 / scale for m in measurements],
        color=NEUTRAL,
        alpha=0.2,
        label="p25–p95",
    )
    ax_l.set(xlabel="batch size", ylabel=f"latency per batch ({unit})", title="latency")
    ax_l.set_xscale("log", base=2)
    ax_l.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@_styled
def roofline(
    rf: Roofline,
    points: Sequence[tuple[Any, ...]] = (),
    title: str = "",
    dtype: str = "fp32",
    overhead: Sequence[Any] = (),
) -> Any:
    """The roofline of ``rf`` (one roof per measured float dtype) with workloads placed on it.

    ``points`` are ``(label, intensity FLOP/byte, achieved FLOP/s)``, or with a fourth item, the dtype whose
    roof the point is judged against (default ``dtype``). A point above its roof is drawn clamped onto it as
    a hollow marker with an arrow (never above it), and listed in the caption: :meth:`Roofline.place` says
    why it happened. Points whose label is in ``overhead`` (placements with ``overhead_bound``) are drawn as
    crosses: their height is set by the cost per op, not by the roof above them."""
    check_instance("rf", rf, Roofline, hint="pass this machine's roofline, e.g. roofline.get_roofline(device)")
    labels = [p[0] for p in points if isinstance(p, tuple) and p]
    unknown = [o for o in overhead if o not in labels] if isinstance(overhead, (list, tuple, set)) else None
    if unknown is None or unknown:
        raise ValueError(f"overhead={overhead!r}: pass a list of point labels, among {labels}.")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    lo = min([0.01] + [p[1] / 2 for p in points])
    hi = max([1e4] + [p[1] * 2 for p in points])
    intensity = np.logspace(np.log10(lo), np.log10(hi), 200)
    roofs = {k: v for k, v in rf.peak_flops.items() if k != "int8" and np.isfinite(v)}
    for i, (name, peak) in enumerate(roofs.items()):
        ax.plot(
            intensity,
            np.minimum(peak, intensity * rf.bandwidth),
            color=PALETTE[i % len(PALETTE)],
            label=f"{name}: {peak / 1e9:,.0f} GFLOP/s, ridge {rf.ridge_point(name):.1f} FLOP/B",
        )
    clamped = []
    for j, point in enumerate(points):
        if len(point) not in (3, 4):
            raise ValueError(f"points[{j}]={point!r}: pass (label, intensity, FLOP/s[, dtype]).")
        label, x, y = point[:3]
        own = point[3] if len(point) == 4 else dtype
        color = PALETTE[(j + 2) % len(PALETTE)]
        roof = rf.attainable(x, own) if own in roofs else y
        if y > roof:
            clamped.append(label)
            ax.plot([x], [roof], "o", markerfacecolor="none", markeredgecolor=color, markersize=9)
            ax.annotate(
                "",
                (x, roof * 1.3),
                xytext=(x, roof),
                arrowprops={"arrowstyle": "->", "color": color},
                annotation_clip=False,
            )
            y = roof
        elif label in overhead:
            ax.plot([x], [y], "X", color=color, markersize=10)
        else:
            ax.plot([x], [y], "o", color=color, markersize=8)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, -12 if j % 2 == 0 else 6), fontsize=9)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel="FLOP/s")
    ax.set_title(title or f"roofline of {rf.machine_id}: memory {rf.bandwidth / 1e9:.1f} GB/s")
    notes = []
    if clamped:
        notes.append(f"hollow, with an arrow: above its roof, drawn on it ({', '.join(map(str, clamped))})")
    if overhead:
        notes.append("cross: overhead-bound, its height set by the cost per op, not by the roof")
    if notes:
        fig.text(0.01, 0.01, "; ".join(notes), fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def _check_waterfall(steps: Any, values: Any, measurements: Any, verdicts: Any) -> None:
    if isinstance(steps, (str, bytes)) or not isinstance(steps, (list, tuple)) or not steps:
        raise TypeError(f"steps must be a non-empty list of step names, got {steps!r}.")
    check_numbers("values", values, minimum=0, hint="pass one measured value per step")
    if len(steps) != len(values):
        raise ValueError("waterfall() needs one value per step, and at least one step.")
    if measurements is not None and len(measurements) != len(steps):
        raise ValueError(f"waterfall() got {len(measurements)} measurements for {len(steps)} steps; pass one per step.")
    if verdicts is None:
        return
    if measurements is not None:
        raise ValueError("waterfall() takes measurements or verdicts, not both: pass the verdicts you took.")
    if len(verdicts) != len(steps) - 1 or not all(hasattr(v, "outcome") for v in verdicts):
        raise ValueError(
            f"waterfall() needs one Verdict per bar after the first ({len(steps) - 1}), got {len(verdicts)}: "
            "pass helpers.verdict(step, the step it is compared with) for each."
        )


def _waterfall_colors(values: Sequence[float], higher_is_better: bool, measurements: Any, verdicts: Any) -> list[str]:
    """The first bar neutral; each next one by its verdict (given, or taken from ``measurements``), else by the
    direction of its value alone."""
    shade = {"faster": GOOD, "slower": BAD, "within noise": SAME}  # any other outcome is undecided
    if verdicts is not None:
        return [NEUTRAL] + [shade.get(v.outcome, UNDECIDED) for v in verdicts]
    if measurements is not None:
        pairs = itertools.pairwise(measurements)
        return [NEUTRAL] + [shade.get(verdict(cur, prev).outcome, UNDECIDED) for prev, cur in pairs]
    better = [(cur >= prev) if higher_is_better else (cur <= prev) for prev, cur in itertools.pairwise(values)]
    return [NEUTRAL] + [GOOD if b else BAD for b in better]


@_styled
def waterfall(
    steps: Sequence[str],
    values: Sequence[float],
    metric: str = "throughput (items/s)",
    higher_is_better: bool = True,
    title: str = "",
    measurements: Sequence[Measurement] | None = None,
    verdicts: Sequence[Any] | None = None,
) -> Any:
    """Cumulative waterfall: each step's bar shows its value, regressions kept visible (a regression is a
    result too). With ``measurements`` (one timing per step), each bar is coloured by
    :func:`helpers.verdict.verdict` against the step before: green faster, red slower, grey within noise, white
    and hatched when undecided (too few samples, or steps timed in separate sessions: pass paired ``verdicts``
    instead) — an undecided step is never drawn as "within noise"; without them, by the direction of the value
    alone (and the title says so).
    ``verdicts`` (one :class:`helpers.verdict.Verdict` per bar after the first) colours the bars by verdicts
    already taken instead, e.g. paired ones from interleaved timing, or each against the step it builds on."""
    _check_waterfall(steps, values, measurements, verdicts)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(steps)), 4.0))
    colors = _waterfall_colors(values, higher_is_better, measurements, verdicts)
    x = np.arange(len(steps))
    bars = ax.bar(x, values, color=colors, edgecolor=[SAME if c == UNDECIDED else c for c in colors])
    for bar, color in zip(bars, colors, strict=True):
        if color == UNDECIDED:
            bar.set_hatch("//")
    ax.plot(x, values, "k--", linewidth=0.8, alpha=0.6)
    base = values[0]
    for i, value in enumerate(values):
        ratio = value / base if base else float("nan")
        ax.annotate(f"{value:.3g}\n×{ratio:.2f}", (i, value), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, steps, rotation=30, ha="right")
    ax.set_ylim(top=max(values) * 1.2 if max(values) > 0 else 1.0)  # room for the labels under the title
    ax.set_ylabel(metric)
    legend = (
        "green faster, red slower, grey within noise of the step before, hatched undecided"
        if measurements is not None
        else "green faster, red slower, grey within noise, hatched undecided, by each step's verdict"
        if verdicts is not None
        else "red: worse than the step before, noise not judged"
    )
    ax.set_title(title or f"{metric}, step by step ({legend})")
    fig.tight_layout()
    return fig


@_styled
def lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = True,
    logy: bool = False,
    hline: tuple[str, float] | None = None,
    ax: Any = None,
) -> Any:
    """Several measured curves against one x (sizes, batch sizes, op counts), optionally with a reference
    line ``hline = (label, y)`` such as a roof."""
    if not series or any(len(ys) != len(x) for ys in series.values()):
        raise ValueError("lines() needs at least one series, each with one value per x.")
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots()
    for i, (label, ys) in enumerate(series.items()):
        ax.plot(x, ys, "o-", color=PALETTE[i % len(PALETTE)], label=label)
    if hline is not None:
        ax.axhline(hline[1], color=BAD, linestyle="--", label=hline[0])
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def label_points(ax: Any, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str], fontsize: int = 7) -> None:
    """Write each label beside its point; a label that would overlap one already written moves down a line at a
    time (up to eight), so that points close together stay readable. Call it once the axes' scales and limits are
    set: overlaps are judged where the labels land on the figure."""
    if not len(xs) == len(ys) == len(labels):
        raise ValueError(f"pass one x, one y and one label per point (got {len(xs)}, {len(ys)}, {len(labels)}).")
    ax.autoscale_view()  # apply a pending autoscale now: the labels are placed where the points will be drawn
    renderer = ax.figure.canvas.get_renderer()
    placed: list[Any] = []
    for x, y, text in sorted(zip(xs, ys, labels, strict=True), key=lambda p: (-p[1], p[0])):
        for step in range(9):
            note = ax.annotate(text, (x, y), fontsize=fontsize, textcoords="offset points", xytext=(5, 4 - step * 9))
            box = note.get_window_extent(renderer)
            if step == 8 or not any(box.overlaps(other) for other in placed):
                break
            note.remove()
        placed.append(box)
