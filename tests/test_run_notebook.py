"""Notebooks run with parameters through papermill; scripts/run_notebook.py adds refusing unknown names and
HTML handouts without solutions."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]


def _notebook(path, tagged=True):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("MODE = 'full'\nBATCH = 8")
    solution = nbformat.v4.new_code_cell("# Solution 1\nprint('the answer is 42')")
    solution.metadata["tags"] = ["solution"]
    if tagged:
        params.metadata["tags"] = ["parameters"]
    work = nbformat.v4.new_code_cell("print('run', MODE, BATCH * 2)")
    nb.cells = [nbformat.v4.new_markdown_cell("# demo"), params, work, solution]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def run(*args):
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "run_notebook.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


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
    handout = (tmp_path / "out.html").read_text()
    assert "run handout 16" in handout
    assert "the answer is 42" not in handout  # no answer key in a handout
    proc = run(source, tmp_path / "key.html", "--html", "--with-solutions")
    assert "the answer is 42" in (tmp_path / "key.html").read_text()
    proc = run(source, tmp_path / "x.ipynb", "-p", "mode", "quick")  # a typo must not pass silently
    assert proc.returncode != 0
    assert "mode: not a parameter of demo.ipynb" in proc.stderr


def test_values_are_read_as_papermill_reads_them():
    sys.path.insert(0, str(REPO / "scripts"))
    from run_notebook import parse_value

    assert [parse_value(v) for v in ("True", "None", "3", "0.5", "quick")] == [True, None, 3, 0.5, "quick"]


def test_papermill_runs_a_course_notebook_with_its_parameters(tmp_path):
    """The documented command, `papermill NOTEBOOK OUT -p MODE quick`, on a course notebook: its cells up to the
    set-up cell that reads the parameters (the whole notebook runs in make test-notebooks)."""
    course = nbformat.read(REPO / "notebooks" / "08_profiling.ipynb", as_version=4)
    setup = next(i for i, c in enumerate(course.cells) if "helpers.set_mode(" in c.source)
    course.cells = course.cells[: setup + 1]
    nbformat.write(course, tmp_path / "08_head.ipynb")
    out = tmp_path / "08.ipynb"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            str(tmp_path / "08_head.ipynb"),
            str(out),
            "-p",
            "MODE",
            "quick",
            "-p",
            "DEVICE",
            "cpu",
            "--cwd",
            str(REPO / "notebooks"),
            "--no-progress-bar",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    texts = "".join(
        o.get("text", "") for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code" for o in c.outputs
    )
    assert "mode=quick, device=cpu" in texts


def test_a_notebook_without_a_parameters_cell_is_refused(tmp_path):
    source = tmp_path / "plain.ipynb"
    _notebook(source, tagged=False)
    proc = run(source, tmp_path / "x.ipynb", "-p", "MODE", "quick")
    assert proc.returncode != 0
    assert "has no cell tagged `parameters`" in proc.stderr


def test_the_executor_reports_the_failing_cell_and_what_went_to_stderr(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    from execute import execute, stderr_lines

    from helpers import noise

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import sys, warnings\nprint('to stderr', file=sys.stderr)"),
        nbformat.v4.new_code_cell("warnings.warn('an unexplained warning')"),
        nbformat.v4.new_code_cell("1 / 0"),
        nbformat.v4.new_code_cell("print('never runs')"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "bad.ipynb")
    run = execute(tmp_path / "bad.ipynb", tmp_path / "out" / "bad.ipynb", timeout=60)
    assert run.status == "failed"
    assert "cell 2" in run.error
    assert "ZeroDivisionError" in run.error
    assert (tmp_path / "out" / "bad.ipynb").exists()
    assert not list((tmp_path / "out").glob(".*partial*"))
    lines = [line for _, line in stderr_lines(run.notebook)]
    assert "to stderr" in lines
    assert any("an unexplained warning" in line for line in lines)
    assert all(noise.allowed(line) is None for line in lines)  # the notebook check would refuse both
    with pytest.raises(ValueError, match="pass the path of an .ipynb file"):
        execute(tmp_path, tmp_path / "x.ipynb")
