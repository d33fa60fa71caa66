"""Path checks the hub's configuration needs (a module, so the tests can import them without starting a hub)."""

from __future__ import annotations

import os
from pathlib import Path


def closed_to_others(path: Path) -> Path | None:
    """The first folder on the way to ``path`` (or the file itself) that other users cannot enter, or None:
    each participant's server runs as that participant, so the course's Python and notebooks must be reachable."""
    real = Path(path).resolve()
    for step in [*reversed(real.parents), real]:
        if not os.stat(step).st_mode & 0o001:
            return step
    return None
