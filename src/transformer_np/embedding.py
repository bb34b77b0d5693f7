"""Token embeddings and the output layer that can share their matrix (weight tying).

:class:`Embedding` turns token ids into vectors (one row of a table per token, scaled by
sqrt(d_model) as in the paper); :class:`TiedOutput` turns vectors back into one score per
token of the vocabulary with the same table, transposed (Press and Wolf, 2017).
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import as_typed_array, check_bool, check_dtype, check_positive_int, check_rng
from .module import Module, as_grad

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
    .. math:: \mathrm{Embedding}(t) = \sqrt{d_{\text{model}}}\; W_{t,:}

    After a call ``self.cache`` holds the ``ids``.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import Embedding
    >>> emb = Embedding(100, 16, rng=np.random.default_rng(0))
    >>> emb(np.array([[1, 2, 3], [4, 5, 6]])).shape
    (2, 3, 16)
    """

    def __init__(self, vocab_size, d_model, *, scale=True, rng=None, dtype=np.float64, init=True):
        super().__init__()
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.d_model = check_positive_int(d_model, "d_model")
        check_bool(scale, "scale")
        self.scale = bool(scale)
        dtype = check_dtype(dtype)
        rng = check_rng(rng)
        if not check_bool(init, "init"):  # a loader will overwrite W: zeros, no random draw
            self.params["W"] = np.zeros((self.vocab_size, self.d_model), dtype)
            return
        std = 1.0 / math.sqrt(self.d_model)
        W = std * rng.standard_normal((self.vocab_size, self.d_model))
        self.params["W"] = W.astype(dtype)

    def __repr__(self):
        return (
            f"Embedding(vocab_size={self.vocab_size}, d_model={self.d_model}, scale={self.scale})"
        )

    def expected_shapes(self):
        return {"W": (self.vocab_size, self.d_model)}

    def checked_call(self, ids):
        """Look up ``ids`` (integer array of any shape); returns shape ids.shape + (D,)."""
        ids = as_typed_array(ids, "ids", "iu", "an array of integer token ids")
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.vocab_size:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"ids must be in [0, vocab_size) = [0, {self.vocab_size}), got {bad} "
                    f"(ids range from {lo} to {hi})"
                )
        try:
            return self.forward(ids)
        except IndexError:  # the table was replaced by a smaller one
            self.check_parameters()
            raise

    def forward(self, ids):
        """Rows ``ids`` of the table, times sqrt(D) if ``scale``: ids.shape -> ids.shape + (D,)."""
        W = self.params["W"]
        out = W[ids]  # ids.shape -> ids.shape + (D,)
        if self.scale:
            out *= W.dtype.type(math.sqrt(self.d_model))
        self.cache = {"ids": ids}
        return out

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape ids.shape + (D,)
            dL/d(output).

        Returns
        -------
        None
            Token ids are integers: there is no gradient with respect to them.
            ``self.grads["W"]`` (V, D) gets the gradient of the table.

        Notes
        -----
        Row :math:`t` of the table receives the sum of the gradients at every position where
        token :math:`t` occurs (times :math:`\sqrt{d_{\text{model}}}` when scaled); rows of
        tokens absent from the batch get 0.

        .. math:: \frac{\partial L}{\partial W_{t,:}} = \sqrt{d_{\text{model}}}
                  \sum_{n:\ \mathrm{ids}_n = t} g_n
        """
        cache = self.saved()
        ids = cache["ids"]
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
        dW[sorted_ids[starts]] = np.add.reduceat(g2[order], starts, axis=0)  # (n_distinct, D)
        self.grads = {"W": dW}
        return None


class TiedOutput(Module):
    """Output projection that reuses an embedding matrix: ``logits = h @ E^T + b``.

    Parameters
    ----------
    embedding : Embedding
        The layer whose ``W`` (V, D) is shared; its gradient gets this layer's share in
        :meth:`backward` (added to ``embedding.grads["W"]`` by the model).

    Attributes
    ----------
    params : dict
        Only ``b`` (V,): the matrix belongs to the embedding.
    dW : ndarray of shape (V, D)
        This layer's contribution to the shared matrix's gradient, after ``backward``.
    """

    def __init__(self, embedding: Embedding):
        super().__init__()
        self.embedding = embedding  # not a child: its W is counted once, as the embedding's
        W = embedding.params["W"]
        self.params["b"] = np.zeros(W.shape[0], W.dtype)
        self.dW = None

    def expected_shapes(self):
        return {"b": (self.embedding.vocab_size,)}

    def forward(self, h):
        """``h @ E^T + b``: (B, T, D) -> (B, T, V)."""
        W = self.embedding.params["W"]
        h2 = h.reshape(-1, W.shape[1])  # (B, T, D) -> (B*T, D)
        logits = h2 @ W.T  # (B*T, D) @ (D, V) -> (B*T, V)
        logits += self.params["b"]
        self.cache = {"h": h2, "shape": h.shape}
        return logits.reshape(*h.shape[:-1], W.shape[0])  # -> (B, T, V)

    def backward(self, grad_output):
        """dL/dh; ``grads["b"]`` and ``dW``, this layer's share of the embedding's gradient."""
        W = self.embedding.params["W"]
        cache = self.saved()
        h2, shape = cache["h"], cache["shape"]
        g = as_grad(grad_output, shape[:-1] + (W.shape[0],), W.dtype)
        g2 = g.reshape(-1, W.shape[0])  # (B*T, V)
        self.grads = {"b": g2.sum(axis=0)}
        self.dW = g2.T @ h2  # (V, B*T) @ (B*T, D) -> (V, D)
        return (g2 @ W).reshape(shape)  # (B*T, V) @ (V, D) -> (B, T, D)
