"""Run one notebook with other parameters: papermill, plus the two things the course adds on top.

    papermill notebooks/03_batch_sizing.ipynb out.ipynb -p MODE quick -p DEVICE cpu      # the standard way
    .venv/bin/python scripts/run_notebook.py notebooks/03_batch_sizing.ipynb [OUT.ipynb] -p MODE quick
    .venv/bin/python scripts/run_notebook.py NOTEBOOK --html [OUT.html] -p MODE full          # an HTML handout

papermill does the work: it writes the values into a cell tagged ``injected-parameters`` right after the cell
tagged ``parameters`` and runs the notebook top to bottom in its Jupyter kernel. This wrapper adds:

* a name the ``parameters`` cell does not assign is refused (papermill only warns, and a typo such as
  ``-p mode quick`` would change nothing); the names come from ``papermill.inspect_notebook``;
* ``--html``: the executed notebook rendered by nbconvert, solution cells (tag ``solution``) removed unless
  ``--with-solutions`` — a handout, not an answer key.

Default output: ``outputs/runs/<name>.ipynb`` (``outputs/html/<name>.html`` with ``--html``), written atomically.
Values are read as papermill's ``-p`` reads them (``True``/``False``/``None``, an int, a float, else a string).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/: its shared command-line types
from cli_types import positive_int  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_value(text: str) -> object:
    """A ``-p`` value exactly as papermill's command line reads it."""
    from papermill.cli import _resolve_type

    return _resolve_type(text)


def check_names(notebook: Path, names: list[str]) -> None:
    """Refuse a parameter the notebook's ``parameters`` cell does not define, in one line."""
    import papermill

    defined = papermill.inspect_notebook(str(notebook))
    if not defined:
        raise SystemExit(
            f"{notebook.name} has no cell tagged `parameters` (or it assigns nothing): nothing to override."
        )
    unknown = sorted(set(names) - set(defined))
    if unknown:
        raise SystemExit(
            f"{', '.join(unknown)}: not a parameter of {notebook.name}; its parameters cell sets "
            f"{', '.join(sorted(defined))}."
        )


def run(
    notebook: Path,
    out: Path,
    parameters: dict[str, object],
    html: bool = False,
    timeout: int = 1800,
    solutions: bool = False,
) -> Path:
    """Execute ``notebook`` with ``parameters`` (scripts/execute.py: papermill); write it, or its HTML handout, to
    ``out``. A failing cell stops with its error (the executed copy is not written)."""
    import nbformat

    sys.path.insert(0, str(REPO))
    from helpers.paths import write_atomic

    check_names(notebook, list(parameters))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from execute import execute

    with tempfile.TemporaryDirectory() as tmp:
        run_ = execute(notebook, Path(tmp) / notebook.name, parameters=parameters, timeout=timeout)
    if run_.status != "ok":
        raise SystemExit(f"{notebook.name} failed at {run_.error}")
    nb = run_.notebook
    if html:
        from nbconvert import HTMLExporter
        from nbconvert.preprocessors import TagRemovePreprocessor

        exporter = HTMLExporter()
        if not solutions:  # a handout, not an answer key
            exporter.register_preprocessor(TagRemovePreprocessor(remove_cell_tags={"solution"}, enabled=True), True)
        body, _ = exporter.from_notebook_node(nb)
        write_atomic(out, body)
    else:
        write_atomic(out, nbformat.writes(nb))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("out", type=Path, nargs="?", help="where to write the executed notebook (or HTML)")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("--html", action="store_true", help="write an HTML handout instead of a notebook")
    parser.add_argument("--with-solutions", action="store_true", help="keep the solution cells in the HTML")
    parser.add_argument("--timeout", type=positive_int, default=1800, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        print(f"{args.notebook}: no such notebook (pass the path of an .ipynb file)", file=sys.stderr)
        return 2
    try:
        import json

        json.loads(args.notebook.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        print(f"{args.notebook}: not a notebook ({type(exc).__name__}): pass an .ipynb file", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from helpers.paths import outputs_dir

    suffix = ".html" if args.html else ".ipynb"
    out = args.out or outputs_dir() / ("html" if args.html else "runs") / (args.notebook.stem + suffix)
    parameters = {name: parse_value(value) for name, value in args.parameter}
    run(args.notebook.resolve(), out, parameters, html=args.html, timeout=args.timeout, solutions=args.with_solutions)
    print(f"{args.notebook.name} → {out}" + (f" with {parameters}" if parameters else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
