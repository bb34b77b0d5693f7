"""Tolerances of the package's computations, derived from the arithmetic.

helpers.py ("tolerances: from the arithmetic, not from one CPU") gives the rule: a result computed
in a dtype is within rounding_tol(dtype, n, magnitude) = gamma(n) * magnitude of the exact one,
with n the roundings along the computation and magnitude the size of its terms. This module
applies it to what the tests compare, one function per computation, each docstring counting its
roundings:

* functions: softmax and log-softmax, the GELU kernel and the plain GELU formula;
* attention followed at its worst, input errors included (attention_bound, attention_layer_bound,
  torch_sdpa_tol): one attention layer, where that bound stays within a few orders of magnitude
  of the real rounding;
* layers, blocks and models, where following every error at its worst grows by |W| at each
  product: ``Rounded`` counts the roundings along the longest path instead, on the test's own
  data (linear_rounded, layer_norm_rounded, ..., language_model_rounded, transformer_rounded).

PyTorch's float32 kernels are charged their own documented accuracy where a test compares with
them (TORCH_FLOAT32_FUNCTIONS, TORCH_EXP_ROUNDINGS).
"""

from __future__ import annotations

import math

import numpy as np

from transformer_np import TiedOutput
from transformer_np._kernels import gelu as kgelu

from helpers import FUNCTION_ROUNDINGS, abs_product, rounding_tol

FR = FUNCTION_ROUNDINGS


# ============================================================================================
# functions: softmax, log-softmax, GELU
# ============================================================================================


# ============================================================================================
# the GELU kernel
# ============================================================================================


math_erf = np.vectorize(math.erf, otypes=[np.float64])


math_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def gelu_formula(x):
    """The plain exact GELU, 0.5 x (1 + erf(x / sqrt 2)), in float64 with math.erf."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + math_erf(x / math.sqrt(2.0)))


def gelu_derivative(h):
    """GELU'(h) = Phi(h) + h phi(h), in float64 with math.erf."""
    h = np.asarray(h, np.float64)
    cdf = 0.5 * (1.0 + math_erf(h / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * h * h) / math.sqrt(2.0 * math.pi)
    return cdf + h * pdf


# The largest relative error of the float32 tail fit N(a) / D(a) with its coefficients as stored
# (3.2e-8 stated in the kernel's docstring; test_float32_tail_fit_has_the_accuracy_its_docstring_
# states asserts this bound).
TAIL32_FIT_ERROR = 3.5e-8


# The largest relative error of erf64 against math.erf, asserted by
# test_erf64_matches_math_erf_to_a_few_ulp.
ERF64_ERROR = 1e-15


def _tail32_fraction(a):
    """N(a) / D(a), the float32 kernel's fit of R(a) = exp(a^2 / 2) Q(a), in float64."""
    n = np.array(kgelu.TAIL32_N, np.float64)[::-1]
    d = np.array((*kgelu.TAIL32_D, 1.0), np.float64)[::-1]
    return np.polyval(n, a) / np.polyval(d, a)


def gaussian_tail(a):
    """Q(a) = 1 - Phi(a) = erfc(a / sqrt 2) / 2, in float64 with math.erfc."""
    return 0.5 * math_erfc(np.asarray(a, np.float64) / math.sqrt(2.0))


def kernel_tail_tol(a, dtype):
    """A bound on the error of the kernels' Gaussian tail Q(a), a = |x| >= 0, in ``dtype``.

    Both kernels compute Q = e * R with e = exp(-a^2 / 2) (relative error FR roundings, plus
    u a^2 / 2 from the rounding of a^2) and a rational R of positive terms:
    * float32: N(a) / D(a), Horner with positive coefficients (8 + 9 roundings, relative), the
      division and the product with e (2), TAIL32_FIT_ERROR of fit; beyond a = 10 the kernel
      keeps e R(10) for e R(a), off by at most e R(10) (R is positive and decreasing);
    * float64: for a / sqrt 2 = z <= 1, 0.5 - 0.5 erf(z) (erf64 within ERF64_ERROR, z rounded
      twice: 2 u z erf'(z) <= u; the subtraction); beyond, Cephes' P(z) / Q(z) (Horner of degree
      8 twice, positive coefficients: 16 + 16 roundings, the division, the product with e, 2 for
      z and 1 for the fraction's own approximation error, about 1e-16).
    Results below the normal range are rounded absolutely: at most ``tiny`` more.
    """
    dtype = np.dtype(dtype)
    a = np.asarray(a, np.float64)
    q = gaussian_tail(a)
    e = np.exp(-0.5 * a * a)
    arg = rounding_tol(dtype, 1, q * a * a / 2)  # exp's argument a^2 rounded
    if dtype == np.float32:
        far = a > float(kgelu.TAIL32_MAX)
        near = q * TAIL32_FIT_ERROR + rounding_tol(dtype, FR + 19, q) + arg
        r10 = e * _tail32_fraction(float(kgelu.TAIL32_MAX))
        far_off = r10 + r10 * TAIL32_FIT_ERROR + rounding_tol(dtype, FR + 19, r10) + arg
        return np.where(far, far_off, near) + np.finfo(dtype).tiny
    z = a / math.sqrt(2.0)
    erf_z = math_erf(np.minimum(z, 1.0))
    small = (ERF64_ERROR + rounding_tol(dtype, 2)) * 0.5 * erf_z + rounding_tol(dtype, 1, q)
    large = rounding_tol(dtype, FR + 37, q) + arg
    return np.where(z <= 1.0, small, large) + np.finfo(dtype).tiny


def kernel_gelu_tol(x, dtype):
    """A bound on the error of the kernel's GELU, max(x, 0) - |x| Q(|x|), in ``dtype``: |x| times
    the tail's error, and the product and the subtraction (1 rounding each; below the normal
    range, absolutely: ``tiny``)."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    y = np.maximum(x, 0) - a * gaussian_tail(a)
    rounded = rounding_tol(dtype, 1, a * gaussian_tail(a) + np.abs(y)) + np.finfo(dtype).tiny
    return a * kernel_tail_tol(a, dtype) + rounded


def kernel_slope_tol(x, dtype):
    """A bound on the error of the kernel's GELU'(x) = Phi(x) + x phi(x), in ``dtype``.

    Phi is Q(|x|) (x < 0) or 1 - Q(|x|): the tail's error, and 1 rounding of Phi (float32 also
    1 of 1 - 2 Q, its way to 1 - Q); x phi(x) = x e / sqrt(2 pi): e's error (FR, u x^2 / 2), its
    products with x and the rounded constant (3); the final sum (1).
    """
    dtype = np.dtype(dtype)
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    q = gaussian_tail(a)
    phi_cdf = np.where(x < 0, q, 1 - q)
    x_pdf = np.abs(x) * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    rounded = phi_cdf + (np.where(x >= 0, 1 - 2 * q, 0.0) if dtype == np.float32 else 0.0)
    return (
        kernel_tail_tol(a, dtype)
        + rounding_tol(dtype, 1, rounded)
        + rounding_tol(dtype, FR + 3, x_pdf)
        + rounding_tol(dtype, 1, x_pdf * x * x / 2)
        + rounding_tol(dtype, 1, np.abs(gelu_derivative(x)))
    )


def formula_gelu_tol(x, dtype):
    """A bound on the error of 0.5 x (1 + erf(x / sqrt 2)) evaluated plainly in ``dtype``: erf's
    argument (2 roundings, times z erf'(z) <= 1/2: 1 of 1), erf (FR, of |erf| <= 1), 1 + erf
    and the product (1 rounding of |y| each)."""
    x = np.asarray(x, np.float64)
    y = gelu_formula(x)
    return rounding_tol(dtype, FR + 1, 0.5 * np.abs(x)) + rounding_tol(dtype, 2, np.abs(y))


def formula_slope_tol(x, dtype, erf_tol=None):
    """A bound on the error of Phi(x) + x phi(x) evaluated plainly in ``dtype``, as
    gelu_derivative (and PyTorch's GELU backward) write it: 0.5 (1 + erf(x / sqrt 2)) with erf
    within ``erf_tol`` (default FR roundings), its argument (1 rounding of 1/2, as above) and
    1 + erf (1 of Phi); exp(-x^2 / 2) / sqrt(2 pi) times x (FR + 3, and u x^2 / 2 from x^2); the
    sum (1)."""
    dtype = np.dtype(dtype)
    x = np.asarray(x, np.float64)
    erf_z = math_erf(x / math.sqrt(2.0))
    erf_tol = rounding_tol(dtype, FR, np.abs(erf_z)) if erf_tol is None else erf_tol
    phi_cdf = 0.5 * (1 + erf_z)
    x_pdf = np.abs(x) * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return (
        0.5 * erf_tol
        + rounding_tol(dtype, 1, 0.5)
        + rounding_tol(dtype, 1, phi_cdf)
        + rounding_tol(dtype, FR + 3, x_pdf)
        + rounding_tol(dtype, 1, x_pdf * x * x / 2)
        + rounding_tol(dtype, 1, np.abs(gelu_derivative(x)))
    )


def backward32_slope_tol(h):
    """A bound on the error of float32 gelu_backward's GELU'(h) (before the product with the
    gradient): Phi = gelu(h) / h carries the kernel's tail error and 1 rounding each of the
    kernel's |h| Q and of its subtraction (Q, Phi after the division) and of the division (Phi);
    h phi(h) = h exp(-h^2 / 2) / sqrt(2 pi) and the sum as in kernel_slope_tol."""
    h = np.asarray(h, np.float64)
    a = np.abs(h)
    q = gaussian_tail(a)
    phi_cdf = np.where(h < 0, q, 1 - q)
    x_pdf = a * np.exp(-0.5 * h * h) / math.sqrt(2 * math.pi)
    return (
        np.where(h == 0, 0.0, kernel_tail_tol(a, np.float32))  # Phi(0) = 1/2 exactly
        + rounding_tol(np.float32, 1, q + 2 * phi_cdf)
        + rounding_tol(np.float32, FR + 3, x_pdf)
        + rounding_tol(np.float32, 1, x_pdf * h * h / 2)
        + rounding_tol(np.float32, 1, np.abs(gelu_derivative(h)))
    )


# ============================================================================================
# functions: softmax, layer norm, GELU
# ============================================================================================


def slices(x, axis):
    """x in float64; its slices' maxima m (0 for an all -inf slice) and their largest |x - m|
    over the finite entries, both with 1 along ``axis``."""
    x64 = np.asarray(x, np.float64)
    finite = np.isfinite(x64)
    m = np.max(np.where(finite, x64, -np.inf), axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    spread = np.max(np.where(finite, np.abs(x64 - m), 0.0), axis=axis, keepdims=True)
    return x64, m, spread


def softmax_rtol(x, axis=-1, dtype=None, arg_error=0.0):
    """The relative rounding bound of one computation of softmax(x) along ``axis`` in ``dtype``
    (default: x's), one value per slice (1 along ``axis``).

    exp(x_i - m) is off by FR roundings and by u |x_i - m|, the rounding of its argument (or by
    ``arg_error``, an absolute error of the arguments, more); the sum of the n exponentials by
    the same and n roundings; the weight, their quotient, by both and the division.
    """
    dtype = np.dtype(dtype or np.asarray(x).dtype)
    x64, _, spread = slices(x, axis)
    arg_error = np.max(np.broadcast_to(arg_error, x64.shape), axis=axis, keepdims=True)
    n = x64.shape[axis]
    return rounding_tol(dtype, 2 * FR + n + 1) + rounding_tol(dtype, 2, spread) + 2 * arg_error


def log_softmax_tol(x, axis=-1, dtype=None):
    """The absolute rounding bound of one computation of log_softmax(x) (x - m - log T,
    T = sum exp(x - m)) along ``axis`` in ``dtype``, per entry (0 at -inf entries).

    T is off by a relative FR + n roundings and u |x - m| (as in softmax_rtol), which log T turns
    into an absolute error, plus FR roundings of |log T|; the two subtractions round
    |x - m| + |m + log T| (either order: ours subtracts m first, PyTorch's m + log T) + |out|.
    """
    dtype = np.dtype(dtype or np.asarray(x).dtype)
    x64, m, spread = slices(x, axis)
    n = x64.shape[axis]
    shifted = np.where(np.isfinite(x64), x64 - m, 0.0)
    total = np.sum(np.exp(shifted) * np.isfinite(x64), axis=axis, keepdims=True)
    log_t = np.log(np.where(total == 0, 1.0, total))  # an all -inf slice stays -inf
    out = shifted - log_t
    tol = (
        rounding_tol(dtype, FR + n)
        + rounding_tol(dtype, 1, spread)
        + rounding_tol(dtype, FR, np.abs(log_t))
        + rounding_tol(dtype, 1, np.abs(shifted) + np.abs(m + log_t) + np.abs(out))
    )
    return np.where(np.isfinite(x64), tol, 0.0)


# ============================================================================================
# layers, blocks and models: roundings counted along the longest path
# ============================================================================================
#
# A layer, a block or a whole model is a chain of the steps helpers.py bounds one by one: sums of
# products, element-wise steps, functions. ``Rounded`` follows such a chain on the test's own data
# (in float64) and counts, for every value, the roundings n along the longest path that computes
# it, as helpers.py counts them (the length of each sum, one per element-wise step,
# FUNCTION_ROUNDINGS per function); its tolerance is rounding_tol(dtype, n, terms), with ``terms``
# the magnitude of the terms of the value's last step (abs_product for a matrix product).
# Relative errors add along the path: a step's inputs bring their n, the step adds its own. Where a
# step turns an absolute error into a relative one (the softmax of the scores), the step's own
# roundings get the factor attention_tol gives them (twice the scores' size), and the inputs'
# counts are carried on as they are: following every input error at its worst through every later
# step instead (first order, entry by entry) makes the bound grow by the size of |W| at each
# product and by the scores' size at each softmax, e.g. 0.06 for one float32 encoder block of
# width 32 and 36 for a decoder block, where the actual error is about 1e-6. Each function below
# returns the output and ``back``, the same count for the gradients of the backward pass, so a
# test gets the tolerance of every gradient it compares.


# The roundings charged for the functions of a computation. Ours: NumPy's exp (FUNCTION_ROUNDINGS);
# the exact GELU x Phi(x) (or max(x, 0) - |x| Q(|x|)) with Phi (erf) counted as one function, then
# at most 4 roundings of the formula (x / sqrt 2, 1 + erf or the subtraction, the products), each
# at most u |x|.
GELU_ROUNDINGS = FUNCTION_ROUNDINGS + 4


OUR_FUNCTIONS = {"exp": FUNCTION_ROUNDINGS, "gelu": GELU_ROUNDINGS}


# PyTorch's float32 CPU kernels: its flash attention's exp is Vectorized<float>::exp_u20, 20 ULP
# (40 roundings); its GELU's erf is Abramowitz & Stegun 7.1.26, 1 - t r(t) exp(-x^2), whose error
# (1.5e-7 and the roundings of a difference that cancels near 0) makes GELU's at most 68 u |x|
# (the largest over x of torch_gelu_tol in test_functional.py). In float64 (Sleef, 1 ULP) ours
# cover it.
TORCH_FLOAT32_FUNCTIONS = {"exp": 40, "gelu": 68}


def torch_functions(dtype):
    """The function roundings of PyTorch's side of a comparison in ``dtype``."""
    return TORCH_FLOAT32_FUNCTIONS if np.dtype(dtype) == np.float32 else OUR_FUNCTIONS


class Rounded:
    """A value of a test's computation (float64, from the test's data), with ``n``, the
    roundings along the longest path that computes it, and ``terms``, the magnitude of the
    terms of its last step: its tolerance in a dtype is ``rounding_tol(dtype, n, terms)``."""

    def __init__(self, value, n=0.0, terms=None):
        self.value = np.asarray(value, np.float64)
        self.n = float(n)
        self.terms = np.abs(self.value) if terms is None else np.asarray(terms, np.float64)

    def tol(self, dtype, sides=1):
        """The tolerance of a comparison of ``sides`` computations of this value in ``dtype``
        (2: two implementations in ``dtype``; 1: against a float64 reference)."""
        return sides * rounding_tol(dtype, self.n, self.terms)

    def map(self, f):
        """The same count, with ``f`` (a reshape, a transpose, an index) applied to the arrays."""
        return Rounded(f(self.value), self.n, f(self.terms))


def exact(x):
    """An input of the test: no rounding."""
    return Rounded(x)


def add_rounded(a, b):
    """``a + b`` (a residual connection, two gradients accumulated): one rounding more."""
    return Rounded(a.value + b.value, max(a.n, b.n) + 1, a.terms + b.terms)


def linear_rounded(x, W, b=None):
    """``x @ W + b`` on the last axis: d_in products summed, then the bias. Returns
    ``(y, back)``; ``back(g)`` gives ``(dx, {"W": ..., "b": ...})``: g W^T (d_out terms), x^T g
    and the column sums of g (N = rows terms each)."""
    W = np.asarray(W, np.float64)
    d_in, d_out = W.shape
    shape = x.value.shape
    X = x.value.reshape(-1, d_in)
    aX, aW = np.abs(X), np.abs(W)
    y, terms = X @ W, aX @ aW
    if b is not None:
        b = np.asarray(b, np.float64)
        y, terms = y + b, terms + np.abs(b)
    out = Rounded(y, x.n + d_in + (b is not None), terms)
    out = out.map(lambda a: a.reshape(*shape[:-1], d_out))

    def back(g):
        G = g.value.reshape(-1, d_out)
        aG, N = np.abs(G), G.shape[0]
        dx = Rounded(G @ W.T, g.n + d_out, aG @ aW.T).map(lambda a: a.reshape(shape))
        dx.g_n, dx.d_out = g.n, d_out  # for a sum of such products (MultiHeadAttention)
        grads = {"W": Rounded(X.T @ G, x.n + g.n + N, aX.T @ aG)}
        if b is not None:
            grads["b"] = Rounded(G.sum(0), g.n + N, aG.sum(0))
        return dx, grads

    return out, back


def layer_norm_rounded(x, gamma, beta, eps):
    """LayerNorm over the last axis (D features). Returns ``(y, back)``; ``y.x_hat`` and
    ``y.rstd`` are the counts of the cached values.

    The longest path of layer_norm_forward: the mean (D + 1), x - mu, the variance (D + 1),
    + eps, sqrt and 1/x, the normalisation: 2 D + 7, then gamma and beta. The terms: those of
    the mean (mean |x|) and of x, normalised, and |x_hat| for the relative error of rstd; never
    the size of x - mu alone, which may have cancelled."""
    gamma, beta = np.asarray(gamma, np.float64), np.asarray(beta, np.float64)
    X = x.value
    D = X.shape[-1]
    mu = X.mean(-1, keepdims=True)
    c = X - mu
    var = (c * c).mean(-1, keepdims=True)
    r = 1 / np.sqrt(var + eps)
    xh = c * r
    mean_ax = np.abs(X).mean(-1, keepdims=True)
    x_hat = Rounded(xh, x.n + 2 * D + 7, (np.abs(X) + mean_ax) * r + np.abs(xh))
    out = Rounded(xh * gamma + beta, x_hat.n + 2, np.abs(gamma) * x_hat.terms + np.abs(beta))
    out.x_hat = x_hat
    # rstd: relative; the variance also carries the rounding of x - mu, on |c| (|x| + mean |x|)
    centred = (np.abs(c) * (np.abs(X) + mean_ax)).mean(-1, keepdims=True)
    out.rstd = Rounded(r, x.n + 2 * D + 6, r * (1 + centred / (var + eps)))

    def back(g):
        G = g.value
        gh = G * gamma
        mg = gh.mean(-1, keepdims=True)
        mgx = (gh * xh).mean(-1, keepdims=True)
        # g gamma, the mean of g_hat x_hat (D + 1), times x_hat, two differences, times rstd;
        # with x_hat's own count
        ag = np.abs(gh)
        terms = r * (
            ag + ag.mean(-1, keepdims=True) + np.abs(xh) * (ag * np.abs(xh)).mean(-1, keepdims=True)
        )
        dx = Rounded((gh - mg - xh * mgx) * r, g.n + x_hat.n + D + 6, terms)
        G2, X2 = G.reshape(-1, D), xh.reshape(-1, D)
        N = G2.shape[0]
        grads = {
            "gamma": Rounded((G2 * X2).sum(0), g.n + x_hat.n + N, np.abs(G2 * X2).sum(0)),
            "beta": Rounded(G2.sum(0), g.n + N, np.abs(G2).sum(0)),
        }
        return dx, grads

    return out, back


def activation_rounded(h, activation, dtype, functions=OUR_FUNCTIONS):
    """ReLU (exact) or the exact GELU (``functions["gelu"]`` roundings) of ``h`` (a Rounded),
    element-wise; returns ``(a, back)``. ``dtype``: that of the computation, for ReLU's
    backward pass, whose count only holds if no computed ``h`` can have the other sign than
    the exact one."""
    H = h.value
    if activation == "relu":

        def back_relu(g):
            near_0 = np.abs(H) <= rounding_tol(dtype, h.n, h.terms)
            assert not near_0.any(), "a hidden value within rounding of 0: ReLU' may differ"
            return Rounded(g.value * (H > 0), g.n)

        return Rounded(np.maximum(H, 0), h.n), back_relu
    Phi = 0.5 * (1 + np.vectorize(math.erf)(H / math.sqrt(2)))
    phi = np.exp(-0.5 * H * H) / math.sqrt(2 * math.pi)

    def back_gelu(g):
        # GELU'(h) = Phi + h phi: two functions (Phi, exp), h^2 / 2, h phi, the sum, times g
        terms = np.abs(g.value) * (Phi + np.abs(H) * phi)
        return Rounded(g.value * (Phi + H * phi), g.n + h.n + 2 * FUNCTION_ROUNDINGS + 5, terms)

    return Rounded(H * Phi, h.n + functions["gelu"], np.abs(H)), back_gelu


def feed_forward_rounded(ff, x, functions=OUR_FUNCTIONS):
    """FeedForward on ``x`` (a Rounded): Linear, ReLU or GELU, Linear, in the dtype of its
    parameters. Returns ``(y, back)``; ``back(g)`` gives ``(dx, grads)``."""
    p = ff.params
    h, back1 = linear_rounded(x, p["linear1.W"], p["linear1.b"])
    a, back_act = activation_rounded(h, ff.activation, p["linear1.W"].dtype, functions)
    y, back2 = linear_rounded(a, p["linear2.W"], p["linear2.b"])

    def back(g):
        da, g2 = back2(g)
        dx, g1 = back1(back_act(da))
        grads = {f"linear1.{k}": v for k, v in g1.items()}
        grads.update({f"linear2.{k}": v for k, v in g2.items()})
        return dx, grads

    return y, back


def embedding_rounded(emb, ids):
    """Embedding of ``ids``: rows of the table, times sqrt(D) when scaled (sqrt(D) rounded to
    the dtype, the product: 2 roundings). Returns ``(out, back)``; ``back(g)`` gives
    ``{"W": ...}``, each row a sum over the positions of its token."""
    W = np.asarray(emb.params["W"], np.float64)
    V, D = W.shape
    scale, n = (math.sqrt(D), 2) if emb.scale else (1.0, 0)
    out = Rounded(W[ids] * scale, n, np.abs(W[ids]) * scale)
    flat = np.asarray(ids).ravel()

    def back(g):
        G = g.value.reshape(-1, D) * scale
        dW, terms = np.zeros((V, D)), np.zeros((V, D))
        np.add.at(dW, flat, G)
        np.add.at(terms, flat, np.abs(G))
        return {"W": Rounded(dW, g.n + n + np.bincount(flat).max(), terms)}

    return out, back


def tied_output_rounded(emb, b, h):
    """TiedOutput: ``h @ E^T + b`` (Linear's count with the table's transpose). Returns
    ``(logits, back)``; ``back(g)`` gives ``(dh, {"W": this layer's share of the table's
    gradient, "b": ...})``."""
    out, back = linear_rounded(h, np.asarray(emb.params["W"], np.float64).T, b)

    def back_tied(g):
        dh, grads = back(g)
        grads["W"] = grads["W"].map(np.transpose)
        return dh, grads

    return out, back_tied


def _t(a):
    return np.swapaxes(a, -1, -2)


def attention_rounded(q, k, v, mask=None, bias=None, functions=OUR_FUNCTIONS):
    """softmax(q k^T / sqrt(d_k) + bias, masked) v on Rounded q, k, v. Returns
    ``(out, back)``; ``back(g)`` gives ``(dq, dk, dv)``.

    The scores: q's and k's counts, d_k products, the scale (1/sqrt(d_k) rounded, <= 2, and the
    product). The weights, relative: the error attention_tol gives them, twice the scores' own
    rounding error (on their largest terms), u 2 max |s|, exp, the sum of n_k and the division,
    in roundings (gamma(m) ~ m u), exp as ``functions["exp"]``. The output: the weights', v's,
    n_k more."""
    Q, K, V = q.value, k.value, v.value
    d_k, n_k, n_q = Q.shape[-1], K.shape[-2], Q.shape[-2]
    scale = 1 / np.sqrt(d_k)
    s = Q @ _t(K) * scale
    s_terms = np.abs(Q) @ _t(np.abs(K)) * scale
    n_scores = d_k + 3
    if bias is not None:
        bias = np.asarray(bias, np.float64)
        s, s_terms, n_scores = s + bias, s_terms + np.abs(bias), n_scores + 1
    allowed = np.ones(s.shape, bool) if mask is None else np.broadcast_to(mask, s.shape)
    s = np.where(allowed, s, -np.inf)
    row_max = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(row_max), row_max, 0))
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total > 0, total, 1)
    largest_terms = np.max(np.where(allowed, s_terms, 0), initial=0.0)
    largest_score = np.max(np.abs(np.where(allowed, s, 0)), initial=0.0)
    n_p = q.n + k.n + 2 * n_scores * largest_terms + 2 * largest_score
    n_p += functions["exp"] + n_k + 1
    out = Rounded(p @ V, n_p + v.n + n_k, p @ np.abs(V))

    def back(g):
        G = g.value
        dv = Rounded(_t(p) @ G, n_p + g.n + n_q, _t(p) @ np.abs(G))
        dP = G @ _t(V)
        # dS = p (dP - sum(dP p)) scale: dP (d_v), the weighted sum (n_k), the difference, the
        # products by p and by the rounded scale (<= 2)
        n_dS = g.n + v.n + V.shape[-1] + n_p + n_k + 4
        dS = p * (dP - (dP * p).sum(-1, keepdims=True)) * scale
        dS_terms = p * (np.abs(dP) + (np.abs(dP) * p).sum(-1, keepdims=True)) * scale
        dq = Rounded(dS @ K, n_dS + k.n + n_k, dS_terms @ np.abs(K))
        dk = Rounded(_t(dS) @ Q, n_dS + q.n + n_q, _t(dS_terms) @ np.abs(Q))
        return dq, dk, dv

    return out, back


def _split_heads(x, H):
    B, T, D = x.value.shape
    return x.map(lambda a: a.reshape(B, T, H, D // H).transpose(0, 2, 1, 3))


def _merge_heads(x):
    B, H, T, Dh = x.value.shape
    return x.map(lambda a: a.transpose(0, 2, 1, 3).reshape(B, T, H * Dh))


def mha_rounded(mha, xq, xkv=None, mask=None, bias=None, functions=OUR_FUNCTIONS):
    """MultiHeadAttention on Rounded ``xq`` (and ``xkv``; None: self-attention): the
    projections, attention in every head, the output projection. Returns ``(out, back)``;
    ``back(g)`` gives ``(dx, grads)`` in self-attention, ``((dx_q, dx_kv), grads)`` in
    cross-attention."""
    p = mha.params
    H = mha.n_heads
    self_attention = xkv is None
    xkv = xq if self_attention else xkv
    q, back_q = linear_rounded(xq, p["W_q"], p.get("b_q"))
    k, back_k = linear_rounded(xkv, p["W_k"], p.get("b_k"))
    v, back_v = linear_rounded(xkv, p["W_v"], p.get("b_v"))
    ctx, back_att = attention_rounded(
        _split_heads(q, H), _split_heads(k, H), _split_heads(v, H), mask, bias, functions
    )
    out, back_o = linear_rounded(_merge_heads(ctx), p["W_o"], p.get("b_o"))

    def back(g):
        d_ctx, g_o = back_o(g)
        grads = {f"{name}_o": t for name, t in g_o.items()}
        dxs = []
        for which, back_p, d in zip(
            "qkv", (back_q, back_k, back_v), back_att(_split_heads(d_ctx, H)), strict=True
        ):
            dx, g_p = back_p(_merge_heads(d))
            grads.update({f"{name}_{which}": t for name, t in g_p.items()})
            dxs.append(dx)

        def total(parts):
            # one sum of all the parts' terms (PyTorch's packed in_proj), or a sum per part and
            # the additions: the longer count of the two
            n = max(d.g_n for d in parts) + sum(d.d_out for d in parts) + len(parts) - 1
            return Rounded(sum(d.value for d in parts), n, sum(d.terms for d in parts))

        return (total(dxs) if self_attention else (dxs[0], total(dxs[1:]))), grads

    return out, back


def _named(**groups):
    return {f"{prefix}.{k}": v for prefix, grads in groups.items() for k, v in grads.items()}


def _norm(norm, x):
    return layer_norm_rounded(x, norm.params["gamma"], norm.params["beta"], norm.eps)


def _dropped(a, mask):
    """A sublayer output times a kept-dropout mask (0 or 1/(1-p), rounded): 2 roundings."""
    return a if mask is None else Rounded(a.value * mask, a.n + 2, a.terms * mask)


def pre_ln_block_rounded(x, norm1, attn, norm2, ff, dropout_masks=(None, None)):
    """A pre-LN block, h = x + attn(norm1(x)), y = h + ff(norm2(h)), on a Rounded ``x``; each
    sublayer is a function ``t -> (out, back)`` with ``back(g) -> (dt, grads)``. The encoder
    block's pre-LN branch and the LLaMA block (RMSNorm, grouped-query attention, SwiGLU) are both
    this. Returns ``(y, back)``; ``back(g)`` gives ``(dx, grads)`` under the block's names."""
    m1, m2 = dropout_masks
    n1, back_n1 = norm1(x)
    a, back_a = attn(n1)
    h = add_rounded(x, _dropped(a, m1))
    n2, back_n2 = norm2(h)
    f, back_f = ff(n2)
    y = add_rounded(h, _dropped(f, m2))

    def back(g):
        df, gf = back_f(_dropped(g, m2))  # through y = h + f * m2: the mask again
        dn2, gn2 = back_n2(df)
        dh = add_rounded(g, dn2)
        da, ga = back_a(_dropped(dh, m1))
        dn1, gn1 = back_n1(da)
        return add_rounded(dh, dn1), _named(attn=ga, norm1=gn1, norm2=gn2, ff=gf)

    return y, back


def encoder_block_rounded(
    block, x, mask=None, bias=None, dropout_masks=(None, None), functions=OUR_FUNCTIONS
):
    """EncoderBlock (post-LN or pre-LN) on a Rounded ``x``, with the scaled dropout masks the
    test gives (none: evaluation), ``functions`` the roundings of exp and GELU. Returns
    ``(y, back)``; ``back(g)`` gives ``(dx, grads)``."""
    m1, m2 = dropout_masks
    if block.norm_first:
        return pre_ln_block_rounded(
            x,
            norm1=lambda t: _norm(block.norm1, t),
            attn=lambda t: mha_rounded(block.attn, t, None, mask, bias, functions=functions),
            norm2=lambda t: _norm(block.norm2, t),
            ff=lambda t: feed_forward_rounded(block.ff, t, functions),
            dropout_masks=dropout_masks,
        )
    a, back_a = mha_rounded(block.attn, x, None, mask, bias, functions=functions)
    h, back_n1 = _norm(block.norm1, add_rounded(x, _dropped(a, m1)))
    f, back_f = feed_forward_rounded(block.ff, h, functions)
    y, back_n2 = _norm(block.norm2, add_rounded(h, _dropped(f, m2)))

    def back_post(g):
        dz2, gn2 = back_n2(g)
        df, gf = back_f(dz2)
        dz1, gn1 = back_n1(add_rounded(dz2, df))
        da, ga = back_a(dz1)
        return add_rounded(dz1, da), _named(attn=ga, norm1=gn1, norm2=gn2, ff=gf)

    return y, back_post


def decoder_block_rounded(
    block,
    x,
    memory,
    self_mask=None,
    memory_mask=None,
    dropout_masks=(None, None, None),
    functions=OUR_FUNCTIONS,
):
    """DecoderBlock (post-LN or pre-LN) on Rounded ``x`` and ``memory``. Returns
    ``(y, back)``; ``back(g)`` gives ``((dx, dmemory), grads)``."""
    m1, m2, m3 = dropout_masks
    if block.norm_first:
        n1, back_n1 = _norm(block.norm1, x)
        a, back_a = mha_rounded(block.self_attn, n1, None, self_mask, functions=functions)
        h = add_rounded(x, _dropped(a, m1))
        n2, back_n2 = _norm(block.norm2, h)
        c, back_c = mha_rounded(block.cross_attn, n2, memory, memory_mask, functions=functions)
        h2 = add_rounded(h, _dropped(c, m2))
        n3, back_n3 = _norm(block.norm3, h2)
        f, back_f = feed_forward_rounded(block.ff, n3, functions)
        y = add_rounded(h2, _dropped(f, m3))

        def back_pre(g):
            df, gf = back_f(g)
            dn3, gn3 = back_n3(df)
            dh2 = add_rounded(g, dn3)
            (dq, dmem), gc = back_c(dh2)
            dn2, gn2 = back_n2(dq)
            dh = add_rounded(dh2, dn2)
            da, ga = back_a(dh)
            dn1, gn1 = back_n1(da)
            grads = _named(self_attn=ga, cross_attn=gc, norm1=gn1, norm2=gn2, norm3=gn3, ff=gf)
            return (add_rounded(dh, dn1), dmem), grads

        return y, back_pre
    a, back_a = mha_rounded(block.self_attn, x, None, self_mask, functions=functions)
    h, back_n1 = _norm(block.norm1, add_rounded(x, _dropped(a, m1)))
    c, back_c = mha_rounded(block.cross_attn, h, memory, memory_mask, functions=functions)
    h2, back_n2 = _norm(block.norm2, add_rounded(h, _dropped(c, m2)))
    f, back_f = feed_forward_rounded(block.ff, h2, functions)
    y, back_n3 = _norm(block.norm3, add_rounded(h2, _dropped(f, m3)))

    def back_post(g):
        dz3, gn3 = back_n3(g)
        df, gf = back_f(dz3)
        dz2, gn2 = back_n2(add_rounded(dz3, df))
        (dq, dmem), gc = back_c(dz2)
        dz1, gn1 = back_n1(add_rounded(dz2, dq))
        da, ga = back_a(dz1)
        grads = _named(self_attn=ga, cross_attn=gc, norm1=gn1, norm2=gn2, norm3=gn3, ff=gf)
        return (add_rounded(dz1, da), dmem), grads

    return y, back_post


def stack_rounded(stack, x, mask=None, memory=None, memory_mask=None):
    """A Stack of encoder blocks (``memory`` None) or of decoder blocks on a Rounded ``x``: the
    blocks in order, then the final norm if any. Returns ``(y, back)``; ``back(g)`` gives
    ``(dx, grads)``, the decoder's ``((dx, dmemory), grads)`` with the memory's gradient
    summed over the blocks."""
    backs = []
    for layer in stack.layers:
        if memory is None:
            x, back = encoder_block_rounded(layer, x, mask)
        else:
            x, back = decoder_block_rounded(layer, x, memory, mask, memory_mask)
        backs.append(back)
    back_norm = None
    if stack.norm is not None:
        norm = stack.norm
        x, back_norm = layer_norm_rounded(x, norm.params["gamma"], norm.params["beta"], norm.eps)

    def back_stack(g):
        grads = {}
        if back_norm is not None:
            g, g_norm = back_norm(g)
            grads.update({f"norm.{k}": v for k, v in g_norm.items()})
        dmemory = None
        for i in reversed(range(len(backs))):
            d, g_block = backs[i](g)
            grads.update({f"{i}.{k}": v for k, v in g_block.items()})
            if memory is None:
                g = d
            else:
                g, dm = d
                dmemory = dm if dmemory is None else add_rounded(dmemory, dm)
        return (g if memory is None else (g, dmemory)), grads

    return x, back_stack


def cross_entropy_rounded(logits, targets, *, ignore_index=None, label_smoothing=0.0):
    """The mean cross-entropy of Rounded ``logits`` (PyTorch's ignore_index and label
    smoothing) and its gradient (p - q) / N. Returns ``(loss, grad)``, both Rounded.

    log p: the logits' count, then, as attention_tol for a softmax, twice the logits' own last
    sum (``logits.own`` roundings) on their largest terms, z - max, exp and the sum of V, log,
    the subtraction; on the terms 1 + |log sum exp| + |z - max|. The loss: the q-weighted sum of
    V, the sum of N rows, the division. The gradient: exp(log p), - eps / V, - (1 - eps), / N."""
    V = logits.value.shape[-1]
    z = logits.value.reshape(-1, V)
    y = np.asarray(targets).reshape(-1)
    kept = np.ones(y.shape, bool) if ignore_index is None else y != ignore_index
    N = int(kept.sum())
    z_max = z.max(-1, keepdims=True)
    log_total = np.log(np.exp(z - z_max).sum(-1, keepdims=True))
    logp = z - z_max - log_total
    q = np.full(z.shape, label_smoothing / V)
    q[np.arange(len(y)), np.where(kept, y, 0)] += 1 - label_smoothing
    q[~kept] = 0
    n_logp = logits.n + 2 * getattr(logits, "own", 0) * logits.terms.max()
    n_logp += 2 * FUNCTION_ROUNDINGS + V + 3
    logp_terms = 1 + np.abs(log_total) + np.abs(z - z_max)
    loss = Rounded(-(q * logp).sum() / N, n_logp + V + N + 2, (q * logp_terms).sum() / N)
    grad = np.where(kept[:, None], (np.exp(logp) - q) / N, 0)
    grad_terms = np.where(kept[:, None], (np.exp(logp) * logp_terms + q) / N, 0)
    grad = Rounded(grad, n_logp + FUNCTION_ROUNDINGS + 3, grad_terms)
    return loss, grad.map(lambda a: a.reshape(logits.value.shape))


def _output_rounded(model, embedding, h):
    """The output layer of a model (Linear, or TiedOutput with ``embedding``) on ``h``."""
    if isinstance(model.out, TiedOutput):
        logits, back = tied_output_rounded(embedding, model.out.params["b"], h)
    else:
        logits, back = linear_rounded(h, model.out.params["W"], model.out.params.get("b"))
    logits.own = embedding.d_model + 1  # the roundings of its own sum, for the softmax
    return logits, back


def language_model_rounded(model, ids):
    """LanguageModel (causal, without dropout) on ``ids`` (B, T). Returns ``(logits, back)``;
    ``back(g)`` gives every gradient under the model's parameter names."""
    T = ids.shape[1]
    e, back_e = embedding_rounded(model.embed, ids)
    causal = np.tril(np.ones((T, T), bool))
    h, back_h = stack_rounded(model.blocks, add_rounded(e, exact(model.pe[:T])), causal)
    logits, back_o = _output_rounded(model, model.embed, h)

    def back(g):
        dh, g_out = back_o(g)
        dx, g_blocks = back_h(dh)
        g_embed = back_e(dx)["W"]
        grads = {f"blocks.{k}": v for k, v in g_blocks.items()}
        tied = isinstance(model.out, TiedOutput)
        grads["embed.W"] = add_rounded(g_embed, g_out.pop("W")) if tied else g_embed
        grads.update({f"out.{k}": v for k, v in g_out.items()})
        return grads

    return logits, back


def transformer_rounded(model, src, tgt):
    """Transformer (without dropout) on ``src`` (B, S) and ``tgt`` (B, T). Returns
    ``(logits, back)``; ``back(g)`` gives every gradient under the model's parameter names."""
    S, T = src.shape[1], tgt.shape[1]
    src_mask, tgt_mask = model.source_mask(src), model.target_mask(tgt)
    es, back_es = embedding_rounded(model.src_embed, src)
    memory, back_enc = stack_rounded(model.encoder, add_rounded(es, exact(model.pe[:S])), src_mask)
    et, back_et = embedding_rounded(model.tgt_embed, tgt)
    y = add_rounded(et, exact(model.pe[:T]))
    h, back_dec = stack_rounded(model.decoder, y, tgt_mask, memory, src_mask)
    logits, back_o = _output_rounded(model, model.tgt_embed, h)

    def back(g):
        dh, g_out = back_o(g)
        (dy, dmemory), g_dec = back_dec(dh)
        g_tgt = back_et(dy)["W"]
        dx, g_enc = back_enc(dmemory)
        grads = {f"encoder.{k}": v for k, v in g_enc.items()}
        grads.update({f"decoder.{k}": v for k, v in g_dec.items()})
        grads["src_embed.W"] = back_es(dx)["W"]
        tied = isinstance(model.out, TiedOutput)
        grads["tgt_embed.W"] = add_rounded(g_tgt, g_out.pop("W")) if tied else g_tgt
        grads.update({f"out.{k}": v for k, v in g_out.items()})
        return grads

    return logits, back


# ============================================================================================
# attention, followed at its worst (one layer)
# ============================================================================================


# Roundings of the scale 1/sqrt(d_k) in one score: a square root, a division (or a reciprocal),
# a product (ours: q * float(1/sqrt(d_k)); attention_steps: (q k^T) / sqrt(d_k)).
SCALE_ROUNDINGS = 3


# PyTorch's: its math path scales q and k each by c = sqrt(1/sqrt(d_k)) (three float64
# roundings, and one more into a float32 tensor's dtype; c counts twice) and rounds both
# products: at most 8 in float64, 5 in float32.
TORCH_SCALE_ROUNDINGS = 8


# Roundings charged for one exp in PyTorch's CPU attention and softmax: ATen's vectorised
# Vectorized<float>::exp_u20 (its flash attention's exp) is documented within 20 ULP ("A faster
# version of exp with ULP=20", aten/src/ATen/cpu/vec/vec512/vec512_float.h); one ULP <= 2 u.
TORCH_EXP_ROUNDINGS = 40


# PyTorch's CPU flash attention sums the keys in tiles of 512 (kv_split_size, for every q length,
# in aten/src/ATen/native/cpu/FlashAttentionKernel.cpp), rescaling its running sums at each tile.
TORCH_KEY_TILE = 512


def attention_bound(q, k, v, dtype=None, *, mask=None, bias=None, dq=0.0, dk=0.0, dv=0.0,
                    n_tiles=1, exp_roundings=FUNCTION_ROUNDINGS, scale_roundings=SCALE_ROUNDINGS,
                    magnitude=False):  # fmt: skip
    """``(output bound, weights bound)``, arrays shaped like the output and the weights: how far
    ONE computation in ``dtype`` (default: q's) of ``softmax(q k^T / sqrt(d_k) + bias) v``
    (``mask``: True = may attend) and of its weights can be from the exact values, q, k, v being
    within ``dq``, ``dk``, ``dv`` (scalars, or arrays like them) of exact. Two computations
    differ by at most the sum of their bounds.

    * A score: d_k products summed, the scale (``scale_roundings``), the bias added: an error of
      at most gamma(d_k + scale_roundings + 1) (sum_l |q_il k_jl| / sqrt(d_k) + |b_ij|); the errors
      of q and k add sum_l (dq_il (|k_jl| + dk_jl) + |q_il| dk_jl) / sqrt(d_k); subtracting the
      row maximum adds u |s_ij - m_i|. E_i is the largest of these sums on row i.
    * The weights exp(s_j - m) / sum_l exp(s_l - m): exponents off by at most E change each
      weight by a factor within exp(+-2E) (the numerator, and the weighted mean in the sum); an
      exp's error counts twice for the same reason, and so do the exp and the product of each
      rescaling of the running sums when the keys are summed in ``n_tiles`` pieces; the sum of
      n_k terms and the division add n_k + 1. So |computed w_ij - w_ij| <= rel_i w_ij, plus the
      smallest normal number for an exp that underflows.
    * The output, sum_j w_ij v_j: rel_i sum_j w_ij |v_j| + sum_j w_ij dv_j + gamma(n_k)
      (1 + rel_i) sum_j w_ij |v_j|.

    The weights w_ij in these magnitudes are computed here in float64 from the q, k, v given,
    which are within a factor 1 / (1 - rel_i) of the exact ones (their part of E). With
    ``magnitude=True`` a third array follows: sum_j w_ij (|v_j| + dv_j), at least the exact
    |output|.
    """
    dtype = np.dtype(dtype or np.asarray(q).dtype)
    q64, k64, v64 = (np.asarray(t, np.float64) for t in (q, k, v))
    d_k, n_k = q64.shape[-1], k64.shape[-2]
    kt = np.swapaxes(k64, -1, -2)
    root = math.sqrt(d_k)
    s = q64 @ kt / root
    terms = abs_product(q64, kt) / root
    n_score = d_k + scale_roundings
    if bias is not None:
        b = np.asarray(bias, np.float64)
        s = s + b
        terms = terms + np.where(np.isfinite(b), np.abs(b), 0.0)
        n_score += 1
    allowed = np.isfinite(s) if mask is None else np.isfinite(s) & np.asarray(mask, bool)
    s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)  # a row with every key blocked: all weights 0
    w = np.exp(s - m)
    w /= np.maximum(w.sum(axis=-1, keepdims=True), 1.0)
    dq, dk, dv = (np.broadcast_to(d, t.shape) for d, t in ((dq, q64), (dk, k64), (dv, v64)))
    inputs = abs_product(dq, np.swapaxes(np.abs(k64) + dk, -1, -2)) + abs_product(
        q64, np.swapaxes(dk, -1, -2)
    )
    inputs /= root
    subtract = rounding_tol(dtype, 1, np.where(allowed, np.abs(s - m), 0.0))
    e = np.where(allowed, rounding_tol(dtype, n_score, terms) + inputs + subtract, 0.0)
    big_e = np.max(e, axis=-1, keepdims=True)
    n_w = 2 * exp_roundings + 2 * (n_tiles - 1) * (exp_roundings + 1) + n_k + 1
    g = rounding_tol(dtype, n_w)
    rel = np.expm1(2 * big_e) * (1 + g) + g
    assert np.all(rel < 0.5), "no useful bound"
    tiny = np.finfo(dtype).tiny
    w_bound = rel * w / (1 - rel) + tiny
    wv = abs_product(w, v64) / (1 - rel)  # sum_j w_ij |v_j|, exact weights
    w_dv = abs_product(w, dv) / (1 - rel)  # sum_j w_ij dv_j
    out_bound = (rel + rounding_tol(dtype, n_k) * (1 + rel)) * wv + w_dv
    out_bound = out_bound + n_k * tiny * float(np.max(np.abs(v64)))
    return (out_bound, w_bound, wv + w_dv) if magnitude else (out_bound, w_bound)


def attention_layer_bound(layer, x_q, x_kv=None, dtype=None, *, mask=None, bias=None, rope=None,
                          cast_roundings=0, **attention_kw):  # fmt: skip
    """Bounds of ONE computation in ``dtype`` (default: x_q's) of a MultiHeadAttention
    (grouped-query or not) ``layer`` on x_q (B, T, D) or (T, D) (and x_kv), as a dict: "out"
    and "weights" shaped like the layer's output and weights, and those of its steps, shaped
    (..., heads, positions, Dh): "q", "k", "v" (the projections, rotated; one key/value head per
    query head) and "ctx" (the heads' outputs).

    * A projection x W (+ b): gamma(D + 1 + cast_roundings) (|x| |W| + |b|), ``cast_roundings``
      counting x and W rounded to ``dtype`` first (0 when they are in it already).
    * ``rope`` = (cos, sin), (T, Dh): y cos + rotate_half(y) sin rounds |y| |cos| + |y'| |sin|
      twice, and the projection's error dy becomes |dy| |cos| + |dy'| |sin|.
    * The heads: attention_bound with those errors (``attention_kw``: its n_tiles,
      exp_roundings, scale_roundings), each key/value head repeated for its group of queries.
    * The output projection: the heads' errors times |W_o|, plus gamma(D + 1 + cast_roundings)
      (|ctx| |W_o| + |b_o|), |ctx| at most sum_j w_ij |v_j| plus its error.
    """
    dtype = np.dtype(dtype or np.asarray(x_q).dtype)
    p = {name: np.asarray(w, np.float64) for name, w in layer.params.items()}
    xq = np.asarray(x_q, np.float64)
    xkv = xq if x_kv is None else np.asarray(x_kv, np.float64)
    D, H = xq.shape[-1], layer.n_heads
    H_kv, Dh = getattr(layer, "n_kv_heads", H), D // H

    def project(x, name):  # (..., n, D) -> values, their errors
        W, b = p[name], p.get("b" + name[1:])
        y, mag = x @ W, abs_product(x, W)
        if b is not None:
            y, mag = y + b, mag + np.abs(b)
        return y, rounding_tol(dtype, D + (b is not None) + cast_roundings, mag)

    def heads(y, n):  # (..., T, n Dh) -> (..., n, T, Dh)
        return np.moveaxis(y.reshape(y.shape[:-1] + (n, Dh)), -2, -3)

    def rotate(y, err):
        cos, sin = (np.abs(np.asarray(t, np.float64)) for t in rope)
        half = np.concatenate([-y[..., Dh // 2 :], y[..., : Dh // 2]], axis=-1)
        err_half = np.concatenate([err[..., Dh // 2 :], err[..., : Dh // 2]], axis=-1)
        y_rot = y * np.asarray(rope[0], np.float64) + half * np.asarray(rope[1], np.float64)
        mag = np.abs(y) * cos + np.abs(half) * sin
        return y_rot, err * cos + err_half * sin + rounding_tol(dtype, 2, mag)

    (q, dq), (k, dk), (v, dv) = (
        project(x, n) for x, n in ((xq, "W_q"), (xkv, "W_k"), (xkv, "W_v"))
    )
    q, dq = heads(q, H), heads(dq, H)
    k, dk, v, dv = (heads(t, H_kv) for t in (k, dk, v, dv))
    if rope is not None:
        (q, dq), (k, dk) = rotate(q, dq), rotate(k, dk)
    k, dk, v, dv = (np.repeat(t, H // H_kv, axis=-3) for t in (k, dk, v, dv))
    d_ctx, d_w, ctx_mag = attention_bound(
        q, k, v, dtype, mask=mask, bias=bias, dq=dq, dk=dk, dv=dv, magnitude=True, **attention_kw
    )

    def merge(y):  # (..., H, T, Dh) -> (..., T, D)
        y = np.moveaxis(y, -3, -2)
        return y.reshape(y.shape[:-2] + (D,))

    W_o, b_o = p["W_o"], p.get("b_o")
    mag = abs_product(merge(ctx_mag + d_ctx), W_o) + (0.0 if b_o is None else np.abs(b_o))
    n = D + (b_o is not None) + cast_roundings
    out = abs_product(merge(d_ctx), W_o) + rounding_tol(dtype, n, mag)
    return {"out": out, "weights": d_w, "q": dq, "k": dk, "v": dv, "ctx": d_ctx}


def torch_sdpa_tol(q, k, v, *, mask=None, bias=None):
    """``(output tol, weights tol)`` of our attention against PyTorch's on the same q, k, v:
    the sum of the two bounds, PyTorch's with its exp, its scale and its tiles of keys."""
    ours = attention_bound(q, k, v, mask=mask, bias=bias)
    theirs = attention_bound(
        q,
        k,
        v,
        mask=mask,
        bias=bias,
        n_tiles=-(-k.shape[-2] // TORCH_KEY_TILE),
        exp_roundings=TORCH_EXP_ROUNDINGS,
        scale_roundings=TORCH_SCALE_ROUNDINGS,
    )
    return ours[0] + theirs[0], ours[1] + theirs[1]
