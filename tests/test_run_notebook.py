"""scripts/run_notebook.py: papermill-style parameters injected after the `parameters` cell, HTML handouts."""

import subprocess
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]


def _notebook(path, tagged=True):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("MODE = 'full'\nBATCH = 8")
    if tagged:
        params.metadata["tags"] = ["parameters"]
    work = nbformat.v4.new_code_cell("print('run', MODE, BATCH * 2)")
    nb.cells = [nbformat.v4.new_markdown_cell("# demo"), params, work]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def run(*args):
    return subprocess.run([sys.executable, str(REPO / "scripts" / "run_notebook.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def test_parameters_override_the_defaults_and_html_has_the_outputs(tmp_path):
    source = tmp_path / "demo.ipynb"
    _notebook(source)
    proc = run(source, tmp_path / "out.ipynb", "-p", "MODE", "quick", "-p", "BATCH", "32")
    assert proc.returncode == 0, proc.stderr
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert "injected-parameters" in executed.cells[2].metadata["tags"]  # right after the parameters cell
    assert "run quick 64" in executed.cells[3].outputs[0]["text"]
    proc = run(source, tmp_path / "out.html", "--html", "-p", "MODE", "handout")
    assert proc.returncode == 0, proc.stderr
    assert "run handout 16" in (tmp_path / "out.html").read_text()


def test_a_notebook_without_a_parameters_cell_is_refused(tmp_path):
    source = tmp_path / "plain.ipynb"
    _notebook(source, tagged=False)
    proc = run(source, tmp_path / "x.ipynb", "-p", "MODE", "quick")
    assert proc.returncode != 0 and "no cell tagged `parameters`" in proc.stderr
