"""quick / full mode: one environment variable, ``COURSE_MODE``, switches every notebook's sizes.

A notebook reads its ``MODE`` from ``COURSE_MODE`` in its ``parameters`` cell (papermill's ``-p MODE quick`` or
an edit of that cell overrides it), then hands it to :func:`set_mode`, which validates it and makes it the
process's mode: :func:`pick` and :func:`course_mode` follow it, and the environment is left as it was.

* ``quick``: what CI runs, a smoke test. The smallest sizes that reach every cell and assertion, few repeats
  (verdicts may say too few samples); the target is 25 s a notebook on 2 CPU cores (scripts/runtimes.py).
* ``full`` (the default): what a learner or a GPU reference run gets. Sizes that show the real effect.
"""

from __future__ import annotations

import os
from typing import TypeVar

MODES = ("quick", "full")
DEFAULT_MODE = "full"
T = TypeVar("T")
_mode: str | None = None  # set by set_mode (a notebook's MODE); None: COURSE_MODE decides


def set_mode(mode: str | None) -> str:
    """Make ``mode`` (``"quick"`` or ``"full"``; None: ``COURSE_MODE``'s) this process's mode and return it.

    A notebook's set-up cell calls ``MODE = helpers.set_mode(MODE)``: the value its ``parameters`` cell ended
    with, papermill's or the learner's, then sizes every ``pick`` without touching the environment.
    """
    global _mode
    if mode is None:
        _mode = None
        return course_mode()
    if not isinstance(mode, str) or mode.strip().lower() not in MODES:
        raise ValueError(f"MODE={mode!r} is not a mode; set MODE = 'quick' or MODE = 'full' in the parameters cell.")
    _mode = mode.strip().lower()
    return _mode


def course_mode() -> str:
    """Return ``"quick"`` or ``"full"``: the mode :func:`set_mode` set, else ``COURSE_MODE`` (unset: full)."""
    if _mode is not None:
        return _mode
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
