"""The validators of learning: Adam, the schedule, the loss, clipping, train_step and fit.

One validator per public entry point, run once when the user calls it: ``check_<function>``
receives the function's arguments by name and returns them checked (the :func:`.boundary.checked`
decorator); the methods of Adam, NoamSchedule and CrossEntropyLoss call theirs on their first
line. A wrong type is a TypeError, a wrong value a ValueError, and a value that should be finite
and is not a :class:`.boundary.NotFiniteError`; each message names the argument, says what was
expected and shows what was received.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping

import numpy as np

from .boundary import NotFiniteError
from .general import (
    all_finite,
    as_typed_array,
    check_bool,
    check_finite,
    check_positive_float,
    check_positive_int,
    first_index,
    grad_arrays,
    real_scalar,
    shape_str,
    type_name,
)

# -- the checkers of numbers --------------------------------------------------------------------


def check_real(value, name: str, expected: str, ok) -> float:
    """``value`` as a float: TypeError unless a real number, ValueError unless ``ok(value)``.

    ``expected`` completes the message "<name> must be <expected>, got <value> (<type>)"; a
    string such as ``"0.1"``, a bool or None is not a number. 0-d arrays are numbers.
    """
    number = real_scalar(value)
    message = f"{name} must be {expected}, got {value!r} ({type_name(value)})"
    if number is None:
        raise TypeError(message)
    if not ok(number):  # NaN fails every comparison
        raise ValueError(message)
    return number


def is_positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


def check_positive(value, name: str, hint: str = "") -> float:
    """``value`` as a float if it is a finite number > 0; ``hint`` follows "a positive number"."""
    return check_real(value, name, f"a positive finite number{hint}", is_positive)


def check_integer(value, name: str, low: int, expected: str) -> int:
    """``value`` as an int >= ``low`` (NumPy integers and 0-d integer arrays too, not bool)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    message = f"{name} must be {expected}, got {value!r} ({type_name(value)})"
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(message)
    if value < low:
        raise ValueError(message)
    return int(value)


def check_step(step) -> int:
    """An optimiser step: an integer >= 1."""
    return check_integer(step, "step", 1, "a positive integer (optimiser steps are counted from 1)")


def type_description(value) -> str:
    """``the function cross_entropy`` for a named callable, else the type name (for messages)."""
    if callable(value) and hasattr(value, "__name__"):
        return f"the {type(value).__name__} {value.__name__}"
    return type(value).__name__


# -- Adam ---------------------------------------------------------------------------------------

LR_HINT = " (or a schedule step -> lr)"


def check_adam_init(params, lr, betas, eps, weight_decay) -> None:
    if not isinstance(params, Mapping) or not params:
        raise TypeError(f"params must be a non-empty dict name -> ndarray, got {type(params)}")
    for name, p in params.items():
        if not isinstance(p, np.ndarray) or not np.issubdtype(p.dtype, np.floating):
            raise TypeError(f"parameter {name!r} must be a floating-point ndarray")
    if not callable(lr):
        check_positive(lr, "lr", LR_HINT)
    check_betas(betas)
    check_positive(eps, "eps")
    check_real(
        weight_decay,
        "weight_decay",
        "a finite number >= 0 (0 turns it off)",
        lambda x: math.isfinite(x) and x >= 0,
    )


def check_betas(betas) -> None:
    pair = "betas must be a pair (beta1, beta2) of numbers in [0, 1)"
    if isinstance(betas, str) or not hasattr(betas, "__len__") or not hasattr(betas, "__getitem__"):
        raise TypeError(f"{pair}, got {betas!r} ({type_name(betas)})")
    if len(betas) != 2:
        raise ValueError(f"{pair}, got {betas!r} (of length {len(betas)})")
    for i, b in enumerate(betas):
        check_real(b, f"betas[{i}]", "a number in [0, 1)", lambda x: 0.0 <= x < 1.0)


def lr_at_step(lr, step: int) -> float:
    """The learning rate ``lr`` (a number, or a schedule ``step -> lr``) at ``step``, checked."""
    if callable(lr):
        return check_positive(lr(step), "lr", f" (returned by the schedule {lr!r} at step {step})")
    return check_positive(lr, "lr", LR_HINT)


def check_current_lr(optimizer, step) -> int:
    """The step of ``Adam.current_lr``: the given one, or the next (``t + 1``)."""
    return optimizer.t + 1 if step is None else check_step(step)


def check_adam_step(optimizer, grads, lr) -> tuple[np.ndarray, float]:
    """``(g, lr)``: the gradients as one flat vector in the optimiser's dtype (a new array), and
    the learning rate of this step.

    Keys, exact shapes, real dtypes and finiteness are all checked here, before the optimiser or
    any parameter is touched: a NaN or inf is a FloatingPointError that names the gradient.
    """
    names = optimizer._names
    if not isinstance(grads, Mapping):
        raise TypeError(
            f"grads must be a dict name -> ndarray with the keys of params, got {type_name(grads)}"
        )
    if set(grads) != set(names):
        missing = sorted(set(names) - set(grads))
        extra = sorted(set(grads) - set(names))
        raise ValueError(f"grads must have the keys of params; missing {missing}, extra {extra}")
    arrays = grad_arrays(grads)
    for k, p in zip(names, optimizer._arrays, strict=True):
        if arrays[k].shape != p.shape:
            raise ValueError(
                f"grads[{k!r}] must have the shape of params[{k!r}], {shape_str(p.shape)}, "
                f"got {shape_str(arrays[k].shape)}"
            )
    with np.errstate(over="ignore"):  # an overflow is reported just below
        g = np.concatenate([arrays[k].reshape(-1) for k in names], dtype=optimizer.dtype)
    if not all_finite(g):
        first = int(np.flatnonzero(~np.isfinite(g))[0])
        k = names[int(np.searchsorted(optimizer._offsets, first, side="right")) - 1]
        try:
            check_finite(arrays[k], f"grads[{k!r}]")
            reason = (
                f"grads[{k!r}] overflows {optimizer.dtype} (values beyond its range); "
                "expected finite values"
            )
        except ValueError as exc:
            reason = str(exc)
        raise FloatingPointError(
            f"{reason}: the step is refused and neither the parameters nor the optimiser state "
            "were changed"
        )
    return g, lr_at_step(optimizer.lr if lr is None else lr, optimizer.t + 1)


def check_adam_state(optimizer, state) -> tuple[np.ndarray, np.ndarray, int]:
    """``(m, v, t)`` of a state for ``Adam.load_state_dict``: new arrays in the optimiser's dtype.

    Everything is checked before anything is copied: on an error the optimiser stays as it was.
    """
    if not isinstance(state, Mapping):
        raise TypeError(
            "state must be a dict with keys 'm', 'v' and 't' (what state_dict() returns), "
            f"got {type_name(state)}"
        )
    missing = sorted({"m", "v", "t"} - set(state))
    extra = sorted(set(state) - {"m", "v", "t"}, key=str)
    if missing or extra:
        raise ValueError(
            "state must have exactly the keys ['m', 't', 'v'] of state_dict(); "
            f"missing {missing}, unexpected {extra}"
        )
    n = optimizer.m.size
    moments = []
    for key in ("m", "v"):
        what = f"state[{key!r}]"
        arr = as_typed_array(state[key], what, "fiu", "an array of real numbers")
        if arr.shape != (n,):
            raise ValueError(
                f"{what} must have shape ({n},) (one value per scalar parameter, "
                f"{len(optimizer._names)} parameters), got {shape_str(arr.shape)}: the state "
                "belongs to an optimiser of other parameters"
            )
        with np.errstate(over="ignore"):
            arr = arr.astype(optimizer.dtype)  # a copy: nothing is shared with the caller
        check_finite(arr, what)
        moments.append(arr)
    if (moments[1] < 0).any():
        raise ValueError("state['v'] must be >= 0 (it is a mean of squared gradients)")
    t = check_integer(state["t"], "state['t']", 0, "an integer >= 0 (the number of steps taken)")
    return moments[0], moments[1], t


def check_optimizer(model, optimizer, *, need_current_lr=False) -> None:
    """The optimiser must update this model's own parameter arrays (compared by identity).

    An optimiser built on another model, or on copies of the arrays, would train arrays that
    nobody reads.
    """
    from ..optim import Adam  # (imported here: optim.py imports this module)

    methods = ("step", "current_lr") if need_current_lr else ("step",)
    if not all(callable(getattr(optimizer, m, None)) for m in methods):
        raise TypeError(
            "optimizer must be an optimiser built on the model's parameters, such as "
            f"Adam(model.params), got {type(optimizer).__name__}"
        )
    if not isinstance(optimizer, Adam):
        return
    params, names = model.params, optimizer._names
    if set(params) != set(names):
        missing = sorted(set(params) - set(names))
        extra = sorted(set(names) - set(params))
        problem = (
            f"the optimiser holds other parameter names (the model's {missing[:3]} are "
            f"missing, {extra[:3]} are not the model's)"
        )
    else:
        pairs = zip(names, optimizer._arrays, strict=True)
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


# -- the schedule -------------------------------------------------------------------------------


def check_noam_schedule(d_model, warmup_steps, factor) -> dict:
    return {
        "d_model": check_positive(d_model, "d_model"),
        "warmup_steps": check_positive(warmup_steps, "warmup_steps"),
        "factor": check_positive(factor, "factor"),
    }


def check_noam_lr(step, d_model, warmup_steps, factor) -> dict:
    return {"step": check_step(step), **check_noam_schedule(d_model, warmup_steps, factor)}


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
    ignore_index = check_ignore_index(ignore_index)
    label_smoothing = check_label_smoothing(label_smoothing)
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(f"logits must be a floating-point array, got dtype {logits.dtype}")
    if not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"targets must be an integer array of class ids, got dtype {targets.dtype}")
    if logits.ndim < 1 or logits.shape[:-1] != targets.shape:
        raise ValueError(
            "logits must have shape targets.shape + (V,), "
            f"got logits {logits.shape} and targets {targets.shape}"
        )
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
    if loss._grad is None:
        raise RuntimeError("CrossEntropyLoss.backward called before forward")
    return g


# -- clipping -----------------------------------------------------------------------------------


def check_global_norm(grads) -> dict:
    return {"grads": grad_arrays(grads)}


def check_clip_grad_norm(grads, max_norm) -> dict:
    max_norm = check_positive(max_norm, "max_norm")
    return {"grads": grad_arrays(grads, in_place=True), "max_norm": max_norm}


# -- train_step and fit -------------------------------------------------------------------------


def check_model(model) -> None:
    from ..model import LanguageModel, Transformer  # (imported here: no cycle at import time)

    if not isinstance(model, Transformer | LanguageModel):
        raise TypeError(
            f"model must be a Transformer or a LanguageModel, got {type(model).__name__}"
        )


def check_loss_fn(loss_fn):
    """``loss_fn`` itself, or the default cross-entropy for None."""
    from ..losses import CrossEntropyLoss  # (imported here: losses.py imports this module)

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


def check_clip_norm(clip_norm) -> float | None:
    """``clip_norm`` as a float, or None (no clipping)."""
    if clip_norm is None:
        return None
    return check_real(
        clip_norm, "clip_norm", "a positive finite number or None (no clipping)", is_positive
    )


def check_batch(model, batch) -> tuple:
    """``(*inputs, targets)``, checked against what ``model`` takes."""
    from ..model import Transformer

    n_inputs = 2 if isinstance(model, Transformer) else 1
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
    return tuple(batch)


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
        "batch": check_batch(model, batch),
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
    from ..checkpoints import checkpoint_path

    if checkpoint is not None and not hasattr(checkpoint, "write"):
        checkpoint_path(
            checkpoint,
            overwrite,
            argument="checkpoint",
            overwrite_option="overwrite_checkpoint=True",
        )
    return checkpoint


def check_metrics(metrics) -> None:
    """What ``eval_fn`` returned: a dict of metrics."""
    if not isinstance(metrics, Mapping):
        raise TypeError(
            "eval_fn must return a dict of metrics (name -> value), "
            f"got {type(metrics).__name__} {metrics!r:.60}"
        )


def batch_getter(batches, steps: int, model):
    """``batches`` as a function ``step -> batch`` (an iterable is read one batch per step),
    each batch checked against ``model``."""
    if callable(batches):
        return lambda step: check_batch(model, batches(step))
    try:
        iterator = iter(batches)
    except TypeError as exc:
        raise TypeError(
            "batches must be a callable batches(step) -> batch or an iterable of batches, "
            f"got {type(batches).__name__}"
        ) from exc

    def next_batch(step):
        try:
            return check_batch(model, next(iterator))
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
    batches = batch_getter(batches, steps, model)
    return {
        "model": model,
        "batches": batches,
        "steps": steps,
        "optimizer": optimizer,
        "loss_fn": loss_fn,
        "clip_norm": clip_norm,
        "eval_fn": eval_fn,
        "eval_every": eval_every,
        "callback": callback,
        "time_limit": time_limit,
        "checkpoint": checkpoint,
        "overwrite_checkpoint": overwrite_checkpoint,
        "progress": progress,
        "stream": stream,
        "desc": desc,
        "single_blas_thread": single_blas_thread,
    }
