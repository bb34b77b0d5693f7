"""Token embeddings and the output layer that can share their matrix (weight tying).

Pages: embeddings.md (forward), backprop.md (backward, and the shared matrix's two gradients).
"""

from __future__ import annotations

import math

import numpy as np

from ._checks.general import as_grad
from ._checks.layers import (
    check_embedding_call,
    check_embedding_init,
    check_tied_output_call,
    check_tied_output_init,
)
from ._kernels.rows import affine
from .module import Module

__all__ = ["Embedding", "TiedOutput"]


class Embedding(Module):
    r"""Token embedding: a lookup table of one vector per token id.

    Parameters
    ----------
    vocab_size : int
        Number of distinct token ids V (> 0).
    d_model : int
        Embedding width D (> 0).
    scale : bool, default True
        Multiply the looked-up vectors by sqrt(d_model), as in the paper (section 3.4).
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
    init : bool, default True
        False leaves ``W`` at zero (for a loader that sets it).

    Attributes
    ----------
    params : dict
        ``W`` of shape (V, D), initialised N(0, 1/D), so that the scaled embedding
        sqrt(D) * W[id] has unit variance, the same scale as the positional encoding
        (Fairseq's choice).

    Notes
    -----
    When an output layer shares the table (:class:`TiedOutput`), ``grads["W"]`` is the sum of
    both layers' shares of the gradient: see :meth:`set_grad_share`.
    """

    check_init, check_call = check_embedding_init, check_embedding_call

    # --8<-- [start:embedding_init]
    def __init__(self, vocab_size, d_model, *, scale=True, rng=None, dtype=np.float64, init=True):
        super().__init__()
        self.vocab_size, self.d_model, self.scale = int(vocab_size), int(d_model), bool(scale)
        rng, shape = np.random.default_rng(rng), (self.vocab_size, self.d_model)
        if init:  # N(0, 1/D)
            W = (1.0 / math.sqrt(self.d_model)) * rng.standard_normal(shape)
            self.params["W"] = W.astype(dtype)
        else:  # a loader will overwrite W: zeros, no random draw
            self.params["W"] = np.zeros(shape, dtype)
        self.grad_shares = {}  # who -> its share of dL/dW, summed into grads["W"]
        # --8<-- [end:embedding_init]

    def __repr__(self):
        return (
            f"Embedding(vocab_size={self.vocab_size}, d_model={self.d_model}, scale={self.scale})"
        )

    def expected_shapes(self):
        return {"W": (self.vocab_size, self.d_model)}

    # --8<-- [start:embedding_forward]
    def forward(self, ids):
        """Rows ``ids`` of the table, times sqrt(D) if ``scale``: ids.shape -> ids.shape + (D,)."""
        W = self.params["W"]
        out = W[ids]  # ids.shape -> ids.shape + (D,)
        if self.scale:
            out *= W.dtype.type(math.sqrt(self.d_model))
        self.cache = {"ids": ids}
        return out
        # --8<-- [end:embedding_forward]

    # --8<-- [start:embedding_backward]
    def backward(self, grad_output):
        """dL/d(output) ids.shape + (D,) -> None (ids have no gradient); ``grads["W"]`` (V, D), with
        a tied output layer's share added (:meth:`set_grad_share`). Page: backprop.md."""
        ids = self.saved()["ids"]
        W = self.params["W"]
        g = as_grad(grad_output, ids.shape + (self.d_model,), W.dtype)
        g2 = g.reshape(-1, self.d_model)  # (N, D)
        if self.scale:
            g2 = g2 * W.dtype.type(math.sqrt(self.d_model))
        # Scatter-add (repeated ids accumulate): sort the positions by id, sum each run of
        # equal ids with one reduceat, write one row per distinct id.
        flat = ids.reshape(-1)
        order = np.argsort(flat, kind="stable")
        sorted_ids = flat[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        dW = np.zeros_like(W)
        if flat.size:  # (no token, no gradient)
            dW[sorted_ids[starts]] = np.add.reduceat(g2[order], starts, axis=0)  # (n_distinct, D)
        self.set_grad_share("lookup", dW)
        return None
        # --8<-- [end:embedding_backward]

    # --8<-- [start:set_grad_share]
    def set_grad_share(self, who, dW):
        """Record ``who``'s share of dL/dW (V, D), the lookup's or a tied output layer's, replacing
        its previous one; ``grads["W"]`` is the sum of the shares. Page: backprop.md."""
        self.grad_shares[who] = dW
        shares = list(self.grad_shares.values())
        self.grads = {"W": sum(shares[1:], start=shares[0])}  # one share: itself, no copy
        # --8<-- [end:set_grad_share]

    # --8<-- [start:embedding_attend]
    def attend(self, h):
        """The logits of ``h`` (..., D) against the table, ``h @ W^T``: (..., V)."""
        W = self.params["W"].astype(h.dtype, copy=False)
        h2 = h.reshape(-1, self.d_model)  # (..., D) -> (N, D)
        return (h2 @ W.T).reshape(*h.shape[:-1], self.vocab_size)  # (N, D) @ (D, V) -> (..., V)
        # --8<-- [end:embedding_attend]


class TiedOutput(Module):
    """Output projection that reuses an embedding matrix: ``logits = h @ E^T + b``.

    Parameters
    ----------
    embedding : Embedding
        The layer whose ``W`` (V, D) is shared.

    Attributes
    ----------
    params : dict
        Only ``b`` (V,): the matrix belongs to the embedding.

    Notes
    -----
    :meth:`backward` gives this layer's share of the matrix's gradient, ``g^T h``, to the
    embedding (:meth:`Embedding.set_grad_share`), which adds it to its own: after the backward
    passes of both layers, in either order, ``embedding.grads["W"]`` is the whole gradient.
    """

    check_init, check_call = check_tied_output_init, check_tied_output_call

    # --8<-- [start:tied_output_init]
    def __init__(self, embedding: Embedding):
        super().__init__()
        self.embedding = embedding  # not a child: its W is counted once, as the embedding's
        W = embedding.params["W"]
        self.params["b"] = np.zeros(W.shape[0], W.dtype)
        # --8<-- [end:tied_output_init]

    def expected_shapes(self):
        return {"b": (self.embedding.vocab_size,)}

    # --8<-- [start:tied_output_forward]
    def forward(self, h):
        """``h @ E^T + b``: (..., D) -> (..., V). Page: embeddings.md."""
        logits = self.embedding.attend(h)  # (..., D) -> (..., V)
        logits += self.params["b"].astype(h.dtype, copy=False)
        self.cache = {"h": h.reshape(-1, self.embedding.d_model), "shape": h.shape}  # h: (N, D)
        return logits
        # --8<-- [end:tied_output_forward]

    def decode_step(self, B, watch=None):
        """``forward`` on (B, D) rows: a product by the embedding matrix transposed, read now."""
        return affine(self.embedding.params["W"].T, self.params["b"], B)

    # --8<-- [start:tied_output_backward]
    def backward(self, grad_output):
        """dL/dlogits (..., V) -> dL/dh (..., D); ``grads["b"]``, and this layer's share of the
        embedding's gradient. Page: backprop.md."""
        cache = self.saved()
        h2, shape = cache["h"], cache["shape"]  # (N, D)
        V = self.embedding.vocab_size
        g2 = as_grad(grad_output, shape[:-1] + (V,), h2.dtype).reshape(-1, V)  # (N, V)
        W, b = self.embedding.params["W"], self.params["b"]
        self.grads = {"b": g2.sum(axis=0).astype(b.dtype, copy=False)}
        dW = (g2.T @ h2).astype(W.dtype, copy=False)  # (V, N) @ (N, D) -> (V, D)
        self.embedding.set_grad_share("output", dW)
        return (g2 @ W.astype(h2.dtype, copy=False)).reshape(shape)  # (N, V) @ (V, D)
        # --8<-- [end:tied_output_backward]
