"""How the checks are applied: once, at the call a user makes.

A layer's constructor runs its class's ``check_init`` first (:func:`check_construction`),
and its ``__call__`` runs :func:`call_layer`: the class's ``check_call`` checks and prepares
the arguments, ``forward`` computes, and the result comes back in the input's dtype. Inside
the package, layers call each other's ``forward``, so nothing is checked twice. A public
function gets the same through the :func:`checked` decorator; its plain body stays reachable
as ``function.unchecked`` for the package's own callers.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import numpy as np

from .general import NotFiniteError, all_finite, check_finite, shape_str


@dataclass
class Prepared:
    """What a layer's validator gives back: the checked arguments and how to return the result.

    ``dtype`` is the dtype of the result (the input's: float16 in, float16 out, computed in
    float32); ``squeeze`` removes the batch axis that the validator added to 2-D input.
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    dtype: np.dtype | None = None
    squeeze: bool = False

    def finish(self, result):
        """The result of ``forward`` in ``dtype``, without the added batch axis."""
        if isinstance(result, tuple):
            return tuple(self._one(r) for r in result)
        return self._one(result)

    def _one(self, y):
        if not isinstance(y, np.ndarray):
            return y
        if self.squeeze:
            y = y[0]
        return y if self.dtype is None else y.astype(self.dtype, copy=False)


def to_compute(x: np.ndarray) -> np.ndarray:
    """``x`` in the dtype the computation runs in (float16 -> float32, others unchanged)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def call_layer(layer, *args, **kwargs):
    """``layer(*args, **kwargs)``: check the arguments, run ``forward``, blame a bad parameter."""
    check = type(layer).check_call
    if check is None:
        return layer.forward(*args, **kwargs)
    prepared = check(layer, *args, **kwargs)
    result = run_or_blame(layer, layer.forward, *prepared.args, **prepared.kwargs)
    return prepared.finish(result)


def check_construction(cls, args, kwargs) -> None:
    """Run ``cls.check_init`` on the arguments of ``cls(*args, **kwargs)``, by name."""
    check = cls.check_init
    if check is None:
        return
    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    except TypeError as exc:  # a missing or unexpected argument: Python's own message
        raise TypeError(f"{cls.__name__}(): {exc}") from None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(arguments)))  # self
    check(**arguments)


def run_or_blame(layer, compute, *args, **kwargs):
    """``compute(*args, **kwargs)``; if it fails or its output is not finite, name the culprit.

    Parameters are not checked before the computation (only the user changes them between
    calls): a NaN weight makes the output NaN and a wrong shape makes a product fail, and only
    then :func:`check_parameters` runs, to name the parameter. With sound parameters the error
    is the computation's own, or an overflow.
    """
    try:
        result = compute(*args, **kwargs)
    except (ValueError, IndexError):  # a product or a lookup on a misshapen parameter
        check_parameters(layer)
        raise
    y = result[0] if isinstance(result, tuple) else result
    if isinstance(y, np.ndarray) and not all_finite(y):
        check_parameters(layer)
        raise NotFiniteError(
            f"the {type(layer).__name__} output is not finite: it overflowed {y.dtype}"
        )
    return result


def check_parameters(layer) -> None:
    """Raise naming the first parameter of ``layer`` that is missing, misshapen or not finite."""
    where = f"{type(layer).__name__}.params"
    for name, leaf, key in leaf_parameters(layer):
        shape = leaf.expected_shapes()[key]
        if key not in leaf.params:
            raise KeyError(f"{where} is missing {name!r}")
        p = leaf.params[key]
        if not isinstance(p, np.ndarray) or p.shape != tuple(shape):
            got = shape_str(p.shape) if isinstance(p, np.ndarray) else repr(p)
            raise ValueError(
                f"{where}[{name!r}] must be an ndarray of shape {shape_str(shape)}, got {got}"
            )
        check_finite(p, f"{where}[{name!r}]")


def leaf_parameters(layer) -> list:
    """``(flat name, leaf layer, key)`` of every parameter that a leaf layer below expects."""
    children = layer.children()
    if not children:
        return [(key, layer, key) for key in layer.expected_shapes()]
    return [
        (layer.join_key(name, flat), leaf, key)
        for name, child in children.items()
        for flat, leaf, key in leaf_parameters(child)
    ]


def checked(validator):
    """Decorate a public function: ``validator`` checks its arguments before the body runs.

    The validator takes the function's arguments by name (defaults filled in) and returns them
    checked, as a dict; the body then runs on them. The plain body is ``function.unchecked``.
    """

    def decorate(function):
        signature = inspect.signature(function)
        parameters = list(signature.parameters.values())
        # the positional parameters in order, every name, and the defaults
        positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        names = frozenset(p.name for p in parameters)
        defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
        simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters)

        @functools.wraps(function)
        def public(*args, **kwargs):
            if simple and len(args) <= len(positional):  # the common call, bound by hand
                arguments = dict(defaults)
                arguments.update(zip(positional, args, strict=False))
                if not kwargs or (
                    kwargs.keys() <= names and kwargs.keys().isdisjoint(positional[: len(args)])
                ):
                    arguments.update(kwargs)
                    if len(arguments) == len(names):  # nothing missing
                        return function(**validator(**arguments))
            bound = signature.bind(*args, **kwargs)  # (Python's own message for a bad call)
            bound.apply_defaults()
            return function(**validator(**bound.arguments))

        public.unchecked = function
        return public

    return decorate
