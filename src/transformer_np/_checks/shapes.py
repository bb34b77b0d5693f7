"""The shapes and dtypes that a signature declares, checked when a user calls the function.

A public function declares its arrays in its signature with jaxtyping's annotations,
``q: Float[np.ndarray, "*#B Tq Dk"]``: a float array whose axes are named, the same name the
same length across the arguments (``*B``: any number of leading axes, ``#``: they may
broadcast). One line documents the argument and checks it: :func:`check_declared` converts each
declared argument to an array and tests it against its annotation, in order, within one
jaxtyping context (so the lengths of the names must agree), and names the first that does not
fit: the argument, what it must be, what the arguments before it fixed, and what it received.
A wrong dtype is a TypeError, a wrong shape a ValueError.
"""

from __future__ import annotations

import functools
import types
import typing

import numpy as np
from jaxtyping import AbstractArray, jaxtyped

from .general import shape_str


@functools.cache
def declared_arrays(function) -> tuple[tuple[str, type, bool], ...]:
    """``(name, annotation, optional)`` of the parameters of ``function`` annotated with a
    jaxtyping array type, in the signature's order (``X | None`` is an optional one)."""
    declared = []
    for name, hint in typing.get_type_hints(function).items():
        if name == "return":
            continue
        members = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        arrays = [m for m in members if isinstance(m, type) and issubclass(m, AbstractArray)]
        if arrays:
            declared.append((name, arrays[0], type(None) in members))
    return tuple(declared)


def check_declared(where: str, declared, arguments: dict) -> None:
    """Convert the declared arguments of ``arguments`` to arrays, in place, and check each
    against its annotation; raise naming the first that does not fit."""
    seen = []
    with jaxtyped("context"):
        for name, hint, optional in declared:
            value = arguments[name]
            if value is None and optional:
                continue
            try:
                array = value if isinstance(value, np.ndarray) else np.asarray(value)
            except (TypeError, ValueError):
                array = None
            if array is None or not isinstance(array, hint):
                raise mismatch(where, name, hint, value, array, seen)
            arguments[name] = array
            seen.append((name, array))


def mismatch(where, name, hint, value, array, seen) -> Exception:
    """The error of an argument that does not fit its annotation."""
    kind = hint.__name__.split("[", 1)[0].lower()  # Float -> "float"
    dims = ", ".join(d.replace("#", "") for d in hint.dim_str.split())
    expected = f"{name} must be a {kind} array of shape ({dims})"
    if seen:
        expected += " that fits " + ", ".join(f"{n} {shape_str(a.shape)}" for n, a in seen)
    legend = "a name is one length in every argument"
    if "*" in hint.dim_str:
        legend += "; *B: any leading axes, broadcast together"
    if array is None:
        return TypeError(f"{where}: {expected} ({legend}), got {type(value).__name__}")
    got = f"{array.dtype} of shape {shape_str(array.shape)}"
    error = ValueError if array.dtype.name in hint.dtypes else TypeError
    return error(f"{where}: {expected} ({legend}), got {got}")
