"""blockwise_attention (online softmax, tile by tile) gives the output of
scaled_dot_product_attention, for every shape, block size, mask and dtype; and rejects bad
input with the same errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_np import causal_mask, padding_mask, scaled_dot_product_attention
from transformer_np._kernels.threads import num_threads, parallel_for, split_range
from transformer_np.blockwise import blockwise_attention

# Absolute tolerance per dtype, for inputs of standard-normal size (|output| <= max |v| ~ 4).
TOL = {np.float32: 1e-6, np.float64: 1e-12}


def _inputs(rng, lead, n_q, n_k, d_k, d_v, dtype):
    q = rng.standard_normal(lead + (n_q, d_k)).astype(dtype)
    k = rng.standard_normal(lead + (n_k, d_k)).astype(dtype)
    v = rng.standard_normal(lead + (n_k, d_v)).astype(dtype)
    return q, k, v


def _assert_same_as_sdpa(q, k, v, mask=None, *, block_size, causal=False, bias=None):
    out = blockwise_attention(q, k, v, mask, block_size=block_size, causal=causal, bias=bias)
    full_mask = mask
    if causal:
        tri = (
            causal_mask(q.shape[-2])
            if q.shape[-2] == k.shape[-2]
            else np.tril(np.ones((q.shape[-2], k.shape[-2]), bool))
        )
        full_mask = tri if mask is None else np.logical_and(mask, tri)
    ref, _ = scaled_dot_product_attention(q, k, v, full_mask, bias=bias)
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype
    err = float(np.max(np.abs(out.astype(np.float64) - ref))) if out.size else 0.0
    assert err <= TOL[out.dtype.type], f"max |blockwise - sdpa| = {err:.3g} > {TOL[out.dtype.type]}"
    return out


# ------------------------------------------------------------------ equality with the full version


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
    lead=st.sampled_from([(), (1,), (3,), (2, 2)]),
    n_q=st.integers(1, 70),
    n_k=st.integers(1, 70),
    d_k=st.integers(1, 16),
    d_v=st.integers(1, 9),
    mask_kind=st.sampled_from(["none", "causal", "padding", "random", "blocked_rows"]),
)
def test_blockwise_equals_sdpa_for_any_shape_block_size_and_mask(
    data, dtype, lead, n_q, n_k, d_k, d_v, mask_kind
):
    # Block sizes that divide n and that do not, smaller and larger than n.
    block_size = data.draw(st.integers(1, 80), label="block_size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    q, k, v = _inputs(rng, lead, n_q, n_k, d_k, d_v, dtype)
    mask, causal = None, False
    if mask_kind == "causal":
        causal = True
    elif mask_kind == "padding":  # each batch item has its own length (0 blocks every key)
        lengths = rng.integers(0, n_k + 1, size=lead[0] if lead else 1)
        mask = padding_mask(lengths, n_k)  # (B, 1, 1, n_k)
        mask = {2: mask, 1: mask[:, 0], 0: mask[0, 0]}[len(lead)]
    elif mask_kind == "random":
        mask = rng.random(lead + (n_q, n_k)) < 0.5
    elif mask_kind == "blocked_rows":  # some query rows see no key at all
        mask = rng.random((n_q, n_k)) < 0.7
        mask[rng.random(n_q) < 0.4] = False
    _assert_same_as_sdpa(q, k, v, mask, block_size=block_size, causal=causal)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block_size", [5, 7, 32, 64, 100, 1000])
def test_blockwise_equals_sdpa_on_8_heads_with_causal_mask_array_or_flag(dtype, block_size):
    rng = np.random.default_rng(0)
    q, k, v = _inputs(rng, (2, 8), 100, 100, 64, 64, dtype)
    via_array = _assert_same_as_sdpa(q, k, v, causal_mask(100), block_size=block_size)
    via_flag = _assert_same_as_sdpa(q, k, v, block_size=block_size, causal=True)
    np.testing.assert_array_equal(via_array, via_flag)


def test_blockwise_equals_sdpa_when_threads_split_the_query_blocks():
    # 8 heads x 512 x 512 scores is above the threshold where the work is split over threads.
    rng = np.random.default_rng(1)
    q, k, v = _inputs(rng, (8,), 512, 512, 32, 32, np.float32)
    pad = np.ones((1, 512), bool)
    pad[:, 400:] = False
    _assert_same_as_sdpa(q, k, v, pad, block_size=96, causal=True)


def test_causal_output_at_position_i_ignores_later_tokens():
    rng = np.random.default_rng(2)
    q, k, v = _inputs(rng, (3,), 40, 40, 8, 8, np.float64)
    out = blockwise_attention(q, k, v, causal=True, block_size=16)
    k2, v2 = k.copy(), v.copy()
    k2[:, 25:] = rng.standard_normal(k2[:, 25:].shape) * 100
    v2[:, 25:] = rng.standard_normal(v2[:, 25:].shape) * 100
    out2 = blockwise_attention(q, k2, v2, causal=True, block_size=16)
    np.testing.assert_array_equal(out[:, :25], out2[:, :25])


def test_fully_blocked_rows_give_zero_output_not_nan():
    rng = np.random.default_rng(3)
    q, k, v = _inputs(rng, (2,), 9, 9, 4, 4, np.float32)
    mask = np.ones((9, 9), bool)
    mask[[0, 4, 8]] = False  # rows 0, 4 and 8 may attend to nothing
    out = blockwise_attention(q, k, v, mask, block_size=4)
    assert np.all(out[:, [0, 4, 8]] == 0)
    assert np.isfinite(out).all()
    everything_blocked = blockwise_attention(q, k, v, np.zeros((9, 9), bool), block_size=4)
    assert np.all(everything_blocked == 0)


def test_keys_blocked_by_the_mask_do_not_change_the_output_even_when_huge():
    rng = np.random.default_rng(4)
    q, k, v = _inputs(rng, (), 6, 20, 8, 4, np.float64)
    mask = np.ones(20, bool)
    mask[13:] = False  # a padding mask given as a 1-D array of keys
    out = blockwise_attention(q, k, v, mask, block_size=5)
    v_big = v.copy()
    v_big[13:] = 1e30
    np.testing.assert_array_equal(blockwise_attention(q, k, v_big, mask, block_size=5), out)
    ref, _ = scaled_dot_product_attention(q[:, :], k[:13], v[:13])
    np.testing.assert_allclose(out, ref, atol=1e-12, rtol=0)


def test_bias_is_added_to_the_scores_as_in_sdpa():
    rng = np.random.default_rng(5)
    q, k, v = _inputs(rng, (2, 3), 30, 25, 8, 8, np.float64)
    bias = rng.standard_normal((3, 30, 25))
    bias[:, :, -4:] = -np.inf  # -inf in the bias blocks, like a False mask entry
    _assert_same_as_sdpa(q, k, v, block_size=8, bias=bias)


def test_leading_axes_broadcast_like_sdpa():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 3, 10, 8))  # (B, H, n_q, d)
    k = rng.standard_normal((2, 1, 12, 8))  # shared by the heads
    v = rng.standard_normal((1, 1, 12, 5))
    mask = rng.random((2, 1, 1, 12)) < 0.8  # one padding row per batch item
    out = _assert_same_as_sdpa(q, k, v, mask, block_size=4)
    assert out.shape == (2, 3, 10, 5)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_output_keeps_the_input_dtype(dtype):
    rng = np.random.default_rng(7)
    q, k, v = _inputs(rng, (2,), 5, 5, 4, 4, dtype)
    assert blockwise_attention(q, k, v, block_size=2).dtype == dtype


def test_no_score_matrix_of_size_n_by_n_is_allocated():
    # tracemalloc sees NumPy's allocations: the peak must stay far below one (H, n, n) matrix.
    import tracemalloc

    rng = np.random.default_rng(8)
    h, n, d = 4, 1024, 16
    q, k, v = _inputs(rng, (h,), n, n, d, d, np.float32)
    tracemalloc.start()
    try:
        blockwise_attention(q, k, v, block_size=64, causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    scores_bytes = h * n * n * 4  # 16 MiB
    assert peak < scores_bytes / 8, f"peak {peak / 2**20:.1f} MiB"


# ------------------------------------------------------------------ bad input


def test_block_size_must_be_a_positive_integer():
    q = np.zeros((4, 2))
    for bad in (0, -3):
        with pytest.raises(ValueError, match="block_size must be a positive integer"):
            blockwise_attention(q, q, q, block_size=bad)
    for bad in (2.0, "8", None, True):
        with pytest.raises(TypeError, match="block_size must be a positive integer"):
            blockwise_attention(q, q, q, block_size=bad)
    blockwise_attention(q, q, q, block_size=np.int64(3))  # NumPy integers are fine


def test_causal_must_be_a_bool():
    q = np.zeros((4, 2))
    with pytest.raises(TypeError, match="causal must be True or False"):
        blockwise_attention(q, q, q, causal="yes")


def _error(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize(
    "case",
    [
        "d_k mismatch",
        "n_k mismatch",
        "mask does not broadcast",
        "integer input",
        "nan input",
        "inf input",
        "rank 1",
        "leading axes",
        "float mask",
        "overflow",
    ],
)
def test_bad_input_gives_the_same_error_as_sdpa(case):
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 5, 8))
    k = rng.standard_normal((2, 6, 8))
    v = rng.standard_normal((2, 6, 3))
    mask = None
    if case == "d_k mismatch":
        k = k[..., :4]
    elif case == "n_k mismatch":
        v = v[:, :5]
    elif case == "mask does not broadcast":
        mask = np.ones((5, 5), bool)
    elif case == "integer input":
        q = np.ones((2, 5, 8), dtype=np.int64)
    elif case == "nan input":
        k[0, 1, 2] = np.nan
    elif case == "inf input":
        v[1, 0, 0] = np.inf
    elif case == "rank 1":
        q = q[0, 0]
    elif case == "leading axes":
        k, v = np.stack([k[0]] * 3), np.stack([v[0]] * 3)  # 3 batch items against q's 2
    elif case == "float mask":
        mask = rng.standard_normal((5, 6))
    elif case == "overflow":
        q, k, v = (q * 1e20).astype(np.float32), (k * 1e20).astype(np.float32), v.astype(np.float32)
    expected = _error(scaled_dot_product_attention, q, k, v, mask)
    assert expected is not None, "the case should be bad input for sdpa too"
    got = _error(blockwise_attention, q, k, v, mask, block_size=2)
    assert got == expected


# ------------------------------------------------------------------ the thread pool


def test_parallel_for_runs_every_piece_once_and_reraises_errors():
    seen = []
    parallel_for(seen.append, range(11), threads=2)
    assert sorted(seen) == list(range(11))

    def fail_on_7(i):
        if i == 7:
            raise KeyError(i)

    with pytest.raises(KeyError):
        parallel_for(fail_on_7, range(11), threads=2)


def test_parallel_for_nested_calls_run_inline():
    cells = np.zeros((4, 4))

    def row(i):
        def cell(j):
            cells[i, j] = 10 * i + j

        parallel_for(cell, range(4), threads=2)

    parallel_for(row, range(4), threads=2)
    np.testing.assert_array_equal(cells, 10 * np.arange(4)[:, None] + np.arange(4))


def test_split_range_covers_the_range_in_near_equal_parts():
    for n in (1, 5, 10, 17):
        for parts in (1, 2, 3, 8):
            slices = split_range(n, parts)
            sizes = [s.stop - s.start for s in slices]
            assert [i for s in slices for i in range(s.start, s.stop)] == list(range(n))
            assert max(sizes) - min(sizes) <= 1


def test_num_threads_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "1")
    assert num_threads() == 1
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="TRANSFORMER_NP_NUM_THREADS"):
        num_threads()
    monkeypatch.delenv("TRANSFORMER_NP_NUM_THREADS")
    assert num_threads() >= 1
