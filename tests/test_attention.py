"""Unit tests of scaled_dot_product_attention and MultiHeadAttention (PyTorch comparisons are in
test_reference_torch.py)."""

import math
import warnings

import numpy as np
import pytest

from transformer_np import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)


def _naive_attention(q, k, v, allowed=None):
    """One query row at a time, with Python loops: the formula read literally (float64)."""
    n_q, n_k = q.shape[0], k.shape[0]
    out = np.zeros((n_q, v.shape[1]))
    w = np.zeros((n_q, n_k))
    for i in range(n_q):
        scores = [q[i] @ k[j] / math.sqrt(q.shape[1]) for j in range(n_k)]
        keep = [allowed is None or bool(allowed[i, j]) for j in range(n_k)]
        e = [math.exp(s) if ok else 0.0 for s, ok in zip(scores, keep, strict=True)]
        if sum(e) > 0:
            w[i] = np.array(e) / sum(e)
        out[i] = w[i] @ v
    return out, w


# ------------------------------------------------------------------ scaled dot-product attention


@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_attention_matches_row_by_row_formula_for_any_leading_axes(lead):
    rng = np.random.default_rng(0)
    q = rng.standard_normal(lead + (5, 8))
    k = rng.standard_normal(lead + (7, 8))
    v = rng.standard_normal(lead + (7, 3))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == lead + (5, 3) and w.shape == lead + (5, 7)
    for idx in np.ndindex(*lead):
        ref_out, ref_w = _naive_attention(q[idx], k[idx], v[idx])
        np.testing.assert_allclose(w[idx], ref_w, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(out[idx], ref_out, rtol=1e-13, atol=1e-14)


def test_attention_leading_axes_broadcast_like_matmul():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 4, 8))  # (B, H, n_q, d)
    k = rng.standard_normal((2, 1, 6, 8))  # shared by the heads
    v = rng.standard_normal((2, 1, 6, 5))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6)
    out1, _ = scaled_dot_product_attention(q[1, 2], k[1, 0], v[1, 0])
    np.testing.assert_allclose(out[1, 2], out1, rtol=1e-14)


def test_masked_attention_matches_row_by_row_formula():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((3, 6, 4))
    allowed = rng.random((6, 6)) < 0.6
    allowed[:, 0] = True
    out, w = scaled_dot_product_attention(q, k, v, mask=allowed)
    ref_out, ref_w = _naive_attention(q, k, v, allowed)
    np.testing.assert_allclose(w, ref_w, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out, ref_out, rtol=1e-13, atol=1e-14)


def test_blocked_positions_get_exactly_zero_weight():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 2, 5, 4)) * 10  # large scores, saturating softmax
    _, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    assert np.all(w[:, ~causal_mask(5)] == 0.0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-14)


@pytest.mark.parametrize(
    "mask",
    [
        np.array([[1, 0, 1], [1, 1, 0]], dtype=np.int64),
        np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]),
        [[True, False, True], [True, True, False]],
    ],
    ids=["int", "float-0-1", "list-of-bool"],
)
def test_nonzero_mask_entries_mean_may_attend(mask):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 4))
    k = rng.standard_normal((3, 4))
    v = rng.standard_normal((3, 2))
    bool_mask = np.array([[True, False, True], [True, True, False]])
    expected = scaled_dot_product_attention(q, k, v, mask=bool_mask)
    got = scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_fully_blocked_row_gives_zero_weights_and_zero_output_without_warnings():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 6))
    mask = np.ones((2, 3, 5), dtype=bool)
    mask[0, 1, :] = False  # query 1 of sequence 0 may attend to nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(w[0, 1], 0.0)
    np.testing.assert_array_equal(out[0, 1], 0.0)
    # the other rows are unaffected
    ref_out, _ = scaled_dot_product_attention(q[0, [0, 2]], k[0], v[0])
    np.testing.assert_allclose(out[0, [0, 2]], ref_out, rtol=1e-14)


def test_sequence_of_length_zero_in_padding_mask_gives_zero_output():
    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((3, 2, 1, 3, 4))  # (B, H=1, n, d)
    out, w = scaled_dot_product_attention(q, k, v, mask=padding_mask([3, 0]))
    assert np.all(out[1] == 0) and np.all(w[1] == 0)
    assert np.all(np.isfinite(out))


def test_bias_minus_inf_blocks_like_a_false_mask_entry():
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((3, 4, 4))
    mask = causal_mask(4)
    bias = np.where(mask, 0.0, -np.inf)
    out_m, w_m = scaled_dot_product_attention(q, k, v, mask=mask)
    out_b, w_b = scaled_dot_product_attention(q, k, v, bias=bias)
    np.testing.assert_array_equal(w_b, w_m)
    np.testing.assert_array_equal(out_b, out_m)


def test_finite_bias_is_added_to_the_scaled_scores():
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((3, 4, 8))
    bias = rng.standard_normal((4, 4))
    _, w = scaled_dot_product_attention(q, k, v, bias=bias)
    s = q @ k.T / math.sqrt(8) + bias
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(w, e / e.sum(-1, keepdims=True), rtol=1e-13)


def test_bias_and_mask_together():
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((3, 4, 8))
    bias = rng.standard_normal((4, 4))
    _, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(4), bias=bias)
    _, w_ref = scaled_dot_product_attention(
        q, k, v, bias=bias + np.where(causal_mask(4), 0.0, -np.inf)
    )
    np.testing.assert_allclose(w, w_ref, rtol=1e-15)


def test_float32_stays_float32_and_agrees_with_float64():
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((3, 2, 6, 8))
    out64, w64 = scaled_dot_product_attention(q, k, v, mask=causal_mask(6))
    out32, w32 = scaled_dot_product_attention(
        *(t.astype(np.float32) for t in (q, k, v)), mask=causal_mask(6)
    )
    assert out32.dtype == np.float32 and w32.dtype == np.float32
    np.testing.assert_allclose(out32, out64, atol=1e-5)
    np.testing.assert_allclose(w32, w64, atol=1e-6)


def test_mixed_precision_inputs_promote_to_float64():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 4)).astype(np.float32)
    k, v = rng.standard_normal((2, 3, 4))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.dtype == np.float64 and w.dtype == np.float64


def test_float16_attention_masks_exactly_where_minus_1e9_cannot():
    # -1e9 is not a float16 number (the largest finite float16 is 65504): it overflows to -inf.
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(-1e9))
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((3, 5, 8)) * 2).astype(np.float16)
    out, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    assert out.dtype == np.float16 and w.dtype == np.float16
    assert np.all(w[~causal_mask(5)] == 0)
    ref_out, ref_w = scaled_dot_product_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), mask=causal_mask(5)
    )
    np.testing.assert_allclose(out.astype(np.float32), ref_out, atol=5e-3)


def test_attention_does_not_modify_its_inputs():
    rng = np.random.default_rng(13)
    q, k, v = rng.standard_normal((3, 4, 4))
    copies = [t.copy() for t in (q, k, v)]
    scaled_dot_product_attention(q, k, v, mask=causal_mask(4), bias=np.zeros((4, 4)))
    for t, c in zip((q, k, v), copies, strict=True):
        np.testing.assert_array_equal(t, c)


# ------------------------------------------------------------------ multi-head attention


def _manual_mha(mha, x_q, x_kv, mask=None):
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


def _mha_with_random_biases(d_model, n_heads, seed):
    rng = np.random.default_rng(seed)
    mha = MultiHeadAttention(d_model, n_heads, rng=rng)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        mha.params[name] = rng.standard_normal(d_model) * 0.1
    return mha, rng


@pytest.mark.parametrize("batched", [False, True])
def test_mha_self_attention_equals_loop_over_heads(batched):
    mha, rng = _mha_with_random_biases(16, 4, 0)
    x = rng.standard_normal((2, 5, 16) if batched else (5, 16))
    out, w = mha(x)
    ref_out, ref_w = _manual_mha(mha, x, x)
    assert out.shape == x.shape
    assert w.shape == ((2, 4, 5, 5) if batched else (4, 5, 5))
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(w, ref_w, rtol=1e-12, atol=1e-14)


def test_mha_cross_attention_with_other_length_and_padding_mask():
    mha, rng = _mha_with_random_biases(12, 3, 1)
    x_q = rng.standard_normal((2, 4, 12))
    x_kv = rng.standard_normal((2, 7, 12))
    mask = padding_mask([7, 5])
    out, w = mha(x_q, x_kv, mask=mask)
    assert out.shape == (2, 4, 12) and w.shape == (2, 3, 4, 7)
    assert np.all(w[1, :, :, 5:] == 0)
    ref_out, ref_w = _manual_mha(mha, x_q, x_kv, mask=mask[:, 0])  # (B, 1, S) per head
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(w, ref_w, rtol=1e-12, atol=1e-14)


def test_mha_with_one_head_is_single_attention_on_the_projections():
    mha, rng = _mha_with_random_biases(8, 1, 2)
    x = rng.standard_normal((6, 8))
    p = mha.params
    o, w1 = scaled_dot_product_attention(
        x @ p["W_q"] + p["b_q"], x @ p["W_k"] + p["b_k"], x @ p["W_v"] + p["b_v"]
    )
    out, w = mha(x)
    np.testing.assert_allclose(w[0], w1, rtol=1e-13)
    np.testing.assert_allclose(out, o @ p["W_o"] + p["b_o"], rtol=1e-12, atol=1e-13)


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
    np.testing.assert_allclose(out, o.transpose(1, 0, 2).reshape(3, 8) @ p["W_o"], rtol=1e-12)


def test_mha_2d_input_equals_batch_of_one():
    mha, rng = _mha_with_random_biases(8, 2, 3)
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
    out64, _ = mha(x)
    assert out32.dtype == np.float32 and w32.dtype == np.float32
    assert out64.dtype == np.float64
    np.testing.assert_allclose(out32, out64, atol=1e-5)


def test_mha_additive_bias_equals_boolean_mask():
    mha, rng = _mha_with_random_biases(8, 2, 4)
    x = rng.standard_normal((2, 4, 8))
    pm = padding_mask([4, 2])
    out_m, w_m = mha(x, mask=pm)
    out_b, w_b = mha(x, bias=np.where(pm, 0.0, -1e4))  # BERT-style large negative bias
    np.testing.assert_allclose(out_b, out_m, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w_b, w_m, atol=1e-300)


def test_mha_cache_holds_what_a_backward_pass_needs():
    mha, rng = _mha_with_random_biases(8, 2, 5)
    x_q = rng.standard_normal((2, 3, 8))
    x_kv = rng.standard_normal((2, 4, 8))
    _, w = mha(x_q, x_kv)
    c = mha._cache
    assert c["x_q"].shape == (6, 8) and c["x_kv"].shape == (8, 8)
    assert c["q"].shape == (2, 2, 3, 4) and c["k"].shape == (2, 2, 4, 4)
    assert c["v"].shape == (2, 2, 4, 4) and c["context"].shape == (6, 8)
    np.testing.assert_array_equal(c["weights"], w)
    assert c["shape"] == (2, 3, 4) and not c["squeeze"] and not c["self_attention"]
    np.testing.assert_allclose(
        c["context"] @ mha.params["W_o"] + mha.params["b_o"], mha(x_q, x_kv)[0].reshape(6, 8)
    )
