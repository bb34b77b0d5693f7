"""Tests of the pure functions: softmax, log_softmax, relu, erf, gelu, layer_norm.

Sections: values (against the Python standard library, math.erf and math.erfc, and direct
formulas), errors, reference (against PyTorch). The kernels these functions call are tested
equal to the formulas in test_kernels_gelu.py.
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_np import erf, gelu, layer_norm, relu, softmax
from transformer_np.functional import log_softmax

from helpers import (
    PROPERTY_SETTINGS,
    TORCH_FORWARD_TOL,
    assert_close_to_torch,
    to_torch,
    torch_dtype,
)

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
shapes_2d = st.tuples(st.integers(1, 6), st.integers(1, 9))


# ============================================================================================
# values
# ============================================================================================

# ------------------------------------------------------------------ softmax and log_softmax


def test_softmax_matches_direct_formula():
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    e = np.exp(x)
    np.testing.assert_allclose(softmax(x), e / e.sum(axis=-1, keepdims=True), rtol=1e-15)


def test_softmax_does_not_overflow_on_large_scores():
    x = np.array([1000.0, 1001.0, 1002.0])
    p = softmax(x)
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p, softmax(x - 1000.0), rtol=1e-15)


def test_softmax_along_another_axis_sums_to_one_there():
    x = np.random.default_rng(0).standard_normal((3, 4, 5))
    p = softmax(x, axis=1)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(p, np.moveaxis(softmax(np.moveaxis(x, 1, -1)), -1, 1))


def test_softmax_gives_exact_zero_to_minus_inf():
    p = softmax(np.array([0.0, -np.inf, 1.0]))
    assert p[1] == 0.0
    np.testing.assert_allclose(p.sum(), 1.0)


def test_softmax_of_an_all_minus_inf_row_is_zeros_not_nan():
    x = np.array([[-np.inf, -np.inf], [0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value" RuntimeWarning either
        p = softmax(x)
    np.testing.assert_array_equal(p, [[0.0, 0.0], [0.5, 0.5]])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_softmax_keeps_the_input_dtype(dtype):
    p = softmax(np.array([1.0, 2.0], dtype=dtype))
    assert p.dtype == dtype


def test_softmax_leaves_its_input_unchanged():
    x = np.array([1.0, 2.0, 3.0])
    softmax(x)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])


def test_log_softmax_is_stable():
    out = log_softmax(np.array([1000.0, 0.0]))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, [0.0, -1000.0], rtol=1e-15)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_log_softmax_is_the_log_of_softmax(axis):
    x = np.random.default_rng(3).standard_normal((3, 4, 5)) * 4
    # near 0 the reference log(p) has only absolute accuracy (p = 1 - eps rounds)
    np.testing.assert_allclose(
        log_softmax(x, axis=axis), np.log(softmax(x, axis=axis)), rtol=1e-13, atol=1e-15
    )


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_log_softmax_keeps_the_input_dtype_and_leaves_the_input_unchanged(dtype):
    x = np.array([1.0, 2.0, -np.inf], dtype=dtype)
    out = log_softmax(x)
    assert out.dtype == dtype
    assert out[2] == -np.inf
    np.testing.assert_array_equal(x, np.array([1.0, 2.0, -np.inf], dtype=dtype))


# ------------------------------------------------------------------ relu


def test_relu_zeroes_negatives_and_keeps_dtype():
    y = relu(np.array([-2.0, -0.0, 0.5, 3.0], dtype=np.float32))
    np.testing.assert_array_equal(y, [0.0, 0.0, 0.5, 3.0])
    assert y.dtype == np.float32


# ------------------------------------------------------------------ erf


def test_erf_float64_matches_math_erf_to_a_few_ulp():
    x = np.concatenate([np.linspace(-7, 7, 20001), [1e-300, -1e-10, 0.999999, 1.0, 1.000001]])
    mine = erf(x)
    ref = np.array([math.erf(v) for v in x])
    rel = np.abs(mine - ref) / np.maximum(np.abs(ref), 1e-300)
    print("max rel err", rel.max(), "at", x[rel.argmax()])
    assert rel.max() <= 1e-15


def test_erf_float32_is_correctly_rounded_or_one_ulp_off():
    x = np.linspace(-5, 5, 10001, dtype=np.float32)
    mine = erf(x)
    assert mine.dtype == np.float32
    ref = np.array([math.erf(float(v)) for v in x])
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(mine - ref) <= ulp)


def test_erf_is_odd_and_saturates_at_infinity():
    x = np.linspace(0, 6, 1001)
    np.testing.assert_array_equal(erf(-x), -erf(x))
    np.testing.assert_array_equal(erf(np.array([-np.inf, np.inf, 40.0])), [-1.0, 1.0, 1.0])


# ------------------------------------------------------------------ gelu


def _gelu_ref(x):
    """Exact GELU in float64 from math.erfc, accurate also where x * Phi(x) is tiny."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in np.asarray(x, np.float64)])


def test_gelu_float64_matches_math_erfc_formula():
    x = np.concatenate([np.linspace(-12, 12, 24001), [-40.0, 40.0, 1e-8, -1e-8]])
    mine, ref = gelu(x), _gelu_ref(x)
    err = np.abs(mine - ref)
    print("max abs err", err.max(), "at", x[err.argmax()])
    assert np.all(err <= 1e-15 * np.maximum(1.0, np.abs(x)))
    # relative accuracy also in the negative tail, where 1 + erf(x / sqrt 2) would cancel
    tail = (x < -1) & (x > -30)
    assert np.all(err[tail] <= 1e-13 * np.abs(ref[tail]))


def test_gelu_float32_error_is_within_float32_rounding():
    x = np.linspace(-12, 12, 48001).astype(np.float32)
    mine = gelu(x)
    assert mine.dtype == np.float32
    ref = _gelu_ref(x)  # at the float32 inputs, in float64
    err = np.abs(mine - ref)
    # absolute: within one float32 spacing of the result (or of 1e-7 near zero)
    assert np.all(err <= np.maximum(np.spacing(np.abs(ref).astype(np.float32)), 1.2e-7))
    # relative, for x > -10 (beyond, the result is below 8e-23 in magnitude)
    sel = (x > -10) & (x != 0)
    rel = err[sel] / np.abs(ref[sel])
    print("max rel err", rel.max())
    assert rel.max() <= 3e-6


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_large_array_uses_chunks_and_threads_and_matches_small_calls(dtype):
    # more elements than one chunk and than the threading threshold, odd size
    x = (np.random.default_rng(0).standard_normal(300_007) * 3).astype(dtype)
    big = gelu(x)
    pieces = np.concatenate([gelu(x[i : i + 1000]) for i in range(0, x.size, 1000)])
    np.testing.assert_array_equal(big, pieces)


def test_gelu_accepts_non_contiguous_input_and_keeps_its_shape():
    x = np.random.default_rng(1).standard_normal((6, 8))
    y = gelu(x.T)
    assert y.shape == (8, 6)
    np.testing.assert_allclose(y, _gelu_ref(x.T.ravel()).reshape(8, 6), rtol=1e-14, atol=1e-16)


def test_gelu_tanh_approximation_matches_its_formula():
    x = np.linspace(-6, 6, 101)
    ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gelu(x, approximate=True), ref, rtol=1e-14, atol=1e-16)
    np.testing.assert_array_equal(gelu(x, approximate="tanh"), gelu(x, approximate=True))
    np.testing.assert_array_equal(gelu(x, approximate="none"), gelu(x))


def test_gelu_float16_is_computed_and_returned():
    y = gelu(np.array([-1.0, 0.0, 1.0], dtype=np.float16))
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, [-0.1587, 0.0, 0.8413], atol=1e-3)


# ------------------------------------------------------------------ layer_norm


def test_layer_norm_matches_direct_formula_with_affine():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8)) * 4 + 1
    g, b = rng.standard_normal(8), rng.standard_normal(8)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    ref = (x - mu) / np.sqrt(var + 1e-5) * g + b
    np.testing.assert_allclose(layer_norm(x, g, b), ref, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_keeps_dtype_and_normalises(dtype):
    x = np.random.default_rng(2).standard_normal((5, 16)).astype(dtype) * 3
    y = layer_norm(x, np.ones(16, dtype), np.zeros(16, dtype), eps=1e-12)
    assert y.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=tol)
    np.testing.assert_allclose(y.var(-1), 1.0, atol=tol * 10)


def test_layer_norm_of_a_constant_row_is_beta_not_nan():
    y = layer_norm(np.full((1, 4), 7.0), np.ones(4), np.arange(4.0))
    np.testing.assert_array_equal(y, [[0.0, 1.0, 2.0, 3.0]])


@PROPERTY_SETTINGS
@given(arrays(np.float64, shapes_2d, elements=finite))
def test_softmax_rows_are_probability_distributions(x):
    p = softmax(x)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)


@PROPERTY_SETTINGS
@given(
    arrays(np.float64, shapes_2d, elements=finite),
    st.floats(-100, 100, allow_nan=False),
)
def test_softmax_is_invariant_to_adding_a_constant_to_a_row(x, c):
    np.testing.assert_allclose(softmax(x + c), softmax(x), rtol=1e-9, atol=1e-12)


@PROPERTY_SETTINGS
@given(
    arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 32)), elements=finite),
    st.sampled_from([1e-12, 1e-5]),
)
def test_layer_norm_output_has_mean_zero_and_variance_one_before_affine(x, eps):
    d = x.shape[-1]
    y = layer_norm(x, np.ones(d), np.zeros(d), eps)
    var_in = x.var(axis=-1)
    # rounding of the mean, amplified by 1 / sqrt(var + eps)
    tol = 1e-14 * d * (np.abs(x).max(axis=-1) + 1) / np.sqrt(var_in + eps)
    assert np.all(np.abs(y.mean(axis=-1)) <= tol)
    # exactly var / (var + eps): 1 whenever the input variance dwarfs eps
    np.testing.assert_allclose(y.var(axis=-1), var_in / (var_in + eps), rtol=1e-9, atol=1e-12)


def test_log_softmax_with_minus_inf():
    out = log_softmax(np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf]]))
    np.testing.assert_allclose(out[0], [np.log(0.5), -np.inf, np.log(0.5)])
    np.testing.assert_array_equal(out[1], -np.inf)  # not NaN


# ============================================================================================
# errors
# ============================================================================================


def test_softmax_and_log_softmax_of_a_0d_array_ask_for_an_axis():
    for fn in (softmax, log_softmax):
        with pytest.raises(ValueError, match="x must have at least one axis, got a 0-d array"):
            fn(np.float64(1.0))


def test_softmax_rejects_plus_inf_along_any_axis():
    with pytest.raises(ValueError, match=r"x contains \+inf .*first at index \(1, 0\)"):
        softmax(np.array([[0.0, 1.0], [np.inf, 1.0]]), axis=0)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_rejects_infinities(approximate):
    match = r"x contains inf \(1 of 2 values, first at index \(1,\)\)"
    with pytest.raises(ValueError, match=match):
        gelu(np.array([0.0, -np.inf]), approximate=approximate)


def test_gelu_rejects_a_with_slope_that_is_not_a_bool():
    with pytest.raises(TypeError, match=r"with_slope must be True or False, got 1 \(int\)"):
        gelu(np.zeros(3), with_slope=1)


@pytest.mark.parametrize("fn", [relu, erf])
def test_relu_and_erf_reject_integer_arrays(fn):
    with pytest.raises(TypeError, match="x must be a floating-point array.*got dtype int"):
        fn(np.arange(3))


def test_relu_rejects_nan():
    with pytest.raises(ValueError, match="x contains NaN"):
        relu(np.array([0.0, np.nan]))


def test_layer_norm_of_a_0d_array_asks_for_a_feature_axis():
    with pytest.raises(ValueError, match=r"x must have a feature axis \(shape \(\.\.\., D\)\)"):
        layer_norm(np.array(1.0), np.ones(1), np.zeros(1))


def test_softmax_errors():
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        softmax(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="x contains NaN"):
        softmax(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"x contains \+inf"):
        softmax(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        softmax(np.zeros((2, 2)), axis=2)


def test_elementwise_function_errors():
    with pytest.raises(ValueError, match="approximate must be"):
        gelu(np.zeros(3), approximate="fast")
    with pytest.raises(ValueError, match="x contains NaN"):
        gelu(np.array([np.nan]))
    with pytest.raises(ValueError, match="x contains inf"):
        relu(np.array([np.inf]))
    with pytest.raises(ValueError, match="x contains NaN"):
        erf(np.array([np.nan]))
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        gelu(np.arange(3))


def test_layer_norm_function_errors():
    x = np.zeros((2, 4))
    with pytest.raises(ValueError, match=r"gamma must have shape \(D,\) = \(4,\).*\(3,\)"):
        layer_norm(x, np.ones(3), np.zeros(4))
    with pytest.raises(ValueError, match="eps must be a positive finite number"):
        layer_norm(x, np.ones(4), np.zeros(4), eps=0.0)
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        layer_norm(np.zeros((2, 4), dtype=int), np.ones(4), np.zeros(4))


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_softmax_of_nothing(shape):
    with pytest.raises(ValueError, match=r"x has no values along axis -1"):
        softmax(np.zeros(shape))


def test_layer_norm_checks_gamma_and_beta():
    x = np.ones((2, 4))
    with pytest.raises(ValueError, match="gamma contains NaN"):
        layer_norm(x, np.array([np.nan, 1, 1, 1]), np.zeros(4))
    with pytest.raises(ValueError, match="beta contains inf"):
        layer_norm(x, np.ones(4), np.array([np.inf, 0, 0, 0]))


@pytest.mark.parametrize("row", [[3e38, -3e38], [3e38, 3e38]])
def test_layer_norm_overflow_in_float32_is_an_error_not_zeros(row):
    x = np.array([row], np.float32)
    with pytest.raises(ValueError, match="x is too large to normalise in float32"):
        layer_norm(x, np.ones(2), np.zeros(2))
    # float64 has the range: the same row normalises to +-1 (or to 0 for equal values)
    y = layer_norm(x.astype(np.float64), np.ones(2), np.zeros(2))
    assert np.all(np.isfinite(y))


def test_log_softmax_of_an_empty_axis():
    with pytest.raises(ValueError, match=r"x has no values along axis -1 \(shape \(0,\)\)"):
        log_softmax(np.zeros(0))
    with pytest.raises(ValueError, match=r"x has no values along axis 0 \(shape \(0, 3\)\)"):
        log_softmax(np.zeros((0, 3)), axis=0)


def test_log_softmax_bad_values_and_types():
    with pytest.raises(ValueError, match=r"x contains NaN \(1 of 3 values"):
        log_softmax(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match=r"x contains \+inf"):
        log_softmax(np.array([0.0, np.inf, 1.0]))
    with pytest.raises(TypeError, match="x must be a floating-point array.*got dtype int"):
        log_softmax(np.array([1, 2]))
    with pytest.raises(ValueError, match="axis 2 is out of range for an array of rank 1"):
        log_softmax(np.zeros(3), axis=2)
    with pytest.raises(TypeError, match="axis must be an int"):
        log_softmax(np.zeros(3), axis=None)


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_match_torch(dtype, axis):
    torch = pytest.importorskip("torch")
    x = (np.random.default_rng(4).standard_normal((3, 4, 7)) * 5).astype(dtype)
    x[0, 1, 2] = x[2, 0, 6] = -np.inf  # masked entries (no slice is all -inf: torch gives NaN)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    for mine, theirs in (
        (softmax(x, axis=axis), torch.softmax(torch.from_numpy(x), dim=axis).numpy()),
        (log_softmax(x, axis=axis), torch.log_softmax(torch.from_numpy(x), dim=axis).numpy()),
    ):
        assert mine.dtype == theirs.dtype
        finite = np.isfinite(theirs)
        np.testing.assert_array_equal(np.isfinite(mine), finite)
        diff = np.abs(mine[finite].astype(np.float64) - theirs[finite])
        print(f"max abs diff {diff.max():.2e}: mine vs torch")
        assert diff.max() <= tol * max(1.0, float(np.abs(theirs[finite]).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_matches_torch_special_erf(torch, dtype):
    x = np.linspace(-6, 6, 20001).astype(dtype)
    ref = torch.special.erf(to_torch(x)).numpy()
    # float32: ours is correctly rounded (computed in float64); torch's within 1-2 ulp
    tol = 2.5e-7 if dtype == np.float32 else 1e-15
    diff = np.abs(erf(x).astype(np.float64) - ref)
    print("max abs diff", diff.max())
    assert diff.max() <= tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(torch, dtype, approximate):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-10, 10, 4001), rng.standard_normal(200_000) * 3])
    x = x.astype(dtype)
    ref = torch.nn.functional.gelu(to_torch(x), approximate=approximate).numpy()
    # float32: torch's own exact kernel is off by up to ~5e-7 absolute near |x| = 4
    assert_close_to_torch(
        gelu(x, approximate=approximate), ref, f"gelu({approximate})", atol=TORCH_FORWARD_TOL[dtype]
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_slope_matches_torch_autograd(torch, dtype, approximate):
    rng = np.random.default_rng(2)
    x = np.concatenate([np.linspace(-10, 10, 4001), rng.standard_normal(200_000) * 3])
    x = x.astype(dtype)
    xt = to_torch(x).requires_grad_(True)
    torch.nn.functional.gelu(xt, approximate=approximate).sum().backward()
    y, slope = gelu(x, approximate=approximate, with_slope=True)
    assert slope.dtype == dtype and slope.shape == x.shape
    np.testing.assert_array_equal(y, gelu(x, approximate=approximate))
    # the slope is in [-0.17, 1.13]: float32 within a few roundings of 1 (both sides round)
    atol = 2e-6 if dtype == np.float32 else 1e-14
    assert_close_to_torch(slope, xt.grad.numpy(), f"gelu'({approximate})", atol=atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm_function_matches_torch_layernorm(torch, dtype, eps):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 7, 32)) * 2 + 0.5).astype(dtype)
    gamma = rng.standard_normal(32).astype(dtype)
    beta = rng.standard_normal(32).astype(dtype)
    ref_ln = torch.nn.LayerNorm(32, eps=eps, dtype=torch_dtype(dtype))
    with torch.no_grad():
        ref_ln.weight.copy_(to_torch(gamma))
        ref_ln.bias.copy_(to_torch(beta))
        ref = ref_ln(to_torch(x)).numpy()
    assert_close_to_torch(
        layer_norm(x, gamma, beta, eps), ref, "layer_norm", atol=TORCH_FORWARD_TOL[dtype]
    )
