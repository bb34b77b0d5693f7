"""Property-based tests (hypothesis): the invariants the chapters state, on many random cases."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_np import (
    EncoderBlock,
    MultiHeadAttention,
    causal_mask,
    layer_norm,
    positional_encoding,
    positional_offset_matrix,
    scaled_dot_product_attention,
    softmax,
)

SETTINGS = settings(max_examples=40, deadline=None)

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
shapes_2d = st.tuples(st.integers(1, 6), st.integers(1, 9))


# ------------------------------------------------------------------ softmax


@SETTINGS
@given(arrays(np.float64, shapes_2d, elements=finite))
def test_softmax_rows_are_probability_distributions(x):
    p = softmax(x)
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)


@SETTINGS
@given(
    arrays(np.float64, shapes_2d, elements=finite),
    st.floats(-100, 100, allow_nan=False),
)
def test_softmax_is_invariant_to_adding_a_constant_to_a_row(x, c):
    np.testing.assert_allclose(softmax(x + c), softmax(x), rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ attention


@st.composite
def attention_case(draw):
    b, n_q, n_k, d = (draw(st.integers(1, n)) for n in (3, 6, 7, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))
    q = rng.standard_normal((b, n_q, d)) * scale
    k = rng.standard_normal((b, n_k, d)) * scale
    v = rng.standard_normal((b, n_k, d))
    mask = rng.random((b, n_q, n_k)) < draw(st.floats(0.0, 1.0))
    return q, k, v, mask


@SETTINGS
@given(attention_case())
def test_attention_rows_sum_to_one_unless_fully_blocked(case):
    q, k, v, mask = case
    _, w = scaled_dot_product_attention(q, k, v, mask=mask)
    some = mask.any(axis=-1)
    np.testing.assert_allclose(w.sum(axis=-1)[some], 1.0, rtol=1e-12)
    assert np.all(w[~some] == 0)  # fully blocked rows: all weights 0
    assert np.all(np.isfinite(w))


@SETTINGS
@given(attention_case())
def test_blocked_positions_get_zero_weight(case):
    q, k, v, mask = case
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.all(w[~mask] == 0)
    # and the output only mixes allowed values: it equals attention over the allowed keys alone
    b, i = np.argwhere(mask.any(axis=-1))[0] if mask.any() else (0, 0)
    if mask[b, i].any():
        keep = mask[b, i]
        o, _ = scaled_dot_product_attention(q[b, i : i + 1], k[b, keep], v[b, keep])
        np.testing.assert_allclose(out[b, i], o[0], rtol=1e-10, atol=1e-12)


@SETTINGS
@given(
    st.integers(2, 8),
    st.data(),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["mha", "block"]),
)
def test_causal_output_at_i_ignores_tokens_after_i(T, data, seed, layer):
    i = data.draw(st.integers(0, T - 2))
    rng = np.random.default_rng(seed)
    if layer == "mha":
        f = MultiHeadAttention(8, 2, rng=rng)

        def run(x):
            return f(x, mask=causal_mask(T))[0]
    else:
        f = EncoderBlock(8, 2, 16, rng=rng)

        def run(x):
            return f(x, mask=causal_mask(T))

    x = rng.standard_normal((2, T, 8))
    x_changed = x.copy()
    x_changed[:, i + 1 :] = rng.standard_normal((2, T - i - 1, 8)) * 10
    np.testing.assert_allclose(
        run(x_changed)[:, : i + 1], run(x)[:, : i + 1], rtol=1e-13, atol=1e-14
    )


@SETTINGS
@given(st.integers(1, 8), st.integers(0, 2**32 - 1), st.sampled_from(["mha", "block"]))
def test_without_positions_attention_is_permutation_equivariant(T, seed, layer):
    rng = np.random.default_rng(seed)
    if layer == "mha":
        mha = MultiHeadAttention(12, 3, rng=rng)

        def f(x):
            return mha(x)[0]
    else:
        f = EncoderBlock(12, 3, 24, rng=rng)
    x = rng.standard_normal((T, 12))
    perm = rng.permutation(T)
    np.testing.assert_allclose(f(x[perm]), f(x)[perm], rtol=1e-12, atol=1e-13)


# ------------------------------------------------------------------ positional encoding


even_d = st.integers(1, 64).map(lambda h: 2 * h)


@SETTINGS
@given(st.integers(1, 2000), even_d)
def test_positional_encoding_values_are_in_minus_one_one(max_len, d_model):
    pe = positional_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model)
    assert np.all(np.abs(pe) <= 1.0)


@SETTINGS
@given(st.integers(0, 5000), st.integers(-500, 500), even_d)
def test_positional_encoding_shift_is_a_fixed_linear_map(pos, k, d_model):
    if pos + k < 0:
        pos = -k
    pe = positional_encoding(pos + k + 1 if k > 0 else pos + 1, d_model)
    R = positional_offset_matrix(k, d_model)
    np.testing.assert_allclose(R @ pe[pos], pe[pos + k], atol=1e-10)


# ------------------------------------------------------------------ layer norm


@SETTINGS
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
