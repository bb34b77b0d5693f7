"""sampling.py: choosing the next token (sample_next), greedy, top-k and temperature sampling.

Sections: values (greedy and top-1 are the arg-max, top-k keeps the k best, the frequencies
follow the tempered softmax, a tiny temperature is greedy, -inf masks a token, the caller's
logits are left alone), errors (bad logits, temperature or top_k: a clear ValueError or
TypeError that names the argument, never a silent wrong token).
"""

import numpy as np
import pytest

from transformer_np.functional import softmax
from transformer_np.sampling import sample_next

# ============================================================================================
# values
# ============================================================================================


def test_greedy_and_top1_are_the_argmax():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 9))
    np.testing.assert_array_equal(sample_next(logits, temperature=0), logits.argmax(-1))
    np.testing.assert_array_equal(sample_next(logits, top_k=1, rng=1), logits.argmax(-1))


def test_top_k_samples_only_among_the_k_best():
    logits = np.tile(np.arange(10.0), (2000, 1)) * 0.1  # nearly uniform
    picks = sample_next(logits, top_k=3, rng=0)
    assert set(np.unique(picks)) == {7, 8, 9}


def test_sampling_frequencies_follow_the_tempered_softmax():
    logits = np.array([1.0, 2.0, 0.0, -1.0])
    n = 40000
    for temperature in (0.5, 1.0, 2.0):
        picks = sample_next(np.tile(logits, (n, 1)), temperature=temperature, rng=0)
        freq = np.bincount(picks, minlength=4) / n
        expected = softmax(logits / temperature)
        # 5 standard errors of a binomial proportion: fails only if the sampler is wrong
        assert np.all(np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n))


@pytest.mark.parametrize("tau", [1e-310, 1e-320, 5e-324, 1e-200])
def test_tiny_temperature_is_greedy(tau):
    logits = np.random.default_rng(0).standard_normal((50, 7))
    greedy = sample_next(logits, temperature=0)
    np.testing.assert_array_equal(sample_next(logits, temperature=tau, rng=0), greedy)
    np.testing.assert_array_equal(sample_next(logits, temperature=tau, top_k=3, rng=0), greedy)
    np.testing.assert_array_equal(
        sample_next(np.array([[1.0, 3.0, 2.0]]), temperature=tau, rng=0), [1]
    )


@pytest.mark.parametrize("temperature", [1e-310, 0.5, 1.0, 1e300])
def test_minus_inf_masks_a_token_without_error(temperature):
    logits = np.tile([-np.inf, 0.0, -np.inf, 0.5, -np.inf], (4000, 1))
    out = sample_next(logits, temperature=temperature, rng=1)
    assert set(np.unique(out)) <= {1, 3}
    out = sample_next(logits, temperature=temperature, top_k=1, rng=1)
    np.testing.assert_array_equal(out, 3)


def test_numpy_scalars_are_accepted():
    logits = np.array([[1.0, 3.0, 2.0]], dtype=np.float32)
    out = sample_next(logits, temperature=np.float32(0.5), top_k=np.int64(1), rng=0)
    assert out.tolist() == [1]


def test_caller_logits_are_not_modified():
    logits = np.array([[1.0, 3.0, -np.inf, 2.0]])
    before = logits.copy()
    sample_next(logits, temperature=0.3, top_k=2, rng=0)
    np.testing.assert_array_equal(logits, before)


# ============================================================================================
# errors
# ============================================================================================


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(
    ("bad", "match"),
    [(np.nan, r"logits contains NaN \(1 of 3 values, first at index \(0, 1\)\)"), (np.inf, "inf")],
)
def test_nan_or_plus_inf_logits_are_rejected(temperature, bad, match):
    logits = np.array([[0.0, bad, 1.0]])
    with pytest.raises(ValueError, match=match):
        sample_next(logits, temperature=temperature, rng=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_row_of_only_minus_inf_is_rejected(temperature):
    logits = np.array([[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf]])
    with pytest.raises(ValueError, match=r"every token is -inf.*1 of 2 rows, first at row 1"):
        sample_next(logits, temperature=temperature, rng=0)


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_empty_vocabulary_axis(temperature):
    with pytest.raises(ValueError, match=r"logits has an empty vocabulary axis: shape \(2, 0\)"):
        sample_next(np.zeros((2, 0)), temperature=temperature)


def test_integer_logits_name_the_dtype():
    with pytest.raises(TypeError, match="logits must be a floating-point array.*got dtype int"):
        sample_next(np.array([[1, 2]]))


def test_logits_of_the_wrong_rank():
    with pytest.raises(ValueError, match=r"logits must be a 2-D array of shape \(B, V\)"):
        sample_next(np.zeros(3))


@pytest.mark.parametrize("temperature", ["1", True, None, np.array([1.0])])
def test_temperature_of_the_wrong_type(temperature):
    with pytest.raises(TypeError, match="temperature must be a number >= 0"):
        sample_next(np.zeros((1, 3)), temperature=temperature)


@pytest.mark.parametrize("temperature", [-1.0, np.nan, np.inf])
def test_temperature_out_of_range(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        sample_next(np.zeros((1, 3)), temperature=temperature)


@pytest.mark.parametrize(
    ("top_k", "error", "match"),
    [
        (0, ValueError, r"top_k must be in \[1, vocab_size = 3\], got 0"),
        (4, ValueError, r"top_k must be in \[1, vocab_size = 3\], got 4"),
        (1.5, TypeError, r"top_k must be a positive integer or None, got 1.5 \(float\)"),
        (True, TypeError, r"top_k must be a positive integer or None, got True \(bool\)"),
        ("2", TypeError, "top_k must be a positive integer or None"),
    ],
)
def test_bad_top_k(top_k, error, match):
    with pytest.raises(error, match=match):
        sample_next(np.zeros((1, 3)), top_k=top_k)
