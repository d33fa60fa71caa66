"""The full-run script, exercised in quick mode on two tiny notebooks (one of which fails)."""

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.parametrize("executor", ["kernel", "plain"])
def test_full_run_executes_collects_and_reports_failures(tmp_path, executor):
    books = tmp_path / "books"
    books.mkdir()
    _notebook(
        books / "00_ok.ipynb",
        "\n".join(
            [
                "import os, helpers",
                "assert os.environ['COURSE_MODE'] == 'quick' and helpers.course_mode() == 'quick'",
                "m = helpers.benchmark(sum, [1, 2, 3], repeats=3)",
                "helpers.record(m, notebook='00_ok', experiment='e', variant='v')",
                "print('ran', m.median > 0)",
                # a function's source must be readable, as in Jupyter (torch.jit.script needs it)
                "def f(x):\n    return x + 1\nimport inspect\nprint('source', inspect.getsource(f).splitlines()[0])",
                "m.n",  # the value of a cell's last expression is kept
            ]
        ),
    )
    _notebook(books / "01_broken.ipynb", "raise RuntimeError('on purpose')")
    out = tmp_path / "out"
    proc = subprocess.run(_run(out, books, executor=executor), capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one notebook failed, and the run says so
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "quick"
    assert summary["environment"]["torch"]
    assert summary["executor"] == executor
    assert summary["notebooks"]["00_ok"]["status"] == "ok"
    assert summary["notebooks"]["01_broken"]["status"] == "failed"
    assert "on purpose" in summary["notebooks"]["01_broken"]["error"]
    executed = nbformat.read(out / "executed" / "00_ok.ipynb", as_version=4)
    texts = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in executed.cells[0].outputs)
    assert "ran True" in texts
    assert "3" in texts
    assert "source def f(x):" in texts
    if executor == "kernel":  # the course's executor says where and how the copy ran (the website shows it)
        course = executed.metadata["course"]
        assert course["machine_id"] == summary["environment"]["machine_id"]
        assert course["mode"] == "quick"
        assert course["status"] == "ok"
        assert course["date"]
        assert course["torch"]
        broken = nbformat.read(out / "executed" / "01_broken.ipynb", as_version=4).metadata["course"]
        assert broken["status"] == "failed"
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 1
    assert records[0]["notebook"] == "00_ok"
    assert records[0]["mode"] == "quick"


# -- nothing is lost ----------------------------------------------------------------------------------------

RECORD = "import helpers\nhelpers.record(metrics={'x': 1.0}, notebook='{name}', experiment='e', variant='v')\n"


def _run(out, books, *extra, executor="plain"):
    return [
        sys.executable,
        str(REPO / "scripts" / "full_run.py"),
        str(out),
        "--mode",
        "quick",
        "--notebooks",
        str(books),
        "--timeout",
        "120",
        "--executor",
        executor,
        *extra,
    ]


def test_merging_skips_a_torn_line_instead_of_gluing_it_to_the_next_file(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    from full_run import merge_results

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"n": 1}\n{"n": 2, "torn": tr')  # a writer killed mid-line: no newline at the end
    b.write_text('{"n": 3}\n')
    kept, torn = merge_results([a, b], tmp_path / "merged.jsonl")
    lines = (tmp_path / "merged.jsonl").read_text().splitlines()
    assert (kept, torn) == (2, 1)
    assert [json.loads(x)["n"] for x in lines] == [1, 3]


def test_an_earlier_runs_results_are_kept_not_deleted(tmp_path):
    books, work = tmp_path / "books", tmp_path / "work"
    books.mkdir()
    _notebook(books / "00_ok.ipynb", RECORD.replace("{name}", "00_ok"))
    (work / "results").mkdir(parents=True)
    (work / "results" / "cpu-old.jsonl").write_text('{"notebook": "from an interrupted run"}\n')
    proc = subprocess.run(
        _run(tmp_path / "out", books, "--work", str(work)), capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = list(work.glob("results-before-*/cpu-old.jsonl"))
    assert len(kept) == 1
    assert "interrupted run" in kept[0].read_text()
    records = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["notebook"] for r in records] == ["00_ok"], "the earlier run's records are not mixed in"


def test_an_interrupted_run_still_writes_its_summary_and_results(tmp_path):
    import signal
    import time

    books, out = tmp_path / "books", tmp_path / "out"
    books.mkdir()
    _notebook(books / "00_ok.ipynb", RECORD.replace("{name}", "00_ok"))
    _notebook(books / "01_long.ipynb", "import time\ntime.sleep(120)")
    _notebook(books / "02_never.ipynb", "print('never')")
    proc = subprocess.Popen(_run(out, books), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until the first notebook is done (the summary is written after each)
            summary = out / "summary.json"
            if summary.exists() and json.loads(summary.read_text())["notebooks"].get("00_ok", {}).get("status") == "ok":
                break
            time.sleep(0.2)
        else:
            raise AssertionError("00_ok was not done within 120 s, so the interruption could not be tested")
        time.sleep(1.0)  # now inside the long notebook
        proc.send_signal(signal.SIGTERM)  # what `timeout` sends at a time limit
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert [summary["notebooks"][n]["status"] for n in ("00_ok", "01_long", "02_never")] == [
        "ok",
        "interrupted",
        "not run",
    ]
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["notebook"] for r in records] == ["00_ok"]


def test_a_notebook_whose_engine_is_missing_is_skipped_by_name(monkeypatch):
    """The GPU image has no serving engine: notebook 12 is skipped there with the reason, not run to fail."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import full_run

    assert "12_serving" in full_run.NEEDS
    monkeypatch.setitem(full_run.NEEDS, "99_x", ("no_such_module_for_this_test", "needs a module this machine lacks"))
    assert full_run.skip_reason(Path("99_x.ipynb")) == "needs a module this machine lacks"
    monkeypatch.setitem(full_run.NEEDS, "99_x", ("json", "never"))
    assert full_run.skip_reason(Path("99_x.ipynb")) is None
    assert full_run.skip_reason(Path("00_environment.ipynb")) is None


def test_reference_run_merges_raw_results_when_the_run_died_without_collecting(tmp_path):
    """scripts/reference_run.sh's fallback (full_run.py gone before it merged): a torn last line in one raw results
    file must not swallow the next file's first record, as a plain concatenation did."""
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    (work / "results" / "a.jsonl").write_text('{"a": 1}\n{"torn": ')
    (work / "results" / "b.jsonl").write_text('{"b": 2}\n')
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "COURSE_WORK": str(work), "PYTHON": sys.executable, "HOME": str(tmp_path)}
    # an unknown option: full_run.py exits at once, before it collects anything, as a run killed outright
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "reference_run.sh"), str(out), "60", "--no-such-option"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode != 0
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert lines == [{"a": 1}, {"b": 2}], run.stdout[-500:] + run.stderr[-500:]
