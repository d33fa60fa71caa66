"""Write data/stdlib_docstrings.txt: the docstrings of the Python standard library, the text the course's two
small language models are trained on (notebook 13). Run once, by whoever rebuilds the data; the file ships with
the course and its checksum, so every machine trains and tests on the same bytes whatever Python it runs.

The docstrings are read with ``ast`` from the source files (nothing is imported, so no module runs), in sorted
path order; test suites, IDLE, tkinter, lib2to3 and the bundled packages are left out, and so is any docstring
under 40 characters or with a non-ASCII character (the models read bytes: ASCII keeps one byte per character).
Documents are separated by a blank line and a form feed. Licence: the Python Software Foundation License.

    .venv/bin/python scripts/make_corpus.py
"""

from __future__ import annotations

import ast
import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.data import CORPUS  # noqa: E402
from helpers.paths import write_atomic  # noqa: E402

SKIP = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip", "pydoc_data", "site-packages"}
SEPARATOR = "\n\n\f\n"


def docstrings(lib: Path) -> list[str]:
    found = []
    for path in sorted(lib.rglob("*.py")):
        if SKIP & set(path.relative_to(lib).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                text = ast.get_docstring(node)
                if text and len(text) >= 40 and text.isascii() and "\f" not in text:
                    found.append(text)
    return found


def main() -> None:
    lib = Path(sysconfig.get_paths()["stdlib"])
    docs = docstrings(lib)
    write_atomic(CORPUS, SEPARATOR.join(docs) + "\n")
    size = CORPUS.stat().st_size / 2**20
    print(f"{CORPUS.name}: {len(docs)} docstrings, {size:.2f} MiB, from Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
