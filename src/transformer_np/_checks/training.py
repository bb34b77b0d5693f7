"""The validators of training: train_step and fit.

Same policy as :mod:`.optim`: one validator per entry point, run once when the user calls it
(the :func:`.boundary.checked` decorator), messages that name the argument.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping

import numpy as np

from .boundary import NotFiniteError
from .calls import user_code
from .files import check_save_path
from .general import (
    as_typed_array,
    check_bool,
    check_integer,
    check_positive_float,
    check_positive_int,
    check_real,
    is_a,
    is_positive,
    real_scalar,
    shape_str,
    type_description,
)

# -- the optimiser of a model ------------------------------------------------------------------


def check_optimizer(model, optimizer, *, need_current_lr=False) -> None:
    """The optimiser must update this model's own parameter arrays (compared by identity).

    An optimiser built on another model, or on copies of the arrays, would train arrays that
    nobody reads.
    """

    methods = ("step", "current_lr") if need_current_lr else ("step",)
    if not all(callable(getattr(optimizer, m, None)) for m in methods):
        raise TypeError(
            "optimizer must be an optimiser built on the model's parameters, such as "
            f"Adam(model.params), got {type(optimizer).__name__}"
        )
    if not is_a(optimizer, "Adam"):
        return
    params, names = dict(model.params.items()), optimizer.names  # (one pass over the model)
    if params.keys() != set(names):
        missing = sorted(params.keys() - set(names))
        extra = sorted(set(names) - params.keys())
        problem = (
            f"the optimiser holds other parameter names (the model's {missing[:3]} are "
            f"missing, {extra[:3]} are not the model's)"
        )
    else:
        pairs = zip(names, optimizer.arrays, strict=True)
        foreign = [name for name, array in pairs if params[name] is not array]
        if not foreign:
            return
        problem = (
            f"{len(foreign)} of {len(names)} arrays (first {foreign[0]!r}) are not the "
            "model's own arrays, so the update would not reach the model"
        )
    raise ValueError(
        f"optimizer was not built on this model's parameters: {problem}; "
        "build it with Adam(model.params) of the model you train"
    )


# -- train_step and fit -------------------------------------------------------------------------


def check_model(model) -> None:
    if not is_a(model, "Transformer", "LanguageModel"):
        raise TypeError(
            f"model must be a Transformer or a LanguageModel, got {type(model).__name__}"
        )


def check_loss_fn(loss_fn):
    """``loss_fn``: None (the step's default cross-entropy) or a loss object."""
    if loss_fn is None:
        return None
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


def check_clip_norm(clip_norm) -> float | None:
    """``clip_norm`` as a float, or None (no clipping)."""
    if clip_norm is None:
        return None
    return check_real(
        clip_norm, "clip_norm", "a positive finite number or None (no clipping)", is_positive
    )


def check_batch(model, batch, loss_fn) -> tuple:
    """``(*inputs, targets)``, checked against what ``model`` takes: the inputs as a call of the
    model checks them, the targets as ids of its vocabulary (or ``loss_fn.ignore_index``) of the
    inputs' shape. The step's own calls of the model and the loss then check nothing again."""
    n_inputs = 2 if is_a(model, "Transformer") else 1
    form = "(src, tgt_in, tgt_out)" if n_inputs == 2 else "(ids, next_ids)"
    if not isinstance(batch, tuple | list):
        shape = f" of shape {tuple(batch.shape)}" if isinstance(batch, np.ndarray) else ""
        raise TypeError(
            f"batch must be a tuple (*inputs, targets), {form} for a {type(model).__name__}, "
            f"got {type(batch).__name__}{shape}"
        )
    if len(batch) != n_inputs + 1:
        raise ValueError(
            f"batch for a {type(model).__name__} must have {n_inputs + 1} elements {form}, "
            f"got {len(batch)}"
        )
    *inputs, targets = batch
    inputs = type(model).check_call(model, *inputs).args
    cfg = model.config
    vocab = cfg.tgt_vocab_size if n_inputs == 2 else cfg.vocab_size
    name = "tgt_out" if n_inputs == 2 else "next_ids"
    return (*inputs, check_targets(targets, name, inputs[-1].shape, vocab, loss_fn))


def check_targets(targets, name: str, shape: tuple, vocab: int, loss_fn) -> np.ndarray:
    """The targets of a batch: integer ids in [0, vocab) (or the loss's ``ignore_index``), of the
    inputs' ``shape``."""
    targets = as_typed_array(targets, name, "iu", "an array of integer token ids")
    if targets.shape != shape:
        raise ValueError(
            f"{name} must have the shape of the inputs {shape_str(shape)} (one target per "
            f"position), got {shape_str(targets.shape)}"
        )
    ignore = getattr(loss_fn, "ignore_index", None)
    valid = targets if ignore is None else targets[targets != ignore]
    if valid.size and (valid.min() < 0 or valid.max() >= vocab):
        bad = valid[(valid < 0) | (valid >= vocab)]
        raise ValueError(
            f"{name} must be class ids in [0, {vocab}) (or ignore_index={ignore}), "
            f"got {bad.ravel()[:5].tolist()}"
        )
    return targets


def check_loss_value(loss, loss_fn) -> float:
    """What ``loss_fn`` returned, as a float: TypeError unless a number, NotFiniteError unless
    finite (a loss of the user's own may return NaN)."""
    number = real_scalar(loss)
    if number is None:
        raise TypeError(
            f"loss_fn must return the loss as a number, got {type(loss).__name__} "
            f"(from {type_description(loss_fn)})"
        )
    if not math.isfinite(number):
        raise NotFiniteError(f"the loss is {number}")
    return number


def check_grad_norm(norm: float, loss: float) -> None:
    """The global norm of the gradients, else NotFiniteError (a gradient overflowed)."""
    if not math.isfinite(norm):
        raise NotFiniteError(f"the gradient norm is {norm} (loss {loss:.4g})")


def check_train_step(model, batch, optimizer, loss_fn, clip_norm) -> dict:
    check_model(model)
    loss_fn = check_loss_fn(loss_fn)
    clip_norm = check_clip_norm(clip_norm)
    check_optimizer(model, optimizer)
    return {
        "model": model,
        "batch": check_batch(model, batch, loss_fn),
        "optimizer": optimizer,
        "loss_fn": loss_fn,
        "clip_norm": clip_norm,
    }


def check_optional_callable(value, name: str, signature: str) -> None:
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} must be a callable {signature} or None, got {type(value).__name__}"
        )


def check_stream(stream):
    """``stream``, or ``sys.stderr`` for None."""
    if stream is None:
        return sys.stderr
    if not callable(getattr(stream, "write", None)):
        raise TypeError(
            "stream must be a text stream with a write() method, such as sys.stderr or "
            f"io.StringIO(), or None (sys.stderr), got {type(stream).__name__}"
        )
    return stream


def check_checkpoint(checkpoint, overwrite: bool):
    """A checkpoint path that can be written at the end of training (checked now, not then)."""
    if checkpoint is not None and not hasattr(checkpoint, "write"):
        check_save_path(checkpoint, overwrite, "checkpoint", "overwrite_checkpoint=True")
    return checkpoint


def check_metrics(metrics) -> None:
    """What ``eval_fn`` returned: a dict of metrics."""
    if not isinstance(metrics, Mapping):
        raise TypeError(
            "eval_fn must return a dict of metrics (name -> value), "
            f"got {type(metrics).__name__} {metrics!r:.60}"
        )


def batch_getter(batches, steps: int, model, loss_fn):
    """``batches`` as a function ``step -> batch`` (an iterable is read one batch per step),
    each batch checked against ``model``."""
    if callable(batches):
        batches = user_code(batches)
        return lambda step: check_batch(model, batches(step), loss_fn)
    try:
        iterator = iter(batches)
    except TypeError as exc:
        raise TypeError(
            "batches must be a callable batches(step) -> batch or an iterable of batches, "
            f"got {type(batches).__name__}"
        ) from exc

    @user_code
    def next_batch(step):
        try:
            return check_batch(model, next(iterator), loss_fn)
        except StopIteration:
            raise ValueError(
                f"batches ran out after {step - 1} batch(es), but steps={steps} asks for "
                f"{steps}: pass at least {steps} batches, a callable batches(step), or a "
                f"smaller steps (the model keeps the parameters of step {step - 1}; nothing "
                "was saved)"
            ) from None

    return next_batch


def check_fit(model, batches, steps, optimizer, loss_fn, clip_norm, eval_fn, eval_every, callback,
              time_limit, checkpoint, overwrite_checkpoint, progress, stream, desc,
              single_blas_thread) -> dict:  # fmt: skip
    """Every argument of ``fit``, checked once before the first step (the checkpoint path too:
    a path that cannot be written fails now, not after the training)."""
    check_model(model)
    steps = check_positive_int(steps, "steps")
    if time_limit is not None:
        time_limit = check_positive_float(time_limit, "time_limit")
    loss_fn = check_loss_fn(loss_fn)
    clip_norm = check_clip_norm(clip_norm)
    check_optimizer(model, optimizer, need_current_lr=True)
    check_optional_callable(eval_fn, "eval_fn", "eval_fn(model) -> dict")
    check_optional_callable(callback, "callback", "callback(step, history) -> bool")
    eval_every = check_integer(
        eval_every, "eval_every", 0, "an integer >= 0 (0: evaluate only at the end)"
    )
    overwrite_checkpoint = check_bool(overwrite_checkpoint, "overwrite_checkpoint")
    checkpoint = check_checkpoint(checkpoint, overwrite_checkpoint)
    progress = check_bool(progress, "progress")
    stream = check_stream(stream)
    single_blas_thread = check_bool(single_blas_thread, "single_blas_thread")
    batches = batch_getter(batches, steps, model, loss_fn)
    return {
        "model": model,
        "batches": batches,
        "steps": steps,
        "optimizer": optimizer,
        "loss_fn": loss_fn,
        "clip_norm": clip_norm,
        "eval_fn": user_code(eval_fn),
        "eval_every": eval_every,
        "callback": user_code(callback),
        "time_limit": time_limit,
        "checkpoint": checkpoint,
        "overwrite_checkpoint": overwrite_checkpoint,
        "progress": progress,
        "stream": stream,
        "desc": desc,
        "single_blas_thread": single_blas_thread,
    }
