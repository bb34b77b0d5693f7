"""LoRA: low-rank adapters on frozen Linear maps (Hu et al. 2021), ``x W + b + (alpha / r)
dropout(x) A B`` with W frozen and A (d_in, r), B (r, d_out) trained. Page: finetuning.md.
A and B are the transposes of PEFT's ``lora_A.weight`` (r, d_in) and ``lora_B.weight``
(d_out, r), the package computing ``x @ W``; PEFT's files: :mod:`transformer_np.lora_files`.
"""

from __future__ import annotations

import re

import numpy as np

from ._checks.boundary import checked
from ._checks.general import as_grad
from ._checks.lora import (
    check_add_lora,
    check_lora_call,
    check_lora_init,
    check_lora_params,
    check_merge_lora,
    check_unmerge_lora,
)
from ._peft import lora_layers, peft_path
from .layers import Dropout, Linear
from .llama import LlamaModel
from .module import Module

__all__ = ["LoRALinear", "add_lora", "lora_params", "merge_lora", "unmerge_lora"]


class LoRALinear(Module):
    """A frozen Linear map with a trainable low-rank adapter beside it. Page: finetuning.md.

    Parameters
    ----------
    base : Linear
        The map to adapt; it is frozen (:meth:`~transformer_np.Module.freeze`).
    r : int, default 8
        The rank of the change (> 0).
    alpha : float, default 16
        The change is scaled by ``alpha / r`` (> 0), as in the paper and PEFT.
    dropout : float in [0, 1), default 0.0
        Dropout on the adapter's input (in training mode only).
    rng : np.random.Generator or int, optional
        Source of the initial A and of the dropout masks.

    Attributes
    ----------
    base : Linear
        The frozen map, ``W`` (d_in, d_out) and perhaps ``b``.
    lora_A : Linear
        d_in -> r, no bias, initialised U(-1/sqrt(d_in), 1/sqrt(d_in)) as PEFT does.
    lora_B : Linear
        r -> d_out, no bias, initialised to zero: the adapted map starts equal to the base.
    params : NestedParams
        ``W`` (and ``b``) of the base, ``lora_A`` and ``lora_B``; inside a layer of named maps
        (:class:`~transformer_np.MultiHeadAttention`) ``W_q``, ``lora_A_q``, ``lora_B_q``.
    merged : bool
        Whether ``W`` holds ``W + (alpha / r) A B`` (:meth:`merge`).
    """

    check_init, check_call = check_lora_init, check_lora_call

    def __init__(self, base, r=8, alpha=16, *, dropout=0.0, rng=None):
        super().__init__()
        self.r, self.alpha, self.scale = int(r), float(alpha), float(alpha) / int(r)
        self.d_in, self.d_out, self.merged = base.d_in, base.d_out, False
        rng = np.random.default_rng(rng)
        dtype = base.params["W"].dtype
        self.base = base.freeze()  # no gradient computed or kept for W and b
        self.lora_A = Linear(self.d_in, self.r, bias=False, rng=rng, dtype=dtype)  # PEFT's init
        self.lora_B = Linear(self.r, self.d_out, bias=False, dtype=dtype, init="zeros")
        self.dropout = Dropout(dropout, rng=rng)
        self.add_children(base=base, lora_A=self.lora_A, lora_B=self.lora_B, dropout=self.dropout)

    def __repr__(self):
        return (
            f"LoRALinear(d_in={self.d_in}, d_out={self.d_out}, r={self.r}, "
            f"alpha={self.alpha:g}, merged={self.merged})"
        )

    @staticmethod
    def join_key(child, key):
        """The base keeps its names (``W``, ``b``); the adapters' are ``lora_A``, ``lora_B``."""
        return key if child == "base" else child

    # --8<-- [start:lora_linear]
    def forward(self, x):
        """``x W + b + (alpha / r) dropout(x) A B``: (..., d_in) -> (..., d_out)."""
        y = self.base.forward(x)  # (..., d_in) -> (..., d_out), the frozen map
        self.cache = {**self.base.cache, "adapted": not self.merged}  # a Linear's, and more
        if self.merged:  # W already holds W + (alpha / r) A B
            return y
        h = self.lora_A.forward(self.dropout.forward(x))  # (..., d_in) -> (..., r)
        y += x.dtype.type(self.scale) * self.lora_B.forward(h)  # (..., r) -> (..., d_out)
        return y

    def backward(self, grad_output):
        """dL/dy (..., d_out) -> dL/dx (..., d_in); ``grads`` gets ``lora_A`` and ``lora_B``."""
        if not self.saved()["adapted"]:
            raise RuntimeError(
                "LoRALinear.backward after a forward pass with the adapter merged into W: "
                "call unmerge_lora(model) (or unmerge()) before training"
            )
        c = self.base.saved()
        g = as_grad(grad_output, c["shape"][:-1] + (self.d_out,), c["x"].dtype)
        dx = self.base.backward(g)  # through the frozen W: g W^T, and no dL/dW
        dh = self.lora_B.backward(g * g.dtype.type(self.scale))  # (..., d_out) -> (..., r)
        dx += self.dropout.backward(self.lora_A.backward(dh))  # (..., r) -> (..., d_in)
        return dx

    # --8<-- [end:lora_linear]

    def delta(self):
        """The change of W, ``(alpha / r) A B``: (d_in, r) @ (r, d_out) -> (d_in, d_out)."""
        return self.scale * (self.lora_A.params["W"] @ self.lora_B.params["W"])

    def merge(self):
        """``W += (alpha / r) A B``, in place: the base map alone then computes the adapted one."""
        W = self.base.params["W"]
        W += self.delta().astype(W.dtype, copy=False)
        self.merged = True

    def unmerge(self):
        """``W -= (alpha / r) A B``: W back as it was, up to rounding."""
        W = self.base.params["W"]
        W -= self.delta().astype(W.dtype, copy=False)
        self.merged = False


# --------------------------------------------------------------------------------------------
# adding, merging, the parameters
# --------------------------------------------------------------------------------------------


# --8<-- [start:names_one]
def names_one(target, name):
    """Whether ``target`` names the layer ``name``: the whole dotted name, its end after a dot
    (``"q"``, ``"attn.q"``), or a regular expression matching the whole name."""
    if name == target or name.endswith("." + target):
        return True
    try:
        return re.fullmatch(target, name) is not None
    except re.error:
        return False


# --8<-- [end:names_one]


# --8<-- [start:find_targets]
def find_targets(model, targets):
    """``{path: Linear}`` of the Linear layers of ``model`` that ``targets`` name, a LlamaModel's
    by transformers' names too (``"q_proj"``); a target naming none is a ValueError listing them."""
    is_llama = isinstance(model, LlamaModel)
    linears = {p: m for p, m in model.named_modules() if type(m) is Linear}
    names = {p: [p] + ([peft_path(p)] if is_llama and peft_path(p) else []) for p in linears}
    found = {}
    for target in targets:
        hits = [p for p, ns in names.items() if any(names_one(target, n) for n in ns)]
        if not hits:
            kinds = sorted({re.sub(r"\.\d+\.", ".*.", n) for ns in names.values() for n in ns})
            raise ValueError(
                f"targets: {target!r} names no Linear layer of the {type(model).__name__}; its "
                f"Linear layers are {', '.join(kinds)} (a name, its end after a dot such as "
                "'q', or a regular expression matching a whole name)"
            )
        found.update((p, linears[p]) for p in hits)
    return {p: m for p, m in linears.items() if p in found}  # in the model's order


# --8<-- [end:find_targets]


# --8<-- [start:adapt]
def adapt(model, found, r, alpha, dropout, rng):
    """Freeze ``model`` and put a LoRALinear in place of each Linear of ``found``."""
    model.freeze()  # 1. every weight of the base frozen
    for path, linear in found.items():  # 2. an adapter beside each chosen map
        lora = LoRALinear(linear, r, alpha, dropout=dropout, rng=rng)
        model.replace(path, lora.train(linear.training))
    return model


# --8<-- [end:adapt]


@checked(check_add_lora)
# --8<-- [start:add_lora]
def add_lora(model, r=8, alpha=16, *, targets=("q", "v"), dropout=0.0, rng=None):
    """Freeze ``model`` and put a low-rank adapter on each Linear map that ``targets`` name.

    Page: finetuning.md.

    Parameters
    ----------
    model : Module
        A model or a layer with sub-layers, changed in place: the outermost one (whose ``params``
        you use), so that every view of the parameters sees the adapters.
    r : int, default 8
        Rank of every adapter (> 0).
    alpha : float, default 16
        Scale ``alpha / r`` of every change (> 0).
    targets : str or sequence of str, default ("q", "v")
        Linear layers by dotted path (``"blocks.0.attn.q"``): a whole path, its end after a dot
        (``"q"``), or a regular expression matching a whole path. A LlamaModel's maps also answer
        to transformers' names (``"q_proj"``, ``"mlp.down_proj"``) as PEFT's ``target_modules``;
        the default, queries and values, is PEFT's for LLaMA.
    dropout : float in [0, 1), default 0.0
        Dropout on the adapters' input, in training mode.
    rng : np.random.Generator or int, optional
        Source of the initial A matrices and of the dropout masks.

    Returns
    -------
    Module
        ``model``, every parameter frozen and each chosen Linear replaced by a :class:`LoRALinear`;
        ``model.params`` gains the adapters (``blocks.0.attn.lora_A_q``, ...), and after
        ``backward`` ``model.grads`` holds theirs only.

    Raises
    ------
    TypeError, ValueError
        If ``model`` is not a layer with sub-layers or already has adapters, an argument is out
        of range, or a target names no Linear layer (the message lists the names).
    """
    return adapt(model, find_targets(model, targets), r, alpha, dropout, rng)


# --8<-- [end:add_lora]


@checked(check_lora_params)
# --8<-- [start:lora_params]
def lora_params(model):
    """The adapters' matrices of ``model``, ``{name: array}`` in the order of ``model.params``,
    not copied: give them to an optimiser (``Adam(lora_params(model))``).

    Raises
    ------
    ValueError
        If ``model`` has no adapters (:func:`add_lora` first).
    """
    adapters = {id(a.lora_A) for a in lora_layers(model).values()}
    adapters |= {id(a.lora_B) for a in lora_layers(model).values()}
    return {name: leaf.params[k] for name, leaf, k in model.leaves() if id(leaf) in adapters}


# --8<-- [end:lora_params]


@checked(check_merge_lora)
def merge_lora(model):
    """Merge every adapter into its map, ``W += (alpha / r) A B``, for inference; returns model.

    :func:`unmerge_lora` takes the changes out again (to train on, or to save another adapter).

    Raises
    ------
    ValueError
        If ``model`` has no adapters, or they are merged already.
    """
    for layer in lora_layers(model).values():
        layer.merge()
    return model


@checked(check_unmerge_lora)
def unmerge_lora(model):
    """Take every merged adapter out of its map, ``W -= (alpha / r) A B``; returns model.

    W comes back up to rounding.

    Raises
    ------
    ValueError
        If ``model`` has no adapters, or they are not merged.
    """
    for layer in lora_layers(model).values():
        layer.unmerge()
    return model
