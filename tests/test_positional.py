"""positional.py: the sinusoidal positional encoding and its offset (rotation) matrices.

Sections: values (the paper's formula entry by entry, the offsets as rotations, the properties
with hypothesis, and why attention needs positions at all), errors (bad sizes, k and base).
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_np import (
    MultiHeadAttention,
    positional_encoding,
    positional_offset_matrix,
)

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import (
    PROPERTY_SETTINGS,
    abs_product,
    assert_within,
    attention_tol,
    rounding_tol,
    unit_roundoff,
)

U64 = unit_roundoff(np.float64)


def sinusoid_tol(angle, exponent, base, value):
    """Our sin or cos of pos * base^(-exponent) against the same computed another way in
    float64: each side rounds the exponent (a relative u |exponent ln(base)| of the power), the
    power (FR) and the product or quotient with pos (1), all times |angle| (|sin'|, |cos'| <= 1),
    then sin or cos (FR of |value|)."""
    angle = np.abs(angle)
    return (
        rounding_tol(np.float64, 2 * (FR + 1), angle)
        + rounding_tol(np.float64, 2, angle * abs(exponent * math.log(base)))
        + rounding_tol(np.float64, 2 * FR, np.abs(value))
    )


def offset_tol(positions, k, d_model, rotated, base=10000.0):
    """A bound on |PE[p] R_k^T - PE[p + k]| (float64) per entry, for the rows ``rotated`` =
    PE[positions] (the error of the frequencies cancels: R_k turns by k omega~, PE by
    p omega~): PE[p] and PE[p + k] round their angles (u |p omega_i|, u |(p + k) omega_i|) and
    their sin and cos (FR), R_k its angle and cos and sin the same, and each rotated entry mixes
    the two entries of its pair (the errors of both count); the product sums d_model terms."""
    omega = base ** (-np.arange(0, d_model, 2) / d_model)
    p = np.abs(np.asarray(positions, np.float64))[:, None]
    u_fr = rounding_tol(np.float64, FR)
    per_pair = (
        2 * (U64 * p * omega + u_fr)  # PE[p]'s pair
        + 2 * (U64 * abs(k) * omega + u_fr)  # R_k's pair
        + U64 * np.abs(p + k) * omega  # PE[p + k]
        + u_fr
    )
    R = positional_offset_matrix(k, d_model, base=base)
    return np.repeat(per_pair, 2, axis=-1) + rounding_tol(
        np.float64, d_model, abs_product(rotated, R.T)
    )


def mha_tol(mha, x):
    """A bound on the error of one computation of mha(x) (self-attention of x (T, D), no mask).

    Each projection x W + b: gamma(D + 1) (|x| |W| + |b|). In each head, attention_tol for
    exact q, k, v, and the projections' errors: a score error ds <= (|dq| |k| + |q| |dk|) /
    sqrt(d_k) moves the weights by a relative 2 max ds (the output by that times max|v|), and
    v's error passes on (the weights sum to 1). The output projection: gamma(D + 1) (|ctx|
    |W_o| + |b_o|), and the heads' errors times |W_o|.
    """
    p = {name: np.asarray(w, np.float64) for name, w in mha.params.items()}
    x = np.asarray(x, np.float64)
    (t, d), h = x.shape, mha.n_heads
    d_k = d // h
    heads = lambda a: a.reshape(t, h, d_k).transpose(1, 0, 2)  # noqa: E731
    val, err = {}, {}
    for n in "qkv":
        w, b = p[f"W_{n}"], p.get(f"b_{n}", np.zeros(d))
        val[n] = heads(x @ w + b)
        err[n] = heads(rounding_tol(mha_dtype(mha), d + 1, abs_product(x, w) + np.abs(b)))
    ctx, ctx_err = np.empty((h, t, d_k)), np.empty((h, t, d_k))
    for i in range(h):
        q, k, v = val["q"][i], val["k"][i], val["v"][i]
        s = q @ k.T / math.sqrt(d_k)
        a = np.exp(s - s.max(-1, keepdims=True))
        ctx[i] = a / a.sum(-1, keepdims=True) @ v
        ds = (abs_product(err["q"][i], k.T) + abs_product(q, err["k"][i].T)).max() / math.sqrt(d_k)
        ctx_err[i] = (
            attention_tol(q, k, v, mha_dtype(mha), sides=1)
            + 2 * ds * np.abs(v).max()
            + err["v"][i].max()
        )
    merge = lambda a: a.transpose(1, 0, 2).reshape(t, d)  # noqa: E731
    ctx, ctx_err = merge(ctx), merge(ctx_err)
    b_o = np.abs(p.get("b_o", np.zeros(d)))
    out = rounding_tol(mha_dtype(mha), d + 1, abs_product(ctx, p["W_o"]) + b_o)
    return out + abs_product(ctx_err, p["W_o"])


def mha_dtype(mha):
    return mha.params["W_q"].dtype


# ============================================================================================
# values
# ============================================================================================


def test_positional_encoding_matches_the_paper_formula_entry_by_entry():
    pe = positional_encoding(12, 10)
    assert pe.shape == (12, 10)
    for pos in range(12):
        for i in range(5):
            angle = pos / 10000 ** (2 * i / 10)
            sin, cos = math.sin(angle), math.cos(angle)
            tol_sin = sinusoid_tol(angle, 2 * i / 10, 10000, sin)
            tol_cos = sinusoid_tol(angle, 2 * i / 10, 10000, cos)
            assert pe[pos, 2 * i] == pytest.approx(sin, abs=tol_sin)
            assert pe[pos, 2 * i + 1] == pytest.approx(cos, abs=tol_cos)


def test_position_zero_is_sin_zero_cos_one():
    pe = positional_encoding(3, 8)
    np.testing.assert_array_equal(pe[0, 0::2], 0.0)
    np.testing.assert_array_equal(pe[0, 1::2], 1.0)


def test_first_pair_has_wavelength_two_pi_and_last_pair_is_slowest():
    pe = positional_encoding(100, 16)
    # omega_0 = base ** -0.0 = 1 exactly (C99 Annex F: pow(x, +-0) = 1): the angles are the
    # integers themselves, and only the two sines round (FR each)
    ref = np.sin(np.arange(100))
    assert_within(pe[:, 0], ref, rounding_tol(np.float64, 2 * FR, np.abs(ref)), "sin(pos)")
    # the slowest pair barely moves over 100 positions
    assert np.abs(np.diff(pe[:, 14])).max() < np.abs(np.diff(pe[:, 0])).max() / 100


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_positional_encoding_dtype_and_range(dtype):
    pe = positional_encoding(500, 64, dtype=dtype)
    assert pe.dtype == dtype
    assert pe.min() >= -1.0 and pe.max() <= 1.0


def test_other_base_changes_the_frequencies():
    pe = positional_encoding(5, 4, base=100.0)
    angle = 3 / 100 ** (2 / 4)
    tol = sinusoid_tol(angle, 2 / 4, 100.0, math.sin(angle))
    assert pe[3, 2] == pytest.approx(math.sin(angle), abs=tol)


@pytest.mark.parametrize("k", [1, 3, 17, -5, 0])
def test_offset_matrix_shifts_every_position_by_k(k):
    pe = positional_encoding(80, 32)
    R = positional_offset_matrix(k, 32)
    lo, hi = max(0, -k), 80 - max(0, k)
    tol = offset_tol(np.arange(lo, hi), k, 32, pe[lo:hi])
    assert_within(pe[lo:hi] @ R.T, pe[lo + k : hi + k], tol, f"PE R_{k}^T")


def test_offset_matrix_is_a_rotation_and_composes_additively():
    R3, R4, R7 = (positional_offset_matrix(k, 16) for k in (3, 4, 7))
    # c^2 + s^2 - 1 from cos and sin (FR each, twice), and the product's sums of 16; a rounded
    # angle is still a rotation
    tol = rounding_tol(np.float64, 16 + 2 * FR, abs_product(R3, R3.T))
    assert_within(R3 @ R3.T, np.eye(16), tol, "R3 R3^T")
    # R(3 w) R(4 w) = R(7 w) exactly; the three angles round (u (3 + 4 + 7) omega_i), the
    # entries of R3 and R4 (FR each, in every product) and of R7 (FR)
    omega = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    angles = np.kron(np.diag(U64 * 14 * omega), np.ones((2, 2)))
    tol = rounding_tol(np.float64, 16 + 2 * FR, abs_product(R3, R4))
    tol += rounding_tol(np.float64, FR, np.abs(R7)) + angles
    assert_within(R3 @ R4, R7, tol, "R3 R4")
    # 2x2 blocks on the diagonal, zeros elsewhere
    blocks = np.kron(np.eye(8), np.ones((2, 2)))
    assert np.all(R3[blocks == 0] == 0)


def test_offset_matrix_does_not_depend_on_position():
    # the same R_k maps pos -> pos + k for every pos: check two far-apart positions
    pe = positional_encoding(1000, 8)
    R = positional_offset_matrix(10, 8)
    assert_within(R @ pe[2], pe[12], offset_tol([2], 10, 8, pe[[2]])[0], "R_10 PE[2]")
    assert_within(R @ pe[900], pe[910], offset_tol([900], 10, 8, pe[[900]])[0], "R_10 PE[900]")


def test_adding_positions_breaks_permutation_equivariance_of_attention():
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(16, 4, rng=rng)
    x = rng.standard_normal((6, 16))
    perm = rng.permutation(6)
    out, _ = mha(x)
    out_perm, _ = mha(x[perm])
    # without positions: equivariant (up to the rounding of two computations of the rows)
    assert_within(out_perm, out[perm], 2 * mha_tol(mha, x)[perm], "permuted attention")
    pe = positional_encoding(6, 16)
    out_pe, _ = mha(x + pe)
    out_pe_perm, _ = mha(x[perm] + pe)
    assert not np.allclose(out_pe_perm, out_pe[perm], atol=1e-3)  # with positions: order matters


# ------------------------------------------------------------------ properties (hypothesis)


even_d = st.integers(1, 64).map(lambda h: 2 * h)


@PROPERTY_SETTINGS
@given(st.integers(1, 2000), even_d)
def test_positional_encoding_values_are_in_minus_one_one(max_len, d_model):
    pe = positional_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model)
    assert np.all(np.abs(pe) <= 1.0)


@PROPERTY_SETTINGS
@given(st.integers(0, 5000), st.integers(-500, 500), even_d)
def test_positional_encoding_shift_is_a_fixed_linear_map(pos, k, d_model):
    if pos + k < 0:
        pos = -k
    pe = positional_encoding(pos + k + 1 if k > 0 else pos + 1, d_model)
    R = positional_offset_matrix(k, d_model)
    assert_within(R @ pe[pos], pe[pos + k], offset_tol([pos], k, d_model, pe[[pos]])[0], "R PE")


# ============================================================================================
# errors
# ============================================================================================


def test_odd_d_model_is_rejected_with_the_reason():
    with pytest.raises(ValueError, match=r"d_model must be even .*sin/cos pairs.*7"):
        positional_encoding(10, 7)
    with pytest.raises(ValueError, match="d_model must be even"):
        positional_offset_matrix(1, 7)


@pytest.mark.parametrize("max_len, d_model", [(0, 8), (-3, 8), (10, 0), (10, -2)])
def test_positional_encoding_non_positive_sizes(max_len, d_model):
    with pytest.raises(ValueError, match="must be a positive integer"):
        positional_encoding(max_len, d_model)


def test_positional_encoding_non_integer_size():
    with pytest.raises(TypeError, match="max_len must be a positive integer"):
        positional_encoding(10.5, 8)


def test_positional_offset_bad_k():
    with pytest.raises(TypeError, match="k must be a real number"):
        positional_offset_matrix("3", 8)
    with pytest.raises(ValueError, match="k must be finite"):
        positional_offset_matrix(np.inf, 8)


def test_positional_encoding_bad_base():
    with pytest.raises(ValueError, match="base must be a positive finite number"):
        positional_encoding(4, 8, base=-1.0)
