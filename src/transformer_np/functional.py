"""Pure functions: softmax and log-softmax, ReLU, GELU and erf, layer normalisation.

float32 in gives float32 out, float64 gives float64; float16 is computed in float32 and cast back.
Pages: attention.md (softmax), feed-forward.md (ReLU, GELU, erf), layer-norm.md, backprop.md
(log-softmax).
"""

from __future__ import annotations

import math

import numpy as np
from jaxtyping import Float

from ._checks.boundary import checked, to_compute
from ._checks.functions import (
    check_erf,
    check_gelu,
    check_layer_norm,
    check_log_softmax,
    check_relu,
    check_softmax,
)
from ._checks.general import check_normalised
from ._kernels.gelu import erf64
from ._kernels.gelu import gelu as exact_gelu

__all__ = [
    "erf",
    "gelu",
    "layer_norm",
    "log_softmax",
    "relu",
    "softmax",
]


# --------------------------------------------------------------------------------------------
# softmax and log-softmax
# --------------------------------------------------------------------------------------------


@checked(check_softmax)
# --8<-- [start:softmax]
def softmax(x: Float[np.ndarray, "..."], axis=-1):
    """Numerically stable softmax along ``axis``. Page: attention.md.

    Parameters
    ----------
    x : ndarray of shape (...)
        Real scores (logits). ``-inf`` is allowed and means "probability exactly 0";
        NaN and ``+inf`` are rejected.
    axis : int, default -1
        The axis along which the output sums to 1.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``
        Non-negative values that sum to 1 along ``axis``; a slice that is ``-inf`` everywhere
        gets all zeros (a fully masked row in attention), never NaN.
    """
    xc = to_compute(x)  # float16 is computed in float32
    # 1. The maximum of each slice. An all -inf slice has maximum -inf: use 0 there instead,
    #    so that its exponentials are exp(-inf - 0) = 0, not exp(-inf + inf) = NaN.
    m = np.max(xc, axis=axis, keepdims=True)  # (...) -> (...) with 1 along axis
    m[np.isneginf(m)] = 0
    # 2. Exponentials of the shifted scores, all in [0, 1]: no overflow.
    e = xc - m  # (...), a new array: x is left unchanged
    np.exp(e, out=e)
    # 3. The sum of each slice. It is 0 only for an all -inf slice (otherwise the maximum
    #    contributes exp(0) = 1): divided by 1, that slice stays 0.
    total = np.sum(e, axis=axis, keepdims=True)  # (...) -> (...) with 1 along axis
    total[total == 0] = 1
    # 4. Normalise.
    e /= total  # (...)
    return e.astype(x.dtype, copy=False)


# --8<-- [end:softmax]


@checked(check_log_softmax)
# --8<-- [start:log_softmax]
def log_softmax(x: Float[np.ndarray, "..."], axis=-1):
    """Numerically stable ``log(softmax(x))``. Page: backprop.md.

    Parameters
    ----------
    x : ndarray of shape (..., V), V >= 1
        Logits. ``-inf`` is allowed (a masked class: its log-probability is ``-inf``); NaN and
        ``+inf`` are rejected.
    axis : int, default -1
        The axis holding the classes.

    Returns
    -------
    ndarray of shape (..., V)
        ``x - logsumexp(x)`` along ``axis``, in ``x``'s dtype. A slice that is ``-inf``
        everywhere stays ``-inf`` everywhere (the log of the all-zero :func:`softmax`), never
        NaN.
    """
    # 1. The maximum of each slice (0 for an all -inf slice: -inf - 0, not -inf + inf = NaN).
    m = x.max(axis=axis, keepdims=True)  # (..., V) -> (..., 1)
    np.copyto(m, 0, where=np.isneginf(m))
    # 2. Shift, so that every exponent is <= 0.
    shifted = x - m  # (..., V)
    # 3. log of the sum of the exponentials. Only an all -inf slice sums to 0: log 1 = 0 keeps
    #    it -inf.
    total = np.exp(shifted).sum(axis=axis, keepdims=True)  # (..., V) -> (..., 1)
    total[total == 0] = 1
    # 4. x - m - log sum exp(x - m)
    return shifted - np.log(total)  # (..., V)


# --8<-- [end:log_softmax]


# --------------------------------------------------------------------------------------------
# ReLU
# --------------------------------------------------------------------------------------------


@checked(check_relu)
# --8<-- [start:relu]
def relu(x: Float[np.ndarray, "..."]):
    """Rectified linear unit, ``max(x, 0)`` element-wise. Page: feed-forward.md.

    Parameters
    ----------
    x : ndarray of shape (...)
        Finite floating-point values.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``
    """
    return np.maximum(x, x.dtype.type(0))  # max(x, 0), with 0 in x's dtype


# --8<-- [end:relu]


# --------------------------------------------------------------------------------------------
# the error function and GELU
# --------------------------------------------------------------------------------------------


@checked(check_erf)
# --8<-- [start:erf]
def erf(x: Float[np.ndarray, "..."]):
    r"""The error function, element-wise, in NumPy alone. Page: feed-forward.md.

    Parameters
    ----------
    x : ndarray of shape (...)
        Floating-point values; ``+-inf`` gives ``+-1``, NaN is rejected.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``
        Computed in float64 with the rational approximations of the Cephes library (relative
        error about 1e-16), then cast to ``x``'s dtype.
    """
    y = erf64(x.astype(np.float64, copy=False))  # Cephes, in float64
    return y.astype(x.dtype, copy=False)


# --8<-- [end:erf]


# --8<-- [start:gelu_tanh_c]
_GELU_TANH_C = math.sqrt(2.0 / math.pi)
# --8<-- [end:gelu_tanh_c]


@checked(check_gelu)
# --8<-- [start:gelu]
def gelu(x: Float[np.ndarray, "..."], approximate=False, *, with_slope=False):
    r"""Gaussian error linear unit, ``x * Phi(x)``, element-wise. Page: feed-forward.md.

    Parameters
    ----------
    x : ndarray of shape (...)
        Finite floating-point values.
    approximate : bool or {"none", "tanh"}, default False
        ``False`` (or ``"none"``): the exact GELU, with the error function (BERT, and
        ``torch.nn.functional.gelu``'s default). ``True`` (or ``"tanh"``): the tanh
        approximation of the GPT-2 code.
    with_slope : bool, default False
        Also return the derivative at ``x`` (keyword only), computed in the same pass: the
        feed-forward network keeps it for its backward pass while training.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``
        GELU(x).
    slope : ndarray of the same shape and dtype as ``x``, only with ``with_slope=True``
        GELU'(x): ``Phi(x) + x phi(x)`` for the exact form (``phi`` the standard normal
        density), the derivative of the tanh formula for the approximation.

    Notes
    -----
    The exact form is computed as ``max(x, 0) - |x| Q(|x|)``, ``Q`` the Gaussian tail, which
    keeps full relative accuracy for negative ``x``: error about 1e-16 in float64, within one
    rounding of the result in float32.
    """
    xc = to_compute(x)  # float16 is computed in float32
    slope = None
    if not approximate:
        # y = 0.5 x (1 + erf(x / sqrt 2)). The kernel computes it as max(x, 0) - |x| Q(|x|),
        # which is the same number without the cancellation of 1 + erf(x / sqrt 2) for x < 0,
        # on every core for large arrays; and, if asked, Phi(x) + x phi(x) from the same Q.
        if with_slope:
            y, slope = exact_gelu(xc, with_slope=True)
        else:
            y = exact_gelu(xc)
    else:
        # y = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), step by step
        x2 = xc * xc  # x^2
        t = x2 * 0.044715
        t += 1
        t *= xc  # x (1 + 0.044715 x^2) = x + 0.044715 x^3
        t *= _GELU_TANH_C  # u
        np.tanh(t, out=t)  # tanh(u)
        y = t + 1
        y *= xc
        y *= 0.5
        if with_slope:
            # y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u', u' = sqrt(2/pi) (1 + 3 0.044715 x^2)
            du = x2 * (3 * 0.044715)
            du += 1
            du *= _GELU_TANH_C
            slope = 1 - t * t
            slope *= du
            slope *= xc
            slope += t + 1
            slope *= 0.5
    if with_slope:
        return y.astype(x.dtype, copy=False), slope.astype(x.dtype, copy=False)
    return y.astype(x.dtype, copy=False)


# --8<-- [end:gelu]


# --------------------------------------------------------------------------------------------
# layer normalisation
# --------------------------------------------------------------------------------------------


@checked(check_layer_norm)
# --8<-- [start:layer_norm]
def layer_norm(
    x: Float[np.ndarray, "*B D"],
    gamma: Float[np.ndarray, " D"],
    beta: Float[np.ndarray, " D"],
    eps=1e-5,
    *,
    with_stats=False,
):
    r"""Layer normalisation over the last axis, then a learned affine map. Page: layer-norm.md.

    Parameters
    ----------
    x : ndarray of shape (..., D)
        Finite floating-point features, D >= 1.
    gamma : ndarray of shape (D,)
        Scale.
    beta : ndarray of shape (D,)
        Shift.
    eps : float, default 1e-5
        Added to the (biased) variance for numerical safety (BERT uses 1e-12).
    with_stats : bool, default False
        Also return ``x_hat`` and ``rstd`` (keyword only), which the
        :class:`~transformer_np.LayerNorm` layer keeps for its backward pass.

    Returns
    -------
    ndarray of shape (..., D)
        In ``x``'s dtype.
    x_hat : ndarray of shape (..., D), only with ``with_stats=True``
        The normalised input ``(x - mu) * rstd``.
    rstd : ndarray of shape (..., 1), only with ``with_stats=True``
        ``1 / sqrt(var + eps)`` of each row.
    """
    xc = to_compute(x)  # float16 is computed in float32
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        # 1. The mean of each row, and the centred input.
        mu = xc.sum(axis=-1, keepdims=True) / x.shape[-1]  # (..., D) -> (..., 1)
        x_hat = xc - mu  # (..., D)
        # 2. The biased variance, sum of squares / D (einsum: without a squared copy of x).
        var = np.einsum("...i,...i->...", x_hat, x_hat)[..., None]  # (..., D) -> (..., 1)
        var /= x.shape[-1]
        # 3. rstd = 1 / sqrt(var + eps), and the normalised input.
        var += eps
        rstd = np.sqrt(var, out=var)
        np.reciprocal(rstd, out=rstd)  # (..., 1)
        x_hat *= rstd  # (..., D)
        # 4. The affine map.
        y = x_hat * gamma.astype(xc.dtype, copy=False)
        y += beta.astype(xc.dtype, copy=False)  # (..., D)
    check_normalised(rstd, x, "x")  # a row too large for the dtype: an error, not zeros
    y = y.astype(x.dtype, copy=False)
    return (y, x_hat, rstd) if with_stats else y


# --8<-- [end:layer_norm]
