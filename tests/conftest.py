"""Shared test set-up: results go to a temporary folder, plots render off-screen."""

from __future__ import annotations

import os

import matplotlib
import pytest

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _isolated_outputs(request, tmp_path, monkeypatch):
    """Every test writes its results under its own temporary outputs folder, never into outputs/. A notebook
    run keeps the COURSE_OUTPUTS `make test` set (outputs/test), so its compile caches serve the next run; the site
    test reads the executed copies the notebook runs left there."""
    if request.node.get_closest_marker("notebook") is None and request.node.get_closest_marker("site") is None:
        monkeypatch.setenv("COURSE_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("COURSE_MODE", "quick")
    from helpers import modes

    monkeypatch.setattr(modes, "_mode", None)  # a test's set_mode does not leak into the next test
    from helpers import noise

    noise.install()  # pytest's "error" filter is set per test: the allow-list goes on top of it
    yield


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped, with their reason, where torch sees no CUDA GPU."""
    import torch

    if torch.cuda.is_available():
        return
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=marker.kwargs.get("reason", "needs a CUDA GPU")))


def one_line(exc: BaseException) -> bool:
    return "\n" not in str(exc) and len(str(exc)) > 20


@pytest.fixture
def no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the message given on a machine without a GPU")
    return True


os.environ.setdefault("MPLBACKEND", "Agg")  # this process; the notebook test gives its kernels inline


def pytest_configure(config):
    """Under pytest-xdist (make test-helpers), each worker's PyTorch gets its share of the cores: two workers of
    two OpenMP threads each on two cores spin against each other and slow every timed call many times over."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if os.environ.get("PYTEST_XDIST_WORKER") and workers > 1:
        import torch

        from helpers.device import usable_cpus

        torch.set_num_threads(max(1, usable_cpus() // workers))
