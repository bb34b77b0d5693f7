"""The position-wise feed-forward network: two Linear layers with an activation between.

It acts on each position alone: the same two matrices for every token, no mixing across the
sequence (that is the attention's job). The paper uses ReLU and d_ff = 4 d_model; BERT and
GPT use the exact GELU, run by the kernel of ``_kernels/gelu.py`` (tested equal to the
formula of :func:`transformer_np.gelu`).
"""

from __future__ import annotations

import numpy as np

from ._kernels.gelu import gelu, gelu_backward
from ._validation import check_positive_int, check_rng, compute_dtype
from .layers import Linear, check_features
from .module import Module

__all__ = ["FeedForward"]

ACTIVATIONS = ("relu", "gelu")


class FeedForward(Module):
    r"""Position-wise feed-forward network: two Linear layers with an activation between.

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

    Notes
    -----
    .. math:: \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\, W_2 + b_2

    After a call ``self.cache`` holds ``h``, the hidden pre-activation (N, d_ff), and, for GELU
    in training mode, ``slope``, the derivative GELU'(h) computed with it (``None``
    otherwise: the backward pass then computes it from ``h``); each Linear keeps its own cache.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import FeedForward
    >>> ff = FeedForward(8, 32, rng=np.random.default_rng(0))
    >>> ff(np.ones((2, 3, 8))).shape
    (2, 3, 8)
    """

    def __init__(self, d_model, d_ff, *, activation="relu", rng=None, dtype=np.float64):
        super().__init__()
        d_model = check_positive_int(d_model, "d_model")
        d_ff = check_positive_int(d_ff, "d_ff")
        if activation not in ACTIVATIONS:
            raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
        rng = check_rng(rng)
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.linear1 = Linear(d_model, d_ff, rng=rng, dtype=dtype)
        self.linear2 = Linear(d_ff, d_model, rng=rng, dtype=dtype)
        self.add_children(linear1=self.linear1, linear2=self.linear2)

    def __repr__(self):
        return (
            f"FeedForward(d_model={self.d_model}, d_ff={self.d_ff}, activation={self.activation!r})"
        )

    def checked_call(self, x):
        """Apply the network to ``x`` of shape (..., D); returns the same shape."""
        x = check_features(x, "x", self.d_model, "d_model")
        y = self.run_or_blame(self.forward, x.astype(compute_dtype(x.dtype), copy=False))
        return y.astype(x.dtype, copy=False)

    # --8<-- [start:feed_forward]
    def forward(self, x):
        """``act(x W_1 + b_1) W_2 + b_2`` on a checked ``x`` (..., D), at each position alone."""
        h = self.linear1(x)  # (..., D) -> (..., d_ff)
        slope = None
        if self.activation == "relu":
            a = np.maximum(h, 0)  # ReLU
        elif self.training:
            # the exact GELU, x Phi(x), and the slope GELU'(h) the backward pass will need,
            # both from the same pass over h
            a, slope = gelu(h, with_slope=True)
        else:
            a = gelu(h)  # the exact GELU, x Phi(x)
        y = self.linear2(a)  # (..., d_ff) -> (..., D)
        self.cache = {"h": h.reshape(-1, self.d_ff), "slope": slope}  # h: (N, d_ff), a view
        return y

    # --8<-- [end:feed_forward]

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (..., D)
            dL/dy.

        Returns
        -------
        ndarray of shape (..., D)
            dL/dx. ``self.grads`` (a live view like ``params``) holds the gradients of both
            Linear layers.

        Notes
        -----
        With :math:`h = x W_1 + b_1` the hidden pre-activation and :math:`\delta = g W_2^\top`:

        .. math:: \frac{\partial L}{\partial h} = \delta \odot \mathrm{act}'(h), \qquad
                  \mathrm{ReLU}'(h) = [h > 0], \qquad
                  \mathrm{GELU}'(h) = \Phi(h) + h\, \varphi(h)

        with :math:`\Phi` and :math:`\varphi` the standard normal CDF and density.
        """
        cache = self.saved()
        h = cache["h"]
        a = self.linear2.cache["x"]  # the activation act(h), input of linear2, (N, d_ff)
        da = self.linear2.backward(grad_output)  # (..., D) -> (..., d_ff)
        shape = da.shape
        da = da.reshape(h.shape)
        if self.activation == "relu":
            dh = da * (h > 0)
        elif cache["slope"] is not None:  # saved by a forward pass in training mode
            dh = da * cache["slope"].reshape(h.shape)
        else:
            dh = gelu_backward(h, a.reshape(h.shape), da)
        return self.linear1.backward(dh.reshape(shape))  # (..., d_ff) -> (..., D)
