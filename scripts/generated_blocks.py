"""Keep generated blocks of Markdown files (between two HTML-comment markers) in step with their data: the
shared part of scripts/reference_table.py and scripts/agenda.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.paths import write_atomic  # noqa: E402


def replace(text: str, start: str, end: str, block: str) -> str:
    """``text`` with what lies between the ``start`` and ``end`` markers replaced by ``block``."""
    if start not in text or end not in text:
        raise SystemExit(f"missing the markers {start} … {end}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def main(description: str, blocks: dict[Path, tuple[str, str, str]], script: str, argv: list[str] | None = None) -> int:
    """Print the blocks, or with --write put them into their files, or with --check fail if a file is stale."""
    parser = argparse.ArgumentParser(description=description)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="update the files")
    group.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        print("\n\n".join(block for _, _, block in blocks.values()))
        return 0
    stale = []
    for path, (start, end, block) in blocks.items():
        text = path.read_text(encoding="utf-8")
        updated = replace(text, start, end, block)
        if updated != text:
            stale.append(path.name)
            if args.write:
                write_atomic(path, updated)  # a reader never sees half a README
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run {script} --write", file=sys.stderr)
        return 1
    return 0
