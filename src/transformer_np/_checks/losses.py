"""The validators of the loss: CrossEntropyLoss and cross_entropy.

Same policy as :mod:`.optim`: one validator per entry point, messages that name the argument.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .boundary import NotFiniteError
from .general import (
    all_finite,
    check_real,
    first_index,
    shape_str,
    type_name,
)

# -- the loss -----------------------------------------------------------------------------------


def check_ignore_index(ignore_index) -> int | None:
    if ignore_index is None:
        return None
    if isinstance(ignore_index, bool | np.bool_) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(
            "ignore_index must be an int (the target id of the rows to skip) or None, "
            f"got {ignore_index!r} ({type_name(ignore_index)})"
        )
    return int(ignore_index)


def check_label_smoothing(label_smoothing) -> float:
    return check_real(
        label_smoothing, "label_smoothing", "a real number in [0, 1)", lambda x: 0.0 <= x < 1.0
    )


def check_cross_entropy_loss_init(ignore_index, label_smoothing) -> None:
    check_ignore_index(ignore_index)
    check_label_smoothing(label_smoothing)


def check_cross_entropy(logits, targets, ignore_index, label_smoothing) -> dict:
    """logits (*B, V) float and targets (*B) integer: their annotations checked the dtypes and
    shapes; here the values."""
    ignore_index = check_ignore_index(ignore_index)
    label_smoothing = check_label_smoothing(label_smoothing)
    V = logits.shape[-1]
    if V == 0:
        raise ValueError(
            f"logits has an empty class axis: shape {shape_str(logits.shape)}; "
            "expected at least one class score per row (V >= 1)"
        )
    valid = np.ones(targets.shape, dtype=bool) if ignore_index is None else targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= V))
    if bad.any():
        raise ValueError(
            f"targets must be class ids in [0, {V}) (or ignore_index={ignore_index}), "
            f"got {targets[bad].ravel()[:5].tolist()}"
        )
    if not all_finite(logits):
        check_logit_values(logits, targets, valid, label_smoothing)
    return {
        "logits": logits,
        "targets": targets,
        "ignore_index": ignore_index,
        "label_smoothing": label_smoothing,
    }


def check_logit_values(logits, targets, valid, label_smoothing) -> None:
    """NaN and +inf are NotFiniteError; -inf (a masked class) only where the loss stays finite."""
    nan, posinf = np.isnan(logits), np.isposinf(logits)
    if nan.any() or posinf.any():
        raise NotFiniteError(
            f"logits contain NaN or inf ({int(nan.sum())} NaN and {int(posinf.sum())} +inf "
            f"of {logits.size} values, first at index {first_index(nan | posinf)}); expected "
            "finite values (-inf is allowed: it masks a class)"
        )
    neginf = np.isneginf(logits) & valid[..., None]  # -inf on the rows that count
    if not neginf.any():
        return
    # A masked class has probability 0, log-probability -inf: the loss is infinite if the
    # target distribution puts any mass on it.
    at_target = np.take_along_axis(logits, np.where(valid, targets, 0)[..., None], axis=-1)
    hit = valid & np.isneginf(at_target[..., 0])
    if hit.any():
        raise NotFiniteError(
            f"logits are -inf at the target class on {int(hit.sum())} row(s) (first at row "
            f"index {first_index(hit)}): a masked class cannot be the target, the loss would "
            "be infinite; mask only classes that are never the target, or set those targets "
            "to ignore_index"
        )
    if label_smoothing:
        raise NotFiniteError(
            f"label_smoothing = {label_smoothing} puts probability label_smoothing / V on every "
            f"class, but logits has -inf (masked classes) on {int(neginf.sum())} value(s) of "
            f"rows that count (first at index {first_index(neginf)}): the loss would be "
            "infinite; use label_smoothing=0 with masked logits"
        )


def check_loss_is_finite(loss: float, logits: np.ndarray) -> float:
    """The loss computed by cross_entropy, else NotFiniteError (finite logits too far apart)."""
    if not math.isfinite(loss):
        raise NotFiniteError(
            f"the loss is {loss}: the logits range from {float(logits.min()):.3g} to "
            f"{float(logits.max()):.3g}, too far apart for {logits.dtype} (their difference "
            "overflows); scale them down or use float64"
        )
    return loss


def check_loss_backward(loss, grad_output) -> float:
    """``grad_output`` of ``CrossEntropyLoss.backward``, after a forward pass."""
    g = check_real(
        grad_output,
        "grad_output",
        "a finite real number (the gradient with respect to the scalar loss)",
        math.isfinite,
    )
    if loss.grad is None:
        raise RuntimeError("CrossEntropyLoss.backward called before forward")
    return g
