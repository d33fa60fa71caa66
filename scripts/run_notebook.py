"""Run one notebook with other parameters, from the command line (papermill's conventions).

    .venv/bin/python scripts/run_notebook.py notebooks/03_batch_sizing.ipynb [OUT.ipynb] -p MODE quick -p DEVICE cpu
    .venv/bin/python scripts/run_notebook.py NOTEBOOK --html [OUT.html] -p MODE full     # an HTML handout

As papermill does, the values are written into a new cell tagged ``injected-parameters`` placed right after
the notebook's cell tagged ``parameters``, so they override its defaults; the notebook then runs top to
bottom in its Jupyter kernel and is saved with its outputs (default: ``outputs/runs/<name>.ipynb``).
Values are read as papermill reads them: ``True``/``False``/``None``, an integer or a float, else a string
(``-p MODE quick -p DEVICE cpu``). A name the ``parameters`` cell does not assign is refused (a typo would
otherwise change nothing). HTML handouts leave out the solution cells unless ``--with-solutions``.
(If you have papermill, ``papermill NOTEBOOK OUT -p MODE quick`` does the same.)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_value(text: str) -> object:
    """As papermill's ``-p``: True, False, None, an int or a float, else the string itself."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parameter_names(source: str) -> set[str]:
    """The names a ``parameters`` cell assigns."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def inject(nb: object, parameters: dict[str, object]) -> None:
    """Insert (or replace) the ``injected-parameters`` cell after the ``parameters`` cell."""
    import nbformat

    cells = nb.cells
    cells[:] = [c for c in cells if "injected-parameters" not in c.metadata.get("tags", [])]
    index = next((i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])), None)
    if index is None:
        raise SystemExit("this notebook has no cell tagged `parameters`: nothing to override.")
    unknown = sorted(set(parameters) - parameter_names(cells[index].source))
    if unknown:
        raise SystemExit(f"{', '.join(unknown)}: not a parameter of this notebook; its parameters cell sets "
                         f"{', '.join(sorted(parameter_names(cells[index].source)))}.")
    source = "# Parameters injected from the command line\n" + "\n".join(
        f"{name} = {value!r}" for name, value in parameters.items())
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["injected-parameters"]
    cells.insert(index + 1, cell)


def run(notebook: Path, out: Path, parameters: dict[str, object], html: bool = False, timeout: int = 1800,
        solutions: bool = False) -> Path:
    """Execute ``notebook`` with ``parameters`` and write it (or its HTML rendering) to ``out``."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    if parameters:
        inject(nb, parameters)
    for i, cell in enumerate(nb.cells):
        cell.id = cell.get("id") or f"injected-{i}"
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    out.parent.mkdir(parents=True, exist_ok=True)
    if html:
        from nbconvert import HTMLExporter
        from nbconvert.preprocessors import TagRemovePreprocessor

        exporter = HTMLExporter()
        if not solutions:  # a handout, not an answer key
            exporter.register_preprocessor(TagRemovePreprocessor(remove_cell_tags={"solution"}, enabled=True), True)
        body, _ = exporter.from_notebook_node(nb)
        out.write_text(body, encoding="utf-8")
    else:
        nbformat.write(nb, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("out", type=Path, nargs="?", help="where to write the executed notebook (or HTML)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("--html", action="store_true", help="write an HTML handout instead of a notebook")
    parser.add_argument("--with-solutions", action="store_true", help="keep the solution cells in the HTML")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    if not args.notebook.exists():
        print(f"{args.notebook}: no such notebook", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from helpers.paths import outputs_dir

    suffix = ".html" if args.html else ".ipynb"
    out = args.out or outputs_dir() / ("html" if args.html else "runs") / (args.notebook.stem + suffix)
    parameters = {name: parse_value(value) for name, value in args.parameter}
    run(args.notebook.resolve(), out, parameters, html=args.html, timeout=args.timeout,
        solutions=args.with_solutions)
    print(f"{args.notebook.name} → {out}" + (f" with {parameters}" if parameters else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
