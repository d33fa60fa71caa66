"""Committed notebooks are stripped of outputs and follow the course skeleton (DESIGN.md §4).
Executing them is the nbmake run in `make test`."""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "00_environment.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs: clear them before committing"
            assert cell.execution_count is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith(f"# {path.name[:2]} ")
    assert "You will learn" in first.source and "Prerequisites" in first.source and "Run time" in first.source
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged `parameters`"
    assert "COURSE_MODE" in tagged[0].source
    headings = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for heading in ("## Summary", "## Exercises", "## Next"):
        assert heading in headings, f"missing section {heading!r}"
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "helpers.Recorder(" in sources, "the notebook records its measurements"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_work_the_same_way(path):
    """Every exercise N: a cell with `answer_N = None` for the learner, a `check_N` self-check that says when
    the exercise is not attempted yet, and a solution cell, collapsed (source hidden) so it is not in the way,
    that runs the same check."""
    import re

    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    solutions = [c for c in code if c.source.lstrip().startswith("# Solution")]
    numbers = sorted({int(n) for c in solutions for n in re.findall(r"# Solution (\d+)", c.source)})
    assert len(numbers) >= 2, "at least two exercises, each with a solution cell"
    for cell in solutions:
        assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, "solution cells start collapsed"
    for n in numbers:
        assert any(re.search(rf"^answer_{n} = None", c.source, re.M) for c in code), f"exercise {n}: answer_{n} = None"
        check = next((c for c in code if f"def check_{n}(" in c.source), None)
        assert check is not None and "not attempted" in check.source, f"exercise {n}: check_{n} handles no answer"
        assert any(f"check_{n}(" in c.source for c in solutions), f"the solution of exercise {n} runs check_{n}"
