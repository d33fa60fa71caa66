import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from conftest import one_line

from helpers import results
from helpers.results import Recorder, append_record, load_reference, load_results, read_records, record
from helpers.timing import Measurement

REPO = Path(__file__).resolve().parents[1]


def _m(label="x"):
    return Measurement.from_samples([0.001, 0.002, 0.003], label=label, items=2)


def test_record_writes_context_to_this_machines_file():
    rec = record(
        _m(),
        notebook="00_environment",
        experiment="demo",
        variant="eager",
        batch=2,
        dtype="fp32",
        metrics={"gb_per_s": 12.5},
        extra={"note": "hi"},
    )
    path = results.results_path()
    assert path.exists()
    assert path.parent.parent == Path(os.environ["COURSE_OUTPUTS"]).resolve()
    assert path.name == f"{rec['machine_id']}.jsonl"
    df = load_results()
    assert len(df) == 1
    row = df.iloc[0]
    assert (row.notebook, row.experiment, row.variant, row.batch, row["dtype"]) == (
        "00_environment",
        "demo",
        "eager",
        2,
        "fp32",
    )
    assert row["median"] == pytest.approx(0.002)
    assert row["gb_per_s"] == 12.5
    assert row["extra_note"] == "hi"
    assert row["mode"] == "quick"
    assert row["device"] == "cpu"
    assert row["v_torch"]
    assert json.loads(path.read_text())["measurement"]["samples"] == [0.001, 0.002, 0.003]


def test_recorder_binds_the_notebook(tmp_path):
    rec = Recorder("01_bottlenecks", "cpu", path=tmp_path / "r.jsonl")
    rec(_m(), experiment="a", variant="b")
    rec(metrics={"x": 1.0}, experiment="a", variant="c")
    assert [r["variant"] for r in read_records(tmp_path / "r.jsonl")] == ["b", "c"]
    assert rec(metrics={"y": 2.0}, experiment="a", variant="d") is None  # quiet in a notebook cell
    assert len(rec.records) == 3
    assert all(r["notebook"] == "01_bottlenecks" for r in rec.records)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"notebook": "", "experiment": "e", "variant": "v"}, ValueError),
        ({"notebook": "n", "experiment": "e", "variant": "v", "batch": 0}, ValueError),
        ({"notebook": "n", "experiment": "e", "variant": "v", "metrics": {"x": "fast"}}, ValueError),
        ({"notebook": "n", "experiment": "e", "variant": "v", "extra": {"x": object()}}, ValueError),
        ({"notebook": "n", "experiment": "e", "variant": "v", "device": "cuda:999"}, ValueError),
    ],
)
def test_bad_records_are_refused_and_nothing_is_written(tmp_path, kwargs, error):
    path = tmp_path / "r.jsonl"
    with pytest.raises(error) as info:
        record(_m(), path=path, **kwargs)
    assert one_line(info.value)
    assert not path.exists()


def test_numpy_metrics_and_nan_are_stored(tmp_path):
    import numpy as np

    record(
        metrics={"a": np.float32(1.5), "b": float("nan"), "c": np.float64("nan")},
        notebook="n",
        experiment="e",
        variant="v",
        path=tmp_path / "r.jsonl",
    )
    assert read_records(tmp_path / "r.jsonl")[0]["metrics"] == {"a": 1.5, "b": None, "c": None}


def test_load_results_merges_every_device_file():
    rec = results.make_record(metrics={"x": 1.0}, notebook="n", experiment="e", variant="v")
    append_record(rec, results.results_path())
    other = dict(rec, machine_id="cuda-some-gpu", device="cuda")
    append_record(other, results.results_path().parent / "cuda-some-gpu.jsonl")
    assert set(load_results().machine_id) == {rec["machine_id"], "cuda-some-gpu"}


def test_nothing_to_record_is_refused(tmp_path):
    with pytest.raises(ValueError, match="nothing to record"):
        record(notebook="n", experiment="e", variant="v", path=tmp_path / "r.jsonl")
    with pytest.raises(TypeError):
        record(0.5, notebook="n", experiment="e", variant="v", path=tmp_path / "r.jsonl")


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from helpers.results import append_record
    import os
    import helpers.results as results
    path, who, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    real_write = os.write

    def write_in_two_halves(fd, data):
        # Split every line into two writes with a pause between: without the file lock, the other
        # writer's line would land in the middle and both lines would be corrupt.
        half = max(1, len(data) // 2)
        written = real_write(fd, data[:half])
        time.sleep(0.0005)
        return written + real_write(fd, data[half:])

    results.os.write = write_in_two_halves
    (go.parent / f"ready-{who}").touch()  # imported (torch takes seconds on a loaded machine): waiting for go
    while not go.exists():
        time.sleep(0.001)
    for i in range(count):
        append_record({"who": who, "i": i, "payload": [i] * 4000}, path)
""")


def test_two_processes_append_at_once_without_losing_or_mixing_lines(tmp_path):
    path, go, count = tmp_path / "shared.jsonl", tmp_path / "go", 100
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), who, str(count), str(go)], cwd=REPO)
        for who in ("a", "b")
    ]
    deadline = time.time() + 120  # both imported and waiting, so their writes do overlap
    while not all((tmp_path / f"ready-{who}").exists() for who in ("a", "b")) and time.time() < deadline:
        time.sleep(0.01)
    assert all((tmp_path / f"ready-{who}").exists() for who in ("a", "b")), "a writer did not start in 120 s"
    go.touch()
    assert all(p.wait(timeout=120) == 0 for p in procs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a single torn line would warn
        records = read_records(path)
    assert len(records) == 2 * count
    for who in ("a", "b"):
        assert [r["i"] for r in records if r["who"] == who] == list(range(count))
    assert all(len(r["payload"]) == 4000 for r in records)


def test_crash_in_the_middle_of_a_write_leaves_the_file_readable(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    append_record({"i": 0}, path)
    real_write = os.write

    def dies_halfway(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(results.os, "write", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        append_record({"i": 1, "payload": "x" * 1000}, path)
    monkeypatch.setattr(results.os, "write", real_write)
    with pytest.warns(UserWarning, match="skipped 1 incomplete line"):
        assert [r["i"] for r in read_records(path)] == [0]
    append_record({"i": 2}, path)  # starts on a fresh line despite the torn one
    with pytest.warns(UserWarning, match="skipped 1 incomplete line"):
        assert [r["i"] for r in read_records(path)] == [0, 2]


def test_a_killed_writer_leaves_the_file_readable(tmp_path):
    path, go = tmp_path / "r.jsonl", tmp_path / "go"
    go.touch()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "k", "100000", str(go)], cwd=REPO)
    deadline = time.time() + 60
    while (not path.exists() or path.stat().st_size < 200_000) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the last line may or may not be torn
        records = read_records(path)
    assert len(records) >= 5
    assert [r["i"] for r in records] == list(range(len(records)))
    append_record({"who": "after", "i": -1}, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_records(path)[-1]["who"] == "after"


def test_load_reference_filters(tmp_path):
    ref = tmp_path / "reference"
    for machine, value in (("cuda-nvidia-h200", 100.0), ("cpu-intel-xeon-2cpu", 1.0)):
        rec = results.make_record(
            metrics={"gflops": value}, notebook="00_environment", experiment="roofline", variant="fp32"
        )
        rec["machine_id"] = machine
        append_record(rec, ref / f"{machine}.jsonl")
    df = load_reference(reference_dir=ref)
    assert len(df) == 2
    assert set(df.source) == {"cuda-nvidia-h200.jsonl", "cpu-intel-xeon-2cpu.jsonl"}
    gpu = load_reference(notebook="00_environment", experiment="roofline", machine="h200", reference_dir=ref)
    assert list(gpu.gflops) == [100.0]
    assert load_reference(notebook="99_missing", reference_dir=ref).empty
    (tmp_path / "empty").mkdir()
    assert load_reference(reference_dir=tmp_path / "empty").empty  # an empty folder: no rows (a missing one is refused)


def test_reference_table_says_when_nothing_ships(capsys):
    assert results.reference_table("99_missing", "nothing") is None
    assert "No reference result for 99_missing/nothing" in capsys.readouterr().out
    assert results.show_reference("99_missing", "nothing") is None
    assert "No reference result" in capsys.readouterr().out


def test_shipped_reference_results_load():
    files = sorted(results.REFERENCE_DIR.glob("*.jsonl"))
    assert files, "data/reference/ should ship at least one machine's reference results"
    df = load_reference()
    assert len(df) > 0
    assert {"notebook", "experiment", "variant", "machine_id"} <= set(df.columns)
    assert df.machine_id.notna().all()


def test_a_rate_in_a_reference_is_a_rate_not_a_time():
    import pandas as pd

    shown = results.readable_reference(pd.DataFrame({"gb_per_s": [13.8], "images_per_s": [161.0], "p99_s": [0.5]}))
    assert list(shown.columns) == ["GB/s", "images/s", "p99"]
    assert list(shown.iloc[0]) == ["13.8", "161.0", "500 ms"]


def test_a_reference_table_says_where_each_row_ran(capsys):
    table = results.reference_table("05_onnx_runtime", "speed")
    if table is None:
        pytest.skip("no GPU reference ships for 05")
    ort = table[table["variant"].str.contains("ORT")]  # that machine's ONNX Runtime had no GPU build
    assert len(ort)
    assert set(ort["device"]) == {"cpu"}
    assert set(table["device"]) == {"cpu", "cuda"}
    assert "ran on different devices of that machine (cpu, cuda" in capsys.readouterr().out


def test_references_are_shown_in_readable_units(capsys):
    table = results.reference_table("01_bottlenecks", "h2d", columns=["bytes", "bytes_per_s"])
    if table is None:
        pytest.skip("no GPU reference ships")
    assert {"median", "IQR", "size", "GB/s", "device"} <= set(table.columns)
    assert "bytes_per_s" not in table.columns
    assert all(v.endswith(("s", "—")) for v in table["median"])
    assert "measured" in capsys.readouterr().out


def test_a_lock_that_cannot_be_created_is_refused_at_once_not_waited_for(tmp_path):
    import time

    from helpers import results

    (tmp_path / "r.jsonl.lock").mkdir()  # a lock file that cannot be created: filelock would retry it forever
    start = time.perf_counter()
    with pytest.raises(PermissionError, match="cannot create or open the lock file"):
        results.append_record({"a": 1}, tmp_path / "r.jsonl")
    assert time.perf_counter() - start < 5
    with pytest.raises(TypeError, match="must be a dict"):
        results.append_record([1, 2], tmp_path / "r.jsonl")


def test_lines_of_json_that_are_not_records_are_named_as_such(tmp_path):
    from helpers import results

    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\nnull\n{"torn": \n')
    with pytest.warns(UserWarning) as caught:
        records = results.read_records(path)
    messages = " ".join(str(w.message) for w in caught)
    assert records == [{"a": 1}]
    assert "1 incomplete line(s)" in messages
    assert "2 line(s) of JSON that are not records" in messages


def test_one_malformed_reference_record_does_not_break_the_load(tmp_path):
    from helpers import results

    good = {"notebook": "00_x", "experiment": "e", "variant": "v", "machine_id": "cpu-x", "metrics": {"a": 1.0}}
    lines = [good, {"notebook": "00_x", "metrics": [1, 2]}, {"variant": "no notebook, no machine"}]
    (tmp_path / "ref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.warns(UserWarning, match="1 malformed record"):
        df = results.load_reference(notebook="00_x", machine="cpu", reference_dir=tmp_path)
    assert list(df["variant"]) == ["v"]
