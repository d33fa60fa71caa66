"""helpers.checks: the one argument checker, and the one shape of its messages."""

import math

import numpy as np
import pytest
from conftest import one_line

from helpers.checks import check_callable, check_choice, check_int, check_number


def refused(error, call, *names):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert one_line(info.value), message
    assert all(name in message for name in names), message
    return message


def test_check_int():
    assert check_int("batch", 4) == 4
    assert check_int("warmup", 0, minimum=0) == 0
    assert check_int("n", 5, minimum=None, maximum=5) == 5
    assert check_int("batch", np.int64(8)) == 8  # list(df.index) gives NumPy integers
    for bad in (True, False, np.bool_(True)):
        refused(ValueError, lambda bad=bad: check_int("batch", bad), "batch=", "integer")
    for bad in (2.0, "4", None):
        refused(ValueError, lambda bad=bad: check_int("batch", bad), "batch=", "integer")
    assert "≥ 1" in refused(ValueError, lambda: check_int("batch", 0), "batch=0")
    assert "between 1 and 8" in refused(ValueError, lambda: check_int("depth", 9, maximum=8), "depth=9")
    assert refused(
        ValueError, lambda: check_int("depth", 0, hint="pass how many items to load ahead, e.g. 2"), "depth"
    ).endswith("; pass how many items to load ahead, e.g. 2")


def test_check_number():
    assert check_number("target", 0.005, positive=True) == 0.005
    assert check_number("timeout", 0, minimum=0) == 0.0
    assert check_number("x", np.float32(1.5)) == 1.5
    assert check_number("budget", None, allow_none=True) is None
    for bad in (True, "1", None, math.nan, math.inf):
        refused(ValueError, lambda bad=bad: check_number("target", bad, positive=True), "target=", "positive number")
    refused(ValueError, lambda: check_number("target", 0, positive=True), "target=0", "positive")
    refused(ValueError, lambda: check_number("timeout", -1, minimum=0), "timeout=-1", "≥ 0")
    assert "or None" in refused(
        ValueError, lambda: check_number("budget", -1, positive=True, allow_none=True), "budget"
    )


def test_check_callable():
    assert check_callable("fn", len) is len
    assert "model" in refused(TypeError, lambda: check_callable("fn", 3, hint="pass a model"), "fn", "int")


def test_check_choice():
    assert check_choice("level", "all", ("basic", "all")) == "all"
    assert check_choice("level", "all", {"basic": 1, "all": 2}) == "all"  # a mapping's keys are the choices
    message = refused(ValueError, lambda: check_choice("level", "max", ("basic", "all")), "level='max'")
    assert "'basic', 'all'" in message
