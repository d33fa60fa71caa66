"""Committed notebooks are stripped of outputs and follow the course skeleton (section 4, "Notebook skeleton",
of the design notes the course was built from).
Executing them is nbmake (make test-notebooks), with the checks of conftest.py at the root."""

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS
    assert NOTEBOOKS[0].name == "00_environment.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs: clear them before committing"
            assert cell.execution_count is None, f"cell {i} has an execution count"


def test_nbstripout_is_the_git_filter_and_keeps_cell_ids():
    """`git add` passes notebooks through nbstripout (.gitattributes; `make setup` configures the filter), which
    leaves a committed notebook unchanged and strips an executed one to it."""
    assert "*.ipynb filter=nbstripout" in (REPO / ".gitattributes").read_text()
    assert "-m nbstripout --keep-id" in (REPO / "Makefile").read_text()
    verify = subprocess.run(
        [sys.executable, "-m", "nbstripout", "--verify", "--keep-id", *map(str, NOTEBOOKS)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, f"nbstripout would change: {verify.stdout}{verify.stderr}"
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="measured 1.23 ms\n")]
    code.execution_count = 7
    cleaned = subprocess.run(
        [sys.executable, "-m", "nbstripout", "--keep-id"],
        input=nbformat.writes(nb),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert cleaned.strip() == NOTEBOOKS[0].read_text(encoding="utf-8").strip()
    if shutil.which("git") and (REPO / ".git").exists():
        attr = subprocess.run(
            ["git", "check-attr", "filter", "notebooks/00_environment.ipynb"], cwd=REPO, capture_output=True, text=True
        ).stdout
        assert attr.strip().endswith("nbstripout"), attr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith(f"# {path.name[:2]} ")
    assert "You will learn" in first.source
    assert "Prerequisites" in first.source
    assert "Run time" in first.source
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged `parameters`"
    assert "COURSE_MODE" in tagged[0].source
    setup = nb.cells[nb.cells.index(tagged[0]) + 1].source
    assert "helpers.set_mode(MODE)" in setup, "the set-up cell hands the parameters cell's MODE to helpers.set_mode"
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert 'os.environ["COURSE_MODE"]' not in sources, "the mode is not round-tripped through the environment"
    headings = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for heading in ("## Summary", "## Exercises", "## Next"):
        assert heading in headings, f"missing section {heading!r}"
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "helpers.Recorder(" in sources, "the notebook records its measurements"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_work_the_same_way(path):
    """Every exercise N: a cell with `answer_N = None` for the learner, a `check_N` self-check that says when
    the exercise is not attempted yet, and, after them, a solution cell tagged `solution` whose code and output
    start collapsed (not in the way; left out of HTML handouts) and that runs the same check. An open-ended
    exercise says "No self-check" instead."""
    import re

    nb = nbformat.read(path, as_version=4)
    announced = sorted(
        {int(n) for c in nb.cells if c.cell_type == "markdown" for n in re.findall(r"\*\*Exercise (\d+)", c.source)}
    )
    open_pattern = r"\*\*Exercise (\d+)[^*]*\*\*(?:(?!\*\*Exercise).)*No self-check"
    open_ended = {
        int(n) for c in nb.cells if c.cell_type == "markdown" for n in re.findall(open_pattern, c.source, re.S)
    }
    assert len(announced) >= 2, "at least two exercises"
    for n in announced:
        if n in open_ended:
            continue
        answer = next((i for i, c in enumerate(nb.cells) if re.search(rf"^answer_{n} = None", c.source, re.M)), None)
        check = next((i for i, c in enumerate(nb.cells) if f"def check_{n}(" in c.source), None)
        solution = next(
            (
                i
                for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and c.source.lstrip().startswith(f"# Solution {n}")
            ),
            None,
        )
        assert None not in (answer, check, solution), f"exercise {n}: answer_{n} = None, check_{n} and a solution cell"
        assert answer <= check < solution, f"exercise {n}: answer cell, then check, then solution"
        assert "not attempted" in nb.cells[check].source, f"exercise {n}: check_{n} handles no answer"
        cell = nb.cells[solution]
        assert f"check_{n}(" in cell.source, f"the solution of exercise {n} runs check_{n}"
        hidden = cell.metadata.get("jupyter", {})
        assert hidden.get("source_hidden"), "solutions start collapsed"
        assert hidden.get("outputs_hidden"), "solutions start collapsed"
        assert "solution" in cell.metadata.get("tags", []), "solution cells are tagged (handouts leave them out)"


def _code(name: str) -> str:
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "code" and not c.source.lstrip().startswith("%"))


def test_load_comparisons_use_one_arrival_trace_per_load():
    """Load is judged on repeated runs (helpers.runs): 12 seeds every load run by its rate and replicate only, so
    every batch setting and both replica counts are sent the same arrival trace in a replicate; 13 makes each
    replicate's requests from the load and the replicate only, whatever the policy, and compares every policy on
    them; one trace per slot count for speculation under load."""
    import ast

    tree = ast.parse(_code("12_serving"))
    seeds = [
        ast.unparse(k.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "serving.open_loop"
        for k in node.keywords
        if k.arg == "seed"
    ]
    assert seeds == ["1000 * int(rate) + r"], f"12's runs must be seeded by their rate and replicate: {seeds}"
    tree = ast.parse(_code("13_llm_serving"))
    run = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "policy_run")
    make = next(n for n in ast.walk(run) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("make_requests"))
    keywords = {k.arg: ast.unparse(k.value) for k in make.keywords}
    assert keywords["rate"] == "load", keywords
    assert "label" not in keywords["seed"], keywords
    assert "r" in keywords["seed"], keywords
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and ast.unparse(n.iter) == "LOADS"]
    assert any("compare_runs" in ast.unparse(loop) and "POLICIES" in ast.unparse(loop) for loop in loops), (
        "13 must compare every policy, on repeated runs, at each load"
    )
    # speculation under load: one trace per slot count, made before the runs without and with each gamma serve it
    spec = next(n for n in ast.walk(tree) if isinstance(n, ast.For) and ast.unparse(n.iter) == "SPEC_SLOTS")
    made = [i for i, n in enumerate(spec.body) if "make_requests" in ast.unparse(n)]
    timed = [i for i, n in enumerate(spec.body) if "interleaved(" in ast.unparse(n)]
    assert made, "13 must make a slot count's trace once, before timing"
    assert timed, "13 must make a slot count's trace once, before timing"
    assert made[0] < timed[0], "13 must make a slot count's trace once, before timing"
    assert "serve(spec_target, spec_trace," in ast.unparse(spec), "every candidate must serve that one trace"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_next_links_exist_and_lead_on(path):
    """The "## Next" section links only notebooks that exist, and the one after this one where there is one."""
    import re

    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if "## Next" not in text:
        pytest.skip(f"{path.stem} has no Next section")
    section = text.split("## Next", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\((\d\d_\w+\.ipynb)\)", section)
    missing = [link for link in links if not (path.parent / link).exists()]
    assert not missing, f"{path.stem}'s Next section links notebooks that do not exist: {missing}"
    following = sorted(path.parent.glob(f"{int(path.stem[:2]) + 1:02d}_*.ipynb"))
    if following:
        assert following[0].name in links, f"{path.stem}'s Next section should lead on to {following[0].name}"
