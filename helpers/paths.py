"""Where the course's files live: the repository, the shipped data, and the ignored outputs folder."""

from __future__ import annotations

import contextlib
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


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half of one: write a
    temporary file beside it, flush it to disk, then rename it over the target (``os.replace`` is atomic)."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
