"""The energy counter: read from a RAPL tree made here (the CI machine exposes none), wrap-around, interleaved
windows, the one-line reason where no counter exists, and the verdict worded in energy terms."""

from __future__ import annotations

import itertools

import pytest

from helpers import energy
from helpers.verdict import verdict


class FakeRapl:
    """A RAPL directory whose counter advances by `step_uj` at every read, wrapping at `max_uj`."""

    def __init__(self, root, start_uj=0, step_uj=1000, max_uj=10**9):
        self.root, self.value, self.step, self.max = root, start_uj, step_uj, max_uj
        root.mkdir()
        (root / "name").write_text("package-0\n")
        (root / "max_energy_range_uj").write_text(f"{max_uj}\n")
        self.write()

    def write(self):
        (self.root / "energy_uj").write_text(f"{self.value}\n")

    def tick(self):
        self.value = (self.value + self.step) % self.max
        self.write()


@pytest.fixture
def rapl(tmp_path, monkeypatch):
    fake = FakeRapl(tmp_path / "intel-rapl:0")
    monkeypatch.setattr(energy, "RAPL", str(fake.root))
    return fake


def test_cpu_counter_reads_joules(rapl):
    c = energy.counter("cpu")
    assert not isinstance(c, str), c
    assert "package-0" in c.name
    before = c.read()
    rapl.tick()
    assert c.read() - before == pytest.approx(1000 / 1e6)


def test_no_counter_is_one_line_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "RAPL", str(tmp_path / "missing"))
    reason = energy.counter("cpu")
    assert isinstance(reason, str)
    assert "not readable" in reason
    assert "\n" not in reason
    assert energy.samples({"a": lambda: None}, "cpu", window=0.2, windows=1) == reason
    with pytest.raises(ValueError, match="not supported by the course"):
        energy.counter("meta")


def test_samples_are_joules_per_call_in_interleaved_windows(rapl):
    order = []

    def call(name):
        order.append(name)
        rapl.tick()  # each call "uses" 1 mJ

    seconds = {}
    out = energy.samples(
        {"a": lambda: call("a"), "b": lambda: call("b")}, "cpu", window=0.2, windows=2, seconds=seconds
    )
    assert set(out) == {"a", "b"}
    assert all(len(v) == 2 for v in out.values())
    windows = [(n, len(list(g))) for n, g in itertools.groupby(order)]  # each window: one run of calls
    for i, (name, calls) in enumerate(windows):  # seconds per call × calls = the window, at least 0.2 s
        assert 0.2 <= seconds[name][i // 2] * calls < 1.2  # slack for a stalled VM
    assert all(j == pytest.approx(1000 / 1e6) for v in out.values() for j in v)
    # interleaved: a's windows and b's alternate
    runs = [order[0]] + [n for prev, n in zip(order, order[1:], strict=False) if n != prev]
    assert runs == ["a", "b", "a", "b"]


def test_wrap_around_is_counted(rapl):
    c = energy.counter("cpu")
    assert energy._used(c, start=c.wrap - 0.001, end=0.002) == pytest.approx(0.003)


def test_bad_inputs_say_what_to_pass():
    with pytest.raises(ValueError, match="dict of name"):
        energy.samples([lambda: None])
    with pytest.raises(ValueError, match="window"):
        energy.samples({"a": lambda: None}, window=0.01)
    with pytest.raises(ValueError, match="empty dict"):
        energy.samples({"a": lambda: None}, seconds=[])


def test_sentence_speaks_energy():
    windows = {"compiled": [1.0, 1.01, 0.99, 1.0, 1.02, 0.98], "eager": [2.0, 2.02, 1.98, 2.0, 2.01, 1.99]}
    v = energy.judge(windows, "compiled", "eager")
    assert v.paired
    assert energy.sentence(v).startswith("compiled uses 2.00× less energy per call than eager")
    assert energy.judge(windows, "compiled", "eager", items=2).ratio == pytest.approx(v.ratio)
    assert "separate sessions" in energy.sentence(verdict(windows["compiled"], windows["eager"]))
    with pytest.raises(ValueError, match="not a key"):
        energy.judge(windows, "compiled", "fp32")
    v = verdict(
        [2.0, 2.1, 1.9, 2.0, 2.05, 2.02],
        [1.0, 1.02, 0.98, 1.0, 1.01, 0.99],
        candidate_label="x",
        baseline_label="y",
        independent="synthetic",
    )
    said = energy.sentence(v, per="inference")
    assert f"{1 / v.ratio:.2f}× more energy per inference" in said
    low, high = (float(x) for x in said.split("interval ")[1].rstrip("×).").split("–"))
    assert low <= 2.0 <= high  # the interval is of the factor the sentence names
