import logging
import os
import subprocess
import sys
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
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    probe = "import os, helpers; print(os.environ.get('KINETO_LOG_LEVEL'))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("None" if torch.cuda.is_available() else "5")
    # a value the user chose is never overridden
    out = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "KINETO_LOG_LEVEL": "1"}, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1"


def test_torchao_import_and_compile_cache_notes_are_filtered(caplog):
    noise.install()
    with caplog.at_level(logging.WARNING):
        logging.getLogger("torch.utils._pytree").warning(
            "<enum 'KernelPreference'> is an Enum subclass and is now natively supported by torch.compile as an "
            "opaque value type."
        )
        logging.getLogger("torch.utils._pytree").warning("another pytree warning")
    assert [r.getMessage() for r in caplog.records] == ["another pytree warning"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("Int8Tensor does not implement _stable_hash_for_caching(self) -> str", UserWarning, stacklevel=1)
    assert caught == []
