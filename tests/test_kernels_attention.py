"""The attention kernel (``_kernels/attention.py``) equals the plain five steps.

Two references: the plain, readable ``attention_steps`` of ``attention.py`` (what the pages
teach), and the in-place steps run once on the whole arrays (``attention_inplace``), for the
fast path (chunks of query rows spread over threads) on every layout that reaches it, with and
without the weights (``need_weights=False``), with and without the row maximum. Problems of
2 MiB of scores or more take the chunked path (``threads.MIN_SPLIT_BYTES``).

Sections: values (the kernel equals the plain steps, the chunked path equals one pass, the row
maximum is skipped only when a bound proves the scores small), errors (an overflow in a worker
thread), reference (the fast path against PyTorch). The thread pool is tested in
test_kernels_threads.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np import attention_steps, causal_mask, padding_mask, scaled_dot_product_attention
from transformer_np._kernels import attention as kernel
from transformer_np._kernels.attention import attention_inplace, scores_are_bounded
from transformer_np._kernels.threads import MIN_SPLIT_BYTES, row_chunks

from helpers import (
    FUNCTION_ROUNDINGS,
    assert_within,
    random_qkv,
    rounding_tol,
    to_torch,
)
from rounding import attention_bound, torch_sdpa_tol

# Tolerances: attention_bound (rounding.py) of each of the two computations compared.

# ============================================================================================
# values
# ============================================================================================

# ------------------------------------------------------------------ kernel == the plain steps


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("masking", ["none", "causal", "padding", "bias"])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 6, 9), (2, 4, 600, 700)])
def test_kernel_equals_the_plain_steps(dtype, masking, shape):
    rng = np.random.default_rng(11)
    lead, n_q, n_k = shape[:-2], shape[-2], shape[-1]
    q = rng.standard_normal(lead + (n_q, 16)).astype(dtype)
    k = rng.standard_normal(lead + (n_k, 16)).astype(dtype)
    v = rng.standard_normal(lead + (n_k, 8)).astype(dtype)
    mask = bias = None
    if masking == "causal":
        mask = np.tril(np.ones((n_q, n_k), bool))
    elif masking == "padding":
        mask = np.arange(n_k) < n_k - 2  # (n_k,): the last two keys are padding, for every row
    elif masking == "bias":
        bias = rng.standard_normal((n_q, n_k)).astype(dtype)
    ref_out, ref_w = attention_steps(q, k, v, mask, bias)
    out_tol, w_tol = (2 * b for b in attention_bound(q, k, v, mask=mask, bias=bias))  # 2 sides
    for need_weights in (True, False):
        out, w = kernel.attention(q, k, v, mask, bias, need_weights=need_weights)
        assert_within(out, ref_out, out_tol, f"output, need_weights={need_weights}")
        if need_weights:
            assert_within(w, ref_w, w_tol, "weights")


def test_kernel_gives_zeros_for_a_fully_blocked_row_like_the_plain_steps():
    rng = np.random.default_rng(12)
    q, k, v = rng.standard_normal((3, 4, 6, 8))
    mask = np.ones((6, 6), bool)
    mask[2] = False  # query 2 may attend to nothing
    ref_out, ref_w = attention_steps(q, k, v, mask)
    out, w = kernel.attention(q, k, v, mask)
    assert not ref_w[:, 2].any() and not w[:, 2].any() and not out[:, 2].any()
    assert_within(out, ref_out, 2 * attention_bound(q, k, v, mask=mask)[0], "output")


# ------------------------------------------------------------------ chunked path == one pass


def attention_in_one_pass(q, k, v, mask=None, bias=None):
    """The in-place steps run once on the whole arrays (no chunks, no threads)."""
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = np.empty(lead + (q.shape[-2], v.shape[-1]), q.dtype)
    w = np.empty(lead + (q.shape[-2], k.shape[-2]), q.dtype)
    m = None if mask is None else np.asarray(mask, bool)
    attention_inplace(q, k, v, m, bias, out, w)
    return out, w


def assert_fast_path_equals_one_pass(q, k, v, mask=None, bias=None, *, as_if=None):
    """scaled_dot_product_attention (chunked, threaded) equals the one pass, with and without
    the weights, within the bounds of both (attention_bound); returns its output and weights.

    ``as_if``: the (queries, bias) whose computation both sides in fact run, for the bound,
    when they are not (q, bias) (see the BERT-style test).
    """
    n_scores = np.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2])) * q.shape[-2] * k.shape[-2]
    assert n_scores * q.dtype.itemsize >= MIN_SPLIT_BYTES, "too small to take the fast path"
    out, w = scaled_dot_product_attention(q, k, v, mask, bias=bias)
    ref_out, ref_w = attention_in_one_pass(q, k, v, mask, bias)
    bound_q, bound_bias = (q, bias) if as_if is None else as_if
    out_bound, w_bound = attention_bound(bound_q, k, v, mask=mask, bias=bound_bias)
    assert_within(w, ref_w, 2 * w_bound, "fast path weights")
    assert_within(out, ref_out, 2 * out_bound, "fast path output")
    out_only, none = scaled_dot_product_attention(q, k, v, mask, bias=bias, need_weights=False)
    assert none is None and out_only.dtype == out.dtype
    assert_within(out_only, ref_out, 2 * out_bound, "fast path output, need_weights=False")
    return out, w


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_path_equals_one_pass_with_causal_mask(dtype):
    rng = np.random.default_rng(0)
    q, k, v = random_qkv(rng, (1, 4, 512, 32), (1, 4, 512, 32), dtype=dtype)
    out, w = assert_fast_path_equals_one_pass(q, k, v, causal_mask(512))
    assert out.dtype == w.dtype == dtype
    assert np.all(w[..., ~causal_mask(512)] == 0)


def test_fast_path_with_padding_mask_and_fully_blocked_rows():
    rng = np.random.default_rng(1)
    q, k, v = random_qkv(rng, (2, 2, 300, 16), (2, 2, 700, 16), d_v=8, dtype=np.float32)
    mask = padding_mask([700, 250], 700)  # (2, 1, 1, 700)
    assert_fast_path_equals_one_pass(q, k, v, mask)
    rows = np.ones((300, 700), bool)
    rows[::7] = False  # every 7th query sees nothing
    out, w = assert_fast_path_equals_one_pass(q, k, v, rows)
    assert np.all(out[..., ::7, :] == 0) and np.all(w[..., ::7, :] == 0)


def test_fast_path_with_bias_and_keys_shared_by_heads():
    rng = np.random.default_rng(2)
    # k, v broadcast over the heads
    q, k, v = random_qkv(rng, (2, 3, 256, 16), (2, 1, 512, 16), dtype=np.float32)
    bias = rng.standard_normal((3, 256, 512)).astype(np.float32)
    bias[..., -10:] = -np.inf
    assert_fast_path_equals_one_pass(q, k, v, bias=bias)


def test_fast_path_on_a_single_matrix_and_with_a_1d_mask():
    rng = np.random.default_rng(3)
    q, k, v = random_qkv(rng, (1100, 8), (1000, 8), dtype=np.float32)  # no leading axes
    keys = np.arange(1000) % 3 != 0  # (n_k,)
    assert_fast_path_equals_one_pass(q, k, v, keys)


def test_fast_path_groups_many_small_matrices():
    rng = np.random.default_rng(4)
    # 576 matrices of 48 x 48
    q, k, v = random_qkv(rng, (6, 96, 48, 8), (6, 96, 48, 8), dtype=np.float32)
    blocks = row_chunks((6, 96), 48, 48 * 4)
    assert blocks is not None and len(blocks) < 6 * 96  # several matrices per block
    assert_fast_path_equals_one_pass(q, k, v, causal_mask(48))


def test_fast_path_on_transposed_views_as_in_multi_head_attention():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 400, 4, 16)).astype(np.float32)  # (B, T, H, Dh)
    q = x.transpose(0, 2, 1, 3)  # (B, H, T, Dh), not contiguous
    assert_fast_path_equals_one_pass(q, q, q, causal_mask(400))


# ------------------------------------------------------------------ the row maximum
#
# It is skipped only when a bound proves the scores small.


def test_the_bound_holds_for_ordinary_inputs_and_fails_for_large_ones():
    rng = np.random.default_rng(8)
    q, k, v = random_qkv(rng, (2, 64, 16), (2, 64, 16), dtype=np.float32)
    assert scores_are_bounded(q, k, v, None)
    assert not scores_are_bounded(q * 30, k * 30, v, None)  # scores up to ~ 900 / 4
    assert scores_are_bounded(q, k, v * 1e30, None)  # 64 e^B 1e30 still fits in float32
    assert not scores_are_bounded(q, k, v * 1e36, None)  # n_k e^B max|v| could overflow
    bert_mask = np.where(rng.random((64, 64)) < 0.5, 0.0, -1e9).astype(np.float32)
    assert not scores_are_bounded(q, k, v, bert_mask)  # large finite bias
    blocked = np.where(rng.random((64, 64)) < 0.5, 0.0, -np.inf).astype(np.float32)
    assert scores_are_bounded(q, k, v, blocked)  # -inf blocks; it does not count in the bound


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_steps_without_the_row_maximum_give_the_same_weights(dtype):
    rng = np.random.default_rng(9)
    q, k, v = random_qkv(rng, (3, 40, 8), (3, 50, 8), d_v=6, dtype=dtype)
    mask = rng.random((40, 50)) < 0.7
    mask[5] = False  # a row with every key blocked
    assert scores_are_bounded(q, k, v, None)
    out_tol, w_tol = (2 * b for b in attention_bound(q, k, v, mask=mask))
    results = []
    for shift in (True, False):
        out, w = np.empty((3, 40, 6), dtype), np.empty((3, 40, 50), dtype)
        attention_inplace(q, k, v, mask, None, out, w, shift=shift)
        results.append((out, w))
    (out1, w1), (out2, w2) = results
    assert_within(w2, w1, w_tol, "weights without the row maximum")
    assert_within(out2, out1, out_tol, "output without the row maximum")
    assert np.all(w2[:, 5] == 0) and np.all(out2[:, 5] == 0)


@pytest.mark.parametrize("need_weights", [True, False])
def test_large_scores_on_the_fast_path_take_the_row_maximum(need_weights):
    # scores up to ~150: e^150 overflows float32, so the fast path must subtract the maximum
    rng = np.random.default_rng(10)
    q, k, v = random_qkv(rng, (2, 2, 512, 16), (2, 2, 512, 16), dtype=np.float32)
    q *= 6.0
    k *= 6.0
    assert not scores_are_bounded(q, k, v, None)
    out, w = scaled_dot_product_attention(q, k, v, need_weights=need_weights)
    s = (q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)) / 4.0
    ref_w = np.exp(s - s.max(-1, keepdims=True))
    ref_w /= ref_w.sum(-1, keepdims=True)
    assert np.isfinite(out).all()
    out_tol, w_tol = attention_bound(q, k, v)  # float32 scores of ~150 against float64
    assert_within(out, ref_w @ v, out_tol, "output")
    if need_weights:
        assert_within(w, ref_w, w_tol, "weights")


def test_bert_style_additive_mask_on_the_fast_path():
    # -1e9 on every key of a row absorbs the scores (-1e9 + s == -1e9 in float32): the row comes
    # out uniform, as in the one-pass path; elsewhere the -1e9 keys get a weight of 0
    rng = np.random.default_rng(11)
    q, k, v = random_qkv(rng, (2, 2, 512, 16), (2, 2, 512, 16), dtype=np.float32)
    bias = np.zeros((512, 512), np.float32)
    bias[:, 400:] = -1e9
    bias[7] = -1e9  # every key of row 7
    # In float32 s - 1e9 rounds to -1e9 (|s| < 32, half a unit in the last place of 1e9): both
    # sides exponentiate the same rounded scores, on which the -1e9 keys weigh 0 as blocked ones
    # and row 7 has equal scores, as with a query of zeros: the bound of that computation
    assert np.abs(q @ k.swapaxes(-1, -2)).max() / 4 < 32  # |s| < 32 (d_k = 16)
    blocked = np.where(bias == 0, 0.0, -np.inf).astype(np.float32)
    blocked[7] = 0.0
    bound_q = q.copy()
    bound_q[..., 7, :] = 0.0
    out, w = assert_fast_path_equals_one_pass(q, k, v, bias=bias, as_if=(bound_q, blocked))
    # row 7: 512 equal scores (s - 1e9 rounds to -1e9), so weights e_j / sum_l e_l with e_j =
    # exp(0) within FUNCTION_ROUNDINGS (in the numerator and in the sum), the sum of 512 terms
    # and the division: a relative error of at most gamma(2 FUNCTION_ROUNDINGS + 513)
    row = w[..., 7, :]
    tol = rounding_tol(np.float32, 2 * FUNCTION_ROUNDINGS + 513, 1 / 512)
    assert_within(row, np.full(row.shape, 1 / 512), tol, "row 7")
    assert np.all(w[..., :7, 400:] == 0) and np.all(w[..., 8:, 400:] == 0)


# ============================================================================================
# errors
# ============================================================================================


def test_overflow_in_a_worker_thread_raises_the_clear_error():
    rng = np.random.default_rng(6)
    q, k, v = random_qkv(rng, (2, 2, 512, 8), (2, 2, 512, 8), dtype=np.float32)
    q[1, 1, 300] = 1e25  # with k[1, 1, 5], one score of 1e50 overflows float32
    k[1, 1, 5] = 1e25
    with pytest.raises(ValueError, match="overflowed float32"):
        scaled_dot_product_attention(q, k, v)


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("need_weights", [True, False])
def test_sdpa_fast_path_matches_torch(torch, dtype, need_weights):
    # 2 x 4 x 512 x 640 scores (several MiB): the blocked path on both cores, which skips the row
    # maximum when the scores are provably small (they are, here) and, without the weights,
    # divides the output instead of the weights
    rng = np.random.default_rng(3)
    q, k, v = random_qkv(rng, (2, 4, 512, 32), (2, 4, 640, 32), d_v=24, dtype=dtype)
    assert scores_are_bounded(q, k, v, None)
    mask = np.tril(np.ones((512, 640), bool), k=128)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=need_weights)
    ref = torch.nn.functional.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v), attn_mask=to_torch(mask)
    )
    assert_within(
        out,
        ref.numpy(),
        torch_sdpa_tol(q, k, v, mask=mask)[0],
        f"sdpa output, fast path, need_weights={need_weights}",
    )
    assert (w is None) == (not need_weights)
