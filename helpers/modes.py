"""quick / full mode: one environment variable, ``COURSE_MODE``, switches every notebook's sizes.

* ``quick``: what CI runs. Small sizes and few repeats; each notebook under a minute on 2 CPU cores.
* ``full`` (the default): what a learner or a GPU reference run gets. Sizes that show the real effect.
"""

from __future__ import annotations

import os
from typing import TypeVar

MODES = ("quick", "full")
DEFAULT_MODE = "full"
T = TypeVar("T")


def course_mode() -> str:
    """Return ``"quick"`` or ``"full"`` from ``COURSE_MODE`` (unset or empty means full)."""
    raw = os.environ.get("COURSE_MODE", "").strip().lower() or DEFAULT_MODE
    if raw not in MODES:
        raise ValueError(
            f"COURSE_MODE={raw!r} is not a mode; set COURSE_MODE=quick or COURSE_MODE=full (or unset it for full)."
        )
    return raw


def pick(quick: T, full: T, mode: str | None = None) -> T:
    """Return the quick-mode or full-mode value of a parameter: ``repeats = pick(5, 50)``."""
    mode = course_mode() if mode is None else mode
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not a mode; use 'quick' or 'full'.")
    return quick if mode == "quick" else full
