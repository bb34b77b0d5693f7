"""What every layer shares: parameters, gradients, the forward cache, sub-layers, train/eval.
Page: backprop.md ("The interface").

A :class:`Module` keeps ``params`` (name -> ndarray; for a layer of sub-layers a live view with
dotted names, ``"linear1.W"``), ``grads`` (after ``backward``, the same keys), ``cache`` (what
the forward pass saved for the backward pass), ``training`` (dropout on) and ``trainable``
(False: frozen). ``layer(x)`` checks the input, then runs ``layer.forward(x)``; inside the
package a layer calls its sub-layers' ``forward``: the input was checked once, outermost.
"""

from __future__ import annotations

import contextlib
from collections.abc import ItemsView, Iterator, MutableMapping, ValuesView

import numpy as np

from ._checks.boundary import call_layer, construct, entry_backward
from ._checks.general import NotFiniteError, shape_str
from ._kernels.threads import share_cores

__all__ = ["Module", "NotFiniteError"]


class NestedParams(MutableMapping):
    """A live, flat view of the parameter dicts of a layer's leaves, with dotted keys made by the
    owner's ``join_key`` (``"ff.linear1.W"``): reading gives the leaf's array itself, assigning
    stores into the leaf's dict; no key is added or deleted. ``attr="grads"`` views the gradients
    of the trainable leaves."""

    def __init__(self, owner: Module, attr: str = "params"):
        self.owner, self.attr = owner, attr
        self._flat = None  # {dotted name: (leaf, key)}

    def flat(self) -> dict:
        """``{dotted name: (leaf layer, key)}`` of the owner's parameters, built once (a model's
        structure is fixed once built): a read is one dict lookup, not one per level."""
        if self._flat is None:
            self._flat = {name: (leaf, k) for name, leaf, k in self.owner.leaves()}
        return self._flat

    def entries(self) -> Iterator[tuple[str, dict, str]]:
        """``(dotted name, the leaf's dict, key)`` of every parameter the view shows: a gradient
        only once backward has stored it, and only for a trainable leaf."""
        attr = self.attr
        for name, (leaf, key) in self.flat().items():
            d = getattr(leaf, attr)
            if key in d and (attr == "params" or leaf.trainable):
                yield name, d, key

    def _entry(self, key: str):
        """``(the leaf's dict, key)`` of the dotted name ``key``, or a KeyError."""
        found = self.flat().get(key)
        if found is None:
            raise KeyError(key)
        leaf, rest = found
        return getattr(leaf, self.attr), rest, leaf

    def __getitem__(self, key):
        d, rest, leaf = self._entry(key)
        if self.attr == "grads" and not (rest in d and leaf.trainable):
            raise KeyError(f"no gradient for {key!r}: call backward() first, or unfreeze it")
        return d[rest]

    def __setitem__(self, key, value):
        d, rest, _ = self._entry(key)
        if rest not in d:
            raise KeyError(f"{key!r} is not a parameter; the keys are {list(self)}")
        d[rest] = value

    def __delitem__(self, key):
        raise TypeError("parameters cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        for name, _, _ in self.entries():
            yield name

    def __len__(self) -> int:
        return sum(1 for _ in self.entries())

    # one pass over the leaves for items() and values(), not one lookup per key
    def items(self):
        return NestedItems(self)

    def values(self):
        return NestedValues(self)

    def __repr__(self):
        items = ", ".join(f"{k}: {shape_str(v.shape)}" for k, v in self.items())
        return f"NestedParams({items})"


class NestedItems(ItemsView):
    """``view.items()`` of a :class:`NestedParams`, read in one pass over its leaves."""

    def __iter__(self):
        for name, d, key in self._mapping.entries():
            yield name, d[key]


class NestedValues(ValuesView):
    """``view.values()`` of a :class:`NestedParams`, read in one pass over its leaves."""

    def __iter__(self):
        for _, d, key in self._mapping.entries():
            yield d[key]


class LayerType(type):
    """The type of every layer: building one checks its arguments first (``check_init``), once,
    for the layer the user builds and not again for the sub-layers its ``__init__`` builds."""

    def __call__(cls, *args, **kwargs):
        return construct(cls, args, kwargs, super().__call__)


class Module(metaclass=LayerType):
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
        self.trainable = True  # False (frozen): backward computes no gradient for params
        self._children = {}
        self._leaves = None

    # -- calling --------------------------------------------------------------------------------

    # The layer's validators, in transformer_np._checks (None: nothing to check):
    check_init = None  # of the constructor's arguments, run before __init__
    check_call = None  # of a call's arguments, run before forward

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "backward" in cls.__dict__:  # a user's call checks the gradient it passes, once
            cls.backward = entry_backward(cls.backward)

    def __call__(self, *args, **kwargs):
        """``forward(*args, **kwargs)``, after the layer's ``check_call`` (the package's boundary).

        Inside the package a layer calls its sub-layers' ``forward`` directly: what the
        outermost call checked is not checked again. BLAS gets the cores that other processes
        leave free (:func:`~transformer_np._kernels.threads.share_cores`).
        """
        share_cores()
        return call_layer(self, *args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward pass")

    def decode_step(self, B, watch=None):
        """The layer on the new position of each of B sequences, a function of their (B, n)
        rows, for generation with a cache: ``forward``, unless the layer has a faster step (tested
        equal to it); a normalisation records its largest std in ``watch`` (B, D).
        Page: decoding.md."""
        return self.forward

    def one_token_forward(self):
        """The forward that generation calls at every step: ``forward``, unless the model has
        a faster one for one new token with a cache (LanguageModel and Transformer, from their
        layers' :meth:`decode_step`)."""
        return self.forward

    # -- structure ------------------------------------------------------------------------------

    def add_children(self, **children: Module) -> None:
        """Register sub-layers: ``params`` and ``grads`` become views with dotted names."""
        self._children.update(children)
        self.params = NestedParams(self)
        self.grads = NestedParams(self, "grads")
        self._leaves = None

    @staticmethod
    def join_key(child: str, key: str) -> str:
        """The flat name of a sub-layer's parameter: ``"linear1" + "W" -> "linear1.W"``."""
        return f"{child}.{key}"

    def children(self) -> dict[str, Module]:
        """The registered sub-layers, by name."""
        return dict(self._children)

    def modules(self) -> Iterator[Module]:
        """This layer and every layer below it (depth first)."""
        yield self
        for child in self._children.values():
            yield from child.modules()

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """``(dotted path, layer)`` of this layer (path ``prefix``) and every layer below it."""
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def replace(self, path: str, layer: Module) -> Module:
        """Put ``layer`` in place of the sub-layer at the dotted ``path`` (one of
        :meth:`named_modules`), and as the parent's attribute of that name if it held the old one;
        return the old one. Call it on the outermost layer: every view below is rebuilt."""
        *parents, name = path.split(".")
        parent = self
        for p in parents:
            parent = parent._children[p]
        old = parent._children[name]
        parent._children[name] = layer
        if getattr(parent, name, None) is old:
            setattr(parent, name, layer)
        for m in self.modules():  # the structure changed: forget the cached name tables
            m._leaves = None
            if m._children:
                m.params._flat = m.grads._flat = None
        return old

    def leaves(self) -> list[tuple[str, Module, str]]:
        """``(dotted name, leaf layer, key)`` of every parameter, in the order of ``params``."""
        if self._leaves is None:
            leaves = []
            for name, child in self._children.items():
                if child._children:
                    leaves.extend(
                        (self.join_key(name, n), leaf, k) for n, leaf, k in child.leaves()
                    )
                else:
                    leaves.extend((self.join_key(name, k), child, k) for k in child.params)
            self._leaves = leaves
        return self._leaves

    # -- parameters and gradients ---------------------------------------------------------------

    def num_parameters(self) -> int:
        """Total number of scalar parameters."""
        return int(sum(p.size for p in self.params.values()))

    def zero_grad(self) -> None:
        """Set every gradient to zeros shaped like its parameter."""
        if not self._children and self.trainable:  # (a frozen layer keeps no gradient)
            self.grads = {k: np.zeros_like(p) for k, p in self.params.items()}
        for child in self._children.values():
            child.zero_grad()

    def freeze(self) -> Module:
        """Freeze this layer and all below; returns self. Its ``backward`` still passes the
        gradient to its input, but computes and keeps none for its parameters (for LoRA)."""
        for m in self.modules():
            m.trainable = False
            if not m._children:
                m.grads = {}  # the gradients of before are dropped with the memory they hold
        return self

    def unfreeze(self) -> Module:
        """Make this layer and all below trainable again; returns self."""
        for m in self.modules():
            m.trainable = True
        return self

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape each parameter must have (a leaf layer with parameters says which)."""
        return {name: p.shape for name, p in self.params.items()}

    # -- training mode --------------------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Switch dropout on (``mode=True``) or off in this layer and all below; returns self."""
        self.training = bool(mode)
        for child in self._children.values():  # a call per layer (each decoding call makes two)
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: dropout off."""
        return self.train(False)

    @contextlib.contextmanager
    def evaluation_mode(self):
        """``with model.evaluation_mode():`` dropout off inside, the previous mode back after."""
        was_training = self.training
        self.eval()
        try:
            yield self
        finally:
            self.train(was_training)

    # -- the backward pass ----------------------------------------------------------------------

    def saved(self) -> dict:
        """The forward cache, or a clear error if there was no forward pass yet."""
        if self.cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward was called before a forward pass (no cache)"
            )
        return self.cache


class NamedMaps(Module):
    """A layer made of maps whose parameters keep the formula's names: ``"W"`` of the map
    ``q`` is ``"W_q"`` (MultiHeadAttention, SwiGLU), not ``"q.W"``."""

    @staticmethod
    def join_key(child: str, key: str) -> str:
        return f"{key}_{child}"
