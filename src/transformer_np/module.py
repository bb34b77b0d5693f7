"""What every layer shares: parameters, gradients, the forward cache, sub-layers, train/eval.

A layer of the package is a :class:`Module`. It keeps

* ``params``: its parameters, a dict ``name -> ndarray`` (for a layer made of sub-layers, a
  live view of theirs with dotted names, ``"linear1.W"``: see :class:`NestedParams`);
* ``grads``: after ``backward``, the gradients, with the same keys as ``params``;
* ``cache``: what the last forward pass saved for the backward pass (None before it);
* ``training``: whether dropout is on (:meth:`Module.train`, :meth:`Module.eval`).

Calling a layer, ``layer(x)``, runs ``layer.forward(x)``, the plain computation. The input is
checked once, at the outermost call: when a user calls a model, the model checks the token ids
(:meth:`Module.checked_call`), and the blocks and layers it calls while it runs go straight to
their ``forward``, so nothing is checked twice.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, MutableMapping

import numpy as np

from ._validation import all_finite, check_finite, shape_str

__all__ = ["Module", "NestedParams", "as_grad", "checks_done", "running"]

_running = threading.local()  # _running.depth > 0 while a layer's call is running


class NestedParams(MutableMapping):
    """A live, flat view of the parameter dicts of sub-layers, with dotted keys.

    ``NestedParams({"linear1": lin1, "linear2": lin2})`` has the keys ``"linear1.W"``,
    ``"linear1.b"``, ... Reading ``view["linear1.W"]`` returns ``lin1.params["W"]`` itself (no
    copy); assigning ``view["linear1.W"] = w`` stores ``w`` in ``lin1.params``. Keys cannot be
    added or deleted. Sub-layers may themselves expose a NestedParams (keys nest:
    ``"ff.linear1.W"``). ``attr`` selects the dict to view (``"params"``, or ``"grads"``).
    """

    def __init__(self, children: dict, attr: str = "params"):
        self.children = dict(children)
        self.attr = attr

    def _split(self, key: str):
        name, _, rest = key.partition(".")
        if name not in self.children or not rest:
            raise KeyError(key)
        return getattr(self.children[name], self.attr), rest

    def __getitem__(self, key):
        d, rest = self._split(key)
        return d[rest]

    def __setitem__(self, key, value):
        d, rest = self._split(key)
        if rest not in d:
            raise KeyError(f"{key!r} is not a parameter; the keys are {list(self)}")
        d[rest] = value

    def __delitem__(self, key):
        raise TypeError("parameters cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        for name, child in self.children.items():
            for k in getattr(child, self.attr):
                yield f"{name}.{k}"

    def __len__(self) -> int:
        return sum(len(getattr(c, self.attr)) for c in self.children.values())

    def __repr__(self):
        items = ", ".join(f"{k}: {shape_str(v.shape)}" for k, v in self.items())
        return f"NestedParams({items})"


class Module:
    """The base of every layer, block and model.

    A leaf layer (Linear, LayerNorm, ...) fills ``self.params`` with its arrays. A layer made
    of sub-layers registers them with :meth:`add_children`, which turns ``params`` and
    ``grads`` into live views of the children's dicts.
    """

    def __init__(self):
        self.params = {}  # name -> ndarray
        self.grads = {}  # filled by backward(), same keys as params
        self.cache = None  # what the last forward pass saved for backward()
        self.training = False  # dropout on or off
        self._children = {}
        self._leaves = None

    # -- calling --------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        """``forward(*args, **kwargs)``, with the input checked if this is the outermost call."""
        if checks_done():  # called by another layer: its caller checked
            return self.forward(*args, **kwargs)
        with running():
            return self.checked_call(*args, **kwargs)

    def checked_call(self, *args, **kwargs):
        """The outermost call: check the arguments, then run :meth:`forward`.

        Layers override it with their checks; this default checks nothing but the result
        (:meth:`run_or_blame`).
        """
        return self.run_or_blame(self.forward, *args, **kwargs)

    def run_or_blame(self, compute, *args, **kwargs):
        """``compute(*args, **kwargs)`` (usually :meth:`forward`); if it fails or gives a
        non-finite output, name the bad parameter.

        Parameters are not checked before the computation (only the user changes them between
        calls): one NaN weight makes the output NaN, and a wrong shape makes a product fail,
        so :meth:`check_parameters` runs then, to name the culprit. With sound parameters the
        error is the computation's own, or an overflow.
        """
        try:
            result = compute(*args, **kwargs)
        except ValueError:
            self.check_parameters()
            raise
        y = result[0] if isinstance(result, tuple) else result
        if not all_finite(y):
            self.check_parameters()
            raise ValueError(
                f"the {type(self).__name__} output is not finite: it overflowed {y.dtype}"
            )
        return result

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward pass")

    # -- structure ------------------------------------------------------------------------------

    def add_children(self, **children: Module) -> None:
        """Register sub-layers: ``params`` and ``grads`` become views with dotted names."""
        self._children.update(children)
        self.params = NestedParams(self._children)
        self.grads = NestedParams(self._children, "grads")
        self._leaves = None

    def children(self) -> dict[str, Module]:
        """The registered sub-layers, by name."""
        return dict(self._children)

    def modules(self) -> Iterator[Module]:
        """This layer and every layer below it (depth first)."""
        yield self
        for child in self._children.values():
            yield from child.modules()

    def leaves(self) -> list[tuple[str, Module, str]]:
        """``(dotted name, leaf layer, key)`` of every parameter, in the order of ``params``."""
        if self._leaves is None:
            leaves = []
            for name, child in self._children.items():
                if child._children:
                    leaves.extend((f"{name}.{n}", leaf, k) for n, leaf, k in child.leaves())
                else:
                    leaves.extend((f"{name}.{k}", child, k) for k in child.params)
            self._leaves = leaves
        return self._leaves

    # -- parameters and gradients ---------------------------------------------------------------

    def num_parameters(self) -> int:
        """Total number of scalar parameters."""
        return int(sum(p.size for p in self.params.values()))

    def gradients(self) -> dict[str, np.ndarray]:
        """Dict ``name -> ndarray`` of the gradients of the last backward pass.

        Same keys, in the same order, as ``params``. A snapshot of the arrays (the next
        backward pass makes new ones); ``self.grads`` is the live view.
        """
        if not self._children:
            missing = [k for k in self.params if k not in self.grads]
            if missing:
                raise RuntimeError(f"no gradient for {missing[:3]}: call backward() first")
            return dict(self.grads)
        leaves = self.leaves()
        missing = [name for name, layer, k in leaves if k not in layer.grads]
        if missing:
            raise RuntimeError(f"no gradient for {missing[:3]}...: call backward() first")
        return {name: layer.grads[k] for name, layer, k in leaves}

    def zero_grad(self) -> None:
        """Set every gradient to zeros shaped like its parameter."""
        if not self._children:
            self.grads = {k: np.zeros_like(p) for k, p in self.params.items()}
        for child in self._children.values():
            child.zero_grad()

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape each parameter must have (a leaf layer with parameters says which)."""
        return {name: p.shape for name, p in self.params.items()}

    def check_parameters(self) -> None:
        """Raise ValueError naming the first parameter that is missing, misshapen or not finite.

        Not called on every forward pass (only the user changes parameters between calls): a
        layer calls it when its computation fails or its output is not finite, to say which
        parameter is to blame (one NaN weight makes every output NaN).
        """
        where = f"{type(self).__name__}.params"
        for prefix, layer in self._named_leaf_layers(""):
            for key, shape in layer.expected_shapes().items():
                name = prefix + key
                if key not in layer.params:
                    raise KeyError(f"{where} is missing {name!r}")
                p = layer.params[key]
                if not isinstance(p, np.ndarray) or p.shape != tuple(shape):
                    got = shape_str(p.shape) if isinstance(p, np.ndarray) else repr(p)
                    raise ValueError(
                        f"{where}[{name!r}] must be an ndarray of shape {shape_str(shape)}, "
                        f"got {got}"
                    )
                check_finite(p, f"{where}[{name!r}]")

    def _named_leaf_layers(self, prefix: str):
        """``(dotted prefix, layer)`` of every layer without children, this one included."""
        if not self._children:
            yield prefix, self
        for name, child in self._children.items():
            yield from child._named_leaf_layers(f"{prefix}{name}.")

    # -- training mode --------------------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Switch dropout on (``mode=True``) or off in this layer and all below; returns self."""
        for m in self.modules():
            m.training = bool(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: dropout off."""
        return self.train(False)

    # -- the backward pass ----------------------------------------------------------------------

    def saved(self) -> dict:
        """The forward cache, or a clear error if there was no forward pass yet."""
        if self.cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward was called before a forward pass (no cache)"
            )
        return self.cache


def checks_done() -> bool:
    """Whether a checked entry point is running (its callees need not check again)."""
    return getattr(_running, "depth", 0) > 0


@contextlib.contextmanager
def running():
    """Within the block, layers that are called run their ``forward`` without checks.

    For a public entry point that has checked its arguments and then calls layers (a model's
    ``encode``, the generation loop): what it checked is not checked again below it.
    """
    depth = getattr(_running, "depth", 0)
    _running.depth = depth + 1
    try:
        yield
    finally:
        _running.depth = depth


def as_grad(grad_output, shape, dtype, name: str = "grad_output") -> np.ndarray:
    """``grad_output`` as a float array of the last output's ``shape``, in ``dtype``."""
    g = np.asarray(grad_output)
    if g.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating-point array, got dtype {g.dtype}")
    if tuple(g.shape) != tuple(shape):
        raise ValueError(
            f"{name} must have the shape of the last output {shape_str(shape)}, "
            f"got {shape_str(g.shape)}"
        )
    return g.astype(dtype, copy=False)
