"""Shared input checks.

Every public function and layer of the package validates its inputs with these helpers, so
that bad input gives a ``ValueError`` or ``TypeError`` that names the argument, says what was
expected and shows what was received, instead of an obscure NumPy traceback or a silent NaN.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from .calls import incoming_gradient

__all__ = [
    "type_description",
    "is_positive",
    "check_step",
    "check_real",
    "check_positive",
    "check_integer",
    "as_float_array",
    "all_finite",
    "as_typed_array",
    "check_axis",
    "check_bool",
    "check_broadcastable",
    "check_dtype",
    "check_finite",
    "check_last_dim",
    "check_ndim",
    "check_normalised",
    "check_positive_float",
    "check_positive_int",
    "check_rng",
    "check_softmax_input",
    "first_index",
    "grad_arrays",
    "real_scalar",
    "shape_str",
    "type_name",
]


def shape_str(shape) -> str:
    """Format a shape as Python does, ``(2, 5, 8)`` or ``(8,)``, also for NumPy integers."""
    return str(tuple(int(s) for s in shape))


def check_bool(value, name: str) -> bool:
    """Return ``value`` as a bool if it is ``True`` or ``False`` (NumPy's too), else raise."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_axis(axis, ndim: int) -> int:
    """``axis`` as an int in ``[-ndim, ndim)``, else TypeError or ValueError."""
    if isinstance(axis, bool | np.bool_) or not isinstance(axis, int | np.integer):
        raise TypeError(f"axis must be an int, got {axis!r} ({type(axis).__name__})")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of rank {ndim}")
    return int(axis)


def check_positive_int(value, name: str) -> int:
    """Return ``value`` as a Python int if it is an integer > 0, else raise.

    ``bool`` is rejected (``True`` is not a size), NumPy integers are accepted.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a positive integer, got {value!r} ({type(value).__name__})"
        )
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return int(value)


def check_positive_float(value, name: str) -> float:
    """Return ``value`` as a Python float if it is a finite real number > 0, else raise."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value}")
    return value


def check_dtype(dtype, name: str = "dtype") -> np.dtype:
    """Return ``np.dtype(dtype)`` if it is float32 or float64 (the parameter dtypes), else raise."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be np.float32 or np.float64, got {dtype!r}") from exc
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must be np.float32 or np.float64, got {dt}")
    return dt


def check_rng(rng) -> np.random.Generator:
    """Return a Generator: ``rng`` itself, a fresh one for None, or one seeded by an int >= 0."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool | np.bool_):
        if rng < 0:
            raise ValueError(f"rng must be a np.random.Generator, a seed >= 0 or None, got {rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng must be a np.random.Generator, an int seed or None, got {type(rng).__name__}"
    )


def as_float_array(x, name: str) -> np.ndarray:
    """Return ``x`` as a floating-point ndarray (no copy if it already is one), else TypeError.

    Integer, boolean, complex and non-numeric inputs are rejected: the maths of the package is
    defined on real floating-point values, and a silent cast would hide a bug in the caller.
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a floating-point array, got {type(x).__name__}") from exc
    if arr.dtype.kind != "f":
        hint = " (convert it with .astype(np.float32) or np.float64)"
        raise TypeError(
            f"{name} must be a floating-point array (float16, float32 or float64), "
            f"got dtype {arr.dtype}" + (hint if arr.dtype.kind in "iub" else "")
        )
    return arr


def as_typed_array(x, name: str, kinds: str, expected: str) -> np.ndarray:
    """``x`` as an ndarray whose dtype kind is in ``kinds`` (e.g. ``"iu"``), else TypeError.

    ``expected`` completes the message "<name> must be <expected>, got ...".
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be {expected}, got {type(x).__name__}") from exc
    if arr.dtype.kind not in kinds:
        raise TypeError(f"{name} must be {expected}, got dtype {arr.dtype}")
    return arr


class NotFiniteError(ValueError):
    """NaN or inf where finite numbers are needed: in an input, a parameter, or a result."""


BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def check_finite(x: np.ndarray, name: str, *, allow_neg_inf: bool = False) -> None:
    """Raise ValueError if ``x`` holds NaN or +-inf (or only NaN/+inf when ``allow_neg_inf``).

    The fast path is a single sum: a finite sum proves that no NaN or inf is present (NaN and
    inf propagate through addition). Only when the sum is not finite (a bad value, or an
    overflow of large finite values) is the element-wise check run. For a contiguous float32 or
    float64 array the sum is the sum of squares, one BLAS dot product (several times faster).
    """
    if x.size == 0:
        return
    if not allow_neg_inf:
        with np.errstate(over="ignore", invalid="ignore"):
            if x.dtype in BLAS_FLOATS and x.flags.c_contiguous:
                flat = x.reshape(-1)
                total = np.dot(flat, flat)
            else:
                total = np.add.reduce(x, axis=None)
        if np.isfinite(total):
            return
        bad = ~np.isfinite(x)
        if not bad.any():
            return
        what = "NaN" if np.isnan(x).any() else "inf"
    else:
        bad = np.isnan(x) | np.isposinf(x)
        if not bad.any():
            return
        what = "NaN" if np.isnan(x).any() else "+inf"
    first = first_index(bad)
    raise NotFiniteError(
        f"{name} contains {what} ({int(bad.sum())} of {x.size} values, first at index {first}); "
        "expected finite values" + (" (-inf is allowed)" if allow_neg_inf else "")
    )


def all_finite(x: np.ndarray) -> bool:
    """Whether ``x`` holds no NaN or inf, in one pass without a temporary array when it does.

    A finite sum proves every value finite (NaN and inf propagate through addition); only a
    sum that is not finite (a bad value, or large finite values that overflow) needs the
    element-wise check.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(x, axis=None)):
            return True
    return bool(np.isfinite(x).all())


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    """The index of the first True of a boolean array (which has one), as a tuple of ints."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_ndim(x: np.ndarray, name: str, ndims, meaning: str) -> None:
    """Raise ValueError unless ``x.ndim`` is in ``ndims``; ``meaning`` describes the shapes."""
    if x.ndim not in ndims:
        raise ValueError(
            f"{name} must be {meaning}, "
            f"got an array of rank {x.ndim} with shape {shape_str(x.shape)}"
        )


def check_last_dim(x: np.ndarray, name: str, expected: int, what: str) -> None:
    """Raise ValueError unless the last axis of ``x`` has length ``expected``."""
    if x.shape[-1] != expected:
        raise ValueError(
            f"{name} must have last dimension {what} = {expected}, "
            f"got shape {shape_str(x.shape)} (last dimension {x.shape[-1]})"
        )


def check_broadcastable(shape, target, name: str, target_desc: str) -> None:
    """Raise ValueError unless an array of ``shape`` broadcasts to exactly ``target``."""
    try:
        ok = np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {shape_str(shape)} does not broadcast to {target_desc} "
            f"{shape_str(target)}"
        )


def type_name(value) -> str:
    """The type's name of ``value``, for messages."""
    return type(value).__name__


def real_scalar(value):
    """``value`` as a Python float if it is a real number (0-d real arrays too), else None.

    ``bool`` and strings are not numbers here: ``lr="0.1"`` or ``eps=True`` are caller bugs.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "fiu":
        return float(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def check_softmax_input(x, axis, what: str) -> tuple[np.ndarray, int]:
    """``(x, axis)`` checked for ``what`` (a softmax or a log-softmax) along ``axis``.

    ``x``, a float array (its annotation checked the dtype), must have at least one value along
    ``axis``, without NaN or +inf (-inf is a masked entry: its weight is 0).
    """
    if x.ndim == 0:
        raise ValueError("x must have at least one axis, got a 0-d array")
    axis = check_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(
            f"x has no values along axis {axis} (shape {shape_str(x.shape)}): {what} needs "
            "at least one"
        )
    check_finite(x, "x", allow_neg_inf=True)
    return x, axis


def check_normalised(rstd: np.ndarray, x: np.ndarray, name: str) -> None:
    """Raise NotFiniteError (a ValueError; in training, a TrainingDiverged) if a row of finite
    ``x`` was too large for its dtype's layer norm.

    ``rstd`` is the ``1 / sqrt(var + eps)`` of ``functional.layer_norm``, one value per
    row: an overflow of the mean or the variance makes it NaN or 0 (and the output wrong: a row
    of zeros or NaN), so checking these few values is enough.
    """
    if rstd.size and not (rstd.min() > 0 and rstd.max() < np.inf):  # False for a NaN, too
        raise NotFiniteError(
            f"{name} is too large to normalise in {rstd.dtype} (the mean or variance of a row "
            f"overflows; largest |{name}| = {float(np.max(np.abs(x))):.3g}); scale it down or "
            "use float64"
        )


def grad_arrays(grads, name="grads", *, in_place=False):
    """Check a dict of gradients and return it as ``{key: ndarray}`` (no copy of ndarrays).

    Every value must be a real numeric array. With ``in_place`` (the arrays will be modified)
    each must already be a floating-point ndarray: a list or an integer array cannot be scaled
    in place. Nothing is modified here.
    """
    if not isinstance(grads, Mapping):
        raise TypeError(
            f"{name} must be a dict name -> ndarray (as model.grads), got {type_name(grads)}"
        )
    arrays = {}
    for key, g in grads.items():
        if type(g) is np.ndarray and g.dtype.kind in ("f" if in_place else "fiu"):
            arrays[key] = g  # (the common case, without a call)
            continue
        what = f"{name}[{key!r}]"
        if in_place:
            if not isinstance(g, np.ndarray) or g.dtype.kind != "f":
                got = f"dtype {g.dtype}" if isinstance(g, np.ndarray) else type_name(g)
                raise TypeError(
                    f"{what} must be a floating-point ndarray (it is scaled in place), got {got}"
                )
        else:
            g = as_typed_array(g, what, "fiu", "an array of real numbers")
        arrays[key] = g
    return arrays


def is_a(obj, *names: str) -> bool:
    """Whether ``obj`` is an instance of a class named one of ``names``, or of a subclass of one.

    The checks test the package's own classes by name: they import none of them, and the
    package's modules can import the checks.
    """
    return any(c.__name__ in names for c in type(obj).__mro__)


def as_grad(grad_output, shape, dtype, name: str = "grad_output") -> np.ndarray:
    """``grad_output`` as a finite float array of the last output's ``shape``, in ``dtype``.

    A NaN gradient would silently become NaN in every gradient below it. Checked once, when a
    user's ``backward`` reads it: the gradients the layers pass each other are taken as they are.
    """
    if not incoming_gradient():
        return grad_output
    g = np.asarray(grad_output)
    if g.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {g.dtype}")
    if tuple(g.shape) != tuple(shape):
        raise ValueError(
            f"{name} must have the shape of the last output {shape_str(shape)}, "
            f"got {shape_str(g.shape)}"
        )
    check_finite(g, name)
    return g.astype(dtype, copy=False)


# -- numbers ----------------------------------------------------------------------------------


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
