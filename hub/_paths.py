"""Path checks the hub's configuration needs (a module, so the tests can import them without starting a hub)."""

from __future__ import annotations

import os
from pathlib import Path


def closed_to_others(path: Path, read: bool = False) -> Path | None:
    """The first folder on the way to ``path`` — through its symlinks too, and their targets — that other users
    cannot enter, or ``path`` itself when they cannot run it (``read=False``) or read it (``read=True``, a
    folder: list and enter it); None when every participant can. Each participant's server runs as that
    participant, so the course's Python, notebooks, helpers and warm caches must be reachable."""
    path = Path(os.path.abspath(path))
    steps = [*reversed(path.parents), path, *reversed(path.resolve().parents), path.resolve()]
    for step in steps[:-1]:
        if step.is_dir() and not os.stat(step).st_mode & 0o001:
            return step
    mode = os.stat(path).st_mode
    need = (0o004 | (0o001 if path.is_dir() else 0)) if read else 0o001
    return None if mode & need == need else path
