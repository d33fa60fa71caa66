"""Printed conclusions come from the verdict helper, never from a notebook's own thresholds.

Every notebook's code cells are parsed (AST) and two patterns are refused outside ``helpers.verdict``:

* a **threshold applied to a measured ratio**: a comparison of a ratio-like value (a name such as
  ``speedup``, ``ratio``, ``fraction``, ``share``; or a division involving a median, a time or a throughput)
  with a number, e.g. ``if speedup > 1.05`` or ``base.median / m.median < 1``;
* a **comparison of two measurements**: both sides timing-like (``eager.median < compiled.median``), unless
  one side is a target or a limit (``p99 <= target``: a latency objective is not a verdict);
* the words **faster / slower / regression / pays back** in any string of a code cell (an f-string, a
  concatenation, ``.format``, a conditional, a dict of two sentences, a fixed sentence): a verdict the
  notebook decides, or prints whatever the numbers say. The words belong to ``helpers.verdict``'s sentences;
  prose around a table goes in markdown, written conditionally.

Notebooks not yet converted to the verdict helper are listed in ``PENDING`` by name: each notebook issue
removes its own. A pending notebook that no longer has a finding fails too, so the list cannot go stale.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))

#: Notebooks whose cells still decide comparisons themselves (issue: measurement core v2). Each notebook issue
#: converts its notebooks to helpers.verdict and deletes their names here.
PENDING: set[str] = set()

WORDS = re.compile(r"\b(faster|slower|regressions?|pays? back)\b", re.IGNORECASE)
RATIO_NAME = re.compile(
    r"(ratio|speed_?up|slow_?down|fraction|share|gain|relative|_vs_|pays?_back|pct|percent)", re.IGNORECASE
)
TIMING_NAME = re.compile(
    r"(median|^min$|^mean$|^p\d\d$|throughput|seconds|time|latency|_s$|flops|bandwidth|"
    r"bytes_per_s|peak_flops|achieved|roof)",
    re.IGNORECASE,
)
TARGET_NAME = re.compile(r"(target|budget|limit|slo|deadline|timeout)", re.IGNORECASE)


def _identifiers(node: ast.AST) -> list[str]:
    names = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.append(sub.attr)
        elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
            names.append(str(sub.slice.value))
    return names


def _ratio_like(node: ast.AST) -> bool:
    """A value that is a measured ratio: named like one, or a division of timing-like values."""
    if isinstance(node, ast.Call):  # min(a, b), len(x)... judged by their arguments only when they divide
        return any(_ratio_like(a) for a in node.args)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return any(TIMING_NAME.search(n) or RATIO_NAME.search(n) for n in _identifiers(node))
    if isinstance(node, ast.Name | ast.Attribute | ast.Subscript):
        key = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = str(node.slice.value)
        return bool(key and RATIO_NAME.search(key))
    return False


def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool)


def _scaled(sides: list[ast.AST]) -> bool:
    """``a <= 1.01 * b.min()`` with a timing-like value in it: the ratio ``a / b`` against a number."""
    for side in sides:
        scaled = isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult)
        if scaled and (_number(side.left) or _number(side.right)):
            if any(TIMING_NAME.search(n) for s in sides for n in _identifiers(s)):
                return True
    return False


def _measured_vs_measured(sides: list[ast.AST]) -> bool:
    """Every side names a timing-like value and none is a target or a limit."""
    names = [_identifiers(s) for s in sides]
    if any(any(TARGET_NAME.search(n) for n in side) for side in names):
        return False
    return all(any(TIMING_NAME.search(n) for n in side) for side in names)


def findings(source: str) -> list[str]:
    """What the rule refuses in one cell's code: one short description per finding."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # IPython magics: the kernel runs them; nothing to judge
    found = []
    for node in ast.walk(tree):
        ordered = isinstance(node, ast.Compare) and any(
            isinstance(op, ast.Lt | ast.Gt | ast.LtE | ast.GtE) for op in node.ops
        )
        if ordered:
            sides = [node.left, *node.comparators]
            if (any(_number(s) for s in sides) and any(_ratio_like(s) for s in sides)) or _scaled(sides):
                found.append(f"line {node.lineno}: threshold on a measured ratio: {ast.unparse(node)}")
            elif _measured_vs_measured(sides):
                found.append(f"line {node.lineno}: two measurements compared directly: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and WORDS.search(node.value):
            words = sorted({w.lower() for w in WORDS.findall(node.value)})
            found.append(f"line {node.lineno}: a string deciding '{', '.join(words)}' itself: {node.value[:60]!r}")
    return found


def notebook_findings(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [
        f"cell {i} {f}" for i, cell in enumerate(nb.cells) if cell.cell_type == "code" for f in findings(cell.source)
    ]


# -- the rule on synthetic code: it must catch these, and leave these alone ---------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "if speedup > 1.05:\n    print('ok')",
        "x = 'good' if base.median / m.median < 1 else 'bad'",
        "flag = row['ratio'] >= 0.97",
        "print(f'compiled is {r:.2f}x faster')",
        "print(f\"{'faster' if r > 1 else 'slower'} than eager\")",
        "word = 'a regression' if new.median > old.median else 'an improvement'",
        "print(f'it pays back after {n} calls')",
        "ok = m_fast.median / m_slow.median < 0.9",
        "share = fraction_of_bound > 1.0",
        "if eager.median < compiled.median:\n    pass",
        "ok = achieved / peak > 0.5",
        "print('{} faster'.format(x))",
        "print('compiled: ' + str(r) + 'x faster')",
        "print({True: 'faster', False: 'slower'}[r > 1])",
        "print('fp16 is slower than fp32 on this CPU')",
        "best = finite[finite <= 1.01 * finite.min()]",
        "knee = df.throughput >= 0.95 * df.throughput.max()",
    ],
)
def test_rule_catches(code):
    assert findings(code), f"the rule must refuse: {code}"


@pytest.mark.parametrize(
    "code",
    [
        "print(verdict(m_fast, m_slow).sentence())",
        "print(f'{v.short()} ({v.interval})')",
        "if len(samples) < 5:\n    pass",
        "n = max(1, total // 4)",
        "print('fp16 needs hardware units; see the table')",
        "x = a / b if a > 0 else 0",
        "assert peak_bytes_used < 2 * weights_bytes",
        "ok = [b for b, p99 in rows if p99 <= target]",
        "fits = m.median < time_limit",
        "%timeit f(x)",
    ],
)
def test_rule_leaves_alone(code):
    assert not findings(code), f"the rule must accept: {code} (found {findings(code)})"


# -- the notebooks ------------------------------------------------------------------------------------------


def test_pending_names_are_notebooks():
    assert PENDING <= {p.stem for p in NOTEBOOKS}, "PENDING names a notebook that does not exist"


def check_pending(path: Path, found: list[str], pending: set[str], name: str, advice: str) -> None:
    """A pending notebook must still have a finding (the list cannot go stale); any other must have none."""
    if path.stem in pending:
        assert found, f"{path.stem} has no finding left: remove it from {name} in tests/test_conclusions.py"
    else:
        assert not found, f"{path.stem} {advice}:\n" + "\n".join(found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_conclusions_come_from_the_verdict_helper(path):
    advice = "decides comparisons itself; use helpers.verdict (faster / slower / within noise / too few samples)"
    check_pending(path, notebook_findings(path), PENDING, "PENDING", advice)


# -- one comparison, one session -------------------------------------------------------------------------------
#
# A verdict (``helpers.verdict``, ``helpers.compare`` with a baseline, ``winner``) in a notebook cell must judge
# measurements of one session: a ``time_together`` comparison's methods (``cmp.verdict(...)``, ``cmp.table()``),
# or the measurements of an ``interleaved``/``time_together`` run taken by subscript (``pair["compiled"]``). Any
# other call must say why independent samples are right (``independent="each is a fresh process"``).

#: Notebooks whose verdicts still judge measurements of separate cells (measurement core v3). Each notebook issue
#: converts its notebooks to one-session comparisons and deletes their names here.
PENDING_SESSIONS: set[str] = set()

JUDGES = {"verdict", "compare", "winner"}
SESSIONS = {"interleaved", "time_together"}


def _callee(node: ast.Call) -> str | None:
    """``verdict`` for ``verdict(...)``, ``helpers.verdict(...)``, ``helpers.verdict.verdict(...)``; None for a
    method of another object (``cmp.verdict(...)`` is a Comparison's: one session by construction)."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "helpers":
        return func.attr
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == "verdict":
        return func.attr
    return None


def session_names(sources: list[str]) -> set[str]:
    """Names assigned from an ``interleaved``/``time_together`` call anywhere in the notebook."""
    names = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _callee(node.value) in SESSIONS:
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _of_a_session(arg: ast.AST, sessions: set[str]) -> bool:
    """``pair["eager"]`` or ``cmp.measurements["eager"]`` where ``pair``/``cmp`` came from one session."""
    if isinstance(arg, ast.Subscript):
        base = arg.value
        if isinstance(base, ast.Attribute) and base.attr == "measurements":
            base = base.value
        return isinstance(base, ast.Name) and base.id in sessions
    return False


def session_findings(source: str, sessions: set[str]) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _callee(node) not in JUDGES:
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        if "independent" in keywords:
            continue
        baseline = keywords.get("baseline")
        if _callee(node) == "compare" and isinstance(baseline, ast.Constant) and baseline.value is None:
            continue  # a table of unrelated workloads: no verdict
        args = node.args[:2] if _callee(node) == "verdict" else []
        if args and all(_of_a_session(a, sessions) for a in args):
            continue
        found.append(f"line {node.lineno}: a verdict on measurements of separate sessions: {ast.unparse(node)[:90]}")
    return found


def notebook_session_findings(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    sessions = session_names(sources)
    return [
        f"cell {i} {f}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for f in session_findings(cell.source, sessions)
    ]


@pytest.mark.parametrize(
    "code",
    [
        "print(helpers.verdict(m_fast, m_slow))",
        "v = verdict(a, b)",
        "display(helpers.compare([m1, m2]))",
        "best, vs = winner(measurements)",
        "helpers.verdict.verdict(x, y)",
        "m = helpers.benchmark(f)\nprint(helpers.verdict(m, other['x']))",
    ],
)
def test_session_rule_catches(code):
    assert session_findings(code, {"pair"}), f"the rule must refuse: {code}"


@pytest.mark.parametrize(
    "code",
    [
        "print(cmp.verdict('compiled'))",
        "display(cmp.table())",
        "print(helpers.verdict(pair['a'], pair['b']))",
        "print(helpers.verdict(cmp.measurements['a'], cmp.measurements['b']))",
        "v = helpers.verdict(cold, warm, independent='each launch is a fresh process')",
        "helpers.compare([m_digits, m_resnet], baseline=None)",
        "best, vs = cmp.winner()",
    ],
)
def test_session_rule_leaves_alone(code):
    assert not session_findings(code, {"pair", "cmp"}), f"the rule must accept: {code}"


def test_session_names_come_from_session_calls():
    assert session_names(["pair = helpers.interleaved({})", "cmp = helpers.time_together({})", "m = f()"]) == {
        "pair",
        "cmp",
    }


def test_pending_sessions_names_are_notebooks():
    assert PENDING_SESSIONS <= {p.stem for p in NOTEBOOKS}, "PENDING_SESSIONS names a notebook that does not exist"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_verdicts_judge_one_session_or_say_why_not(path):
    advice = (
        "judges measurements of separate sessions; time the candidates together (helpers.time_together) or "
        "pass independent='why' where each sample is its own run"
    )
    check_pending(path, notebook_session_findings(path), PENDING_SESSIONS, "PENDING_SESSIONS", advice)


# -- facts about the machine are measured, not read -------------------------------------------------------------
#
# What a dtype costs and which cache matters are measured (the roofline's speed table and the knee of its bandwidth
# sweep: ``rf.pays``, ``rf.dtype_line``, ``rf.cache_bytes``, ``rf.fits_in_cache``). A notebook cell may not decide
# them from the CPU's flags or the OS's figure: ``cpu_dtype_support`` is shown only in notebook 00, beside the
# measurement (and read for int8's saturation, a property of the instructions themselves); the OS's cache size
# (``last_level_cache_bytes``, ``roofline.cache_bytes``) is not read at all.

FLAG_CALLS = {"cpu_dtype_support"}
OS_CACHE_CALLS = {"last_level_cache_bytes", "cache_bytes"}  # cache_bytes: roofline's, not a model's KV cache
SHOWS_THE_FLAGS = {"00_environment"}


def machine_fact_findings(source: str, flags_allowed: bool = False) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    int8_reads = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "int8"
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        if name == "last_level_cache_bytes" or (name in OS_CACHE_CALLS and owner in (None, "roofline")):
            found.append(
                f"line {node.lineno}: the OS's cache size read ({name}); use rf.cache_bytes / rf.fits_in_cache"
            )
        elif name in FLAG_CALLS and not flags_allowed and id(node) not in int8_reads:
            found.append(f"line {node.lineno}: a dtype's speed read from the CPU's flags; use rf.pays / rf.dtype_line")
    return found


@pytest.mark.parametrize(
    "code",
    [
        "llc = roofline.cache_bytes(device)",
        "c = helpers.device.last_level_cache_bytes()",
        "fast, why = cpu_dtype_support()['bf16']",
        "table = cpu_dtype_support(features)",
    ],
)
def test_machine_fact_rule_catches(code):
    assert machine_fact_findings(code), f"the rule must refuse: {code}"


@pytest.mark.parametrize(
    "code",
    [
        "fits = rf.fits_in_cache(weights)",
        "print(rf.dtype_line('bf16'))",
        "seven_bit = cpu_dtype_support()['int8'][0] is False",
        "llc = rf.cache_bytes or 32 * 2**20",
        "kv = model.cache_bytes()",
    ],
)
def test_machine_fact_rule_leaves_alone(code):
    assert not machine_fact_findings(code), f"the rule must accept: {code}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_machine_facts_are_measured_not_read(path):
    nb = nbformat.read(path, as_version=4)
    found = [
        f"cell {i} {f}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for f in machine_fact_findings(cell.source, flags_allowed=path.stem in SHOWS_THE_FLAGS)
    ]
    assert not found, f"{path.stem} reads a machine fact instead of measuring it:\n" + "\n".join(found)
