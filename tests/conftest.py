"""Shared test set-up: results go to a temporary folder, plots render off-screen."""

from __future__ import annotations

import os

import matplotlib
import pytest

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _isolated_outputs(tmp_path, monkeypatch):
    """Every test writes its results under its own temporary outputs folder, never into outputs/."""
    monkeypatch.setenv("COURSE_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("COURSE_MODE", "quick")
    from helpers import modes

    monkeypatch.setattr(modes, "_mode", None)  # a test's set_mode does not leak into the next test
    yield


def one_line(exc: BaseException) -> bool:
    return "\n" not in str(exc) and len(str(exc)) > 20


@pytest.fixture
def no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the message given on a machine without a GPU")
    return True


os.environ.setdefault("MPLBACKEND", "Agg")
