"""The fast path of scaled_dot_product_attention (blocks of query rows spread over threads)
gives the result of the plain one-pass computation, for every layout that reaches it, with and
without the weights (``need_weights=False``), with and without the row maximum.

Problems of 2 MiB of scores or more take the blocked path (``_parallel.MIN_SPLIT_BYTES``); the
reference is the same five steps run once on the whole arrays (``_attention_steps``), always
subtracting the row maximum.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np import causal_mask, padding_mask, scaled_dot_product_attention
from transformer_np._kernels.threads import MIN_SPLIT_BYTES, blas_single_threaded, row_chunks
from transformer_np.attention import _attention_steps, _scores_are_bounded

TOL = {np.float32: 2e-6, np.float64: 1e-13}


def _one_pass(q, k, v, mask=None, bias=None):
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = np.empty(lead + (q.shape[-2], v.shape[-1]), q.dtype)
    w = np.empty(lead + (q.shape[-2], k.shape[-2]), q.dtype)
    m = None if mask is None else np.asarray(mask, bool)
    _attention_steps(q, k, v, m, bias, out, w)
    return out, w


def _check(q, k, v, mask=None, bias=None):
    n_scores = np.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2])) * q.shape[-2] * k.shape[-2]
    assert n_scores * q.dtype.itemsize >= MIN_SPLIT_BYTES, "too small to take the fast path"
    out, w = scaled_dot_product_attention(q, k, v, mask, bias=bias)
    ref_out, ref_w = _one_pass(q, k, v, mask, bias)
    tol = TOL[q.dtype.type]
    np.testing.assert_allclose(w, ref_w, atol=tol, rtol=0)
    np.testing.assert_allclose(out, ref_out, atol=tol, rtol=0)
    out_only, none = scaled_dot_product_attention(q, k, v, mask, bias=bias, need_weights=False)
    assert none is None and out_only.dtype == out.dtype
    np.testing.assert_allclose(out_only, ref_out, atol=tol, rtol=0)
    return out, w


def _qkv(rng, shape_q, shape_k, d_v=None, dtype=np.float32):
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k[:-1] + (d_v or shape_k[-1],)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_path_equals_one_pass_with_causal_mask(dtype):
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, (1, 4, 512, 32), (1, 4, 512, 32), dtype=dtype)
    out, w = _check(q, k, v, causal_mask(512))
    assert out.dtype == w.dtype == dtype
    assert np.all(w[..., ~causal_mask(512)] == 0)


def test_fast_path_with_padding_mask_and_fully_blocked_rows():
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, (2, 2, 300, 16), (2, 2, 700, 16), d_v=8)
    mask = padding_mask([700, 250], 700)  # (2, 1, 1, 700)
    _check(q, k, v, mask)
    rows = np.ones((300, 700), bool)
    rows[::7] = False  # every 7th query sees nothing
    out, w = _check(q, k, v, rows)
    assert np.all(out[..., ::7, :] == 0) and np.all(w[..., ::7, :] == 0)


def test_fast_path_with_bias_and_keys_shared_by_heads():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, (2, 3, 256, 16), (2, 1, 512, 16))  # k, v broadcast over the heads
    bias = rng.standard_normal((3, 256, 512)).astype(np.float32)
    bias[..., -10:] = -np.inf
    _check(q, k, v, bias=bias)


def test_fast_path_on_a_single_matrix_and_with_a_1d_mask():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, (1100, 8), (1000, 8))  # no leading axes at all
    keys = np.arange(1000) % 3 != 0  # (n_k,)
    _check(q, k, v, keys)


def test_fast_path_groups_many_small_matrices():
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, (6, 96, 48, 8), (6, 96, 48, 8))  # 576 matrices of 48 x 48
    blocks = row_chunks((6, 96), 48, 48 * 4)
    assert blocks is not None and len(blocks) < 6 * 96  # several matrices per block
    _check(q, k, v, causal_mask(48))


def test_fast_path_on_transposed_views_as_in_multi_head_attention():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 400, 4, 16)).astype(np.float32)  # (B, T, H, Dh)
    q = x.transpose(0, 2, 1, 3)  # (B, H, T, Dh), not contiguous
    _check(q, q, q, causal_mask(400))


def test_overflow_in_a_worker_thread_raises_the_clear_error():
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, (2, 2, 512, 8), (2, 2, 512, 8))
    q[1, 1, 300] = 1e25  # with k[1, 1, 5], one score of 1e50 overflows float32
    k[1, 1, 5] = 1e25
    with pytest.raises(ValueError, match="overflowed float32"):
        scaled_dot_product_attention(q, k, v)


def test_blas_threads_are_restored_after_the_fast_path():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("no BLAS known to threadpoolctl")
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, (4, 512, 16), (4, 512, 16))
    scaled_dot_product_attention(q, k, v)
    assert blas_threads() == before
    with blas_single_threaded():
        assert set(blas_threads()) == {1}
        with blas_single_threaded():  # nested: still one thread, restored by the outer exit
            pass
        assert set(blas_threads()) == {1}
    assert blas_threads() == before


# ----------------------------------------------------------------------------------------------
# the row maximum is skipped only when a bound proves the scores small
# ----------------------------------------------------------------------------------------------


def test_the_bound_holds_for_ordinary_inputs_and_fails_for_large_ones():
    rng = np.random.default_rng(8)
    q, k, v = _qkv(rng, (2, 64, 16), (2, 64, 16))
    assert _scores_are_bounded(q, k, v, None)
    assert not _scores_are_bounded(q * 30, k * 30, v, None)  # scores up to ~ 900 / 4
    assert _scores_are_bounded(q, k, v * 1e30, None)  # 64 e^B 1e30 still fits in float32
    assert not _scores_are_bounded(q, k, v * 1e36, None)  # n_k e^B max|v| could overflow
    bert_mask = np.where(rng.random((64, 64)) < 0.5, 0.0, -1e9).astype(np.float32)
    assert not _scores_are_bounded(q, k, v, bert_mask)  # large finite bias
    blocked = np.where(rng.random((64, 64)) < 0.5, 0.0, -np.inf).astype(np.float32)
    assert _scores_are_bounded(q, k, v, blocked)  # -inf blocks; it does not count in the bound


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_steps_without_the_row_maximum_give_the_same_weights(dtype):
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, (3, 40, 8), (3, 50, 8), d_v=6, dtype=dtype)
    mask = rng.random((40, 50)) < 0.7
    mask[5] = False  # a row with every key blocked
    assert _scores_are_bounded(q, k, v, None)
    results = []
    for shift in (True, False):
        out, w = np.empty((3, 40, 6), dtype), np.empty((3, 40, 50), dtype)
        _attention_steps(q, k, v, mask, None, out, w, shift=shift)
        results.append((out, w))
    (out1, w1), (out2, w2) = results
    tol = TOL[dtype]
    np.testing.assert_allclose(w2, w1, atol=tol, rtol=0)
    np.testing.assert_allclose(out2, out1, atol=tol, rtol=0)
    assert np.all(w2[:, 5] == 0) and np.all(out2[:, 5] == 0)


@pytest.mark.parametrize("need_weights", [True, False])
def test_large_scores_on_the_fast_path_take_the_row_maximum(need_weights):
    # scores up to ~150: e^150 overflows float32, so the fast path must subtract the maximum
    rng = np.random.default_rng(10)
    q, k, v = _qkv(rng, (2, 2, 512, 16), (2, 2, 512, 16))
    q *= 6.0
    k *= 6.0
    assert not _scores_are_bounded(q, k, v, None)
    out, w = scaled_dot_product_attention(q, k, v, need_weights=need_weights)
    s = (q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)) / 4.0
    ref_w = np.exp(s - s.max(-1, keepdims=True))
    ref_w /= ref_w.sum(-1, keepdims=True)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref_w @ v, atol=2e-4, rtol=0)  # float32 scores of ~150
    if need_weights:
        np.testing.assert_allclose(w, ref_w, atol=2e-4, rtol=0)


def test_bert_style_additive_mask_on_the_fast_path():
    # -1e9 on every key of a row absorbs the scores (-1e9 + s == -1e9 in float32): the row comes
    # out uniform, as in the one-pass path; elsewhere the -1e9 keys get a weight of 0
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, (2, 2, 512, 16), (2, 2, 512, 16))
    bias = np.zeros((512, 512), np.float32)
    bias[:, 400:] = -1e9
    bias[7] = -1e9  # every key of row 7
    out, w = _check(q, k, v, bias=bias)
    np.testing.assert_allclose(w[..., 7, :], 1 / 512, rtol=1e-5)
    assert np.all(w[..., :7, 400:] == 0) and np.all(w[..., 8:, 400:] == 0)


def test_need_weights_must_be_a_bool():
    rng = np.random.default_rng(12)
    q, k, v = _qkv(rng, (4, 8), (5, 8))
    with pytest.raises(TypeError, match=r"need_weights must be True or False, got 'no' \(str\)"):
        scaled_dot_product_attention(q, k, v, need_weights="no")
    out, w = scaled_dot_product_attention(q, k, v, need_weights=np.bool_(False))  # small path
    assert w is None
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v)[0], atol=2e-6)
