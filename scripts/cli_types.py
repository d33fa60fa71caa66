"""``argparse`` types the course's scripts share: a bad number on the command line is a one-line usage error,
not a traceback from deep inside the script. Imports nothing heavy (no torch), so a script stays quick to start."""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """A whole number ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ≥ 1")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value
