"""No code cell of a course notebook over 40 lines (DESIGN.md: a cell is read on one screen). Run by `make lint`.

.venv/bin/python scripts/check_cells.py [notebooks/*.ipynb]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MAX_LINES = 40
REPO = Path(__file__).resolve().parent.parent


def long_cells(path: Path) -> list[str]:
    """'<notebook> cell <n>: <lines> lines' for each code cell of ``path`` over MAX_LINES lines."""
    cells = json.loads(path.read_text())["cells"]
    return [
        f"{path.name} cell {i}: {n} lines"
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code" and (n := len("".join(cell["source"]).splitlines())) > MAX_LINES
    ]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    found = [line for p in paths for line in long_cells(p)]
    for line in found:
        print(f"{line} (at most {MAX_LINES}: split the cell where a step can be named)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
