"""layers.py: the basic layers Linear, LayerNorm and Dropout.

Sections: values (the formulas, initialisation, dtypes, the forward cache), errors (bad input
and bad parameters name the argument), backward (against finite differences), reference
(against torch.nn.Linear and torch.nn.LayerNorm). FeedForward, Embedding, RMSNorm and SwiGLU
have their own test files; what all the small layers share (NumPy integer sizes, a zero-size
axis) is tested here. The function layer_norm is tested in test_functional.py.
"""

import math

import numpy as np
import pytest

from transformer_np import (
    Dropout,
    Embedding,
    FeedForward,
    LayerNorm,
    Linear,
    RMSNorm,
    SwiGLU,
    layer_norm,
)

from helpers import (
    assert_within,
    gradcheck_layer,
    load_layer_norm,
    load_linear,
    randomise_biases,
    rounding_tol,
    to_torch,
    to_torch64,
    torch_dtype,
)
from rounding import exact, layer_norm_rounded, linear_rounded

# ============================================================================================
# values
# ============================================================================================

# ------------------------------------------------------------------ Linear


def test_linear_is_x_at_w_plus_b_on_the_last_axis():
    rng = np.random.default_rng(0)
    lin = Linear(4, 3, rng=rng)
    x = rng.standard_normal((2, 5, 4))
    y = lin(x)
    assert y.shape == (2, 5, 3)
    ref, _ = linear_rounded(exact(x), lin.params["W"], lin.params["b"])
    assert_within(y, x @ lin.params["W"] + lin.params["b"], ref.tol(np.float64, sides=2), "Linear")


def test_linear_init_is_torch_default_uniform():
    lin = Linear(64, 32, rng=np.random.default_rng(0))
    assert lin.params["W"].shape == (64, 32) and lin.params["b"].shape == (32,)
    bound = 1 / math.sqrt(64)
    assert np.abs(lin.params["W"]).max() <= bound and np.abs(lin.params["b"]).max() <= bound
    assert np.abs(lin.params["W"]).max() > 0.9 * bound  # really uniform on the whole range


def test_linear_without_bias():
    lin = Linear(3, 2, bias=False, rng=np.random.default_rng(0))
    assert list(lin.params) == ["W"]
    x = np.ones((4, 3))
    ref, _ = linear_rounded(exact(x), lin.params["W"])
    assert_within(lin(x), x @ lin.params["W"], ref.tol(np.float64, sides=2), "Linear, no bias")


@pytest.mark.parametrize("param_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("in_dtype", [np.float32, np.float64])
def test_linear_output_dtype_follows_the_input(param_dtype, in_dtype):
    lin = Linear(3, 2, rng=np.random.default_rng(0), dtype=param_dtype)
    assert lin.params["W"].dtype == param_dtype
    assert lin(np.ones((4, 3), dtype=in_dtype)).dtype == in_dtype


def test_linear_cache_holds_the_2d_input():
    lin = Linear(3, 2, rng=np.random.default_rng(0))
    x = np.arange(24.0).reshape(2, 4, 3)
    lin(x)
    np.testing.assert_array_equal(lin.cache["x"], x.reshape(8, 3))
    assert lin.cache["shape"] == (2, 4, 3)


# ------------------------------------------------------------------ LayerNorm


def test_layernorm_class_equals_function_and_starts_as_identity_affine():
    rng = np.random.default_rng(1)
    ln = LayerNorm(6)
    np.testing.assert_array_equal(ln.params["gamma"], np.ones(6))
    np.testing.assert_array_equal(ln.params["beta"], np.zeros(6))
    ln.params["gamma"] = rng.standard_normal(6)
    ln.params["beta"] = rng.standard_normal(6)
    x = rng.standard_normal((3, 4, 6))
    np.testing.assert_array_equal(ln(x), layer_norm(x, ln.params["gamma"], ln.params["beta"]))


def test_layernorm_eps_is_used():
    x = np.array([[0.0, 1e-3]])  # variance 2.5e-7: far above 1e-12, below 1e-5
    small = LayerNorm(2, eps=1e-12)(x)
    large = LayerNorm(2, eps=1e-5)(x)
    np.testing.assert_allclose(np.abs(small), 1.0, atol=1e-5)  # normalised to +-1
    formula = 0.5e-3 / np.sqrt(2.5e-7 + 1e-5)
    y, _ = layer_norm_rounded(exact(x), np.ones(2), np.zeros(2), 1e-5)
    # the formula: its three decimal constants, the sum, sqrt and the division
    tol = y.tol(np.float64) + rounding_tol(np.float64, 6, formula)
    assert_within(np.abs(large), np.full((1, 2), formula), tol, "LayerNorm(eps=1e-5)")


def test_layernorm_cache_holds_normalised_input_and_rstd():
    x = np.random.default_rng(2).standard_normal((5, 8))
    ln = LayerNorm(8)
    ln(x)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    y, _ = layer_norm_rounded(exact(x), np.ones(8), np.zeros(8), 1e-5)
    # the same roundings on both sides (NumPy's var: the mean, x - mu, the mean of squares)
    rstd, x_hat = y.rstd.tol(np.float64, sides=2), y.x_hat.tol(np.float64, sides=2)
    assert_within(ln.cache["rstd"], 1 / np.sqrt(var + 1e-5), rstd, "rstd")
    assert_within(ln.cache["x_hat"], (x - mu) / np.sqrt(var + 1e-5), x_hat, "x_hat")


def test_layernorm_float32_in_float32_out():
    y = LayerNorm(4)(np.ones((2, 4), dtype=np.float32) * np.arange(4, dtype=np.float32))
    assert y.dtype == np.float32


# ------------------------------------------------------------------ Dropout


def test_dropout_keeps_the_mean_and_scales_kept_values():
    p = 0.1
    drop = Dropout(p, rng=np.random.default_rng(8)).train()
    x = np.ones(1_000_000)
    y = drop(x)
    kept = y != 0
    # inverted dropout: a kept value is x / (1 - p), exactly; the others are exactly 0
    np.testing.assert_array_equal(y[kept], np.float64(1 / (1 - p)))
    np.testing.assert_array_equal(drop.cache, y)  # the cache is the scaled mask (x is ones)
    assert abs((~kept).mean() - p) <= 0.002  # std of the fraction: sqrt(p (1 - p) / n) = 3e-4
    assert abs(y.mean() - 1.0) <= 0.002  # E[y] = x
    # the backward pass multiplies by the same (scaled) mask
    g = np.random.default_rng(9).standard_normal(x.shape)
    np.testing.assert_array_equal(drop.backward(g), g * y)
    # evaluation mode: the identity, forward and backward
    drop.eval()
    np.testing.assert_array_equal(drop(x), x)
    assert drop.cache is None
    np.testing.assert_array_equal(drop.backward(g), g)


# ------------------------------------------------------------------ all the small layers

# name -> (the layer built with sizes of integer type `n`, an input of `t` tokens, D = 4)
SMALL_LAYERS = {
    "Linear": (lambda n: Linear(n(4), n(3), rng=n(0)), lambda t: np.ones((2, t, 4))),
    "LayerNorm": (lambda n: LayerNorm(n(4)), lambda t: np.ones((2, t, 4))),
    "FeedForward": (lambda n: FeedForward(n(4), n(8), rng=n(0)), lambda t: np.ones((2, t, 4))),
    "Embedding": (lambda n: Embedding(n(10), n(4), rng=n(0)), lambda t: np.ones((2, t), int)),
    "RMSNorm": (lambda n: RMSNorm(n(4)), lambda t: np.ones((2, t, 4))),
    "SwiGLU": (lambda n: SwiGLU(n(4), n(6), rng=n(0)), lambda t: np.ones((2, t, 4))),
}


@pytest.mark.parametrize("name", SMALL_LAYERS)
@pytest.mark.parametrize("integer", [np.int64, np.int32, np.uint8])
def test_numpy_integers_are_sizes(name, integer):
    build, data = SMALL_LAYERS[name]
    layer, reference = build(integer), build(int)
    assert list(layer.params) == list(reference.params)
    for key, value in reference.params.items():
        np.testing.assert_array_equal(layer.params[key], value)  # the same draws
    np.testing.assert_array_equal(layer(data(3)), reference(data(3)))


@pytest.mark.parametrize("name", SMALL_LAYERS)
def test_zero_tokens_give_an_empty_output_and_gradient(name):
    build, data = SMALL_LAYERS[name]
    layer = build(int)
    x = data(0)  # (2, 0, 4): a batch of empty sequences
    y = layer(x)
    assert y.shape[:2] == (2, 0) and y.size == 0
    if hasattr(layer, "backward") and name != "SwiGLU":
        dx = layer.backward(np.zeros_like(y))
        assert dx is None or dx.shape == x.shape
        assert all(not g.any() for g in layer.grads.values())  # no token, no gradient


# ============================================================================================
# errors
# ============================================================================================


def test_layer_feature_size_errors():
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., d_in\) with d_in = 4"):
        Linear(4, 2, rng=0)(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="x must have shape .* d_model = 6"):
        LayerNorm(6)(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="x contains NaN"):
        LayerNorm(2)(np.array([[np.nan, 0.0]]))


@pytest.mark.parametrize("name", [n for n in SMALL_LAYERS if n != "Embedding"])
def test_a_zero_size_feature_axis_is_a_wrong_width(name):
    layer = SMALL_LAYERS[name][0](int)
    what = "d_in" if name == "Linear" else "d_model"
    with pytest.raises(
        ValueError, match=rf"x must have shape \(\.\.\., {what}\) with {what} = 4, got \(2, 3, 0\)"
    ):
        layer(np.ones((2, 3, 0)))


def test_layer_params_replaced_with_wrong_shape():
    lin = Linear(4, 2, rng=0)
    lin.params["W"] = np.zeros((2, 4))
    with pytest.raises(
        ValueError, match=r"Linear.params\['W'\] must be an ndarray of shape \(4, 2\)"
    ):
        lin(np.zeros((1, 4)))


@pytest.mark.parametrize("row", [[3e38, -3e38], [3e38, 3e38]])
def test_layer_norm_layer_overflow_in_float32_is_an_error_not_zeros(row):
    x = np.array([row], np.float32)
    with pytest.raises(ValueError, match="x is too large to normalise in float32"):
        LayerNorm(2, dtype=np.float32)(x)


def test_dropout_p_must_be_a_finite_number():
    with pytest.raises(ValueError, match=r"Dropout.p must be a finite number, got nan"):
        Dropout(float("nan"))


def test_backward_with_wrong_gradient_shape_is_a_clear_error(rng):
    lin = Linear(2, 3, rng=rng)
    lin(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"grad_output must have the shape of the last output"):
        lin.backward(np.ones((4, 2)))


def test_linear_backward_refuses_a_nan_gradient(rng):
    lin = Linear(2, 3, rng=rng)
    lin(np.ones((4, 2)))
    g = np.ones((4, 3))
    g[1, 2] = np.nan  # passed on, it would make every gradient below NaN
    with pytest.raises(
        ValueError, match=r"grad_output contains NaN \(1 of 12 values, first at index \(1, 2\)\)"
    ):
        lin.backward(g)


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize("bias", [True, False])
def test_linear_backward_matches_finite_differences(rng, bias):
    lin = Linear(4, 3, bias=bias, rng=rng)
    x = rng.standard_normal((2, 5, 4))
    gradcheck_layer(lin, lin.backward, lin, [x], rng)


def test_layer_norm_backward_matches_finite_differences(rng):
    ln = LayerNorm(6)
    ln.params["gamma"] = rng.standard_normal(6)
    ln.params["beta"] = rng.standard_normal(6)
    x = 3 * rng.standard_normal((2, 4, 6)) + 1
    gradcheck_layer(ln, ln.backward, ln, [x], rng)


def test_dropout_backward_uses_the_forward_mask(rng):
    drop = Dropout(0.4)
    drop.training = True
    x = rng.standard_normal((3, 5))

    def forward(x):
        drop.rng = np.random.default_rng(7)  # the same mask at every call
        return drop(x)

    gradcheck_layer(forward, drop.backward, drop, [x], rng)
    y = forward(x)
    # x times 1/0.6 rounded, against x / 0.6: three roundings
    assert np.all((y == 0) | (np.abs(y - x / 0.6) <= rounding_tol(np.float64, 3, np.abs(x) / 0.6)))


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm_matches_torch_layernorm(torch, dtype, eps):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 7, 32)) * 2 + 0.5).astype(dtype)
    ln = LayerNorm(32, eps=eps, dtype=dtype)
    ln.params["gamma"] = rng.standard_normal(32).astype(dtype)
    ln.params["beta"] = rng.standard_normal(32).astype(dtype)
    ref_ln = torch.nn.LayerNorm(32, eps=eps, dtype=torch_dtype(dtype))
    load_layer_norm(ref_ln, ln)
    with torch.no_grad():
        ref = ref_ln(to_torch(x)).numpy()
    y, _ = layer_norm_rounded(exact(x), ln.params["gamma"], ln.params["beta"], eps)
    assert_within(ln(x), ref, y.tol(dtype, sides=2), f"LayerNorm ({np.dtype(dtype).name})")


def test_linear_and_layer_norm_grads_match_torch(torch, rng):
    x = rng.standard_normal((3, 4, 6))
    G = rng.standard_normal((3, 4, 6))
    lin = Linear(6, 6, rng=rng)
    tl = torch.nn.Linear(6, 6, dtype=torch.float64)
    load_linear(tl, lin)
    ln = LayerNorm(6)
    randomise_biases(ln.params, rng)
    tln = torch.nn.LayerNorm(6, dtype=torch.float64)
    load_layer_norm(tln, ln)
    counts = {
        lin: linear_rounded(exact(x), lin.params["W"], lin.params["b"])[1],
        ln: layer_norm_rounded(exact(x), ln.params["gamma"], ln.params["beta"], ln.eps)[1],
    }
    for mine, theirs, names in ((lin, tl, ("W", "b")), (ln, tln, ("gamma", "beta"))):
        name = type(mine).__name__
        xt = to_torch64(x, True)
        (theirs(xt) * to_torch64(G)).sum().backward()
        mine(x)
        dx, grads = counts[mine](exact(G))
        assert_within(mine.backward(G), xt.grad, dx.tol(np.float64, sides=2), f"{name} dx")
        assert_within(
            mine.grads[names[0]],
            theirs.weight.grad.numpy().T if names[0] == "W" else theirs.weight.grad,
            grads[names[0]].tol(np.float64, sides=2),
            f"{name}.{names[0]}",
        )
        assert_within(
            mine.grads[names[1]],
            theirs.bias.grad,
            grads[names[1]].tol(np.float64, sides=2),
            f"{name}.{names[1]}",
        )
