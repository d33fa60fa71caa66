"""Compare model variants (precisions, quantizations, runtimes) on the same footing: speed, size, memory,
accuracy and agreement with the fp32 reference. Correctness is measured before anything is timed."""

from __future__ import annotations

import io
import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from .checks import check_callable, check_int, check_tensor
from .device import DeviceLike, choose_device
from .memory import peak_allocated_bytes
from .models import accuracy
from .timing import timed_call
from .verdict import Comparison


def model_size_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's serialised ``state_dict`` (what you would ship): works for quantized tensor
    subclasses and packed legacy weights alike, unlike counting ``parameters()``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model_size_bytes() needs an nn.Module, got {type(model).__name__}.")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes


def agreement(reference: torch.Tensor, output: torch.Tensor) -> dict[str, float]:
    """How close a variant's logits are to the fp32 reference: max absolute difference and top-1 agreement."""
    check_tensor("reference", reference, hint="pass the fp32 model's logits")
    check_tensor("output", output, hint="pass the variant's logits on the same inputs")
    if reference.shape != output.shape:
        raise ValueError(f"shapes differ: reference {tuple(reference.shape)} vs output {tuple(output.shape)}.")
    if reference.dim() < 2:
        raise ValueError(f"logits must be (items, …, classes), got {tuple(reference.shape)}: agreement compares rows.")
    ref, out = reference.float().cpu(), output.float().cpu()
    for name, t in (("reference", ref), ("output", out)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} holds NaN or infinite logits (a broken variant or input): no agreement.")
    return {
        "max_abs_diff": float((ref - out).abs().max()),
        "top1_agreement": float((ref.argmax(dim=-1) == out.argmax(dim=-1)).float().mean()),
    }


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> None:
    """``torch.testing.assert_close`` with ``atol`` taken relative to the expected outputs' scale (their largest
    magnitude, capped at 1). An absolute tolerance alone lets an all-zero output pass wherever a model's outputs are
    small (a randomly initialised network's logits can all lie under 1e-4): a runtime that returned nothing would
    pass a parity check. Raises ``AssertionError`` as ``assert_close`` does."""
    check_tensor("expected", expected, hint="pass the reference outputs (PyTorch's)")
    scale = float(expected.detach().abs().max())
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * min(1.0, scale))


@torch.inference_mode()
def predict(
    fn: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    batch_size: int = 512,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
    pad: bool = False,
) -> torch.Tensor:
    """Logits of ``fn`` over ``images`` in batches (``prepare`` converts each batch, e.g. to half).

    ``pad=True`` pads the last batch to ``batch_size`` (and drops the padding's outputs), so a compiled
    ``fn`` only ever sees one shape and is never recompiled.
    """
    check_callable("fn", fn, hint="predict() needs a model or function from a batch to logits")
    check_int("batch_size", batch_size, hint="pass how many images per call, e.g. 512")
    check_tensor("images", images, hint="pass a batch of inputs (a tensor with a batch dimension)")
    if prepare is not None:
        check_callable("prepare", prepare, hint="pass a function of a batch (e.g. lambda x: x.half()), or None")
    outs = []
    for start in range(0, len(images), batch_size):
        x = images[start : start + batch_size]
        n = len(x)
        if pad and n < batch_size:
            x = torch.cat([x, x.new_zeros((batch_size - n, *x.shape[1:]))])
        out = fn(prepare(x) if prepare else x)
        if not isinstance(out, torch.Tensor) or out.dim() == 0 or len(out) != len(x):
            got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"fn returned {got} for a batch of {len(x)} images: it must return one row per image.")
        outs.append(out[:n].float().cpu())
    return torch.cat(outs)


def is_compiled(fn: Any) -> bool:
    """Whether ``fn`` runs compiled code: a ``torch.compile`` module (it has ``_orig_mod``) or a function that
    says so with ``fn.compiled = True`` (a closure around a compiled module, e.g. one that patches Inductor's
    settings for each call)."""
    return hasattr(fn, "_orig_mod") or getattr(fn, "compiled", False) is True


def evaluate(
    name: str,
    fn: Callable[[torch.Tensor], torch.Tensor],
    *,
    model: torch.nn.Module | None,
    bench_input: torch.Tensor,
    test_images: torch.Tensor,
    test_labels: torch.Tensor,
    reference_logits: torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
    device: DeviceLike = None,
) -> tuple[dict[str, Any], Callable[[], Any]]:
    """Check one variant before anything is timed: its first call, accuracy, agreement with the fp32 logits,
    size and peak memory. Returns the row and ``call``, the zero-argument call on ``bench_input`` that
    :func:`helpers.time_together` then times together with the other variants (one session, so the verdicts
    are paired); :func:`timing_columns` turns that comparison into the table's timing columns.

    ``fn`` takes a batch (already on the device); ``prepare`` converts the fp32 batch for it (``.half()`` …);
    ``model`` is what is measured for size (None when the variant is not a module, e.g. an ONNX session).
    The very first call, on ``bench_input``, is timed apart as ``first_call_s`` (for a compiled ``fn`` it
    includes compilation); accuracy (:func:`helpers.models.accuracy`) is then computed in batches of the same
    shape, so nothing recompiles. On a CPU, peak memory is ``None`` for a compiled ``fn`` (:func:`is_compiled`):
    the tracker sees eager aten ops only, and a compiled graph's buffers are invisible to it.
    """
    check_callable("fn", fn, hint="pass the variant: a model or a function from a batch to logits")
    dev = choose_device(device)
    x = prepare(bench_input) if prepare else bench_input

    def call() -> Any:
        with torch.inference_mode():
            return fn(x)

    first_call, _ = timed_call(call, device=dev)  # the one first-call timer (timing.timed_call)
    logits = predict(fn, test_images, batch_size=len(bench_input), prepare=prepare, pad=True)
    top1 = accuracy(fn, test_images, test_labels, logits=logits)  # scores the logits just computed
    agree = agreement(reference_logits, logits)
    row = {
        "variant": name,
        "accuracy": top1,
        **agree,
        "first_call_s": first_call,
        "size_bytes": model_size_bytes(model) if model is not None else None,
        "peak_mem_bytes": None if dev.type != "cuda" and is_compiled(fn) else peak_allocated_bytes(call, dev),
    }
    return row, call


def timing_columns(comparison: Comparison) -> Any:
    """One row per candidate of ``comparison`` (from :func:`helpers.time_together`), indexed by label, with the
    numbers a variant table needs: ``median_s``, ``iqr_s``, ``items_per_s``, ``samples``, ``noisy``, and, against
    the comparison's baseline, ``speed-up`` (the paired verdict's ratio), its ``interval`` and the ``verdict``."""
    import pandas as pd

    if not isinstance(comparison, Comparison):
        raise TypeError(
            f"timing_columns() needs a Comparison (helpers.time_together), got {type(comparison).__name__}."
        )
    rows = {}
    for label in comparison.labels:
        m = comparison[label]
        row = {"median_s": m.median, "iqr_s": m.iqr, "items_per_s": m.throughput, "samples": m.n, "noisy": m.noisy}
        if label == comparison.baseline:
            row.update({"speed-up": 1.0, "interval": "", "verdict": "baseline"})
        else:
            v = comparison.verdict(label)
            row.update({"speed-up": v.ratio, "interval": f"{v.low:.2f}–{v.high:.2f}", "verdict": v.short()})
        rows[label] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def pareto_front(
    rows: list[dict[str, Any]],
    minimize: tuple[str, ...] = ("median_s", "size_bytes"),
    maximize: tuple[str, ...] = ("accuracy",),
) -> list[bool]:
    """For each row, whether it is Pareto-optimal: no other row is at least as good on every criterion and
    strictly better on one. Rows with a missing value on a criterion (absent, None, NaN or not a number) are
    never optimal, and never dominate another."""
    if not isinstance(rows, list):
        raise TypeError(f"rows must be a list of dicts (one per variant), got {type(rows).__name__}.")
    for name, group in (("minimize", minimize), ("maximize", maximize)):
        if not isinstance(group, tuple) or not all(isinstance(k, str) for k in group):
            raise TypeError(f"{name} must be a tuple of column names, e.g. ('median_s',).")
    keys = minimize + maximize
    if not rows:
        return []
    if not all(isinstance(r, dict) for r in rows):
        raise TypeError("rows must be a list of dicts, one per variant, each with the criteria as keys.")

    def valid(r: dict[str, Any]) -> bool:
        values = [r.get(k) for k in keys]
        return all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in values)

    def as_good(a: dict[str, Any], b: dict[str, Any]) -> bool:  # a at least as good as b everywhere
        return all(a[k] <= b[k] for k in minimize) and all(a[k] >= b[k] for k in maximize)

    front = []
    for r in rows:
        if not valid(r):
            front.append(False)
            continue
        dominated = any(valid(o) and o is not r and as_good(o, r) and not as_good(r, o) for o in rows)
        front.append(not dominated)
    return front
