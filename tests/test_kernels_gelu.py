"""The kernels equal the plain code: erf64, the threaded GELU and its backward.

Each kernel of :mod:`transformer_np._kernels.gelu` is checked against the formula it computes,
written plainly here or in :mod:`transformer_np.functional`: ``math.erf``,
``0.5 x (1 + erf(x / sqrt 2))`` and its derivative ``Phi(x) + x phi(x)`` (and a finite
difference). The softmax kernel is tested in test_kernels_softmax.py.
"""

import math

import numpy as np
import pytest

from transformer_np import functional
from transformer_np._kernels import gelu as kgelu

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import assert_within, rounding_tol, unit_roundoff
from rounding import (
    ERF64_ERROR,
    TAIL32_FIT_ERROR,
    backward32_slope_tol,
    formula_gelu_tol,
    formula_slope_tol,
    gaussian_tail,
    gelu_derivative,
    gelu_formula,
    kernel_gelu_tol,
    kernel_slope_tol,
    kernel_tail_tol,
    math_erf,
    math_erfc,
)

# ============================================================================================
# tolerances (the rounding bounds of the kernels and of the plain formulas)
# ============================================================================================
#
# Each comparison below allows the worst-case rounding of both computations (helpers.py,
# "tolerances: from the arithmetic"): u = unit_roundoff(dtype), FR roundings per exp or erf, and
# the exponent's argument: exp(-a^2 / 2) with a^2 rounded is off by a relative u a^2 / 2.


# ============================================================================================
# erf64
# ============================================================================================


def test_erf64_matches_math_erf_to_a_few_ulp():
    special = [0.0, -0.0, 1e-300, -1e-10, 0.999999, 1.0, 1.000001, -1.0, 8.0, -8.0, 11.0, 27.0]
    x = np.concatenate([np.linspace(-7, 7, 20001), special])
    mine, ref = kgelu.erf64(x), math_erf(x)
    assert mine.dtype == np.float64 and mine.shape == x.shape
    rel = np.abs(mine - ref) / np.maximum(np.abs(ref), 1e-300)
    print("max rel err", rel.max(), "at", x[rel.argmax()])
    assert rel.max() <= ERF64_ERROR


def test_erf64_saturates_far_out_and_at_infinity():
    x = np.array([-np.inf, -40.0, -6.0, 6.0, 40.0, np.inf])
    np.testing.assert_array_equal(kgelu.erf64(x), math_erf(x))
    np.testing.assert_array_equal(kgelu.erf64(x[[0, 1, 4, 5]]), [-1.0, -1.0, 1.0, 1.0])


def test_erf64_keeps_the_shape_of_its_input():
    x = np.linspace(-3, 3, 24).reshape(2, 3, 4)
    np.testing.assert_allclose(kgelu.erf64(x), math_erf(x), rtol=ERF64_ERROR, atol=1e-300)


def test_float32_tail_fit_has_the_accuracy_its_docstring_states():
    # R(a) = exp(a^2 / 2) Q(a), Q(a) = erfc(a / sqrt 2) / 2, in float64 with math.erfc (within
    # 2e-14 of mpmath up to a = 10), against N(a) / D(a) with the coefficients as stored
    a = np.linspace(0.0, float(kgelu.TAIL32_MAX), 20001)
    ref = 0.5 * math_erfc(a / math.sqrt(2.0)) * np.exp(0.5 * a * a)
    n = np.array(kgelu.TAIL32_N, np.float64)[::-1]  # highest degree first, for np.polyval
    d = np.array((*kgelu.TAIL32_D, 1.0), np.float64)[::-1]
    rel = np.abs(np.polyval(n, a) / np.polyval(d, a) / ref - 1.0)
    print(f"max rel err {rel.max():.2e} at a = {a[rel.argmax()]:.4f}")
    assert rel.max() <= TAIL32_FIT_ERROR  # 3.2e-8: the float32 rounding of the coefficients


# ============================================================================================
# gelu (forward, threaded)
# ============================================================================================

# one chunk; several chunks on one thread; the smallest threaded size; threaded, odd size
SIZES = [1000, kgelu.PARALLEL_MIN - 1, kgelu.PARALLEL_MIN, 300_007]


def _inputs(n, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * 4
    x[: min(n, 7)] = [0.0, -0.0, 14.0, -14.0, 30.0, -30.0, 1e-8][: min(n, 7)]
    return x.astype(dtype)


def _assert_equals_formula(y, x):
    ref = gelu_formula(x)  # at the (float32) inputs, in float64
    err = np.abs(y.astype(np.float64) - ref)
    if x.dtype == np.float32:
        # the stated accuracy: within one float32 spacing of the result (or of 1.2e-7 near zero)
        tol = np.maximum(np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64), 1.2e-7)
    else:
        tol = kernel_gelu_tol(x, np.float64)
    # and the formula's own rounding (in float64; 1 + erf cancels for x < 0)
    tol = tol + formula_gelu_tol(x, np.float64)
    worst = np.argmax(err / tol)
    print(f"max abs err {err.max():.2e}; worst at x = {x[worst]!r}: {y[worst]!r} vs {ref[worst]!r}")
    assert_within(y, ref, tol, f"gelu - formula ({x.dtype})")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_gelu_equals_the_formula_with_one_and_two_threads(monkeypatch, dtype, n):
    x = _inputs(n, dtype)
    results = {}
    for threads in (1, 2):
        monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", str(threads))
        results[threads] = kgelu.gelu(x)
        assert results[threads].dtype == dtype and results[threads].shape == x.shape
    _assert_equals_formula(results[1], x)
    # the slices handed to the threads are computed exactly as one thread computes them
    np.testing.assert_array_equal(results[2], results[1])


@pytest.mark.parametrize("n", SIZES)
def test_gelu_uses_threads_from_the_threshold_on(monkeypatch, n):
    calls = []
    real = kgelu.parallel_for

    def spy(fn, pieces, **kwargs):
        calls.append(len(pieces))
        return real(fn, pieces, **kwargs)

    monkeypatch.setattr(kgelu, "parallel_for", spy)
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "2")
    kgelu.gelu(_inputs(n, np.float32))
    assert calls == ([2] if n >= kgelu.PARALLEL_MIN else [])
    calls.clear()
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "1")
    kgelu.gelu(_inputs(n, np.float32))
    assert calls == []


def test_float32_scratch_buffers_are_reused_per_thread_and_never_shared():
    import threading

    mine = kgelu.scratch32()
    assert all(a is b for a, b in zip(mine, kgelu.scratch32(), strict=True))  # call after call
    other = []
    thread = threading.Thread(target=lambda: other.extend(kgelu.scratch32()))
    thread.start()
    thread.join()
    assert not any(np.shares_memory(a, b) for a in mine for b in other)
    # the shared constants cannot be written by mistake
    assert not kgelu.LIM32.flags.writeable and not kgelu.ZERO32.flags.writeable


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_of_a_non_contiguous_array_keeps_its_shape(dtype):
    x = _inputs(6 * 40_000, dtype).reshape(6, 40_000)
    y = kgelu.gelu(x.T)
    assert y.shape == (40_000, 6) and y.dtype == dtype
    np.testing.assert_array_equal(y, kgelu.gelu(np.ascontiguousarray(x.T)))
    _assert_equals_formula(y.ravel(), x.T.ravel())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_public_gelu_is_the_kernel_after_its_checks(dtype):
    x = _inputs(5000, dtype).reshape(50, 100)
    np.testing.assert_array_equal(functional.gelu(x), kgelu.gelu(x))
    x64 = x.astype(np.float64)
    np.testing.assert_array_equal(functional.erf(x64), kgelu.erf64(x64))


# ============================================================================================
# gelu_backward
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_backward_equals_the_derivative_formula(dtype):
    rng = np.random.default_rng(3)
    h = np.concatenate([np.linspace(-12, 12, 2401), rng.standard_normal(4998) * 4, [0.0]])
    h = h.astype(dtype).reshape(-1, 10)  # 7400 values
    grad = rng.standard_normal(h.shape).astype(dtype)
    dh = kgelu.gelu_backward(h, kgelu.gelu(h), grad)
    assert dh.dtype == dtype and dh.shape == h.shape
    ref = grad.astype(np.float64) * gelu_derivative(h)
    err = np.abs(dh - ref)
    print("max abs err", err.max())
    g = np.abs(grad.astype(np.float64))
    if dtype == np.float32:
        slope_tol = backward32_slope_tol(h)
    else:  # erf64, then the same steps as the formula
        erf_tol = ERF64_ERROR * np.abs(math_erf(h / math.sqrt(2.0)))
        slope_tol = formula_slope_tol(h, dtype, erf_tol)
    # both slopes' errors times |grad|, and both products with grad (1 rounding each)
    tol = g * (slope_tol + formula_slope_tol(h, np.float64))
    tol += rounding_tol(dtype, 1, np.abs(ref)) + rounding_tol(np.float64, 1, np.abs(ref))
    assert_within(dh, ref, tol, f"gelu_backward - grad * GELU' ({np.dtype(dtype)})")


def test_gelu_backward_at_zero_is_half_the_gradient():
    for dtype in (np.float32, np.float64):
        h = np.zeros(3, dtype)
        grad = np.array([1.0, -2.0, 4.0], dtype)
        np.testing.assert_array_equal(kgelu.gelu_backward(h, kgelu.gelu(h), grad), 0.5 * grad)


def test_gelu_backward_matches_a_finite_difference_of_the_forward():
    h = np.linspace(-6, 6, 241)
    grad = np.random.default_rng(4).standard_normal(h.shape)
    step = 1e-5
    numeric = (kgelu.gelu(h + step) - kgelu.gelu(h - step)) / (2 * step) * grad
    dh = kgelu.gelu_backward(h, kgelu.gelu(h), grad)
    err = np.abs(dh - numeric).max()
    print("max abs err", err)
    # The central difference is off by step^2 / 6 max|GELU'''| (GELU''' = x phi(x) (x^2 - 4)),
    # and by its round-off: the two GELU values (kernel_gelu_tol each) and the rounding of
    # h +- step (u |h +- step| times GELU' near h) over 2 step, then the subtraction and the
    # division (2); gelu_backward is off by its slope's error (erf64 and the formula's steps);
    # both products with grad (2).
    u = unit_roundoff(np.float64)
    fine = np.linspace(-10, 10, 200_001)
    third = np.abs(fine * np.exp(-0.5 * fine**2) / math.sqrt(2 * math.pi) * (fine**2 - 4)).max()
    slope = np.abs(gelu_derivative(h)) + step * math.sqrt(2 / math.pi)  # max|GELU''| = 2 phi(0)
    ends = np.abs(h) + step
    round_off = kernel_gelu_tol(h + step, np.float64) + kernel_gelu_tol(h - step, np.float64)
    round_off = (round_off + 2 * u * ends * slope) / (2 * step) + rounding_tol(np.float64, 2, slope)
    erf_tol = ERF64_ERROR * np.abs(math_erf(h / math.sqrt(2.0)))
    ours = formula_slope_tol(h, np.float64, erf_tol)
    g = np.abs(grad)
    tol = g * (step**2 / 6 * third + round_off + ours) + rounding_tol(np.float64, 2, g * slope)
    assert_within(dh, numeric, tol, "gelu_backward - central difference")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_gelu_with_slope_equals_gelu_and_the_derivative_formula(monkeypatch, dtype, n):
    x = _inputs(n, dtype)
    x[-2401:] = np.linspace(-12, 12, 2401).astype(dtype)[-n:]
    for threads in (1, 2):
        monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", str(threads))
        y, slope = kgelu.gelu(x, with_slope=True)
        assert slope.dtype == dtype and slope.shape == x.shape
        # the output is the same array gelu gives without the slope
        np.testing.assert_array_equal(y, kgelu.gelu(x))
        ref = gelu_derivative(x)
        err = np.abs(slope - ref)
        print(threads, "max abs err", err.max(), "at", x[err.argmax()])
        tol = kernel_slope_tol(x, dtype) + formula_slope_tol(x, np.float64)
        assert_within(slope, ref, tol, f"GELU' - formula ({np.dtype(dtype)})")
        # the slope gives the gradient gelu_backward gives (from the forward's output)
        grad = np.linspace(-2, 2, n).astype(dtype)
        mine, theirs = grad * slope, kgelu.gelu_backward(x, y, grad)
        g = np.abs(grad.astype(np.float64))
        if dtype == np.float32:
            # both read Phi off the same tail Q of the kernel (but at x = 0, where gelu_backward
            # takes 1/2): 1 - 2 Q + Q against (x - x Q) / x, 1 rounding each of |1 - 2 Q|,
            # Phi, Q, Phi, Phi; x phi(x) from the same exp argument: FR + 2 each
            q = gaussian_tail(np.abs(x))
            phi_cdf = np.where(x < 0, q, 1 - q)
            x_pdf = np.abs(x) * np.exp(-0.5 * x.astype(np.float64) ** 2) / math.sqrt(2 * math.pi)
            slopes_tol = (
                rounding_tol(dtype, 1, np.where(x >= 0, np.abs(1 - 2 * q), 0) + q + 3 * phi_cdf)
                + rounding_tol(dtype, 2 * (FR + 2), x_pdf)
                + rounding_tol(dtype, 2, np.abs(ref))  # the two sums
                + np.where(x == 0, kernel_tail_tol(0.0, dtype), 0.0)
            )
        else:  # the kernel's tail against erf64 and the formula's steps
            erf_tol = ERF64_ERROR * np.abs(math_erf(x / math.sqrt(2.0)))
            slopes_tol = kernel_slope_tol(x, dtype) + formula_slope_tol(x, dtype, erf_tol)
        # and the two products with grad; below the normal range, rounding is absolute
        tol = g * slopes_tol + rounding_tol(dtype, 2, np.abs(g * ref)) + np.finfo(dtype).tiny
        assert_within(mine, theirs, tol, "grad * slope - gelu_backward")


def test_gelu_slope_at_zero_is_one_half_and_saturates_far_out():
    for dtype in (np.float32, np.float64):
        x = np.array([0.0, -0.0, 40.0, -40.0], dtype)
        _, slope = kgelu.gelu(x, with_slope=True)
        np.testing.assert_array_equal(slope, np.array([0.5, 0.5, 1.0, 0.0], dtype))
