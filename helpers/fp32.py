"""fp32 means fp32: the one place the course switches TensorFloat-32 off (and reads or restores the switches).

PyTorch has two APIs for the same switches, and they must agree:

* the legacy flags ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32`` (one flag
  for all of cuDNN), which ``torch.export`` and older code still read;
* the per-operation flags of PyTorch ≥ 2.9: ``torch.backends.cuda.matmul.fp32_precision``,
  ``torch.backends.cudnn.conv.fp32_precision`` and ``torch.backends.cudnn.rnn.fp32_precision``
  (``"ieee"``: exact fp32; ``"tf32"``).

The per-operation setters do not update the legacy flags, and the legacy getters raise where the two disagree:
set ``cudnn.conv.fp32_precision = "ieee"`` by hand and reading ``cudnn.allow_tf32`` raises *"PyTorch is checking
whether allow_tf32 is enabled for cuDNN without a specific operator name"* — and so does ``torch.export``, which
reads it (on a CPU too: the flags exist there). A legacy setter, for its part, resets the per-operation flags
(``False`` → ``"none"``, ``True`` → ``"tf32"``). :func:`exact_fp32` therefore sets the legacy flags first and then
every per-operation flag, so both APIs read "no TF32" and nothing raises.

This module imports nothing but torch, so a fresh replica process (``helpers/_replica.py``) can load it from
its file without importing the rest of the course.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

#: The per-operation fp32 flags, by the name a notebook writes them with.
FLAGS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn")


def _backend(name: str):  # noqa: ANN202 - a torch.backends sub-object
    obj = torch.backends
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def fp32_flags() -> dict[str, str | bool]:
    """Both kinds of switch, read without raising: the per-operation precision of matmuls, cuDNN convolutions and
    cuDNN RNNs (``'ieee'`` exact, ``'tf32'``, ``'none'``: the legacy flag decides) and the two legacy flags (the
    cuDNN one is missing where the two APIs disagree: it cannot be read then)."""
    flags: dict[str, str | bool] = {name: str(_backend(name).fp32_precision) for name in FLAGS}
    flags["legacy cublas"] = bool(torch._C._get_cublas_allow_tf32())
    try:
        flags["legacy cudnn"] = bool(torch._C._get_cudnn_allow_tf32())
    except RuntimeError:  # the two APIs disagree: there is no one legacy value to read (or to put back)
        pass
    return flags


def set_fp32_flags(flags: dict[str, str | bool]) -> None:
    """Put the switches back as :func:`fp32_flags` read them: the legacy flags first (their setters reset the
    per-operation ones), then the per-operation flags."""
    known = {*FLAGS, "legacy cublas", "legacy cudnn"}
    if not isinstance(flags, dict) or set(flags) - known:
        raise ValueError(f"pass what fp32_flags() returned (keys among {sorted(known)}), got {flags!r}.")
    if "legacy cublas" in flags:
        torch._C._set_cublas_allow_tf32(bool(flags["legacy cublas"]))
    if "legacy cudnn" in flags:
        torch._C._set_cudnn_allow_tf32(bool(flags["legacy cudnn"]))
    for name in FLAGS:
        if name in flags:
            _backend(name).fp32_precision = flags[name]


def exact_fp32() -> None:
    """fp32 math in fp32 on an NVIDIA GPU: TensorFloat-32 off for matmuls, cuDNN convolutions and cuDNN RNNs
    (cuDNN uses TF32 for fp32 convolutions by default), through both APIs so they agree and ``torch.export`` does
    not raise. Harmless on a CPU. The switches are per process: call it in every process that checks fp32 results
    (a serving replica is a process of its own)."""
    set_fp32_flags({"legacy cublas": False, "legacy cudnn": False, **dict.fromkeys(FLAGS, "ieee")})


def tf32_enabled() -> dict[str, bool]:
    """What the legacy API reads (it raises where the two APIs disagree): ``{'matmul': False, 'cudnn': False}``
    after :func:`exact_fp32`."""
    return {"matmul": bool(torch.backends.cuda.matmul.allow_tf32), "cudnn": bool(torch.backends.cudnn.allow_tf32)}


@contextlib.contextmanager
def consistent_fp32_flags() -> Iterator[None]:
    """For code that reads the legacy flags (``torch.export``): where the two APIs disagree (a notebook set a
    per-operation flag by hand), the legacy cuDNN flag is made to say what the convolution flag says, for the
    block; both kinds of switch are put back as they were afterwards."""
    saved = fp32_flags()
    try:
        try:
            tf32_enabled()
        except RuntimeError:  # the mix that makes torch.export raise
            torch._C._set_cudnn_allow_tf32(
                saved["cudnn.conv"] == "tf32"
            )  # resets conv and rnn to the value it stands for
        yield
    finally:
        set_fp32_flags(saved)


@contextlib.contextmanager
def cudnn_switches(*, tf32: bool, benchmark: bool) -> Iterator[None]:
    """cuDNN's switches for the block, put back after it: TF32 in its convolutions and RNNs (through both APIs, so
    they agree: a precision step, where :func:`exact_fp32` keeps fp32 exact) and ``cudnn.benchmark`` (time the
    algorithms at each new shape instead of choosing by heuristics). Notebook 09 sets them per call of a step."""
    saved, saved_benchmark = fp32_flags(), torch.backends.cudnn.benchmark
    value = "tf32" if tf32 else "ieee"
    set_fp32_flags({"legacy cudnn": bool(tf32), "cudnn.conv": value, "cudnn.rnn": value})
    torch.backends.cudnn.benchmark = bool(benchmark)
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark
        set_fp32_flags(saved)
