"""Pure functions: softmax, activations (ReLU, GELU and the error function), masks, layer norm.

Everything here is stateless maths on NumPy arrays. The layers in :mod:`transformer_np.layers`
and :mod:`transformer_np.attention` hold parameters and call these functions.

Conventions
-----------
* A **mask** is boolean: ``True`` means "may attend", ``False`` means "blocked".
* float32 in gives float32 out, float64 in gives float64 out; float16 is computed in float32
  and cast back.
"""

from __future__ import annotations

import math

import numpy as np

from ._kernels.threads import num_threads, parallel_for, split_range
from ._validation import (
    as_float_array,
    check_axis,
    check_finite,
    check_positive_float,
    check_positive_int,
    compute_dtype,
    shape_str,
)

__all__ = [
    "causal_mask",
    "erf",
    "gelu",
    "layer_norm",
    "padding_mask",
    "relu",
    "softmax",
]


# --------------------------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------------------------


def softmax(x, axis=-1):
    """Numerically stable softmax along ``axis``.

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
        Non-negative values that sum to 1 along ``axis``. A slice whose entries are all
        ``-inf`` has no probability distribution; it gets all zeros (the same rule as a fully
        masked row in attention), never NaN.

    Notes
    -----
    .. math:: \\mathrm{softmax}(x)_i = \\frac{e^{x_i - m}}{\\sum_j e^{x_j - m}},
              \\qquad m = \\max_j x_j

    Subtracting the maximum ``m`` changes nothing mathematically (it cancels between numerator
    and denominator) but keeps every exponent <= 0, so ``exp`` never overflows.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import softmax
    >>> p = softmax(np.array([1.0, 2.0, 3.0]))
    >>> np.round(p, 4)
    array([0.09  , 0.2447, 0.6652])
    >>> bool(np.isclose(p.sum(), 1.0))
    True
    """
    x, axis = check_softmax_input(x, axis, "a softmax")
    out = x.astype(compute_dtype(x.dtype), copy=True)
    softmax_inplace(out, axis)
    return out.astype(x.dtype, copy=False)


def check_softmax_input(x, axis, what: str) -> tuple[np.ndarray, int]:
    """``(x, axis)`` checked for ``what`` (a softmax or a log-softmax) along ``axis``.

    ``x`` must be a float array with at least one value along ``axis``, without NaN or +inf
    (-inf is a masked entry: its weight is 0).
    """
    x = as_float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x must have at least one axis, got a 0-d array")
    axis = check_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(
            f"x has no values along axis {axis} (shape {shape_str(x.shape)}): {what} needs "
            "at least one"
        )
    check_finite(x, "x", allow_neg_inf=True)
    return x, axis


def softmax_inplace(
    s: np.ndarray,
    axis: int = -1,
    row_max: np.ndarray | None = None,
    *,
    shift: bool = True,
    normalise: bool = True,
) -> np.ndarray:
    """Softmax of ``s`` along ``axis``, written into ``s`` itself (no input checks).

    The kernel behind :func:`softmax` and attention: 1. maximum of each slice, 2. subtract it,
    3. exponentiate, 4. divide by the slice sum; all in place on ``s``. A slice that is entirely
    ``-inf`` becomes all zeros. ``s`` must be a float array without NaN or ``+inf``.

    ``row_max``, if given, is ``np.max(s, axis=axis, keepdims=True)`` already computed by the
    caller; it is overwritten. ``shift=False`` skips steps 1-2, for a caller that knows that
    ``exp(s)`` cannot overflow (the softmax is the same whatever is subtracted from a slice).
    ``normalise=False`` skips step 4: ``s`` ends with the exponentials, and the caller divides
    something else by the sums.

    Returns the sums of the slices (``keepdims``), with 1 in place of 0 for an all ``-inf``
    slice.
    """
    if shift:
        # The maximum of each slice; an all -inf slice has max -inf: use 0 there instead, so
        # that exp(-inf - 0) = 0 and the slice ends as zeros instead of NaN.
        m = np.max(s, axis=axis, keepdims=True) if row_max is None else row_max
        np.copyto(m, 0, where=np.isneginf(m))
        s -= m
    np.exp(s, out=s)
    if axis in (-1, s.ndim - 1):  # a product with a vector of ones: BLAS sums rows faster
        total = np.matmul(s, np.ones(s.shape[-1], s.dtype))[..., None]
    else:
        total = np.sum(s, axis=axis, keepdims=True)
    # A slice sums to 0 only if it was all -inf (with the maximum subtracted, the maximum
    # contributes exp(0) = 1): divided by 1, it stays 0.
    total[total == 0] = 1
    if normalise:
        s /= total
    return total


# --------------------------------------------------------------------------------------------
# ReLU
# --------------------------------------------------------------------------------------------


def relu(x):
    """Rectified linear unit, ``max(x, 0)`` element-wise.

    Parameters
    ----------
    x : ndarray of shape (...)
        Finite floating-point values.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``

    Notes
    -----
    .. math:: \\mathrm{ReLU}(x) = \\max(0, x)

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import relu
    >>> relu(np.array([-2.0, 0.0, 3.0]))
    array([0., 0., 3.])
    """
    x = as_float_array(x, "x")
    check_finite(x, "x")
    return np.maximum(x, x.dtype.type(0))


# --------------------------------------------------------------------------------------------
# The error function and GELU
# --------------------------------------------------------------------------------------------
#
# erf and the Gaussian tail are not in NumPy. float64 uses the rational approximations of the
# Cephes library (S. L. Moshier, ndtr.c, the same ones SciPy uses), accurate to about 1e-16.
# float32 GELU uses one rational function, fitted for this package, of the scaled Gaussian
# tail R(a) = exp(a**2 / 2) * Q(a), where Q(a) = 1 - Phi(a) = erfc(a / sqrt(2)) / 2, on
# [0, 10]: numerator of degree 4, monic denominator of degree 5, all coefficients positive (so
# float32 evaluation has no cancellation), maximum relative error 2.5e-9 in exact arithmetic
# (fitted by linearised least squares with Lawson re-weighting against mpmath).

_SQRT1_2 = 0.7071067811865476  # 1 / sqrt(2)

# Cephes: erf(z) = z * T(z^2) / U(z^2) for |z| <= 1 (highest degree first, U monic).
_ERF_T = (
    9.60497373987051638749e0,
    9.00260197203842689217e1,
    2.23200534594684319226e3,
    7.00332514112805075473e3,
    5.55923013010394962768e4,
)
_ERF_U = (
    3.35617141647503099647e1,
    5.21357949780152679795e2,
    4.59432382970980127987e3,
    2.26290000613890934246e4,
    4.92673942608635921086e4,
)
# Cephes: erfc(z) = exp(-z^2) * P(z) / Q(z) for 1 <= z < 8 (highest degree first, Q monic).
_ERFC_P = (
    2.46196981473530512524e-10,
    5.64189564831068821977e-1,
    7.46321056442269912687e0,
    4.86371970985681366614e1,
    1.96520832956077098242e2,
    5.26445194995477358631e2,
    9.34528527171957607540e2,
    1.02755188689515710272e3,
    5.57535335369399327526e2,
)
_ERFC_Q = (
    1.32281951154744992508e1,
    8.67072140885989742329e1,
    3.54937778887819891062e2,
    9.75708501743205489753e2,
    1.82390916687909736289e3,
    2.24633760818710981792e3,
    1.65666309194161350182e3,
    5.57535340817727675546e2,
)
# Cephes: erfc(z) = exp(-z^2) * R(z) / S(z) for z >= 8 (highest degree first, S monic).
_ERFC_R = (
    5.64189583547755073984e-1,
    1.27536670759978104416e0,
    5.01905042251180477414e0,
    6.16021097993053585195e0,
    7.40974269950448939160e0,
    2.97886665372100240670e0,
)
_ERFC_S = (
    2.26052863220117276590e0,
    9.39603524938001434673e0,
    1.20489539808096656605e1,
    1.70814450747565897222e1,
    9.60896809063285878198e0,
    3.36907645100081516050e0,
)
# float32 scaled tail R(a) ~ N(a) / D(a) on [0, 10] (lowest degree first, D monic).
_TAIL32_N = tuple(
    np.float32(c)
    for c in (
        54.120539464187715,
        46.130227208860184,
        18.87584955942694,
        4.0787645903698975,
        0.39895352111311244,
    )
)
_TAIL32_D = tuple(
    np.float32(c)
    for c in (
        108.24107865505924,
        178.62436066225825,
        126.15252666579883,
        48.28967117882216,
        10.225206643333783,
    )
)
_TAIL32_MAX = np.float32(10.0)  # beyond it Q(a) < 8e-24: the tail is exp(-a^2/2) * R(10)

# Elements per chunk: the element-wise kernels run chunk by chunk on scratch buffers that stay
# in the CPU cache instead of streaming whole temporary arrays through memory. Each chunk costs
# about 27 ufunc calls, and each call holds the GIL for a moment: with two threads, chunks of
# 32768 left them waiting for each other. Measured on the exact float32 GELU of a (960, 1536)
# array, 2 threads: 9.3 ms with 32768, 7.8 with 65536, 7.5 with 131072 (one thread: about
# 12.3 ms for all three sizes).
_CHUNK = 65536
_PARALLEL_MIN = 1 << 17  # elements; below this one thread is faster than two


def _polevl(z, coefs):
    """Horner evaluation, highest-degree coefficient first."""
    r = coefs[0] * z + coefs[1]
    for c in coefs[2:]:
        r *= z
        r += c
    return r


def _p1evl(z, coefs):
    """Horner evaluation of a monic polynomial (implicit leading 1), highest degree first."""
    r = z + coefs[0]
    for c in coefs[1:]:
        r *= z
        r += c
    return r


def _erf_small64(z):
    """erf(z) for float64 ``|z| <= 1`` (Cephes)."""
    s = z * z
    return z * _polevl(s, _ERF_T) / _p1evl(s, _ERF_U)


def _erfc_large64(z, exp_mz2=None):
    """erfc(z) for float64 ``z >= 1`` (Cephes); 0 where it underflows.

    ``exp_mz2``, if given, is ``exp(-z**2)`` computed by the caller (more accurately).
    """
    if exp_mz2 is None:
        with np.errstate(over="ignore", under="ignore"):
            exp_mz2 = np.exp(-(z * z))  # underflows to 0 for z > 27
    zc = np.minimum(z, 30.0)  # keeps the polynomials finite; erfc(30) < 1e-392 is 0 anyway
    ratio = _polevl(zc, _ERFC_P) / _p1evl(zc, _ERFC_Q)  # 1 <= z < 8
    far = zc >= 8.0
    if far.any():  # rare (|x| > 11 in GELU): only then evaluate the far-tail fraction
        ratio = np.where(far, _polevl(zc, _ERFC_R) / _p1evl(zc, _ERFC_S), ratio)
    return exp_mz2 * ratio


def _erf64(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    small = _erf_small64(np.clip(x, -1.0, 1.0))
    large = np.copysign(1.0 - _erfc_large64(np.maximum(a, 1.0)), x)
    return np.where(a <= 1.0, small, large)


def erf(x):
    r"""The error function, element-wise, in NumPy alone.

    Parameters
    ----------
    x : ndarray of shape (...)
        Floating-point values; ``+-inf`` gives ``+-1``, NaN is rejected.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``

    Notes
    -----
    .. math:: \mathrm{erf}(x) = \frac{2}{\sqrt{\pi}} \int_0^x e^{-t^2}\, dt

    Computed in float64 with the rational approximations of the Cephes library (relative error
    about 1e-16) for every input dtype, then cast to the input dtype (so float32 results are
    correctly rounded or within one unit in the last place).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import erf
    >>> np.round(erf(np.array([-1.0, 0.0, 0.5, 2.0])), 6)
    array([-0.842701,  0.      ,  0.5205  ,  0.995322])
    """
    x = as_float_array(x, "x")
    if np.isnan(x).any():
        raise ValueError("x contains NaN; expected real values")
    return _erf64(x.astype(np.float64, copy=False)).astype(x.dtype, copy=False)


def _gelu_range32(x, out):
    """Exact GELU of a contiguous float32 array: ``out = max(x, 0) - |x| * Q(|x|)``.

    Runs chunk by chunk on five scratch buffers that stay in the CPU cache.
    """
    m = min(x.size, _CHUNK)
    a, ac, e, num, den = (np.empty(m, np.float32) for _ in range(5))
    # ufuncs with an array operand are much faster than with a scalar one for min/max
    lim = np.full(m, _TAIL32_MAX, np.float32)
    zero = np.zeros(m, np.float32)
    n, d = _TAIL32_N, _TAIL32_D
    for start in range(0, x.size, _CHUNK):
        xs = x[start : start + _CHUNK]
        k = xs.size
        if k < m:
            a, ac, e, num, den, lim, zero = (b[:k] for b in (a, ac, e, num, den, lim, zero))
        np.abs(xs, out=a)
        np.minimum(a, lim, out=ac)
        # e = exp(-a^2 / 2) (underflows to 0 for |x| > 14, as the true value does)
        np.multiply(a, a, out=e)
        e *= np.float32(-0.5)
        np.exp(e, out=e)
        # R(ac) = N(ac) / D(ac), Horner in place
        np.multiply(ac, n[4], out=num)
        for c in (n[3], n[2], n[1]):
            num += c
            num *= ac
        num += n[0]
        np.add(ac, d[4], out=den)
        for c in (d[3], d[2], d[1], d[0]):
            den *= ac
            den += c
        num /= den
        # |x| * Q(|x|) = |x| * e * R
        num *= e
        num *= a
        os_ = out[start : start + _CHUNK]
        np.maximum(xs, zero, out=os_)
        os_ -= num


def _gelu_range64(x, out):
    """Exact GELU of a contiguous float64 array: ``out = max(x, 0) - |x| * Q(|x|)``."""
    for start in range(0, x.size, _CHUNK):
        xs = x[start : start + _CHUNK]
        a = np.abs(xs)
        z = a * _SQRT1_2  # Q(a) = erfc(z) / 2
        with np.errstate(over="ignore", under="ignore"):
            e = np.exp(-0.5 * (a * a))  # exp(-z^2), without the rounding of z
        tail_small = 0.5 - 0.5 * _erf_small64(np.minimum(z, 1.0))
        tail_large = 0.5 * _erfc_large64(np.maximum(z, 1.0), e)
        tail = np.where(z <= 1.0, tail_small, tail_large)
        os_ = out[start : start + _CHUNK]
        np.maximum(xs, 0.0, out=os_)
        os_ -= a * tail


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    """Exact GELU of a float32 or float64 array (no checks), on all cores for large arrays."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
    kernel = _gelu_range32 if flat.dtype == np.float32 else _gelu_range64
    n_threads = num_threads()
    if n_threads > 1 and flat.size >= _PARALLEL_MIN:
        # NumPy runs element-wise ufuncs on one core; one slice per core runs them on all.
        parallel_for(lambda sl: kernel(flat[sl], out[sl]), split_range(flat.size, n_threads))
    else:
        kernel(flat, out)
    return out.reshape(x.shape)


_GELU_TANH_C = math.sqrt(2.0 / math.pi)


def gelu(x, approximate=False):
    r"""Gaussian error linear unit, ``x * Phi(x)``, element-wise.

    Parameters
    ----------
    x : ndarray of shape (...)
        Finite floating-point values.
    approximate : bool or {"none", "tanh"}, default False
        ``False`` (or ``"none"``): the exact GELU, with the error function (BERT, and
        ``torch.nn.functional.gelu``'s default). ``True`` (or ``"tanh"``): the tanh
        approximation of the GPT-2 code.

    Returns
    -------
    ndarray of the same shape and dtype as ``x``

    Notes
    -----
    .. math:: \mathrm{GELU}(x) = x\,\Phi(x)
              = \frac{x}{2}\left(1 + \mathrm{erf}\!\left(\frac{x}{\sqrt{2}}\right)\right)

    The exact form is computed as ``max(x, 0) - |x| Q(|x|)`` with the Gaussian tail
    ``Q(a) = 1 - Phi(a) = erfc(a / sqrt(2)) / 2``, which keeps full relative accuracy for
    negative ``x`` too (where ``1 + erf`` would cancel). float64: Cephes rational
    approximations, error about 1e-16. float32: a dedicated rational approximation of the
    scaled tail evaluated in float32, chunk by chunk in cache; absolute error within one
    float32 rounding of the result, relative error below 3e-6 for ``x > -10`` (PyTorch's own
    float32 kernel is off by up to about 5e-7 absolute). The tanh form is
    ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import gelu
    >>> np.round(gelu(np.array([-3.0, -1.0, 0.0, 1.0, 3.0])), 6)
    array([-0.00405 , -0.158655,  0.      ,  0.841345,  2.99595 ])
    """
    x = as_float_array(x, "x")
    if approximate in (False, "none"):
        exact = True
    elif approximate in (True, "tanh"):
        exact = False
    else:
        raise ValueError(f'approximate must be False, True, "none" or "tanh", got {approximate!r}')
    check_finite(x, "x")
    dt = compute_dtype(x.dtype)
    xc = x.astype(dt, copy=False)
    if exact:
        y = _gelu_exact(xc)
    else:
        inner = xc * xc
        inner *= dt.type(0.044715)
        inner += dt.type(1)
        inner *= xc
        inner *= dt.type(_GELU_TANH_C)
        np.tanh(inner, out=inner)
        inner += dt.type(1)
        inner *= xc
        inner *= dt.type(0.5)
        y = inner
    return y.astype(x.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# masks
# --------------------------------------------------------------------------------------------


def causal_mask(n):
    r"""Boolean causal (look-ahead) mask: position ``i`` may attend to positions ``j <= i``.

    Parameters
    ----------
    n : int
        Sequence length, > 0.

    Returns
    -------
    ndarray of bool, shape (n, n)
        ``mask[i, j]`` is True when query ``i`` may attend to key ``j`` (lower triangle and
        diagonal). It broadcasts against scores of shape ``(..., n, n)``.

    Notes
    -----
    .. math:: M_{ij} = [\, j \le i \,]

    Examples
    --------
    >>> from transformer_np import causal_mask
    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    n = check_positive_int(n, "n")
    return np.tri(n, n, dtype=bool)


def padding_mask(lengths, max_len=None):
    r"""Boolean key-padding mask from the true lengths of the sequences of a batch.

    Parameters
    ----------
    lengths : array_like of int, shape (B,)
        Number of real (non-padding) tokens of each sequence, ``0 <= lengths[b] <= max_len``.
        The real tokens are the first ``lengths[b]`` positions (right padding).
    max_len : int, optional
        Padded sequence length; defaults to ``max(lengths)``.

    Returns
    -------
    ndarray of bool, shape (B, 1, 1, max_len)
        True where the key is a real token. The two singleton axes broadcast over the heads
        and the query positions of multi-head scores of shape ``(B, H, n_q, max_len)``; for
        single-head scores ``(B, n_q, n_k)`` use ``mask[:, 0]`` of shape ``(B, 1, max_len)``.

    Notes
    -----
    .. math:: M_{b,j} = [\, j < \mathrm{lengths}_b \,]

    A sequence of length 0 blocks every key: its attention weights are all 0 and its output
    is 0 (see :func:`~transformer_np.scaled_dot_product_attention`).

    Examples
    --------
    >>> from transformer_np import padding_mask
    >>> m = padding_mask([3, 1])
    >>> m.shape
    (2, 1, 1, 3)
    >>> m[:, 0, 0].astype(int)
    array([[1, 1, 1],
           [1, 0, 0]])
    """
    arr = np.asarray(lengths)
    if arr.dtype.kind not in "iu" or arr.dtype == bool:
        raise TypeError(f"lengths must be an array of integers, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"lengths must be a non-empty 1-D array (one length per sequence), "
            f"got shape {shape_str(arr.shape)}"
        )
    if (arr < 0).any():
        raise ValueError(f"lengths must be >= 0, got {arr.tolist()}")
    if max_len is None:
        max_len = int(arr.max())
        if max_len == 0:
            raise ValueError("every length is 0: pass max_len to say how long the padded batch is")
    max_len = check_positive_int(max_len, "max_len")
    if (arr > max_len).any():
        raise ValueError(f"lengths must be <= max_len = {max_len}, got {arr.tolist()}")
    mask = np.arange(max_len) < arr[:, None]  # (B, max_len)
    return mask[:, None, None, :]  # (B, max_len) -> (B, 1, 1, max_len)


# --------------------------------------------------------------------------------------------
# layer normalisation
# --------------------------------------------------------------------------------------------


def layer_norm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float):
    """Layer norm kernel without checks; returns ``(y, x_hat, rstd)`` for a backward pass.

    ``x_hat`` is the normalised input (same shape as ``x``) and ``rstd`` the reciprocal
    standard deviation of shape ``x.shape[:-1] + (1,)``. All arrays are in ``x``'s dtype.
    """
    mu = np.mean(x, axis=-1, keepdims=True)  # (..., D) -> (..., 1)
    x_hat = x - mu
    var = np.einsum("...i,...i->...", x_hat, x_hat)[..., None]  # (..., D) -> (..., 1)
    var /= x.shape[-1]
    var += eps
    rstd = np.sqrt(var, out=var)
    np.reciprocal(rstd, out=rstd)
    x_hat *= rstd
    y = x_hat * gamma
    y += beta
    return y, x_hat, rstd


def layer_norm(x, gamma, beta, eps=1e-5):
    r"""Layer normalisation over the last axis, then a learned affine map.

    Parameters
    ----------
    x : ndarray of shape (..., D)
        Finite floating-point features.
    gamma : ndarray of shape (D,)
        Scale.
    beta : ndarray of shape (D,)
        Shift.
    eps : float, default 1e-5
        Added to the variance for numerical safety (BERT uses 1e-12).

    Returns
    -------
    ndarray of shape (..., D)
        In ``x``'s dtype.

    Notes
    -----
    .. math:: \mathrm{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}
              + \beta, \qquad \mu = \frac{1}{D}\sum_i x_i, \quad
              \sigma^2 = \frac{1}{D}\sum_i (x_i - \mu)^2

    The variance is the biased one (divided by ``D``), as in the paper and in PyTorch.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import layer_norm
    >>> x = np.array([[1.0, 2.0, 3.0, 4.0]])
    >>> y = layer_norm(x, np.ones(4), np.zeros(4))
    >>> np.round(y, 4)
    array([[-1.3416, -0.4472,  0.4472,  1.3416]])
    """
    x = as_float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x must have a feature axis (shape (..., D)), got a 0-d array")
    d = x.shape[-1]
    gamma = as_float_array(gamma, "gamma")
    beta = as_float_array(beta, "beta")
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p.shape != (d,):
            raise ValueError(
                f"{name} must have shape (D,) = ({d},) to match x {shape_str(x.shape)}, "
                f"got {shape_str(p.shape)}"
            )
    eps = check_positive_float(eps, "eps")
    check_finite(x, "x")
    check_finite(gamma, "gamma")
    check_finite(beta, "beta")
    dt = compute_dtype(x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        y, _, rstd = layer_norm_forward(
            x.astype(dt, copy=False), gamma.astype(dt, copy=False), beta.astype(dt, copy=False), eps
        )
    check_normalised(rstd, x, "x")
    return y.astype(x.dtype, copy=False)


def check_normalised(rstd: np.ndarray, x: np.ndarray, name: str) -> None:
    """Raise ValueError if a row of finite ``x`` was too large for its dtype's layer norm.

    ``rstd`` is :func:`layer_norm_forward`'s ``1 / sqrt(var + eps)``, one value per row: an
    overflow of the mean or the variance makes it NaN or 0 (and the output wrong: a row of zeros
    or NaN), so checking these few values is enough.
    """
    if not (np.isfinite(rstd).all() and (rstd > 0).all()):
        raise ValueError(
            f"{name} is too large to normalise in {rstd.dtype} (the mean or variance of a row "
            f"overflows; largest |{name}| = {float(np.max(np.abs(x))):.3g}); scale it down or "
            "use float64"
        )
