"""The basic layers: Linear, LayerNorm and Dropout.

The layers built from them live in their own modules: :mod:`~transformer_np.feed_forward`
(FeedForward) and :mod:`~transformer_np.embedding` (Embedding, TiedOutput).

Every layer is a :class:`~transformer_np.module.Module`: it keeps its parameters in ``params``
and, after ``backward``, their gradients in ``grads``. Calling a layer runs its ``forward``,
the plain computation; a call from outside the package checks the input first
(``checked_call``), once.

The computation runs in the input's dtype: float32 in gives float32 out, float64 in gives
float64 out (parameters are cast if needed, which is free when they already match).
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import (
    as_float_array,
    check_bool,
    check_dtype,
    check_finite,
    check_normalised,
    check_positive_float,
    check_positive_int,
    check_rng,
    compute_dtype,
    shape_str,
)
from .functional import layer_norm_forward
from .module import Module, as_grad

__all__ = ["Dropout", "LayerNorm", "Linear"]


def check_features(x, name: str, d: int, what: str) -> np.ndarray:
    """``x`` as a float array of shape (..., d) without NaN or inf, else a clear error."""
    x = as_float_array(x, name)
    if x.ndim == 0 or x.shape[-1] != d:
        raise ValueError(
            f"{name} must have shape (..., {what}) with {what} = {d}, got {shape_str(x.shape)}"
        )
    check_finite(x, name)
    return x


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

    Attributes
    ----------
    params : dict
        ``W`` of shape (d_in, d_out) (note: the transpose of PyTorch's ``Linear.weight``) and,
        with ``bias=True``, ``b`` of shape (d_out,). Both start as U(-1/sqrt(d_in),
        1/sqrt(d_in)), the default of ``torch.nn.Linear``.

    Notes
    -----
    .. math:: y = x W + b

    The leading axes are flattened so the product is one 2-D matrix product. After a call
    ``self.cache`` holds ``x`` (the 2-D input, shape (N, d_in)) and ``shape`` (the input
    shape) for a backward pass.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import Linear
    >>> lin = Linear(4, 3, rng=np.random.default_rng(0))
    >>> lin(np.ones((2, 5, 4))).shape
    (2, 5, 3)
    """

    def __init__(self, d_in, d_out, *, bias=True, rng=None, dtype=np.float64):
        super().__init__()
        self.d_in = check_positive_int(d_in, "d_in")
        self.d_out = check_positive_int(d_out, "d_out")
        check_bool(bias, "bias")
        dtype = check_dtype(dtype)
        rng = check_rng(rng)
        self.has_bias = bool(bias)
        limit = 1.0 / math.sqrt(self.d_in)
        self.params["W"] = rng.uniform(-limit, limit, (self.d_in, self.d_out)).astype(dtype)
        if bias:
            self.params["b"] = rng.uniform(-limit, limit, self.d_out).astype(dtype)

    def __repr__(self):
        return f"Linear(d_in={self.d_in}, d_out={self.d_out}, bias={self.has_bias})"

    def expected_shapes(self):
        shapes = {"W": (self.d_in, self.d_out)}
        if self.has_bias:
            shapes["b"] = (self.d_out,)
        return shapes

    def checked_call(self, x):
        """Apply the map to ``x`` of shape (..., d_in); returns (..., d_out) in ``x``'s dtype."""
        x = check_features(x, "x", self.d_in, "d_in")
        y = self.run_or_blame(self.forward, x.astype(compute_dtype(x.dtype), copy=False))
        return y.astype(x.dtype, copy=False)

    def forward(self, x):
        """``x @ W + b`` on a checked ``x`` (..., d_in) -> (..., d_out)."""
        x2 = x.reshape(-1, self.d_in)  # (..., d_in) -> (N, d_in)
        y = x2 @ self.params["W"].astype(x.dtype, copy=False)  # (N, d_in) -> (N, d_out)
        if self.has_bias:
            y += self.params["b"].astype(x.dtype, copy=False)
        self.cache = {"x": x2, "shape": x.shape}
        return y.reshape(*x.shape[:-1], self.d_out)  # (N, d_out) -> (..., d_out)

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (..., d_out)
            dL/dy, the gradient of the loss with respect to the last output.

        Returns
        -------
        ndarray of shape (..., d_in)
            dL/dx. ``self.grads`` gets ``W`` (d_in, d_out) and ``b`` (d_out,), overwritten
            (not accumulated) at every call.

        Notes
        -----
        With the leading axes flattened (N rows):

        .. math:: \frac{\partial L}{\partial W} = x^\top g, \qquad
                  \frac{\partial L}{\partial b} = \sum_n g_n, \qquad
                  \frac{\partial L}{\partial x} = g\, W^\top
        """
        cache = self.saved()
        x2 = cache["x"]  # (N, d_in)
        out_shape = tuple(cache["shape"][:-1]) + (self.d_out,)
        g2 = as_grad(grad_output, out_shape, x2.dtype).reshape(-1, self.d_out)  # (N, d_out)
        W = self.params["W"]
        grads = {"W": (x2.T @ g2).astype(W.dtype, copy=False)}  # (d_in, N) @ (N, d_out)
        if self.has_bias:
            grads["b"] = g2.sum(axis=0).astype(self.params["b"].dtype, copy=False)
        self.grads = grads
        dx = g2 @ W.astype(x2.dtype, copy=False).T  # (N, d_out) @ (d_out, d_in) -> (N, d_in)
        return dx.reshape(cache["shape"])  # (N, d_in) -> (..., d_in)


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

    Notes
    -----
    .. math:: \mathrm{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}
              + \beta

    with the mean and (biased) variance over the D features of each position. After a call
    ``self.cache`` holds ``x_hat`` (the normalised input, shape (..., D)) and ``rstd``
    (1 / sqrt(var + eps), shape (..., 1)).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import LayerNorm
    >>> ln = LayerNorm(4)
    >>> y = ln(np.array([[1.0, 2.0, 3.0, 4.0]]))
    >>> np.round(y.mean(), 6), np.round(y.var(), 4)
    (np.float64(0.0), np.float64(1.0))
    """

    def __init__(self, d_model, eps=1e-5, *, dtype=np.float64):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.eps = check_positive_float(eps, "eps")
        dtype = check_dtype(dtype)
        self.params["gamma"] = np.ones(self.d_model, dtype)
        self.params["beta"] = np.zeros(self.d_model, dtype)

    def __repr__(self):
        return f"LayerNorm(d_model={self.d_model}, eps={self.eps:g})"

    def expected_shapes(self):
        return {"gamma": (self.d_model,), "beta": (self.d_model,)}

    def checked_call(self, x):
        """Normalise ``x`` of shape (..., D); returns the same shape in ``x``'s dtype."""
        x = check_features(x, "x", self.d_model, "d_model")
        y = self.run_or_blame(self.forward, x.astype(compute_dtype(x.dtype), copy=False))
        return y.astype(x.dtype, copy=False)

    def forward(self, x):
        """The normalisation of a checked ``x`` (..., D), then ``gamma`` and ``beta``."""
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
            y, x_hat, rstd = layer_norm_forward(
                x,
                self.params["gamma"].astype(x.dtype, copy=False),
                self.params["beta"].astype(x.dtype, copy=False),
                self.eps,
            )
        check_normalised(rstd, x, "x")  # a row too large for the dtype: a clear error
        self.cache = {"x_hat": x_hat, "rstd": rstd}
        return y

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (..., D)
            dL/dy.

        Returns
        -------
        ndarray of shape (..., D)
            dL/dx. ``self.grads`` gets ``gamma`` and ``beta`` (D,).

        Notes
        -----
        With :math:`\hat x = (x - \mu)\, r`, :math:`r = 1/\sqrt{\sigma^2 + \epsilon}` and
        :math:`\hat g = g \odot \gamma` (the gradient reaching :math:`\hat x`):

        .. math:: \frac{\partial L}{\partial x} = r \left( \hat g - \overline{\hat g}
                  - \hat x \; \overline{\hat g \odot \hat x} \right), \qquad
                  \frac{\partial L}{\partial \gamma} = \sum_n g_n \odot \hat x_n, \qquad
                  \frac{\partial L}{\partial \beta} = \sum_n g_n

        where the bar is the mean over the D features: the two subtracted terms remove the
        components along which the normalisation itself is invariant (a shift of all
        features, and a rescaling).
        """
        cache = self.saved()
        x_hat, rstd = cache["x_hat"], cache["rstd"]  # (..., D), (..., 1)
        g = as_grad(grad_output, x_hat.shape, x_hat.dtype)
        D = self.d_model
        g2, xh2 = g.reshape(-1, D), x_hat.reshape(-1, D)  # (N, D)
        gamma = self.params["gamma"]
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
    .. math:: y = \\frac{m \\odot x}{1 - p}, \\qquad m_i \\sim \\mathrm{Bernoulli}(1 - p)

    so that the expected value of ``y`` is ``x``; at evaluation time (``training = False``) the
    layer is the identity. The backward pass multiplies by the same mask.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import Dropout
    >>> drop = Dropout(0.5, rng=np.random.default_rng(0))
    >>> drop.training = True
    >>> y = drop(np.ones(8))
    >>> sorted(set(y.tolist()))
    [0.0, 2.0]
    """

    def __init__(self, p=0.0, rng=None):
        super().__init__()
        check_probability(p, "Dropout.p")
        self.p = float(p)
        self.rng = check_rng(rng)

    def __repr__(self):
        return f"Dropout(p={self.p})"

    def checked_call(self, x):
        return self.forward(as_float_array(x, "x"))

    def forward(self, x):
        """``x`` itself at evaluation time; ``x`` with a fresh random mask in training."""
        if not self.training or self.p == 0.0:
            self.cache = None
            return x
        keep = self.rng.random(x.shape) >= self.p  # each value kept with probability 1 - p
        self.cache = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - self.p))
        return x * self.cache

    def backward(self, grad_output):
        """The gradient through the same mask (unchanged at evaluation time)."""
        return grad_output if self.cache is None else grad_output * self.cache


def check_probability(p, name: str) -> float:
    """``p`` as a float in [0, 1), else a TypeError or ValueError naming ``name``."""
    if isinstance(p, bool | np.bool_) or not isinstance(p, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a number, got {p!r}")
    if not np.isfinite(p):
        raise ValueError(f"{name} must be a finite number, got {p}")
    if p < 0.0:
        raise ValueError(f"{name} must be >= 0.0, got {p}")
    if p >= 1.0:
        raise ValueError(f"{name} must be < 1.0, got {p}")
    return float(p)
