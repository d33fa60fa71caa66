"""The one argument checker: bad input to a helper gets one line saying what to pass.

Every public helper checks its arguments with these instead of hand-writing ``isinstance`` chains, so the
messages have one shape: ``name=value is not allowed: <what it must be>; <what to do>``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any


def _fail(name: str, value: Any, must: str, hint: str = "") -> ValueError:
    return ValueError(f"{name}={value!r} is not allowed: {name} must be {must}" + (f"; {hint}" if hint else "."))


def check_int(name: str, value: Any, minimum: int | None = 1, maximum: int | None = None, hint: str = "") -> int:
    """``value`` must be an integer (not a bool) in ``[minimum, maximum]``; returns it. NumPy integers count
    (``list(df.index)`` of a pandas table gives ``numpy.int64``s, not ints)."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        bounds = (
            f"between {minimum} and {maximum}"
            if minimum is not None and maximum is not None
            else f"≥ {minimum}"
            if minimum is not None
            else f"≤ {maximum}"
            if maximum is not None
            else ""
        )
        raise _fail(name, value, f"an integer {bounds}".strip(), hint)
    return value


def check_number(
    name: str,
    value: Any,
    *,
    positive: bool = False,
    minimum: float | None = None,
    allow_none: bool = False,
    hint: str = "",
) -> float | None:
    """``value`` must be a finite real number (``> 0`` if ``positive``, ``≥ minimum`` if given), or None when
    ``allow_none``; returns it as a float."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (not positive or value > 0) and (minimum is None or value >= minimum)
    if not ok:
        must = "a positive number" if positive else f"a number ≥ {minimum}" if minimum is not None else "a number"
        raise _fail(name, value, must + (", or None" if allow_none else ""), hint)
    return float(value)


def check_callable(name: str, value: Any, hint: str = "") -> Callable[..., Any]:
    """``value`` must be callable (a function, a module, a bound method)."""
    if not callable(value):
        raise TypeError(f"{name} must be a callable, got {type(value).__name__}" + (f"; {hint}" if hint else "."))
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any], hint: str = "") -> Any:
    """``value`` must be one of ``choices``."""
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
        raise TypeError(f"choices must be a list of the allowed values, got {type(choices).__name__}.")
    options = list(choices)
    if value not in options:
        raise _fail(name, value, "one of " + ", ".join(repr(c) for c in options), hint)
    return value


def check_instance(name: str, value: Any, kind: type | tuple[type, ...], hint: str = "") -> Any:
    """``value`` must be an instance of ``kind`` (a class or a tuple of classes); returns it."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(k.__name__ for k in kinds)
        raise TypeError(f"{name} must be a {wanted}, got {type(value).__name__}" + (f"; {hint}" if hint else "."))
    return value


def check_tensor(name: str, value: Any, ndim: int | None = None, nonempty: bool = True, hint: str = "") -> Any:
    """``value`` must be a torch.Tensor (with ``ndim`` dimensions if given, not empty if ``nonempty``)."""
    import torch

    check_instance(name, value, torch.Tensor, hint)
    if ndim is not None and value.dim() != ndim:
        raise _fail(name, f"a tensor of shape {tuple(value.shape)}", f"a {ndim}-d tensor", hint)
    if nonempty and value.numel() == 0:
        raise _fail(name, f"an empty tensor of shape {tuple(value.shape)}", "a tensor with elements", hint)
    return value


def check_finite(name: str, value: Any, hint: str = "") -> Any:
    """A tensor ``value`` must hold no NaN or infinity (integer tensors always pass); returns it."""
    import torch

    if value.is_floating_point() or value.is_complex():
        bad = int((~torch.isfinite(value)).sum())
        if bad:
            raise _fail(name, f"a tensor with {bad} NaN or infinite value(s)", "finite everywhere", hint)
    return value


def check_labels(name: str, labels: Any, classes: int, hint: str = "") -> Any:
    """``labels`` must be a non-empty 1-d tensor of integer class indices in ``0 … classes − 1``; returns it."""
    import torch

    check_tensor(name, labels, ndim=1, hint=hint)
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise _fail(name, f"a {labels.dtype} tensor", "integer class indices", hint)
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= classes:
        raise _fail(name, f"labels from {low} to {high}", f"class indices in 0…{classes - 1} ({classes} classes)", hint)
    return labels


def check_numbers(
    name: str, values: Any, *, positive: bool = False, minimum: float | None = None, hint: str = ""
) -> list[float]:
    """``values`` must be a non-empty sequence of finite real numbers (each checked as :func:`check_number`)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) == 0:
        raise _fail(name, values, "a non-empty list of numbers", hint)
    return [
        check_number(f"{name}[{i}]", v, positive=positive, minimum=minimum, hint=hint) for i, v in enumerate(values)
    ]


def check_ints(name: str, values: Any, minimum: int | None = 1, hint: str = "") -> list[int]:
    """``values`` must be a non-empty sequence of integers ≥ ``minimum``."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) == 0:
        raise _fail(name, values, "a non-empty list of integers", hint)
    return [check_int(f"{name}[{i}]", v, minimum=minimum, hint=hint) for i, v in enumerate(values)]
