"""The argument checks of training, run once at the entry points (train_step, fit).

Each check names the argument, says what was expected and shows what was received, so that a
wrong model, optimiser, loss, clip norm, callback or stream fails before the first step, not
deep inside it.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .losses import CrossEntropyLoss
from .model import LanguageModel, Transformer
from .optim import Adam


def type_description(value):
    """``the function cross_entropy`` for a named callable, else the type name (for messages)."""
    if callable(value) and hasattr(value, "__name__"):
        return f"the {type(value).__name__} {value.__name__}"
    return type(value).__name__


def check_model(model):
    if not isinstance(model, Transformer | LanguageModel):
        raise TypeError(
            f"model must be a Transformer or a LanguageModel, got {type(model).__name__}"
        )


def check_optimizer(model, optimizer, *, need_current_lr=False):
    """The optimiser must update this model's own parameter arrays (checked by identity)."""
    methods = ("step", "current_lr") if need_current_lr else ("step",)
    if not all(callable(getattr(optimizer, m, None)) for m in methods):
        raise TypeError(
            "optimizer must be an optimiser built on the model's parameters, such as "
            f"Adam(model.parameters()), got {type(optimizer).__name__}"
        )
    if isinstance(optimizer, Adam):
        optimizer.check_holds(model.parameters())


def check_loss_fn(loss_fn):
    """``loss_fn`` itself, or the default cross-entropy for None."""
    if loss_fn is None:
        return CrossEntropyLoss()
    if not callable(loss_fn) or not callable(getattr(loss_fn, "backward", None)):
        hint = (
            " (the function cross_entropy returns (loss, grad); pass CrossEntropyLoss() instead)"
            if getattr(loss_fn, "__name__", "") == "cross_entropy"
            else ""
        )
        raise TypeError(
            "loss_fn must be a loss object called as loss_fn(logits, targets) -> float with a "
            f"backward() method, such as CrossEntropyLoss(), got {type_description(loss_fn)}"
            f"{hint}"
        )
    return loss_fn


def check_clip_norm(clip_norm):
    """``clip_norm`` as a float, or None (no clipping)."""
    if clip_norm is None:
        return None
    if isinstance(clip_norm, bool | np.bool_) or not isinstance(clip_norm, numbers.Real):
        raise TypeError(
            "clip_norm must be a positive number or None (no clipping), "
            f"got {clip_norm!r} ({type(clip_norm).__name__})"
        )
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(
            f"clip_norm must be a positive finite number or None (no clipping), got {clip_norm}"
        )
    return float(clip_norm)


def check_eval_every(eval_every):
    if isinstance(eval_every, bool | np.bool_) or not isinstance(eval_every, numbers.Integral):
        raise TypeError(
            "eval_every must be an integer >= 0 (0: evaluate only at the end), "
            f"got {eval_every!r} ({type(eval_every).__name__})"
        )
    if eval_every < 0:
        raise ValueError(
            f"eval_every must be an integer >= 0 (0: evaluate only at the end), got {eval_every}"
        )
    return int(eval_every)


def check_optional_callable(value, name, signature):
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} must be a callable {signature} or None, got {type(value).__name__}"
        )


def check_stream(stream):
    if stream is not None and not callable(getattr(stream, "write", None)):
        raise TypeError(
            "stream must be a text stream with a write() method, such as sys.stderr or "
            f"io.StringIO(), or None (sys.stderr), got {type(stream).__name__}"
        )


def batch_getter(batches, steps):
    """``batches`` as a function ``step -> batch`` (an iterable is read one batch per step)."""
    if callable(batches):
        return batches
    try:
        iterator = iter(batches)
    except TypeError as exc:
        raise TypeError(
            "batches must be a callable batches(step) -> batch or an iterable of batches, "
            f"got {type(batches).__name__}"
        ) from exc

    def next_batch(step):
        try:
            return next(iterator)
        except StopIteration:
            raise ValueError(
                f"batches ran out after {step - 1} batch(es), but steps={steps} asks for "
                f"{steps}: pass at least {steps} batches, a callable batches(step), or a "
                f"smaller steps (the model keeps the parameters of step {step - 1}; nothing "
                "was saved)"
            ) from None

    return next_batch
