import matplotlib.pyplot as plt
import pytest
from test_roofline import synthetic

from helpers import plotting
from helpers.timing import Measurement
from helpers.verdict import verdict


def _m(label, t, noisy=False):
    spread = [t, t * 2, t, t * 3] if noisy else [t, t * 1.01, t * 0.99, t]
    return Measurement.from_samples(spread, label=label)


def teardown_function():
    plt.close("all")


def test_bars_one_bar_per_measurement_with_error_bars():
    fig = plotting.bars([_m("eager", 2e-3), _m("compiled", 1e-3, noisy=True)], title="t")
    ax = fig.axes[0]
    assert len(ax.patches) == 2
    assert "ms" in ax.get_xlabel()
    assert ax.patches[1].get_facecolor()[:3] == pytest.approx(plt.matplotlib.colors.to_rgb(plotting.BAD))
    assert "red" in ax.get_xlabel()  # the colour is explained where it is used
    label_x = [t.xy[0] for t in ax.texts]
    assert label_x[0] >= 2.0
    assert label_x[1] >= 1.0  # each value sits at or past its whisker, never over the bar


def test_vs_batch_plots_items_per_second_and_the_median_latency():
    batches = [1, 2, 4, 8]
    measurements = [_m(str(b), 1e-3 * (1 + b / 4)) for b in batches]
    fig = plotting.vs_batch(batches, measurements)
    throughput, latency = fig.axes[0].lines[0], fig.axes[1].lines[0]
    assert list(throughput.get_xdata()) == batches
    assert list(throughput.get_ydata()) == pytest.approx(
        [b / m.median for b, m in zip(batches, measurements, strict=True)]
    )
    assert "ms" in fig.axes[1].get_ylabel()  # medians of 1.25–3 ms are shown in ms
    assert list(latency.get_ydata()) == pytest.approx([m.median * 1e3 for m in measurements])


def test_the_course_style_leaves_the_learners_settings_alone():
    before = dict(plt.rcParams)
    fig = plotting.bars([_m("eager", 2e-3)])
    assert dict(plt.rcParams) == before  # a style context, not a global rcParams change
    assert not fig.axes[0].spines["top"].get_visible()  # but the figure has the course's look
    fig, ax = plotting.subplots()
    assert not ax.spines["right"].get_visible()
    assert dict(plt.rcParams) == before


def test_style_restores_only_its_own_settings():
    # Jupyter's inline backend turns interactive mode on when pyplot first starts it, which may happen inside
    # the block; restoring every rcParam on exit would turn it off again and hide every later figure.
    before = plt.rcParams["interactive"]
    with plotting.style():
        plt.rcParams["interactive"] = not before
    try:
        assert plt.rcParams["interactive"] == (not before)
    finally:
        plt.rcParams["interactive"] = before


def test_roofline_plot_has_a_roof_per_dtype_and_points():
    fig = plotting.roofline(synthetic(), points=[("add", 0.125, 1e9), ("matmul", 100.0, 80e9)])
    ax = fig.axes[0]
    assert len(ax.lines) == 2 + 2
    assert ax.get_xscale() == "log"
    assert ax.get_yscale() == "log"
    fig = plotting.roofline(synthetic(), points=[("add", 0.125, 1e9), ("tiny", 0.125, 1e6)], overhead=["tiny"])
    markers = [line.get_marker() for line in fig.axes[0].lines[2:]]
    assert markers == ["o", "X"]
    assert "overhead-bound" in fig.texts[0].get_text()
    with pytest.raises(ValueError, match="point labels"):
        plotting.roofline(synthetic(), points=[("add", 0.125, 1e9)], overhead=["nope"])


def test_waterfall_marks_regressions():
    fig = plotting.waterfall(["baseline", "batching", "fp16"], [10.0, 50.0, 40.0])
    colors = [p.get_facecolor()[:3] for p in fig.axes[0].patches]
    to_rgb = plt.matplotlib.colors.to_rgb
    assert colors == [pytest.approx(to_rgb(c)) for c in (plotting.NEUTRAL, plotting.GOOD, plotting.BAD)]


def test_waterfall_colours_bars_by_the_verdicts_given():
    slow = Measurement(samples=tuple(2.0 + 0.01 * i for i in range(10)), label="slow", session="s")
    fast = Measurement(samples=tuple(1.0 + 0.01 * i for i in range(10)), label="fast", session="s")
    same = Measurement(samples=tuple(reversed(slow.samples)), label="same", session="s")
    verdicts = [verdict(fast, slow), verdict(same, slow)]  # the third bar judged against the first, not the second
    fig = plotting.waterfall(["slow", "fast", "same"], [1.0, 2.0, 1.0], verdicts=verdicts)
    colors = [p.get_facecolor()[:3] for p in fig.axes[0].patches]
    to_rgb = plt.matplotlib.colors.to_rgb
    assert [v.outcome for v in verdicts] == ["faster", "within noise"]
    assert colors == [pytest.approx(to_rgb(c)) for c in (plotting.NEUTRAL, plotting.GOOD, plotting.SAME)]
    few = Measurement(samples=(1.0, 1.1), label="few", session="s")  # too few samples: hatched, not "same"
    fig = plotting.waterfall(["slow", "few"], [1.0, 1.0], verdicts=[verdict(few, slow)])
    bar = fig.axes[0].patches[1]
    assert bar.get_facecolor()[:3] == pytest.approx(to_rgb(plotting.UNDECIDED))
    assert bar.get_hatch() == "//"
    other = Measurement(samples=slow.samples, label="other session", session="t")
    fig = plotting.waterfall(["slow", "other"], [1.0, 1.0], measurements=[slow, other])  # separate sessions
    assert fig.axes[0].patches[1].get_hatch() == "//"
    with pytest.raises(ValueError, match="one Verdict per bar"):
        plotting.waterfall(["a", "b"], [1.0, 2.0], verdicts=[])
    with pytest.raises(ValueError, match="not both"):
        plotting.waterfall(["a", "b"], [1.0, 2.0], measurements=[slow, fast], verdicts=verdicts[:1])


def test_lines_one_curve_per_series_and_a_roof():
    fig = plotting.lines([1, 2, 4], {"a": [1, 2, 3], "b": [3, 2, 1]}, "x", "y", hline=("roof", 4.0))
    ax = fig.axes[0]
    assert len(ax.lines) == 3
    assert ax.get_xscale() == "log"
    with pytest.raises(ValueError):
        plotting.lines([1, 2], {"a": [1]}, "x", "y")


def test_plot_bad_input():
    with pytest.raises(ValueError):
        plotting.bars([])
    with pytest.raises(ValueError):
        plotting.vs_batch([1, 2], [_m("a", 1.0)])
    with pytest.raises(ValueError):
        plotting.waterfall(["a"], [])


def test_labels_of_points_close_together_do_not_overlap():
    fig, ax = plotting.subplots()
    xs, ys = [1.0, 1.01, 1.02, 3.0], [0.5, 0.5, 0.51, 0.2]
    ax.scatter(xs, ys)
    plotting.label_points(ax, xs, ys, ["first label", "second label", "third label", "far away"])
    boxes = [t.get_window_extent(fig.canvas.get_renderer()) for t in ax.texts]
    assert len(boxes) == 4
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    with pytest.raises(ValueError, match="one x, one y and one label"):
        plotting.label_points(ax, [1.0], [1.0, 2.0], ["a"])
    plt.close(fig)
