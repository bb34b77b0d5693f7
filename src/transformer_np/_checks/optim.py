"""The validators of the optimiser, its schedule and gradient clipping.

One validator per public entry point (``check_<function>``, run by the
:func:`.boundary.checked` decorator, or on the first line of a method of Adam or
NoamSchedule). A wrong type is a TypeError, a wrong value a ValueError, a value that should be
finite and is not a :class:`.boundary.NotFiniteError`; each message names the argument, says
what was expected and shows what was received.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .calls import user_code
from .general import (
    all_finite,
    as_typed_array,
    check_finite,
    check_integer,
    check_positive,
    check_real,
    check_step,
    grad_arrays,
    shape_str,
    type_name,
)

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
        rate = user_code(lr)(step)
        return check_positive(rate, "lr", f" (returned by the schedule {lr!r} at step {step})")
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
    names = optimizer.names
    if not isinstance(grads, Mapping):
        raise TypeError(
            f"grads must be a dict name -> ndarray with the keys of params, got {type_name(grads)}"
        )
    if set(grads) != set(names):
        missing = sorted(set(names) - set(grads))
        extra = sorted(set(grads) - set(names))
        raise ValueError(f"grads must have the keys of params; missing {missing}, extra {extra}")
    arrays = grad_arrays(grads)
    for k, p in zip(names, optimizer.arrays, strict=True):
        if arrays[k].shape != p.shape:
            raise ValueError(
                f"grads[{k!r}] must have the shape of params[{k!r}], {shape_str(p.shape)}, "
                f"got {shape_str(arrays[k].shape)}"
            )
    with np.errstate(over="ignore"):  # an overflow is reported just below
        g = np.concatenate([arrays[k].reshape(-1) for k in names], dtype=optimizer.dtype)
    if not all_finite(g):
        first = int(np.flatnonzero(~np.isfinite(g))[0])
        k = names[int(np.searchsorted(optimizer.offsets, first, side="right")) - 1]
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
                f"{len(optimizer.names)} parameters), got {shape_str(arr.shape)}: the state "
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


# -- the schedule -------------------------------------------------------------------------------


def check_noam_schedule(d_model, warmup_steps, factor) -> dict:
    return {
        "d_model": check_positive(d_model, "d_model"),
        "warmup_steps": check_positive(warmup_steps, "warmup_steps"),
        "factor": check_positive(factor, "factor"),
    }


def check_noam_lr(step, d_model, warmup_steps, factor) -> dict:
    return {"step": check_step(step), **check_noam_schedule(d_model, warmup_steps, factor)}


# -- clipping -----------------------------------------------------------------------------------


def check_global_norm(grads) -> dict:
    return {"grads": grad_arrays(grads)}


def check_clip_grad_norm(grads, max_norm) -> dict:
    max_norm = check_positive(max_norm, "max_norm")
    return {"grads": grad_arrays(grads, in_place=True), "max_norm": max_norm}
