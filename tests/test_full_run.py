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
    _notebook(books / "00_ok.ipynb", "\n".join([
        "import os, helpers",
        "assert os.environ['COURSE_MODE'] == 'quick' and helpers.course_mode() == 'quick'",
        "m = helpers.benchmark(sum, [1, 2, 3], repeats=3)",
        "helpers.record(m, notebook='00_ok', experiment='e', variant='v')",
        "print('ran', m.median > 0)",
        # a function's source must be readable, as in Jupyter (torch.jit.script needs it)
        "def f(x):\n    return x + 1\nimport inspect\nprint('source', inspect.getsource(f).splitlines()[0])",
        "m.n",  # the value of a cell's last expression is kept
    ]))
    _notebook(books / "01_broken.ipynb", "raise RuntimeError('on purpose')")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "full_run.py"), str(out), "--mode", "quick",
         "--notebooks", str(books), "--timeout", "120", "--executor", executor],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one notebook failed, and the run says so
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "quick" and summary["environment"]["torch"] and summary["executor"] == executor
    assert summary["notebooks"]["00_ok"]["status"] == "ok"
    assert summary["notebooks"]["01_broken"]["status"] == "failed"
    assert "on purpose" in summary["notebooks"]["01_broken"]["error"]
    executed = nbformat.read(out / "executed" / "00_ok.ipynb", as_version=4)
    texts = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in executed.cells[0].outputs)
    assert "ran True" in texts and "3" in texts and "source def f(x):" in texts
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["notebook"] == "00_ok" and records[0]["mode"] == "quick"
