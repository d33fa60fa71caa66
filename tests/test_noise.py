import logging
import os
import warnings

import torch
from torch.utils.data import DataLoader

from helpers import noise


def test_cuda_home_message_is_dropped_and_nothing_else(caplog):
    noise.install()
    noise.install()  # idempotent
    logger = logging.getLogger("torch.utils.cpp_extension")
    with caplog.at_level(logging.WARNING):
        logger.warning("No CUDA runtime is found, using CUDA_HOME='/usr/local'")
        logger.warning("a different warning")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["a different warning"]


def test_pin_memory_warning_only_is_filtered():
    noise.install()  # pytest resets warning filters around each test; a notebook keeps them from import
    loader = DataLoader(torch.arange(8), batch_size=4, pin_memory=True)
    with warnings.catch_warnings(record=True) as caught:
        list(loader)
        warnings.warn("some other warning", UserWarning, stacklevel=1)
    texts = [str(w.message) for w in caught]
    assert not any("pin_memory" in t for t in texts)
    assert "some other warning" in texts


def test_kineto_is_quiet_only_without_a_gpu():
    if torch.cuda.is_available():
        assert os.environ.get("KINETO_LOG_LEVEL") != "5" or "KINETO_LOG_LEVEL" in os.environ
    else:
        assert os.environ["KINETO_LOG_LEVEL"] == "5"
