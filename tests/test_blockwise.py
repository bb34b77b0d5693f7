"""blockwise.py: memory-efficient attention (the online softmax, tile by tile).

Sections: values (blockwise_attention gives the output of scaled_dot_product_attention for
every shape, tile size, mask and dtype, without an (n, n) matrix of scores), errors (bad
arguments, and bad input gets the same error as from scaled_dot_product_attention).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_np import causal_mask, padding_mask, scaled_dot_product_attention
from transformer_np.blockwise import blockwise_attention

from helpers import assert_within, attention_tol, random_qkv


def assert_same_as_sdpa(q, k, v, mask=None, *, tile_size, causal=False, bias=None):
    """blockwise_attention equals scaled_dot_product_attention (with the causal mask made
    explicit) in shape, dtype and values, within the rounding bound of both (attention_tol:
    the blockwise sums run over ceil(n_k / tile_size) tiles); returns the blockwise output."""
    out = blockwise_attention(q, k, v, mask, tile_size=tile_size, causal=causal, bias=bias)
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
    n_tiles = -(-k.shape[-2] // tile_size)
    tol = attention_tol(q, k, v, bias=bias, n_tiles=n_tiles)
    assert_within(out, ref, tol, "blockwise - sdpa")
    return out


# ============================================================================================
# values
# ============================================================================================

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
def test_blockwise_equals_sdpa_for_any_shape_tile_size_and_mask(
    data, dtype, lead, n_q, n_k, d_k, d_v, mask_kind
):
    # Block sizes that divide n and that do not, smaller and larger than n.
    tile_size = data.draw(st.integers(1, 80), label="tile_size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    q, k, v = random_qkv(rng, lead + (n_q, d_k), lead + (n_k, d_k), d_v=d_v, dtype=dtype)
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
    assert_same_as_sdpa(q, k, v, mask, tile_size=tile_size, causal=causal)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tile_size", [5, 7, 32, 64, 100, 1000])
def test_blockwise_equals_sdpa_on_8_heads_with_causal_mask_array_or_flag(dtype, tile_size):
    rng = np.random.default_rng(0)
    q, k, v = random_qkv(rng, (2, 8, 100, 64), (2, 8, 100, 64), dtype=dtype)
    via_array = assert_same_as_sdpa(q, k, v, causal_mask(100), tile_size=tile_size)
    via_flag = assert_same_as_sdpa(q, k, v, tile_size=tile_size, causal=True)
    np.testing.assert_array_equal(via_array, via_flag)


def test_blockwise_equals_sdpa_when_threads_split_the_query_blocks():
    # 8 heads x 512 x 512 scores is above the threshold where the work is split over threads.
    rng = np.random.default_rng(1)
    q, k, v = random_qkv(rng, (8, 512, 32), (8, 512, 32), dtype=np.float32)
    pad = np.ones((1, 512), bool)
    pad[:, 400:] = False
    assert_same_as_sdpa(q, k, v, pad, tile_size=96, causal=True)


def test_causal_output_at_position_i_ignores_later_tokens():
    rng = np.random.default_rng(2)
    q, k, v = random_qkv(rng, (3, 40, 8), (3, 40, 8))
    out = blockwise_attention(q, k, v, causal=True, tile_size=16)
    k2, v2 = k.copy(), v.copy()
    k2[:, 25:] = rng.standard_normal(k2[:, 25:].shape) * 100
    v2[:, 25:] = rng.standard_normal(v2[:, 25:].shape) * 100
    out2 = blockwise_attention(q, k2, v2, causal=True, tile_size=16)
    np.testing.assert_array_equal(out[:, :25], out2[:, :25])


def test_fully_blocked_rows_give_zero_output_not_nan():
    rng = np.random.default_rng(3)
    q, k, v = random_qkv(rng, (2, 9, 4), (2, 9, 4), dtype=np.float32)
    mask = np.ones((9, 9), bool)
    mask[[0, 4, 8]] = False  # rows 0, 4 and 8 may attend to nothing
    out = blockwise_attention(q, k, v, mask, tile_size=4)
    assert np.all(out[:, [0, 4, 8]] == 0)
    assert np.isfinite(out).all()
    everything_blocked = blockwise_attention(q, k, v, np.zeros((9, 9), bool), tile_size=4)
    assert np.all(everything_blocked == 0)


def test_keys_blocked_by_the_mask_do_not_change_the_output_even_when_huge():
    rng = np.random.default_rng(4)
    q, k, v = random_qkv(rng, (6, 8), (20, 8), d_v=4)
    mask = np.ones(20, bool)
    mask[13:] = False  # a padding mask given as a 1-D array of keys
    out = blockwise_attention(q, k, v, mask, tile_size=5)
    v_big = v.copy()
    v_big[13:] = 1e30
    np.testing.assert_array_equal(blockwise_attention(q, k, v_big, mask, tile_size=5), out)
    ref, _ = scaled_dot_product_attention(q[:, :], k[:13], v[:13])
    # blockwise sums the 20 keys (7 of them blocked: terms 0) in 4 tiles, sdpa the 13 at once
    assert_within(out, ref, attention_tol(q, k, v, n_tiles=4), "blockwise - sdpa on 13 keys")


def test_bias_is_added_to_the_scores_as_in_sdpa():
    rng = np.random.default_rng(5)
    q, k, v = random_qkv(rng, (2, 3, 30, 8), (2, 3, 25, 8))
    bias = rng.standard_normal((3, 30, 25))
    bias[:, :, -4:] = -np.inf  # -inf in the bias blocks, like a False mask entry
    assert_same_as_sdpa(q, k, v, tile_size=8, bias=bias)


def test_leading_axes_broadcast_like_sdpa():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 3, 10, 8))  # (B, H, n_q, d)
    k = rng.standard_normal((2, 1, 12, 8))  # shared by the heads
    v = rng.standard_normal((1, 1, 12, 5))
    mask = rng.random((2, 1, 1, 12)) < 0.8  # one padding row per batch item
    out = assert_same_as_sdpa(q, k, v, mask, tile_size=4)
    assert out.shape == (2, 3, 10, 5)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_output_keeps_the_input_dtype(dtype):
    rng = np.random.default_rng(7)
    q, k, v = random_qkv(rng, (2, 5, 4), (2, 5, 4), dtype=dtype)
    assert blockwise_attention(q, k, v, tile_size=2).dtype == dtype


def test_no_score_matrix_of_size_n_by_n_is_allocated():
    # tracemalloc sees NumPy's allocations: the peak must stay far below one (H, n, n) matrix.
    import tracemalloc

    rng = np.random.default_rng(8)
    h, n, d = 4, 1024, 16
    q, k, v = random_qkv(rng, (h, n, d), (h, n, d), dtype=np.float32)
    tracemalloc.start()
    try:
        blockwise_attention(q, k, v, tile_size=64, causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    scores_bytes = h * n * n * 4  # 16 MiB
    assert peak < scores_bytes / 8, f"peak {peak / 2**20:.1f} MiB"


# ============================================================================================
# errors
# ============================================================================================


def test_tile_size_must_be_a_positive_integer():
    q = np.zeros((4, 2))
    for bad in (0, -3):
        with pytest.raises(ValueError, match="tile_size must be a positive integer"):
            blockwise_attention(q, q, q, tile_size=bad)
    for bad in (2.0, "8", None, True):
        with pytest.raises(TypeError, match="tile_size must be a positive integer"):
            blockwise_attention(q, q, q, tile_size=bad)
    blockwise_attention(q, q, q, tile_size=np.int64(3))  # NumPy integers are fine


def test_causal_must_be_a_bool():
    q = np.zeros((4, 2))
    with pytest.raises(TypeError, match="causal must be True or False"):
        blockwise_attention(q, q, q, causal="yes")


def error_raised_by(fn, *args, **kwargs):
    """(type, message) of the TypeError or ValueError that ``fn(*args, **kwargs)`` raises, or
    None."""
    try:
        fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc).removeprefix(f"{fn.__name__}: ")
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
    expected = error_raised_by(scaled_dot_product_attention, q, k, v, mask)
    assert expected is not None, "the case should be bad input for sdpa too"
    got = error_raised_by(blockwise_attention, q, k, v, mask, tile_size=2)
    assert got == expected


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_blockwise_output_overflow_is_an_error():
    q = np.ones((2, 4), np.float32)
    v = np.full((2, 4), 3e38, np.float32)
    assert np.all(scaled_dot_product_attention(q, q, v)[0] == v)  # normalises the weights first
    with pytest.raises(ValueError, match="the output overflowed float32.*or use float64"):
        blockwise_attention(q, q, v)
