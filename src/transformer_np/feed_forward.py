"""The position-wise feed-forward network: two Linear layers with an activation between.

The same two matrices at every position, no mixing across the sequence. The paper uses ReLU
and d_ff = 4 d_model; BERT and GPT use the exact GELU. Page: feed-forward.md.
"""

from __future__ import annotations

import numpy as np

from ._checks.general import as_grad
from ._checks.layers import check_feed_forward_call, check_feed_forward_init
from ._kernels.gelu import gelu, gelu_backward
from ._kernels.rows import constant, gelu_rows
from .layers import Linear
from .module import Module

__all__ = ["FeedForward"]


class FeedForward(Module):
    """Position-wise feed-forward network, ``act(x W_1 + b_1) W_2 + b_2``. Page: feed-forward.md.

    Parameters
    ----------
    d_model : int
        Input and output features D (> 0).
    d_ff : int
        Hidden features (> 0), 4 * d_model in the paper.
    activation : {"relu", "gelu"}, default "relu"
        ``"relu"`` as in the paper; ``"gelu"`` is the exact (erf) GELU of BERT.
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64

    Attributes
    ----------
    linear1 : Linear
        D -> d_ff.
    linear2 : Linear
        d_ff -> D.
    params : NestedParams
        Live view with keys ``linear1.W``, ``linear1.b``, ``linear2.W``, ``linear2.b``.
    """

    check_init, check_call = check_feed_forward_init, check_feed_forward_call

    def __init__(self, d_model, d_ff, *, activation="relu", rng=None, dtype=np.float64):
        super().__init__()
        self.d_model, self.d_ff, self.activation = int(d_model), int(d_ff), activation
        rng = np.random.default_rng(rng)
        self.linear1 = Linear(self.d_model, self.d_ff, rng=rng, dtype=dtype)
        self.linear2 = Linear(self.d_ff, self.d_model, rng=rng, dtype=dtype)
        self.add_children(linear1=self.linear1, linear2=self.linear2)

    def __repr__(self):
        return (
            f"FeedForward(d_model={self.d_model}, d_ff={self.d_ff}, activation={self.activation!r})"
        )

    # --8<-- [start:feed_forward]
    def forward(self, x):
        """``act(x W_1 + b_1) W_2 + b_2`` on a checked ``x`` (..., D), at each position alone."""
        h = self.linear1.forward(x)  # (..., D) -> (..., d_ff)
        slope = None
        if self.activation == "relu":
            a = np.maximum(h, 0)  # ReLU
        elif self.training:
            # the exact GELU, x Phi(x), and the slope GELU'(h) the backward pass will need,
            # both from the same pass over h
            a, slope = gelu(h, with_slope=True)
        else:
            a = gelu(h)  # the exact GELU, x Phi(x)
        y = self.linear2.forward(a)  # (..., d_ff) -> (..., D)
        self.cache = {"h": h.reshape(-1, self.d_ff), "slope": slope}  # h: (N, d_ff), a view
        return y

    # --8<-- [end:feed_forward]

    def decode_step(self, B, watch=None):
        """``forward`` on (B, D) rows: the two maps' steps around the activation."""
        first, second = self.linear1.decode_step(B), self.linear2.decode_step(B)
        if self.activation == "relu":
            dtype = next(iter(self.linear1.params.values())).dtype
            zero = constant((B, self.d_ff), 0, dtype)
            return lambda x: second(np.maximum(first(x), zero))
        return lambda x: second(gelu_rows(first(x)))  # the exact GELU

    def backward(self, grad_output):
        """dL/dy (..., D) -> dL/dx (..., D); ``grads`` gets both Linear layers'. GELU'(h) = Phi(h) +
        h phi(h), saved by a forward pass in training mode. Page: feed-forward.md."""
        cache = self.saved()
        h = cache["h"]  # (N, d_ff)
        g = as_grad(grad_output, self.linear2.cache["shape"][:-1] + (self.d_model,), h.dtype)
        a = self.linear2.cache["x"]  # the activation act(h), input of linear2, (N, d_ff)
        da = self.linear2.backward(g)  # (..., D) -> (..., d_ff)
        shape = da.shape
        da = da.reshape(h.shape)
        if self.activation == "relu":
            dh = da * (h > 0)
        elif cache["slope"] is not None:  # saved by a forward pass in training mode
            dh = da * cache["slope"].reshape(h.shape)
        else:
            dh = gelu_backward(h, a.reshape(h.shape), da)
        return self.linear1.backward(dh.reshape(shape))  # (..., d_ff) -> (..., D)
