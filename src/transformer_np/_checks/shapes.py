"""The shapes and dtypes that a signature declares, checked when a user calls the function.

A public function declares its arrays in its signature with jaxtyping's annotations,
``q: Float[np.ndarray, "*#B Tq Dk"]``: a float array whose axes are named, the same name the
same length across the arguments (``*B``: any number of leading axes, ``#``: they may
broadcast). One line documents the argument and checks it: :func:`check_declared` converts each
declared argument to an array and tests it against its annotation, in order, within one
jaxtyping context (so the lengths of the names must agree), and names the first that does not
fit: the argument, what it must be, what the arguments before it fixed, and what it received.
A wrong dtype is a TypeError, a wrong shape a ValueError. A list or tuple with no numbers in it
(``[]``) has no dtype of its own (NumPy makes it float64): it takes the declared one, so that an
empty list of lengths is said to be empty, not to hold floats.
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
            if array is not None and array.size == 0 and array is not value:
                array = empty_as_declared(array, hint)
            if array is None or not isinstance(array, hint):
                raise mismatch(where, name, hint, value, array, seen, shares_names(declared))
            arguments[name] = array
            seen.append((name, array))


def empty_as_declared(array: np.ndarray, hint) -> np.ndarray:
    """An empty array made from a list or tuple, in the declared dtype if NumPy's float64 is not
    one (an integer or a bool array: int64, bool)."""
    if isinstance(array, hint) or array.dtype != np.float64:
        return array
    for dtype in ("int64", "bool"):
        if dtype in hint.dtypes:
            return array.astype(dtype)
    return array


def shares_names(declared) -> bool:
    """Whether more than one of the declared arrays names its axes (a name can then be shared)."""
    return sum(h.dim_str.split() not in ([], ["..."]) for _, h, _ in declared) > 1


def mismatch(where, name, hint, value, array, seen, several: bool) -> Exception:
    """The error of an argument that does not fit its annotation (``several``: one of several
    declared arrays that name their axes)."""
    kind = hint.__name__.split("[", 1)[0].lower()  # Float -> "float", Integer -> "integer"
    article = "an" if kind[0] in "aeiou" else "a"
    axes = hint.dim_str.split()
    dims = ", ".join(d.replace("#", "") for d in axes)
    if len(axes) == 1 and axes != ["..."]:
        dims += ","  # (D,), as Python writes a shape of one axis
    expected = f"{name} must be {article} {kind} array of shape ({dims})"
    if seen:
        expected += " that fits " + ", ".join(f"{n} {shape_str(a.shape)}" for n, a in seen)
    expected += legend(axes, several)
    if array is None:
        return TypeError(f"{where}: {expected}, got {type(value).__name__}")
    got = f"{array.dtype} of shape {shape_str(array.shape)}"
    error = ValueError if array.dtype.name in hint.dtypes else TypeError
    return error(f"{where}: {expected}, got {got}")


def legend(axes: list[str], several: bool) -> str:
    """What the names of a declared shape mean, in brackets: that a name is one length in every
    argument (when there are several, and the shape has names), what ``*B`` is."""
    parts = []
    if several and any(d != "..." for d in axes):
        parts.append("a name is one length in every argument")
    for d in axes:
        if d.startswith("*"):
            parts.append(f"*{d.lstrip('*#')}: any leading axes")
            if "#" in d:
                parts[-1] += ", broadcast together"
    return f" ({'; '.join(parts)})" if parts else ""
