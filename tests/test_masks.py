"""Tests of the attention masks: causal_mask and padding_mask.

Sections: values (against the definition, entry by entry), errors (messages that name the
argument).
"""

import numpy as np
import pytest

from transformer_np import causal_mask, padding_mask

# ============================================================================================
# values
# ============================================================================================


def test_causal_mask_is_lower_triangular_bool():
    m = causal_mask(4)
    assert m.dtype == bool and m.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert m[i, j] == (j <= i)


def test_causal_mask_of_length_one_allows_the_token_itself():
    np.testing.assert_array_equal(causal_mask(1), [[True]])


@pytest.mark.parametrize(("n", "offset"), [(1, 0), (4, 0), (1, 5), (3, 2), (4, 7)])
def test_causal_mask_with_an_offset_lets_new_queries_see_the_cached_keys(n, offset):
    """n new queries after ``offset`` cached positions: query i is position offset + i."""
    m = causal_mask(n, offset=offset)
    assert m.dtype == bool and m.shape == (n, offset + n)
    for i in range(n):
        for j in range(offset + n):
            assert m[i, j] == (j <= offset + i)
    # the last n rows of the mask of the whole sequence
    np.testing.assert_array_equal(m, causal_mask(offset + n)[offset:])


def test_padding_mask_marks_real_tokens_with_multihead_shape():
    m = padding_mask(np.array([3, 1, 0]), max_len=4)
    assert m.shape == (3, 1, 1, 4) and m.dtype == bool
    np.testing.assert_array_equal(m[:, 0, 0], [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])


def test_padding_mask_default_length_is_the_longest_sequence():
    assert padding_mask([2, 5, 3]).shape == (3, 1, 1, 5)


# ============================================================================================
# errors
# ============================================================================================


def test_masks_reject_booleans_and_a_zero_max_len():
    with pytest.raises(TypeError, match=r"n must be a positive integer, got True \(bool\)"):
        causal_mask(True)
    with pytest.raises(
        TypeError,
        match=r"^padding_mask: lengths must be an integer array of shape \(B,\), "
        r"got bool of shape \(2,\)$",
    ):
        padding_mask([True, False])
    with pytest.raises(ValueError, match="max_len must be a positive integer, got 0"):
        padding_mask([2], max_len=0)


def test_mask_builder_errors():
    with pytest.raises(ValueError, match="n must be a positive integer"):
        causal_mask(0)
    with pytest.raises(TypeError, match="n must be a positive integer"):
        causal_mask(2.5)
    with pytest.raises(ValueError, match=r"lengths must be <= max_len = 3"):
        padding_mask([2, 4], max_len=3)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        padding_mask([2, -1])
    with pytest.raises(TypeError, match=r"lengths must be an integer array .*got float64 of shape"):
        padding_mask([2.0, 1.0])
    with pytest.raises(
        ValueError, match=r"lengths must be an integer array of shape \(B,\), .*\(1, 2\)$"
    ):
        padding_mask([[2, 1]])
    with pytest.raises(ValueError, match="pass max_len"):
        padding_mask([0, 0])


def test_causal_mask_offset_must_be_an_integer_from_zero():
    with pytest.raises(ValueError, match="offset must be an integer >= 0, got -1"):
        causal_mask(3, offset=-1)
    with pytest.raises(TypeError, match=r"offset must be an integer >= 0, got 1.5 \(float\)"):
        causal_mask(3, offset=1.5)
    assert causal_mask(2, offset=np.int64(1)).shape == (2, 3)  # NumPy integers too


@pytest.mark.parametrize("lengths", [[], np.array([], dtype=np.int64), ()])
def test_padding_mask_of_no_sequence_says_so_whatever_the_dtype(lengths):
    # np.asarray([]) is float64: the error is about the missing lengths, not the dtype
    match = r"lengths must be a non-empty 1-D array \(one length per sequence\), got shape \(0,\)"
    with pytest.raises(ValueError, match=match):
        padding_mask(lengths)
