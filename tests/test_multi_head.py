"""multi_head.py: MultiHeadAttention, split_heads, merge_heads and the KVCache.

Sections: values (against a Python loop over the heads, masks, biases, dtypes, the forward
cache, and the properties the chapters state, with hypothesis), errors (bad input names the
argument), backward (against finite differences), reference (outputs, weights and gradients
against torch.nn.MultiheadAttention).
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_np import (
    KVCache,
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)

from helpers import (
    PROPERTY_SETTINGS,
    abs_product,
    assert_within,
    gradcheck_layer,
    load_mha,
    mha_with_random_biases,
    randomise_biases,
    rounding_tol,
    to_torch,
    to_torch64,
    to_torch_blocked,
    torch_dtype,
    torch_mha_grads,
)
from rounding import TORCH_EXP_ROUNDINGS, TORCH_SCALE_ROUNDINGS, attention_layer_bound

# Tolerances: attention_layer_bound (rounding.py) of each computation compared (two of
# ours, or ours and PyTorch's), and, for the gradients, mha_grad_bound below.


def mha_with_a_loop_over_heads(mha, x_q, x_kv, mask=None):
    """Multi-head attention with an explicit Python loop over heads (the slow, obvious way)."""
    p, H, Dh = mha.params, mha.n_heads, mha.d_head
    q = x_q @ p["W_q"] + p["b_q"]
    k = x_kv @ p["W_k"] + p["b_k"]
    v = x_kv @ p["W_v"] + p["b_v"]
    heads, weights = [], []
    for h in range(H):
        cols = slice(h * Dh, (h + 1) * Dh)
        o, w = scaled_dot_product_attention(q[..., cols], k[..., cols], v[..., cols], mask=mask)
        heads.append(o)
        weights.append(w)
    concat = np.concatenate(heads, axis=-1)
    return concat @ p["W_o"] + p["b_o"], np.stack(weights, axis=-3)


def torch_mha_tol(mha, x_q, x_kv=None, *, mask=None, bias=None):
    """``(output tol, weights tol)`` of our MultiHeadAttention against torch's with the same
    weights: the sum of the two bounds (attention_layer_bound), torch's with its exp and its
    scale."""
    ours = attention_layer_bound(mha, x_q, x_kv, mask=mask, bias=bias)
    theirs = attention_layer_bound(
        mha,
        x_q,
        x_kv,
        mask=mask,
        bias=bias,
        exp_roundings=TORCH_EXP_ROUNDINGS,
        scale_roundings=TORCH_SCALE_ROUNDINGS,
    )
    return ours["out"] + theirs["out"], ours["weights"] + theirs["weights"]


def mha_backward_magnitudes(mha, x_q, x_kv, grad, q, k, v, w, ctx):
    """MultiHeadAttention.backward run on magnitudes, every subtraction made an addition: for
    each gradient, the sum of the absolute values of its terms. x_q, x_kv (None: self-attention)
    and ``grad`` are (B, ., D); q, k, v, w (B, H, ., .) and ctx (B*T, D) are (at least) the
    magnitudes of the forward pass's values. Returns a dict like ``mha.grads``, with "dx_q" and
    "dx_kv" (shaped (B*T, D) and (B*S, D)) for the inputs' gradients."""
    A = {name: np.abs(np.asarray(p, np.float64)) for name, p in mha.params.items()}
    B, H, T, Dh = q.shape
    D = H * Dh
    g = np.abs(grad).reshape(-1, D)
    xq = np.abs(x_q).reshape(-1, D)
    xkv = xq if x_kv is None else np.abs(x_kv).reshape(-1, D)
    m = {"W_o": ctx.T @ g, "b_o": g.sum(axis=0)}
    dctx = split_heads((g @ A["W_o"].T).reshape(B, T, D), H)
    dv = w.swapaxes(-1, -2) @ dctx
    ds = dctx @ v.swapaxes(-1, -2)
    ds = w * (ds + (ds * w).sum(axis=-1, keepdims=True)) / math.sqrt(Dh)
    dq, dk = ds @ k, ds.swapaxes(-1, -2) @ q
    dq, dk, dv = (merge_heads(t).reshape(-1, D) for t in (dq, dk, dv))
    for name, x, dy in (("q", xq, dq), ("k", xkv, dk), ("v", xkv, dv)):
        m["W_" + name], m["b_" + name] = x.T @ dy, dy.sum(axis=0)
    m["dx_kv"] = dk @ A["W_k"].T + dv @ A["W_v"].T
    m["dx_q"] = dq @ A["W_q"].T + (m["dx_kv"] if x_kv is None else 0.0)
    return {name: m[name] for name in (*mha.params, "dx_q", "dx_kv")}


def mha_grad_bound(mha, x_q, x_kv, grad, *, mask=None, torch_side=True):
    """Bounds of the float64 gradients of ``mha.backward(grad)`` after ``mha(x_q, x_kv,
    mask=mask)``, plus those of PyTorch's on the same input (``torch_side``); a dict like
    mha_backward_magnitudes'.

    Given the forward values (q, k, v, weights, context) the backward pass is a polynomial of
    them, evaluated in floating point. A computation whose forward values are within E of exact
    (attention_layer_bound) is then within M(Y + E) - M(Y) + gamma(N) M(Y + E) of the exact
    gradients (Higham, 2002, ch. 3: each term of the expanded polynomial carries at most N
    roundings), M being mha_backward_magnitudes and Y at least the exact values' magnitudes
    (ours plus our bound). N, the longest chain of roundings: dctx = grad W_o^T (D terms),
    dL/dweights = dctx v^T (Dh), its weighted row sum (a product and S terms), the subtraction,
    the product with the weights, the scale (a product and PyTorch's scale roundings), dq = ds k
    or dk = ds^T q (S or T terms), then dx (D terms and 2 additions) or dW, db (B T or B S);
    plus 2 for an implementation that forms w g - w (sum w g) instead.
    """
    c = mha.cache
    B, H, T, Dh = c["q"].shape
    S, D = c["k"].shape[-2], H * Dh
    sides = [attention_layer_bound(mha, x_q, x_kv, mask=mask)]
    if torch_side:
        torch_kw = {"exp_roundings": TORCH_EXP_ROUNDINGS, "scale_roundings": TORCH_SCALE_ROUNDINGS}
        sides.append(attention_layer_bound(mha, x_q, x_kv, mask=mask, **torch_kw))

    def plus_errors(values, bound):  # the forward values' magnitudes plus a bound's errors
        errors = {name: bound[name] for name in ("q", "k", "v")}
        errors["w"], errors["ctx"] = bound["weights"], merge_heads(bound["ctx"]).reshape(-1, D)
        return {name: values[name] + errors[name] for name in values}

    def M(values):
        return mha_backward_magnitudes(mha, x_q, x_kv, grad, **values)

    ours = {name: np.abs(c[name]) for name in ("q", "k", "v")}
    ours["w"], ours["ctx"] = np.abs(c["weights"]), np.abs(mha.o.cache["x"])
    y = plus_errors(ours, sides[0])  # at least the exact values' magnitudes
    m_y = M(y)
    n = D + Dh + 2 * max(S, T) + max(D + 2, B * max(T, S)) + 4 + TORCH_SCALE_ROUNDINGS + 2
    total = {name: 0.0 for name in m_y}
    for bound in sides:
        m_yd = M(plus_errors(y, bound))
        for name in total:
            total[name] = (
                total[name] + m_yd[name] - m_y[name] + rounding_tol(np.float64, n, m_yd[name])
            )
    return total


# ============================================================================================
# values
# ============================================================================================


@pytest.mark.parametrize("batched", [False, True])
def test_mha_self_attention_equals_loop_over_heads(batched):
    rng = np.random.default_rng(0)
    mha = mha_with_random_biases(16, 4, rng)
    x = rng.standard_normal((2, 5, 16) if batched else (5, 16))
    out, w = mha(x)
    ref_out, ref_w = mha_with_a_loop_over_heads(mha, x, x)
    assert out.shape == x.shape
    assert w.shape == ((2, 4, 5, 5) if batched else (4, 5, 5))
    bound = attention_layer_bound(mha, x)  # each of the two computations
    assert_within(out, ref_out, 2 * bound["out"], "output vs loop")
    assert_within(w, ref_w, 2 * bound["weights"], "weights vs loop")


def test_mha_cross_attention_with_other_length_and_padding_mask():
    rng = np.random.default_rng(1)
    mha = mha_with_random_biases(12, 3, rng)
    x_q = rng.standard_normal((2, 4, 12))
    x_kv = rng.standard_normal((2, 7, 12))
    mask = padding_mask([7, 5])
    out, w = mha(x_q, x_kv, mask=mask)
    assert out.shape == (2, 4, 12) and w.shape == (2, 3, 4, 7)
    assert np.all(w[1, :, :, 5:] == 0)
    ref_out, ref_w = mha_with_a_loop_over_heads(mha, x_q, x_kv, mask=mask[:, 0])  # (B, 1, S)
    bound = attention_layer_bound(mha, x_q, x_kv, mask=mask)
    assert_within(out, ref_out, 2 * bound["out"], "output vs loop")
    assert_within(w, ref_w, 2 * bound["weights"], "weights vs loop")


def test_mha_with_one_head_is_single_attention_on_the_projections():
    rng = np.random.default_rng(2)
    mha = mha_with_random_biases(8, 1, rng)
    x = rng.standard_normal((6, 8))
    p = mha.params
    o, w1 = scaled_dot_product_attention(
        x @ p["W_q"] + p["b_q"], x @ p["W_k"] + p["b_k"], x @ p["W_v"] + p["b_v"]
    )
    out, w = mha(x)
    bound = attention_layer_bound(mha, x)
    assert_within(w[0], w1, 2 * bound["weights"][0], "weights")
    assert_within(out, o @ p["W_o"] + p["b_o"], 2 * bound["out"], "output")


def test_mha_parameters_are_created_once_so_calls_are_repeatable():
    mha = MultiHeadAttention(16, 4, rng=np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((3, 16))
    out1, _ = mha(x)
    out2, _ = mha(x)
    np.testing.assert_array_equal(out1, out2)


def test_mha_same_seed_gives_same_weights_and_xavier_range():
    a = MultiHeadAttention(32, 4, rng=np.random.default_rng(7))
    b = MultiHeadAttention(32, 4, rng=np.random.default_rng(7))
    limit = math.sqrt(6 / (32 + 32))
    for name in ("W_q", "W_k", "W_v", "W_o"):
        np.testing.assert_array_equal(a.params[name], b.params[name])
        assert a.params[name].shape == (32, 32)
        assert np.abs(a.params[name]).max() <= limit
    for name in ("b_q", "b_k", "b_v", "b_o"):
        np.testing.assert_array_equal(a.params[name], np.zeros(32))


def test_mha_without_bias_has_no_bias_parameters():
    mha = MultiHeadAttention(8, 2, bias=False, rng=np.random.default_rng(0))
    assert sorted(mha.params) == ["W_k", "W_o", "W_q", "W_v"]
    x = np.random.default_rng(1).standard_normal((3, 8))
    out, _ = mha(x)
    p = mha.params
    o, _ = scaled_dot_product_attention(
        (x @ p["W_q"]).reshape(3, 2, 4).transpose(1, 0, 2),
        (x @ p["W_k"]).reshape(3, 2, 4).transpose(1, 0, 2),
        (x @ p["W_v"]).reshape(3, 2, 4).transpose(1, 0, 2),
    )
    ref = o.transpose(1, 0, 2).reshape(3, 8) @ p["W_o"]
    assert_within(out, ref, 2 * attention_layer_bound(mha, x)["out"], "output")


def test_mha_2d_input_equals_batch_of_one():
    rng = np.random.default_rng(3)
    mha = mha_with_random_biases(8, 2, rng)
    x = rng.standard_normal((5, 8))
    out2, w2 = mha(x, mask=causal_mask(5))
    out3, w3 = mha(x[None], mask=causal_mask(5))
    np.testing.assert_array_equal(out2, out3[0])
    np.testing.assert_array_equal(w2, w3[0])


@pytest.mark.parametrize("param_dtype", [np.float32, np.float64])
def test_mha_computes_in_the_input_dtype(param_dtype):
    mha = MultiHeadAttention(8, 2, rng=np.random.default_rng(0), dtype=param_dtype)
    assert all(p.dtype == param_dtype for p in mha.params.values())
    x = np.random.default_rng(1).standard_normal((2, 3, 8))
    out32, w32 = mha(x.astype(np.float32))
    out64, w64 = mha(x)
    assert out32.dtype == np.float32 and w32.dtype == np.float32
    assert out64.dtype == np.float64
    # the float32 side against float64: x and the parameters rounded to float32 first
    bound = attention_layer_bound(mha, x, dtype=np.float32, cast_roundings=2)
    assert_within(out32, out64, bound["out"], "float32 output")
    assert_within(w32, w64, bound["weights"], "float32 weights")


def test_mha_additive_bias_equals_boolean_mask():
    rng = np.random.default_rng(4)
    mha = mha_with_random_biases(8, 2, rng)
    x = rng.standard_normal((2, 4, 8))
    pm = padding_mask([4, 2])
    out_m, w_m = mha(x, mask=pm)
    out_b, w_b = mha(x, bias=np.where(pm, 0.0, -1e4))  # BERT-style large negative bias
    # exact: s + 0.0 is s, and exp(s - 1e4 - max) underflows to 0 like exp(-inf), so the same
    # steps run on the same numbers
    np.testing.assert_array_equal(out_b, out_m)
    np.testing.assert_array_equal(w_b, w_m)


def test_mha_cache_holds_what_a_backward_pass_needs():
    rng = np.random.default_rng(5)
    mha = mha_with_random_biases(8, 2, rng)
    x_q = rng.standard_normal((2, 3, 8))
    x_kv = rng.standard_normal((2, 4, 8))
    _, w = mha(x_q, x_kv)
    c = mha.cache
    assert mha.q.cache["x"].shape == (6, 8) and mha.k.cache["x"].shape == (8, 8)  # inputs
    assert c["q"].shape == (2, 2, 3, 4) and c["k"].shape == (2, 2, 4, 4)
    assert c["v"].shape == (2, 2, 4, 4) and mha.o.cache["x"].shape == (6, 8)  # the heads merged
    np.testing.assert_array_equal(c["weights"], w)
    assert c["shape"] == (2, 3, 4) and not c["self_attention"]
    context = mha.o.cache["x"]
    W_o, b_o = mha.params["W_o"], mha.params["b_o"]
    # the same product twice: each within gamma(D + 1) of its terms' magnitude
    tol = 2 * rounding_tol(np.float64, 8 + 1, abs_product(context, W_o) + np.abs(b_o))
    assert_within(context @ W_o + b_o, mha(x_q, x_kv)[0].reshape(6, 8), tol, "output")


def test_split_heads_gives_each_head_its_slice_of_features_and_merge_heads_undoes_it():
    x = np.arange(2 * 3 * 12, dtype=np.float64).reshape(2, 3, 12)  # (B, T, D), D = 4 heads x 3
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 3)  # (B, H, T, Dh)
    for h in range(4):
        np.testing.assert_array_equal(heads[:, h], x[..., 3 * h : 3 * (h + 1)])
    np.testing.assert_array_equal(merge_heads(heads), x)


def test_kv_cache_appends_positions_and_refuses_more_than_max_len():
    rng = np.random.default_rng(6)
    cache = KVCache(5)
    assert cache.length == 0
    k1, v1 = rng.standard_normal((2, 2, 1, 2, 4))  # (B, H, n, Dh) = (2, 1, 2, 4) each
    k2, v2 = rng.standard_normal((2, 2, 1, 3, 4))
    cache.append(k1, v1)
    keys, values = cache.append(k2, v2)
    assert cache.length == 5
    np.testing.assert_array_equal(keys, np.concatenate([k1, k2], axis=2))
    np.testing.assert_array_equal(values, np.concatenate([v1, v2], axis=2))
    with pytest.raises(ValueError, match="holds at most max_len = 5 positions"):
        cache.append(k1[:, :, :1], v1[:, :, :1])


def test_kv_cache_refuses_another_batch_size_or_dtype_while_it_holds_positions():
    cache = KVCache(6)
    cache.append(np.zeros((2, 1, 2, 4)), np.zeros((2, 1, 2, 4)))
    with pytest.raises(ValueError, match=r"holds 2 positions of keys \(2, 1, 2, 4\) float64"):
        cache.append(np.zeros((3, 1, 1, 4)), np.zeros((3, 1, 1, 4)))  # another batch size
    with pytest.raises(ValueError, match="another batch size, head count or dtype"):
        cache.append(np.zeros((2, 1, 1, 4), np.float32), np.zeros((2, 1, 1, 4), np.float32))
    cache.length = 0  # starting again, a new batch size is welcome
    keys, _ = cache.append(np.ones((3, 1, 1, 4)), np.ones((3, 1, 1, 4)))
    np.testing.assert_array_equal(keys, np.ones((3, 1, 1, 4)))


@pytest.mark.parametrize("bad", [-1, 3, 1.5, True])
def test_kv_cache_length_can_only_forget_positions(bad):
    cache = KVCache(6)
    cache.append(np.zeros((1, 1, 2, 4)), np.zeros((1, 1, 2, 4)))
    error = TypeError if isinstance(bad, bool | float) else ValueError
    with pytest.raises(error, match="KVCache.length must be"):
        cache.length = bad
    cache.length = 1
    assert cache.stored()[0].shape == (1, 1, 1, 4)


def test_kv_cache_reads_and_appends_with_clear_errors():
    cache = KVCache(4)
    with pytest.raises(RuntimeError, match="the KVCache is empty"):
        cache.stored()
    with pytest.raises(ValueError, match=r"k must be a float array \(B, heads, positions, Dh\)"):
        cache.append(np.zeros((1, 2, 4)), np.zeros((1, 2, 4)))


def test_padding_mask_with_a_cache_is_combined_with_the_causal_mask():
    rng = np.random.default_rng(8)
    mha = MultiHeadAttention(8, 2, rng=rng)
    x = rng.standard_normal((2, 4, 8))
    keep = padding_mask([4, 2])  # (B, 1, 1, S): the second sequence has two positions
    full, _ = mha(x, mask=causal_mask(4) & keep)
    cached, _ = mha(x, mask=keep, kv_cache=KVCache(4))  # the prompt in one chunk
    tol = rounding_tol(np.float64, 8 + 4, abs_product(x, mha.params["W_q"]).max() * 10)
    assert_within(cached, full, tol, "cached prompt with a padding mask")


# ------------------------------------------------------------------ properties (hypothesis)


@PROPERTY_SETTINGS
@given(st.integers(2, 8), st.data(), st.integers(0, 2**32 - 1))
def test_causal_self_attention_output_at_i_ignores_tokens_after_i(T, data, seed):
    i = data.draw(st.integers(0, T - 2))
    rng = np.random.default_rng(seed)
    mha = MultiHeadAttention(8, 2, rng=rng)

    def run(x):
        return mha(x, mask=causal_mask(T))[0]

    x = rng.standard_normal((2, T, 8))
    x_changed = x.copy()
    x_changed[:, i + 1 :] = rng.standard_normal((2, T - i - 1, 8)) * 10
    # two computations; the rows up to i see only the positions up to i, the same in both, so
    # the bound computed on x holds for both
    tol = attention_layer_bound(mha, x, mask=causal_mask(T))["out"][:, : i + 1]
    assert_within(run(x_changed)[:, : i + 1], run(x)[:, : i + 1], 2 * tol, "rows up to i")


@PROPERTY_SETTINGS
@given(st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_without_positions_self_attention_is_permutation_equivariant(T, seed):
    rng = np.random.default_rng(seed)
    mha = MultiHeadAttention(12, 3, rng=rng)

    def f(x):
        return mha(x)[0]

    x = rng.standard_normal((T, 12))
    perm = rng.permutation(T)
    tol = 2 * attention_layer_bound(mha, x)["out"][perm]  # two computations
    assert_within(f(x[perm]), f(x)[perm], tol, "permuted output")


# ============================================================================================
# errors
# ============================================================================================


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model must be divisible by n_heads.*10.*3"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("d_model, n_heads", [(0, 1), (8, 0), (-8, 2)])
def test_non_positive_sizes(d_model, n_heads):
    with pytest.raises(ValueError, match="must be a positive integer"):
        MultiHeadAttention(d_model, n_heads)


@pytest.mark.parametrize("value", [8.0, "8", True, None])
def test_non_integer_sizes(value):
    with pytest.raises(TypeError, match="d_model must be a positive integer"):
        MultiHeadAttention(value, 2)


@pytest.fixture
def mha():
    return MultiHeadAttention(8, 2, rng=np.random.default_rng(0))


@pytest.mark.parametrize("shape", [(8,), (1, 2, 3, 8)])
def test_mha_wrong_input_rank(mha, shape):
    with pytest.raises(ValueError, match=r"x_q must be \(T, d_model\) or \(B, T, d_model\)"):
        mha(np.zeros(shape))


def test_mha_wrong_feature_size(mha):
    with pytest.raises(ValueError, match=r"x_q must have last dimension d_model = 8.*\(2, 3, 6\)"):
        mha(np.zeros((2, 3, 6)))
    with pytest.raises(ValueError, match="x_kv must have last dimension d_model = 8"):
        mha(np.zeros((2, 3, 8)), np.zeros((2, 3, 4)))


def test_mha_integer_input(mha):
    with pytest.raises(TypeError, match="x_q must be a floating-point array"):
        mha(np.zeros((3, 8), dtype=np.int32))


def test_mha_nan_input(mha):
    x = np.zeros((3, 8))
    x[2, 5] = np.nan
    with pytest.raises(ValueError, match="x_kv contains NaN"):
        mha(np.zeros((3, 8)), x)


def test_mha_batch_or_rank_mismatch_between_x_q_and_x_kv(mha):
    with pytest.raises(ValueError, match="same batch size"):
        mha(np.zeros((2, 3, 8)), np.zeros((3, 3, 8)))
    with pytest.raises(ValueError, match="same rank"):
        mha(np.zeros((2, 3, 8)), np.zeros((3, 8)))


def test_mha_mask_for_other_length(mha):
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 4\).*\(B, H, T, S\) = \(2, 2, 3, 3\)"
    ):
        mha(np.zeros((2, 3, 8)), mask=causal_mask(4))


def test_mha_batched_mask_with_unbatched_input(mha):
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 3\).*\(H, T, S\)"):
        mha(np.zeros((3, 8)), mask=padding_mask([3, 2]))


def test_mha_params_replaced_with_wrong_shape(mha):
    mha.params["W_k"] = np.zeros((8, 16))
    with pytest.raises(ValueError, match=r"params\['W_k'\] must be an ndarray of shape \(8, 8\)"):
        mha(np.zeros((3, 8)))


def test_multi_head_attention_reports_a_nan_parameter_by_name():
    mha = MultiHeadAttention(8, 2, rng=0)
    mha.params["W_q"][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"params\['W_q'\] contains NaN"):
        mha(np.ones((1, 3, 8)))


def test_bad_rng_and_dtype():
    with pytest.raises(TypeError, match="rng must be"):
        MultiHeadAttention(8, 2, rng="seed")
    with pytest.raises(TypeError, match="dtype must be np.float32 or np.float64"):
        MultiHeadAttention(8, 2, dtype=np.int32)


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize(
    "mask_kind", ["none", "causal", "padding", "causal+padding", "fully-blocked-row"]
)
def test_self_attention_backward_matches_finite_differences(rng, mask_kind):
    mha = mha_with_random_biases(8, 2, rng, scale=0.3)
    x = rng.standard_normal((2, 5, 8))
    mask = {
        "none": None,
        "causal": causal_mask(5),
        "padding": padding_mask([5, 3]),
        "causal+padding": causal_mask(5) & padding_mask([5, 2]),
        # sequence 1 has length 0: every key blocked, weights 0, output = b_o
        "fully-blocked-row": padding_mask([4, 0], max_len=5),
    }[mask_kind]
    gradcheck_layer(lambda x: mha(x, mask=mask)[0], mha.backward, mha, [x], rng)


def test_cross_attention_backward_returns_both_input_gradients(rng):
    mha = mha_with_random_biases(8, 2, rng, scale=0.3)
    x_q = rng.standard_normal((2, 3, 8))
    x_kv = rng.standard_normal((2, 6, 8))
    mask = padding_mask([6, 4])
    gradcheck_layer(lambda a, b: mha(a, b, mask=mask)[0], mha.backward, mha, [x_q, x_kv], rng)
    dxq, dxkv = mha.backward(np.ones((2, 3, 8)))
    assert dxq.shape == (2, 3, 8) and dxkv.shape == (2, 6, 8)
    # padded keys (positions 4, 5 of sequence 1) influence nothing: their gradient is 0
    assert np.all(dxkv[1, 4:] == 0)


def test_attention_backward_unbatched_and_without_bias(rng):
    mha = mha_with_random_biases(6, 3, rng, scale=0.3, bias=False)
    x = rng.standard_normal((4, 6))  # (T, D), no batch axis
    gradcheck_layer(lambda x: mha(x, mask=causal_mask(4))[0], mha.backward, mha, [x], rng)


def test_key_bias_gradient_is_exactly_zero_by_softmax_shift_invariance(rng):
    mha = mha_with_random_biases(8, 2, rng, scale=0.3)
    x = rng.standard_normal((2, 5, 8))
    mha(x)
    grad = rng.standard_normal((2, 5, 8))
    mha.backward(grad)
    # the exact gradient is 0: what is left is the rounding of the backward pass
    bound = mha_grad_bound(mha, x, None, grad, torch_side=False)["b_k"]
    assert_within(mha.grads["b_k"], np.zeros(8), bound, "b_k gradient")
    assert np.abs(mha.grads["b_q"]).max() > 1e-3  # the query bias is not invariant


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def torch_mha_like(torch, mha, dtype):
    """torch.nn.MultiheadAttention with our weights, in evaluation mode."""
    ref = torch.nn.MultiheadAttention(
        mha.d_model, mha.n_heads, bias=True, batch_first=True, dtype=torch_dtype(dtype)
    )
    load_mha(ref, mha)
    return ref.eval()


def mha_and_torch_mha(torch, dtype, d_model=24, n_heads=4, seed=0):
    """Our MultiHeadAttention with nonzero biases (so they are checked too), torch's with the
    same weights, and the generator to draw inputs from."""
    rng = np.random.default_rng(seed)
    mha = mha_with_random_biases(d_model, n_heads, rng, dtype=dtype)
    return mha, torch_mha_like(torch, mha, dtype), rng


def run_torch_mha(torch, ref, x_q, x_kv, **kw):
    with torch.no_grad():
        out, w = ref(
            to_torch(x_q),
            to_torch(x_kv),
            to_torch(x_kv),
            need_weights=True,
            average_attn_weights=False,
            **kw,
        )
    return out.numpy(), w.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mha_self_attention_matches_torch(torch, dtype):
    mha, ref, rng = mha_and_torch_mha(torch, dtype)
    x = rng.standard_normal((3, 5, 24)).astype(dtype)
    out, w = mha(x)
    ref_out, ref_w = run_torch_mha(torch, ref, x, x)
    out_tol, w_tol = torch_mha_tol(mha, x)
    assert_within(out, ref_out, out_tol, "MHA self output")
    assert_within(w, ref_w, w_tol, "MHA self weights")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mha_cross_attention_with_key_padding_mask_matches_torch(torch, dtype):
    mha, ref, rng = mha_and_torch_mha(torch, dtype, seed=1)
    x_q = rng.standard_normal((3, 4, 24)).astype(dtype)
    x_kv = rng.standard_normal((3, 7, 24)).astype(dtype)
    lengths = np.array([7, 3, 5])
    out, w = mha(x_q, x_kv, mask=padding_mask(lengths))
    key_padding_mask = np.arange(7) >= lengths[:, None]  # torch: True = ignore this key
    ref_out, ref_w = run_torch_mha(
        torch, ref, x_q, x_kv, key_padding_mask=to_torch(key_padding_mask)
    )
    out_tol, w_tol = torch_mha_tol(mha, x_q, x_kv, mask=padding_mask(lengths))
    assert_within(out, ref_out, out_tol, "MHA cross output, key padding")
    assert_within(w, ref_w, w_tol, "MHA cross weights, key padding")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mha_with_causal_attn_mask_and_padding_matches_torch(torch, dtype):
    mha, ref, rng = mha_and_torch_mha(torch, dtype, seed=2)
    x = rng.standard_normal((2, 6, 24)).astype(dtype)
    lengths = np.array([6, 4])
    mask = causal_mask(6) & padding_mask(lengths)  # (T, T) & (B, 1, 1, T) -> (B, 1, T, T)
    out, w = mha(x, mask=mask)
    ref_out, ref_w = run_torch_mha(
        torch,
        ref,
        x,
        x,
        attn_mask=to_torch(~causal_mask(6)),  # torch: True = not allowed
        key_padding_mask=to_torch(np.arange(6) >= lengths[:, None]),
    )
    out_tol, w_tol = torch_mha_tol(mha, x, mask=mask)
    assert_within(out, ref_out, out_tol, "MHA output, causal + padding")
    assert_within(w, ref_w, w_tol, "MHA weights, causal + padding")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mha_with_additive_bias_matches_torch_float_attn_mask(torch, dtype):
    mha, ref, rng = mha_and_torch_mha(torch, dtype, seed=3)
    x = rng.standard_normal((2, 5, 24)).astype(dtype)
    bias = rng.standard_normal((5, 5)).astype(dtype)
    out, w = mha(x, bias=bias)
    ref_out, ref_w = run_torch_mha(torch, ref, x, x, attn_mask=to_torch(bias))
    out_tol, w_tol = torch_mha_tol(mha, x, bias=bias)
    assert_within(out, ref_out, out_tol, "MHA output, float attn_mask")
    assert_within(w, ref_w, w_tol, "MHA weights, float attn_mask")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mha_unbatched_input_matches_torch(torch, dtype):
    mha, ref, rng = mha_and_torch_mha(torch, dtype, seed=4)
    x = rng.standard_normal((5, 24)).astype(dtype)
    out, w = mha(x)
    ref_out, ref_w = run_torch_mha(torch, ref, x, x)
    out_tol, w_tol = torch_mha_tol(mha, x)
    assert_within(out, ref_out, out_tol, "MHA unbatched output")
    assert_within(w, ref_w, w_tol, "MHA unbatched weights")


@pytest.mark.parametrize("kind", ["self", "self+causal+padding", "cross+padding"])
def test_multi_head_attention_grads_match_torch(torch, rng, kind):
    D, H = 8, 2
    mha = MultiHeadAttention(D, H, rng=rng)
    randomise_biases(mha.params, rng)
    tm = torch.nn.MultiheadAttention(D, H, batch_first=True, dtype=torch.float64)
    load_mha(tm, mha)
    x = rng.standard_normal((2, 5, D))
    mem = rng.standard_normal((2, 6, D))
    G = rng.standard_normal((2, 5, D))
    xt, mt = to_torch64(x, True), to_torch64(mem, True)
    x_kv, mask = None, None
    if kind == "self":
        out, _ = tm(xt, xt, xt)
        mha(x)
    elif kind == "self+causal+padding":
        pad = padding_mask([5, 3])
        out, _ = tm(
            xt,
            xt,
            xt,
            attn_mask=to_torch_blocked(causal_mask(5)),
            key_padding_mask=to_torch_blocked(pad[:, 0, 0]),
        )
        mask = causal_mask(5) & pad
        mha(x, mask=mask)
    else:
        pad = padding_mask([6, 4])
        out, _ = tm(xt, mt, mt, key_padding_mask=to_torch_blocked(pad[:, 0, 0]))
        x_kv, mask = mem, pad
        mha(x, mem, mask=pad)
    (out * to_torch64(G)).sum().backward()
    d = mha.backward(G)
    tol = mha_grad_bound(mha, x, x_kv, G, mask=mask)  # ours and PyTorch's
    if kind.startswith("cross"):
        assert_within(d[0], xt.grad, tol["dx_q"].reshape(x.shape), "dx_q")
        assert_within(d[1], mt.grad, tol["dx_kv"].reshape(mem.shape), "dx_kv")
    else:
        assert_within(d, xt.grad, tol["dx_q"].reshape(x.shape), "dx")
    for k, v in torch_mha_grads(tm).items():
        assert_within(mha.grads[k], v, tol[k], k)
