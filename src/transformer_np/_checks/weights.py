"""The one check of weights loaded into a model: a checkpoint, a saved model, a GGUF file.

Every loader asks the same of each array: the name is one the model has, the values are real
numbers of the right shape, and they are still finite once converted to the model's dtype
(float64 weights of 1e300 would become inf in a float32 model). The errors name the parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from .general import all_finite, as_typed_array, first_index, shape_str, type_name


def names_str(names: list) -> str:
    """A list of names for a message: all of them, or the first five and how many in all."""
    return str(names) if len(names) <= 5 else f"{names[:5]} ... ({len(names)} in all)"


def check_weight_names(given, name: str, expected: Iterable[str], what: str, *, extra_ok=False):
    """Raise unless ``given`` (the argument ``name``) maps every name of ``expected`` (and,
    unless ``extra_ok``, no other) to an array; ``what`` says what they are ("parameter")."""
    if not isinstance(given, Mapping):
        raise TypeError(f"{name} must be a mapping of names to arrays, got {type_name(given)}")
    expected = list(expected)
    missing = [k for k in expected if k not in given]
    known = set(expected)
    extra = [] if extra_ok else [k for k in given if k not in known]
    if missing or extra:
        unexpected = f", unexpected {names_str(extra)}" if not extra_ok else ""
        raise ValueError(f"{what} names do not match: missing {names_str(missing)}{unexpected}")


def as_weight(value, name: str, shape, dtype, *, transpose=False) -> np.ndarray:
    """``value`` (transposed if asked) as a C-contiguous array of ``dtype`` and ``shape``.

    Raises a TypeError unless the values are real numbers, and a ValueError naming ``name`` for
    a wrong shape, a NaN or inf, or a value that does not fit in ``dtype``.
    """
    arr = as_typed_array(value, name, "fiu", "an array of real numbers")
    arr = arr.T if transpose else arr
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {shape_str(shape)}, got {shape_str(arr.shape)}")
    with np.errstate(over="ignore"):  # an overflow is reported below, naming the parameter
        weight = np.ascontiguousarray(arr, dtype=dtype)
    if not all_finite(weight):
        check_finite_weight(arr, weight, name)
    return weight


def check_finite_weight(value: np.ndarray, weight: np.ndarray, name: str) -> None:
    """The error for a ``weight`` (``value`` converted) that holds NaN or inf."""
    if all_finite(value):
        largest = float(np.max(np.abs(value)))
        raise ValueError(
            f"{name} does not fit in {weight.dtype}: its largest |value| {largest:.3g} is beyond "
            f"{weight.dtype}'s {float(np.finfo(weight.dtype).max):.3g} and would become inf; "
            "load it into a float64 model, or scale it down"
        )
    bad = ~np.isfinite(weight)
    raise ValueError(
        f"{name} contains NaN or inf ({int(bad.sum())} of {bad.size} values, first at index "
        f"{first_index(bad)}); expected finite values"
    )


def checked_weights(values, name: str, targets: Mapping[str, np.ndarray], what: str) -> dict:
    """Every array of ``values`` (the argument ``name``) checked against the array of the same
    name in ``targets`` (names, shapes, real numbers, finite in the target's dtype)."""
    check_weight_names(values, name, targets, what)
    return {
        k: as_weight(values[k], f"{what} {k!r}", target.shape, target.dtype)
        for k, target in targets.items()
    }
