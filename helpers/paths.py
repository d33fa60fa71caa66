"""Where the course's files live: the repository, the shipped data, and the ignored outputs folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT: Path = Path(__file__).resolve().parents[1]
DATA_DIR: Path = REPO_ROOT / "data"
REFERENCE_DIR: Path = DATA_DIR / "reference"


def outputs_dir() -> Path:
    """The folder for everything a run produces (results, traces, exported models, caches).

    ``COURSE_OUTPUTS`` overrides it (the full-mode run script points it at its own folder);
    otherwise it is ``outputs/`` at the repository root, which git ignores.
    """
    path = Path(os.environ.get("COURSE_OUTPUTS") or REPO_ROOT / "outputs").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path
