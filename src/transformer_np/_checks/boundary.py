"""How the checks are applied: once, at the call a user makes.

A public function is decorated with :func:`checked`; calling a layer, ``layer(x)``, runs
:func:`call_layer`; building one, ``Layer(...)``, runs its class's ``check_init`` first
(:func:`construct`); a layer's ``backward`` checks its incoming gradient (:func:`entry_backward`).
Each of them marks the call as the user's entry (:mod:`.calls`): its checks run, then the maths,
and whatever the maths calls in turn (other public functions, the layers it builds or runs, the
backward of the layers below) runs as it is, under its one name. Nothing is checked twice, and
no function has a second, unchecked name. What the user passed in to be called (a callback, a
schedule) runs as the user's code again (:func:`.calls.user_code`).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import numpy as np

from .calls import state
from .general import NotFiniteError, all_finite, check_finite, shape_str
from .shapes import check_declared, declared_arrays


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
    """``layer(*args, **kwargs)``: check the arguments, run ``forward``, blame a bad parameter.

    Called by the package's own maths (the model of a training step, say), the arguments are
    not checked again: ``forward`` runs, and a parameter made NaN meanwhile is still named.
    """
    check = type(layer).check_call
    if check is None:
        return layer.forward(*args, **kwargs)
    if state.inside:  # the arguments were checked; a bad parameter is still named
        return run_or_blame(layer, layer.forward, *args, **kwargs)
    state.inside = True
    try:
        prepared = check(layer, *args, **kwargs)
        result = run_or_blame(layer, layer.forward, *prepared.args, **prepared.kwargs)
    finally:
        state.inside = False
    return prepared.finish(result)


def construct(cls, args, kwargs, build):
    """``build(*args, **kwargs)``, the construction of a layer ``cls``: when a user builds it,
    its ``check_init`` runs first, and the sub-layers its ``__init__`` builds are not checked
    again."""
    if state.inside:
        return build(*args, **kwargs)
    state.inside = True
    try:
        check_construction(cls, args, kwargs)
        return build(*args, **kwargs)
    finally:
        state.inside = False


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


def entry_backward(backward):
    """A layer's ``backward``: the first one of a backward pass (called by a user, or by a
    training step) checks the gradient that enters the pass, the first gradient it reads
    (:func:`.calls.incoming_gradient`); the backward of the layers below run as they are."""

    @functools.wraps(backward)
    def entry(self, *args, **kwargs):
        if state.in_backward:
            return backward(self, *args, **kwargs)
        state.in_backward = state.gradient_to_check = True
        try:
            return backward(self, *args, **kwargs)
        finally:
            state.in_backward = state.gradient_to_check = False

    return entry


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


def checked(validator, *, every_call=False):
    """Decorate a public function: called by a user, ``validator`` checks its arguments first.

    The arrays the signature declares (jaxtyping annotations, :mod:`.shapes`) are checked
    first; then the validator takes the function's arguments by name (defaults filled in) and
    returns them checked, as a dict; the body then runs on them. Called by the package's own
    maths, the function runs as it is: what the user's call checked is not checked again. A
    function that writes a file checks at ``every_call``: what it saves is the state of the
    moment.
    """

    def decorate(function):
        signature = inspect.signature(function)
        parameters = list(signature.parameters.values())
        # the positional parameters in order, every name, and the defaults
        positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        names = frozenset(p.name for p in parameters)
        defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
        simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters)

        def arguments_of(args, kwargs) -> dict:
            if simple and len(args) <= len(positional):  # the common call, bound by hand
                arguments = dict(defaults)
                arguments.update(zip(positional, args, strict=False))
                if not kwargs or (
                    kwargs.keys() <= names and kwargs.keys().isdisjoint(positional[: len(args)])
                ):
                    arguments.update(kwargs)
                    if len(arguments) == len(names):  # nothing missing
                        return arguments
            bound = signature.bind(*args, **kwargs)  # (Python's own message for a bad call)
            bound.apply_defaults()
            return bound.arguments

        generator = inspect.isgeneratorfunction(function)

        @functools.wraps(function)
        def public(*args, **kwargs):
            if state.inside and not every_call:  # the package's own call
                return function(*args, **kwargs)
            outer, state.inside = state.inside, True
            try:
                arguments = arguments_of(args, kwargs)
                declared = declared_arrays(function)  # the arrays of the signature
                if declared:
                    check_declared(function.__name__, declared, arguments)
                result = function(**validator(**arguments))
            finally:
                state.inside = outer
            return steps_inside(result) if generator else result

        return public

    return decorate


def steps_inside(steps):
    """The items of the generator ``steps``, each computed as the package's own call (a user's
    generator function runs its body when iterated, after the call that checked it)."""
    while True:
        state.inside = True
        try:
            item = next(steps)
        except StopIteration as stop:
            return stop.value
        finally:
            state.inside = False
        yield item
