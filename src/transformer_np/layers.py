"""The basic layers: Linear, LayerNorm and Dropout.

The layers built from them live in their own modules: :mod:`~transformer_np.feed_forward`
(FeedForward) and :mod:`~transformer_np.embedding` (Embedding, TiedOutput).

Every layer is a :class:`~transformer_np.module.Module`: it keeps its parameters in ``params``
and, after ``backward``, their gradients in ``grads``. Calling a layer checks the input, then
runs its ``forward``, the plain computation, in the input's dtype (float16 in float32).
Pages: qkv.md (Linear), layer-norm.md (LayerNorm, Dropout), backprop.md (the backward passes).
"""

from __future__ import annotations

import math

import numpy as np

from ._checks.general import as_grad
from ._checks.layers import (
    check_dropout_call,
    check_dropout_init,
    check_layer_norm_call,
    check_layer_norm_init,
    check_linear_call,
    check_linear_init,
)
from ._kernels.rows import affine, centring, constant, repeated
from .functional import layer_norm
from .module import Module

__all__ = ["Dropout", "LayerNorm", "Linear"]


# --------------------------------------------------------------------------------------------


class Linear(Module):
    """Affine map ``y = x @ W + b`` on the last axis.

    Parameters
    ----------
    d_in : int
        Input features (> 0).
    d_out : int
        Output features (> 0).
    bias : bool, default True
        Whether there is a bias ``b``.
    rng : np.random.Generator or int, optional
        Source of randomness for the initial weights.
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters.
    init : {"uniform", "xavier", "zeros"}, default "uniform"
        ``"uniform"``: ``W`` and ``b`` from U(-1/sqrt(d_in), 1/sqrt(d_in)), the default of
        ``torch.nn.Linear``; ``"xavier"``: ``W`` from U(-a, a), a = sqrt(6 / (d_in + d_out))
        (Xavier/Glorot), ``b`` zero; ``"zeros"``: all zero, for a loader that sets them.

    Attributes
    ----------
    params : dict
        ``W`` of shape (d_in, d_out) (note: the transpose of PyTorch's ``Linear.weight``) and,
        with ``bias=True``, ``b`` of shape (d_out,).
    """

    check_init, check_call = check_linear_init, check_linear_call

    # --8<-- [start:linear_init]
    def __init__(self, d_in, d_out, *, bias=True, rng=None, dtype=np.float64, init="uniform"):
        super().__init__()
        self.d_in, self.d_out, self.has_bias = int(d_in), int(d_out), bool(bias)
        rng = np.random.default_rng(rng)
        shape = (self.d_in, self.d_out)
        if init == "zeros":  # a loader will overwrite them: no random draw
            self.params["W"] = np.zeros(shape, dtype)
        else:
            limit = 1 / math.sqrt(self.d_in) if init == "uniform" else math.sqrt(6 / sum(shape))
            self.params["W"] = rng.uniform(-limit, limit, shape).astype(dtype)
        if bias and init == "uniform":
            self.params["b"] = rng.uniform(-limit, limit, self.d_out).astype(dtype)
        elif bias:
            self.params["b"] = np.zeros(self.d_out, dtype)
        # --8<-- [end:linear_init]

    def __repr__(self):
        return f"Linear(d_in={self.d_in}, d_out={self.d_out}, bias={self.has_bias})"

    def expected_shapes(self):
        shapes = {"W": (self.d_in, self.d_out)}
        if self.has_bias:
            shapes["b"] = (self.d_out,)
        return shapes

    # --8<-- [start:linear_forward]
    def forward(self, x):
        """``x @ W + b``: (..., d_in) -> (..., d_out), the leading axes as N rows. Page: qkv.md."""
        x2 = x.reshape(-1, self.d_in)  # (..., d_in) -> (N, d_in)
        y = x2 @ self.params["W"].astype(x.dtype, copy=False)  # (N, d_in) -> (N, d_out)
        if self.has_bias:
            y += self.params["b"].astype(x.dtype, copy=False)
        self.cache = {"x": x2, "shape": x.shape}
        return y.reshape(*x.shape[:-1], self.d_out)  # (N, d_out) -> (..., d_out)
        # --8<-- [end:linear_forward]

    def decode_step(self, B, watch=None):
        """``forward`` on (B, d_in) rows with the weights read now: one ``np.dot`` and the bias
        repeated to (B, d_out) (B = 1: rows of any number)."""
        return affine(self.params["W"], self.params["b"] if self.has_bias else None, B)

    # --8<-- [start:linear_backward]
    def backward(self, grad_output):
        """dL/dy (..., d_out) -> dL/dx (..., d_in) of the last call; ``grads`` gets ``W`` and ``b``
        (replaced at every call; none if the layer is frozen). Page: backprop.md."""
        cache = self.saved()
        x2 = cache["x"]  # (N, d_in)
        out_shape = tuple(cache["shape"][:-1]) + (self.d_out,)
        g2 = as_grad(grad_output, out_shape, x2.dtype).reshape(-1, self.d_out)  # (N, d_out)
        W, grads = self.params["W"], {}
        if self.trainable:  # frozen (Module.freeze): no gradient computed, none stored
            grads["W"] = (x2.T @ g2).astype(W.dtype, copy=False)  # (d_in, N) @ (N, d_out)
            if self.has_bias:
                grads["b"] = g2.sum(axis=0).astype(self.params["b"].dtype, copy=False)
        self.grads = grads
        dx = g2 @ W.astype(x2.dtype, copy=False).T  # (N, d_out) @ (d_out, d_in) -> (N, d_in)
        return dx.reshape(cache["shape"])  # (N, d_in) -> (..., d_in)
        # --8<-- [end:linear_backward]


# --------------------------------------------------------------------------------------------


class LayerNorm(Module):
    r"""Layer normalisation over the last axis, with a learned scale and shift.

    Parameters
    ----------
    d_model : int
        Number of features D (> 0).
    eps : float, default 1e-5
        Added to the variance (PyTorch's default; BERT uses 1e-12).
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters (keyword only).

    Attributes
    ----------
    params : dict
        ``gamma`` (D,) initialised to ones, ``beta`` (D,) initialised to zeros.
    """

    check_init, check_call = check_layer_norm_init, check_layer_norm_call

    # --8<-- [start:layer_norm_init]
    def __init__(self, d_model, eps=1e-5, *, dtype=np.float64):
        super().__init__()
        self.d_model, self.eps = int(d_model), float(eps)
        self.params["gamma"] = np.ones(self.d_model, dtype)
        self.params["beta"] = np.zeros(self.d_model, dtype)
        # --8<-- [end:layer_norm_init]

    def __repr__(self):
        return f"LayerNorm(d_model={self.d_model}, eps={self.eps:g})"

    def expected_shapes(self):
        return {"gamma": (self.d_model,), "beta": (self.d_model,)}

    # --8<-- [start:layer_norm_forward]
    def forward(self, x):
        """x (..., D) normalised over its last axis, then ``gamma`` and ``beta``; keeps ``x_hat``
        (..., D) and ``rstd`` (..., 1) for the backward pass. Page: layer-norm.md."""
        gamma, beta = self.params["gamma"], self.params["beta"]
        y, x_hat, rstd = layer_norm(x, gamma, beta, self.eps, with_stats=True)
        self.cache = {"x_hat": x_hat, "rstd": rstd}
        return y
        # --8<-- [end:layer_norm_forward]

    def decode_step(self, B, watch=None):
        """``forward`` on (B, D) rows, the means as products by two (D, D) matrices: C = I - 1/D
        centres a row, M = 1/D gives its mean repeated along the row. ``watch`` (B, D) keeps the
        largest standard deviation (inf or NaN where a row overflowed: the caller then runs
        ``forward``, which says so). The squares are divided by D before they are summed, so a
        row whose sum of squares overflows but whose mean square does not is normalised here."""
        D, dtype = self.d_model, self.params["gamma"].dtype
        gamma, beta = (repeated(self.params[k], B, dtype) for k in ("gamma", "beta"))
        eps, mean, centre = (
            constant((B, D), self.eps, dtype),
            constant((D, D), 1 / D, dtype),
            centring(D, dtype),
        )

        def norm(x):
            x_hat = np.dot(x, centre)  # (B, D): x minus its mean
            std = np.sqrt(np.dot(x_hat * x_hat, mean) + eps)  # (B, D), the row's std repeated
            if watch is not None:
                np.maximum(watch, std, out=watch)  # NaN stays NaN
            return x_hat / std * gamma + beta

        return norm

    # --8<-- [start:layer_norm_backward]
    def backward(self, grad_output):
        """dL/dy (..., D) -> dL/dx (..., D) of the last call; ``grads`` gets ``gamma`` and ``beta``
        (none if the layer is frozen). Page: backprop.md."""
        cache = self.saved()
        x_hat, rstd = cache["x_hat"], cache["rstd"]  # (..., D), (..., 1)
        g = as_grad(grad_output, x_hat.shape, x_hat.dtype)
        D = self.d_model
        g2, xh2 = g.reshape(-1, D), x_hat.reshape(-1, D)  # (N, D)
        gamma, self.grads = self.params["gamma"], {}
        if self.trainable:  # frozen (Module.freeze): no gradient computed, none stored
            self.grads = {
                "gamma": np.einsum("nd,nd->d", g2, xh2).astype(gamma.dtype, copy=False),
                "beta": g2.sum(axis=0).astype(self.params["beta"].dtype, copy=False),
            }
        g_hat = g * gamma.astype(g.dtype, copy=False)  # dL/dx_hat, (..., D)
        mean_g = g_hat.mean(axis=-1, keepdims=True)  # (..., D) -> (..., 1)
        mean_gx = np.einsum("...d,...d->...", g_hat, x_hat)[..., None]  # (..., D) -> (..., 1)
        mean_gx /= D
        dx = g_hat - mean_g
        dx -= x_hat * mean_gx
        dx *= rstd
        return dx
        # --8<-- [end:layer_norm_backward]


# --------------------------------------------------------------------------------------------


class Dropout(Module):
    """Inverted dropout: in training, zero each value with probability ``p`` and scale the rest.

    Parameters
    ----------
    p : float in [0, 1)
        Drop probability.
    rng : np.random.Generator or int, optional
        Source of the random masks.

    Notes
    -----
    The values kept are divided by ``1 - p``, so that the expected value of the output is ``x``;
    at evaluation time (``training = False``) the layer is the identity.
    """

    check_init, check_call = check_dropout_init, check_dropout_call

    # --8<-- [start:dropout_init]
    def __init__(self, p=0.0, rng=None):
        super().__init__()
        self.p = float(p)
        self.rng = np.random.default_rng(rng)
        # --8<-- [end:dropout_init]

    def __repr__(self):
        return f"Dropout(p={self.p})"

    # --8<-- [start:dropout_forward]
    def forward(self, x):
        """``x`` itself at evaluation time; in training ``x`` times a fresh mask (the same shape),
        kept for the backward pass. Page: layer-norm.md."""
        if not self.training or self.p == 0.0:
            self.cache = None
            return x
        keep = self.rng.random(x.shape) >= self.p  # each value kept with probability 1 - p
        self.cache = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - self.p))
        return x * self.cache
        # --8<-- [end:dropout_forward]

    # --8<-- [start:dropout_backward]
    def backward(self, grad_output):
        """The gradient through the same mask (unchanged at evaluation time)."""
        return grad_output if self.cache is None else grad_output * self.cache
        # --8<-- [end:dropout_backward]
