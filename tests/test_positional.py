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

from helpers import PROPERTY_SETTINGS

# ============================================================================================
# values
# ============================================================================================


def test_positional_encoding_matches_the_paper_formula_entry_by_entry():
    pe = positional_encoding(12, 10)
    assert pe.shape == (12, 10)
    for pos in range(12):
        for i in range(5):
            angle = pos / 10000 ** (2 * i / 10)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-15)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-15)


def test_position_zero_is_sin_zero_cos_one():
    pe = positional_encoding(3, 8)
    np.testing.assert_array_equal(pe[0, 0::2], 0.0)
    np.testing.assert_array_equal(pe[0, 1::2], 1.0)


def test_first_pair_has_wavelength_two_pi_and_last_pair_is_slowest():
    pe = positional_encoding(100, 16)
    np.testing.assert_allclose(pe[:, 0], np.sin(np.arange(100)), atol=1e-15)
    # the slowest pair barely moves over 100 positions
    assert np.abs(np.diff(pe[:, 14])).max() < np.abs(np.diff(pe[:, 0])).max() / 100


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_positional_encoding_dtype_and_range(dtype):
    pe = positional_encoding(500, 64, dtype=dtype)
    assert pe.dtype == dtype
    assert pe.min() >= -1.0 and pe.max() <= 1.0


def test_other_base_changes_the_frequencies():
    pe = positional_encoding(5, 4, base=100.0)
    np.testing.assert_allclose(pe[3, 2], math.sin(3 / 100 ** (2 / 4)), atol=1e-15)


@pytest.mark.parametrize("k", [1, 3, 17, -5, 0])
def test_offset_matrix_shifts_every_position_by_k(k):
    pe = positional_encoding(80, 32)
    R = positional_offset_matrix(k, 32)
    lo, hi = max(0, -k), 80 - max(0, k)
    np.testing.assert_allclose(pe[lo:hi] @ R.T, pe[lo + k : hi + k], atol=1e-12)


def test_offset_matrix_is_a_rotation_and_composes_additively():
    R3, R4, R7 = (positional_offset_matrix(k, 16) for k in (3, 4, 7))
    np.testing.assert_allclose(R3 @ R3.T, np.eye(16), atol=1e-15)
    np.testing.assert_allclose(R3 @ R4, R7, atol=1e-14)
    # 2x2 blocks on the diagonal, zeros elsewhere
    blocks = np.kron(np.eye(8), np.ones((2, 2)))
    assert np.all(R3[blocks == 0] == 0)


def test_offset_matrix_does_not_depend_on_position():
    # the same R_k maps pos -> pos + k for every pos: check two far-apart positions
    pe = positional_encoding(1000, 8)
    R = positional_offset_matrix(10, 8)
    np.testing.assert_allclose(R @ pe[2], pe[12], atol=1e-12)
    np.testing.assert_allclose(R @ pe[900], pe[910], atol=1e-12)


def test_adding_positions_breaks_permutation_equivariance_of_attention():
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(16, 4, rng=rng)
    x = rng.standard_normal((6, 16))
    perm = rng.permutation(6)
    out, _ = mha(x)
    out_perm, _ = mha(x[perm])
    np.testing.assert_allclose(out_perm, out[perm], atol=1e-12)  # without positions: equivariant
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
    np.testing.assert_allclose(R @ pe[pos], pe[pos + k], atol=1e-10)


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
