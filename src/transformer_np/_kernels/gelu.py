"""The error function and the exact GELU, forward and backward: the fast, accurate kernels.

:mod:`transformer_np.functional` states the maths, ``erf(x)`` and
``GELU(x) = 0.5 x (1 + erf(x / sqrt 2))``, and checks its inputs; this module computes them,
without checks, for float32 and float64 arrays:

* :func:`erf64`: erf in float64 with the rational approximations of the Cephes library.
* :func:`gelu`: the exact GELU as ``max(x, 0) - |x| Q(|x|)``, with ``Q(a) = 1 - Phi(a)`` the
  Gaussian tail, which keeps full relative accuracy for negative ``x`` too (where
  ``1 + erf(x / sqrt 2)`` would cancel); chunk by chunk in cache, on every core for large arrays.
* :func:`gelu_backward`: ``grad * GELU'(h)`` for the backward pass of the feed-forward network.

``tests/test_kernels_gelu.py`` checks each of them against the plain formula.

Where the constants come from
-----------------------------
erf and the Gaussian tail are not in NumPy. float64 uses the rational approximations of the
Cephes library (S. L. Moshier, ndtr.c, the same ones SciPy uses), accurate to about 1e-16.
float32 GELU uses one rational function, fitted for this package, of the scaled Gaussian tail
``R(a) = exp(a**2 / 2) * Q(a)``, where ``Q(a) = 1 - Phi(a) = erfc(a / sqrt(2)) / 2``, on
``[0, 10]``: numerator of degree 4, monic denominator of degree 5, all coefficients positive (so
float32 evaluation has no cancellation), maximum relative error 2.5e-9 in exact arithmetic
(fitted by linearised least squares with Lawson re-weighting against mpmath); 3.2e-8 with the
coefficients rounded to float32, as they are stored (checked by ``tests/test_kernels_gelu.py``).
"""

from __future__ import annotations

import threading

import numpy as np

from .threads import num_threads, parallel_for, split_range

__all__ = [
    "CHUNK",
    "PARALLEL_MIN",
    "erf64",
    "erf_small64",
    "erfc_large64",
    "gelu",
    "gelu_backward",
    "gelu_range32",
    "gelu_range64",
]

SQRT1_2 = 0.7071067811865476  # 1 / sqrt(2)
INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)

# Cephes: erf(z) = z * T(z^2) / U(z^2) for |z| <= 1 (highest degree first, U monic).
ERF_T = (
    9.60497373987051638749e0,
    9.00260197203842689217e1,
    2.23200534594684319226e3,
    7.00332514112805075473e3,
    5.55923013010394962768e4,
)
ERF_U = (
    3.35617141647503099647e1,
    5.21357949780152679795e2,
    4.59432382970980127987e3,
    2.26290000613890934246e4,
    4.92673942608635921086e4,
)
# Cephes: erfc(z) = exp(-z^2) * P(z) / Q(z) for 1 <= z < 8 (highest degree first, Q monic).
ERFC_P = (
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
ERFC_Q = (
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
ERFC_R = (
    5.64189583547755073984e-1,
    1.27536670759978104416e0,
    5.01905042251180477414e0,
    6.16021097993053585195e0,
    7.40974269950448939160e0,
    2.97886665372100240670e0,
)
ERFC_S = (
    2.26052863220117276590e0,
    9.39603524938001434673e0,
    1.20489539808096656605e1,
    1.70814450747565897222e1,
    9.60896809063285878198e0,
    3.36907645100081516050e0,
)
# float32 scaled tail R(a) ~ N(a) / D(a) on [0, 10] (lowest degree first, D monic).
TAIL32_N = tuple(
    np.float32(c)
    for c in (
        54.120539464187715,
        46.130227208860184,
        18.87584955942694,
        4.0787645903698975,
        0.39895352111311244,
    )
)
TAIL32_D = tuple(
    np.float32(c)
    for c in (
        108.24107865505924,
        178.62436066225825,
        126.15252666579883,
        48.28967117882216,
        10.225206643333783,
    )
)
TAIL32_MAX = np.float32(10.0)  # beyond it Q(a) < 8e-24: the tail is exp(-a^2/2) * R(10)

# Elements per chunk: the GELU kernels run chunk by chunk on scratch buffers that stay in the
# CPU cache instead of streaming whole temporary arrays through memory. Each chunk costs about
# 27 ufunc calls, and each call holds the GIL for a moment: with two threads, smaller chunks
# (32768) left them waiting for each other, while larger ones gained little more.
CHUNK = 65536
PARALLEL_MIN = 1 << 17  # elements; below this one thread is faster than two


# --------------------------------------------------------------------------------------------
# erf in float64 (Cephes)
# --------------------------------------------------------------------------------------------


def polevl(z, coefs):
    """Horner evaluation, highest-degree coefficient first."""
    r = coefs[0] * z + coefs[1]
    for c in coefs[2:]:
        r *= z
        r += c
    return r


def p1evl(z, coefs):
    """Horner evaluation of a monic polynomial (implicit leading 1), highest degree first."""
    r = z + coefs[0]
    for c in coefs[1:]:
        r *= z
        r += c
    return r


def erf_small64(z):
    """erf(z) for float64 ``|z| <= 1`` (Cephes)."""
    s = z * z
    return z * polevl(s, ERF_T) / p1evl(s, ERF_U)


def erfc_large64(z, exp_mz2=None):
    """erfc(z) for float64 ``z >= 1`` (Cephes); 0 where it underflows.

    ``exp_mz2``, if given, is ``exp(-z**2)`` computed by the caller (more accurately).
    """
    if exp_mz2 is None:
        with np.errstate(over="ignore", under="ignore"):
            exp_mz2 = np.exp(-(z * z))  # underflows to 0 for z > 27
    zc = np.minimum(z, 30.0)  # keeps the polynomials finite; erfc(30) < 1e-392 is 0 anyway
    ratio = polevl(zc, ERFC_P) / p1evl(zc, ERFC_Q)  # 1 <= z < 8
    far = zc >= 8.0
    if far.any():  # rare (|x| > 11 in GELU): only then evaluate the far-tail fraction
        ratio = np.where(far, polevl(zc, ERFC_R) / p1evl(zc, ERFC_S), ratio)
    return exp_mz2 * ratio


def erf64(x: np.ndarray) -> np.ndarray:
    """The error function of a float64 array (no checks), relative error about 1e-16.

    Parameters
    ----------
    x : ndarray of float64, shape (...)
        Real values; ``+-inf`` gives ``+-1``.

    Returns
    -------
    ndarray of float64, shape (...)
    """
    a = np.abs(x)
    small = erf_small64(np.clip(x, -1.0, 1.0))  # |x| <= 1
    large = np.copysign(1.0 - erfc_large64(np.maximum(a, 1.0)), x)  # |x| > 1: 1 - erfc(|x|)
    return np.where(a <= 1.0, small, large)


# --------------------------------------------------------------------------------------------
# exact GELU, forward
# --------------------------------------------------------------------------------------------


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# Constant operands of the float32 kernel, one chunk long, shared by every call and thread.
LIM32 = _read_only(np.full(CHUNK, TAIL32_MAX, np.float32))
ZERO32 = _read_only(np.zeros(CHUNK, np.float32))
_scratch = threading.local()


def scratch32() -> tuple[np.ndarray, ...]:
    """The calling thread's scratch buffers for :func:`gelu_range32`: five float32 and one bool.

    Allocated once per thread and reused by every call: fresh buffers at every call cost a page
    fault per 4 KiB page when first written (about 1 ms per call for the six of them).
    """
    buffers = getattr(_scratch, "f32", None)
    if buffers is None:
        buffers = _scratch.f32 = (*np.empty((5, CHUNK), np.float32), np.empty(CHUNK, bool))
    return buffers


def gelu_range32(x, out, slope=None):
    """Exact GELU of a contiguous float32 array: ``out = max(x, 0) - |x| * Q(|x|)``.

    Runs chunk by chunk on six scratch buffers that stay in the CPU cache (the calling thread's
    own, :func:`scratch32`). With ``slope`` (an
    array like ``out``) it also writes ``GELU'(x) = Phi(x) + x phi(x)`` from the same ``Q`` and
    ``exp(-x^2 / 2)``: ``Phi(x)`` is ``1 - Q(|x|)`` for ``x >= 0`` and ``Q(|x|)`` for ``x < 0``.
    """
    m = min(x.size, CHUNK)
    a, ac, e, num, den, pos = (b[:m] for b in scratch32())
    # ufuncs with an array operand are much faster than with a scalar one for min/max
    lim, zero = LIM32[:m], ZERO32[:m]
    n, d = TAIL32_N, TAIL32_D
    for start in range(0, x.size, CHUNK):
        xs = x[start : start + CHUNK]
        k = xs.size
        if k < m:
            a, ac, e, num, den, lim, zero, pos = (
                b[:k] for b in (a, ac, e, num, den, lim, zero, pos)
            )
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
        num *= e  # Q(|x|) = e * R
        if slope is not None:
            ss = slope[start : start + CHUNK]
            # Phi(x) = Q + [x >= 0] (1 - 2 Q): Q(|x|) for x < 0, 1 - Q(|x|) for x >= 0
            # (arithmetic with the 0/1 mask: a masked copy is many times slower)
            np.multiply(num, np.float32(-2), out=ss)
            ss += np.float32(1)
            np.greater_equal(xs, zero, out=pos)
            np.multiply(ss, pos, out=ss)
            ss += num
            e *= np.float32(INV_SQRT_2PI)  # phi(x)
            e *= xs
            ss += e  # Phi(x) + x phi(x)
        num *= a  # |x| * Q(|x|)
        os_ = out[start : start + CHUNK]
        np.maximum(xs, zero, out=os_)
        os_ -= num


def gelu_range64(x, out, slope=None):
    """Exact GELU of a contiguous float64 array: ``out = max(x, 0) - |x| * Q(|x|)``.

    With ``slope``, also ``GELU'(x) = Phi(x) + x phi(x)``, as :func:`gelu_range32` does.
    """
    for start in range(0, x.size, CHUNK):
        xs = x[start : start + CHUNK]
        a = np.abs(xs)
        z = a * SQRT1_2  # Q(a) = erfc(z) / 2
        with np.errstate(over="ignore", under="ignore"):
            e = np.exp(-0.5 * (a * a))  # exp(-z^2), without the rounding of z
        tail_small = 0.5 - 0.5 * erf_small64(np.minimum(z, 1.0))
        tail_large = 0.5 * erfc_large64(np.maximum(z, 1.0), e)
        tail = np.where(z <= 1.0, tail_small, tail_large)
        os_ = out[start : start + CHUNK]
        np.maximum(xs, 0.0, out=os_)
        os_ -= a * tail
        if slope is not None:  # Phi(x) + x phi(x), Phi(x) = Q(|x|) for x < 0, 1 - Q otherwise
            phi_cdf = np.where(xs < 0.0, tail, 1.0 - tail)
            phi_cdf += xs * e * INV_SQRT_2PI
            slope[start : start + CHUNK] = phi_cdf


def gelu(x: np.ndarray, *, with_slope: bool = False):
    """Exact GELU of a float32 or float64 array (no checks), on all cores for large arrays.

    Parameters
    ----------
    x : ndarray of float32 or float64, shape (...)
        Finite values, any memory layout.
    with_slope : bool, default False
        Also return the derivative ``GELU'(x)``, computed in the same pass (the backward pass
        of the feed-forward network then needs one product instead of a second evaluation).

    Returns
    -------
    ndarray of shape (...), in ``x``'s dtype
        ``0.5 x (1 + erf(x / sqrt 2))``, computed as ``max(x, 0) - |x| Q(|x|)``. float64: error
        about 1e-16; float32: absolute error within one float32 rounding of the result.
    slope : ndarray of shape (...), only with ``with_slope=True``
        ``Phi(x) + x phi(x)``.
    """
    flat = np.ascontiguousarray(x).reshape(-1)  # (...) -> (N,)
    out = np.empty_like(flat)
    slope = np.empty_like(flat) if with_slope else None
    kernel = gelu_range32 if flat.dtype == np.float32 else gelu_range64
    n_threads = num_threads()
    if n_threads > 1 and flat.size >= PARALLEL_MIN:
        # NumPy runs element-wise ufuncs on one core; one slice per core runs them on all.
        parallel_for(
            lambda sl: kernel(flat[sl], out[sl], None if slope is None else slope[sl]),
            split_range(flat.size, n_threads),
        )
    else:
        kernel(flat, out, slope)
    if with_slope:
        return out.reshape(x.shape), slope.reshape(x.shape)  # (N,) -> (...)
    return out.reshape(x.shape)  # (N,) -> (...)


# --------------------------------------------------------------------------------------------
# exact GELU, backward
# --------------------------------------------------------------------------------------------


def gelu_backward(h: np.ndarray, a: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """``grad * GELU'(h)``, with ``GELU'(h) = Phi(h) + h phi(h)``, in ``h``'s dtype.

    ``a = GELU(h) = h Phi(h)`` is the forward output. float64 computes ``Phi`` from the Cephes
    erf (about 1e-16). float32 reads it off the forward pass, ``Phi(h) = a / h`` (1/2 at
    ``h = 0``): a quotient of two float32 numbers is correctly rounded, so this is as accurate
    as ``a`` itself and costs one division instead of a second evaluation of the tail.

    Parameters
    ----------
    h : ndarray of float32 or float64, shape (...)
        The input of the forward pass.
    a : ndarray of shape (...)
        ``gelu(h)``, the output of the forward pass (read by the float32 path only).
    grad : ndarray of shape (...)
        dL/da.

    Returns
    -------
    ndarray of shape (...)
        dL/dh.
    """
    if h.dtype != np.float32:
        h64 = h.astype(np.float64, copy=False)
        cdf = erf64(h64 * SQRT1_2)  # erf(h / sqrt(2))
        cdf += 1.0
        cdf *= 0.5  # Phi(h)
        pdf = np.exp(-0.5 * h64 * h64)
        pdf *= INV_SQRT_2PI
        pdf *= h64  # h phi(h)
        cdf += pdf
        return (grad * cdf).astype(h.dtype, copy=False)
    half = np.float32(0.5)
    phi_cdf = np.full(h.shape, half, dtype=np.float32)
    np.divide(a, h, out=phi_cdf, where=h != 0)  # Phi(h)
    e = h * h
    e *= -half
    np.exp(e, out=e)  # exp(-h^2 / 2)
    e *= h
    e *= np.float32(INV_SQRT_2PI)  # h phi(h)
    phi_cdf += e
    phi_cdf *= grad
    return phi_cdf
