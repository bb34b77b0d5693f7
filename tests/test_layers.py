"""Unit tests of Linear, LayerNorm, FeedForward, Embedding and the NestedParams view."""

import math

import numpy as np
import pytest

from transformer_np import Embedding, FeedForward, LayerNorm, Linear, gelu, layer_norm
from transformer_np.layers import NestedParams

# ------------------------------------------------------------------ Linear


def test_linear_is_x_at_w_plus_b_on_the_last_axis():
    rng = np.random.default_rng(0)
    lin = Linear(4, 3, rng=rng)
    x = rng.standard_normal((2, 5, 4))
    y = lin(x)
    assert y.shape == (2, 5, 3)
    np.testing.assert_allclose(y, x @ lin.params["W"] + lin.params["b"], rtol=1e-14)


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
    np.testing.assert_allclose(lin(x), x @ lin.params["W"])


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
    np.testing.assert_array_equal(lin._cache["x"], x.reshape(8, 3))
    assert lin._cache["shape"] == (2, 4, 3)


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
    np.testing.assert_allclose(np.abs(large), 0.5e-3 / np.sqrt(2.5e-7 + 1e-5), rtol=1e-12)


def test_layernorm_cache_holds_normalised_input_and_rstd():
    x = np.random.default_rng(2).standard_normal((5, 8))
    ln = LayerNorm(8)
    ln(x)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln._cache["rstd"], 1 / np.sqrt(var + 1e-5), rtol=1e-14)
    np.testing.assert_allclose(ln._cache["x_hat"], (x - mu) / np.sqrt(var + 1e-5), rtol=1e-13)


def test_layernorm_float32_in_float32_out():
    y = LayerNorm(4)(np.ones((2, 4), dtype=np.float32) * np.arange(4, dtype=np.float32))
    assert y.dtype == np.float32


# ------------------------------------------------------------------ FeedForward


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feedforward_is_two_linears_with_activation(activation):
    rng = np.random.default_rng(3)
    ff = FeedForward(8, 32, activation=activation, rng=rng)
    x = rng.standard_normal((2, 3, 8))
    h = x @ ff.linear1.params["W"] + ff.linear1.params["b"]
    a = np.maximum(h, 0) if activation == "relu" else gelu(h)
    ref = a @ ff.linear2.params["W"] + ff.linear2.params["b"]
    np.testing.assert_allclose(ff(x), ref, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(ff._cache["h"], h.reshape(6, 32), rtol=1e-14, atol=1e-15)


def test_feedforward_params_view_has_dotted_names_and_writes_through():
    ff = FeedForward(4, 8, rng=np.random.default_rng(0))
    assert list(ff.params) == ["linear1.W", "linear1.b", "linear2.W", "linear2.b"]
    assert ff.params["linear1.W"] is ff.linear1.params["W"]  # the same array, no copy
    new = np.zeros((4, 8))
    ff.params["linear1.W"] = new
    assert ff.linear1.params["W"] is new
    ff.params["linear2.W"][...] = 0.0  # in-place writes reach the layer too
    ff.params["linear2.b"][...] = 5.0
    np.testing.assert_array_equal(ff(np.ones((1, 4))), np.full((1, 4), 5.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_feedforward_keeps_dtype(dtype):
    ff = FeedForward(4, 8, activation="gelu", rng=np.random.default_rng(0), dtype=dtype)
    assert ff(np.ones((3, 4), dtype=dtype)).dtype == dtype


# ------------------------------------------------------------------ Embedding


def test_embedding_looks_up_rows_scaled_by_sqrt_d_model():
    emb = Embedding(10, 16, rng=np.random.default_rng(4))
    ids = np.array([[1, 2, 3], [9, 0, 1]])
    out = emb(ids)
    assert out.shape == (2, 3, 16)
    np.testing.assert_allclose(out, emb.params["W"][ids] * 4.0, rtol=1e-15)
    np.testing.assert_array_equal(emb._cache["ids"], ids)


def test_embedding_without_scale_is_a_plain_lookup():
    emb = Embedding(5, 4, scale=False, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(emb(np.array([4, 4])), emb.params["W"][[4, 4]])


def test_embedding_scaled_init_has_unit_variance():
    emb = Embedding(2000, 64, rng=np.random.default_rng(6))
    assert abs(emb(np.arange(2000)).var() - 1.0) < 0.05


def test_embedding_does_not_modify_the_table():
    emb = Embedding(5, 4, rng=np.random.default_rng(7))
    W = emb.params["W"].copy()
    emb(np.array([0, 1, 1]))
    np.testing.assert_array_equal(emb.params["W"], W)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64])
def test_embedding_accepts_any_integer_dtype(dtype):
    emb = Embedding(5, 4, rng=np.random.default_rng(0), dtype=np.float32)
    out = emb(np.array([0, 4], dtype=dtype))
    assert out.dtype == np.float32 and out.shape == (2, 4)


# ------------------------------------------------------------------ NestedParams


def test_nested_params_nest_and_reject_unknown_keys():
    inner = NestedParams({"a": Linear(2, 2, rng=np.random.default_rng(0))})

    class Holder:
        params = inner

    outer = NestedParams({"x": Holder, "ln": LayerNorm(2)})
    assert list(outer) == ["x.a.W", "x.a.b", "ln.gamma", "ln.beta"]
    assert len(outer) == 4
    with pytest.raises(KeyError):
        outer["x.a.nope"] = np.zeros(2)
    with pytest.raises(KeyError):
        outer["nope.W"]
    with pytest.raises(TypeError):
        del outer["ln.gamma"]
