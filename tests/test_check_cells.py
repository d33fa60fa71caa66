"""scripts/check_cells.py: the lint step that keeps every code cell within 40 lines."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_cells.py"


def _notebook(tmp_path, lines):
    path = tmp_path / "99_x.ipynb"
    cell = {"cell_type": "code", "source": "\n".join(f"x{i} = {i}" for i in range(lines)), "metadata": {}}
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "# x", "metadata": {}}, cell]}))
    return path


def test_a_cell_over_40_lines_fails_lint_and_is_named(tmp_path):
    run = subprocess.run([sys.executable, SCRIPT, _notebook(tmp_path, 41)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "99_x.ipynb cell 1: 41 lines" in run.stdout


def test_cells_of_40_lines_pass(tmp_path):
    run = subprocess.run([sys.executable, SCRIPT, _notebook(tmp_path, 40)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
