"""sampling.py: choosing the next token (sample_next), greedy, top-k, top-p and temperature.

Sections: values (greedy and top-1 are the arg-max, top-k keeps the k best, the frequencies
follow the tempered softmax, top-p keeps the nucleus worked out by hand, ties at its threshold
included, a tiny temperature is greedy, -inf masks a token, the caller's logits are left
alone), reference (top-p keeps the tokens transformers' TopPLogitsWarper keeps), errors (bad
logits, temperature, top_k or top_p: a clear ValueError or TypeError that names the argument,
never a silent wrong token).
"""

import numpy as np
import pytest

from transformer_np.functional import softmax
from transformer_np.sampling import sample_next, weights

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


def assert_frequencies(picks, expected):
    """The frequencies of ``picks`` are ``expected``: exactly 0 where it is 0, and elsewhere
    within 5 standard errors of a binomial proportion (fails only if the sampler is wrong)."""
    n = len(picks)
    freq = np.bincount(picks, minlength=len(expected)) / n
    np.testing.assert_array_equal(freq == 0, expected == 0)
    assert np.all(np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n)), (
        f"frequencies {freq}, expected {expected}"
    )


# Worked out by hand: the nucleus is the smallest group of most probable tokens whose total
# reaches top_p, renormalised. No top_p sits exactly on a total: there, floating point decides
# (0.25 comes out of the softmax as 0.25000000000000006), in transformers as here. Equal
# probabilities are ordered by index, the lower index as the less probable (transformers'
# rule with a stable sort), so a tie at the threshold is split: the higher index stays.
HALVES = np.log([0.5, 0.25, 0.125, 0.125])
TOP_P_BY_HAND = [
    # (logits, temperature, top_k, top_p, expected distribution)
    (HALVES, 1.0, None, 0.45, [1, 0, 0, 0]),  # 1/2 reaches 0.45 alone
    (HALVES, 1.0, None, 0.6, [2 / 3, 1 / 3, 0, 0]),  # 1/2 + 1/4 = 0.75 >= 0.6
    (HALVES, 1.0, None, 0.74, [2 / 3, 1 / 3, 0, 0]),  # 0.75 >= 0.74, 1/2 alone is not
    (HALVES, 1.0, None, 0.8, [4 / 7, 2 / 7, 0, 1 / 7]),  # the tie split: token 3 stays, 2 not
    (HALVES, 1.0, None, 0.9, [0.5, 0.25, 0.125, 0.125]),  # 0.875 < 0.9: all four
    (HALVES, 1.0, None, 1.0, [0.5, 0.25, 0.125, 0.125]),  # no cut
    # temperature first: at tau = 0.5 the probabilities are squared, 16 : 4 : 1 : 1 over 22,
    # and 20 / 22 = 0.909 already reaches 0.9
    (HALVES, 0.5, None, 0.9, [0.8, 0.2, 0, 0]),
    # top-k first: top_k = 2 leaves 1/2 : 1/4, renormalised 2/3 : 1/3, and 2/3 reaches 0.6
    (HALVES, 1.0, 2, 0.6, [1, 0, 0, 0]),
    # 0.4 + 0.2 + 0.2 = 0.8 reaches 0.7, one of the three tied 0.2 is left out: token 1
    (np.log([0.4, 0.2, 0.2, 0.2]), 1.0, None, 0.7, [0.5, 0, 0.25, 0.25]),
    # -inf is never kept; the tokens in another order, the tie split by index again
    (np.log([0.125, 0.25, 0.125, 0.5]), 1.0, None, 0.8, [0, 2 / 7, 1 / 7, 4 / 7]),
    (np.array([-np.inf, 0.0, 1.0]), 1.0, None, 0.5, [0, 0, 1]),
    (np.array([-np.inf, 0.0, 1.0]), 1.0, None, 0.99, [0, 1 / (1 + np.e), np.e / (1 + np.e)]),
]


@pytest.mark.parametrize(("logits", "temperature", "top_k", "top_p", "expected"), TOP_P_BY_HAND)
def test_top_p_samples_from_the_nucleus_worked_out_by_hand(
    logits, temperature, top_k, top_p, expected
):
    expected = np.array(expected, dtype=float)
    w = weights(logits[None], temperature, top_k, top_p)[0]
    np.testing.assert_array_equal(w == 0, expected == 0)  # the kept set, exactly
    np.testing.assert_allclose(w / w.sum(), expected, rtol=1e-12, atol=0)
    picks = sample_next(
        np.tile(logits, (40000, 1)), temperature=temperature, top_k=top_k, top_p=top_p, rng=0
    )
    assert_frequencies(picks, expected)


def test_top_p_none_and_one_are_no_cut():
    logits = np.random.default_rng(0).standard_normal((50, 9))
    plain = sample_next(logits, temperature=0.8, top_k=5, rng=3)
    for top_p in (None, 1.0, 1):
        np.testing.assert_array_equal(
            sample_next(logits, temperature=0.8, top_k=5, top_p=top_p, rng=3), plain
        )


@pytest.mark.parametrize(
    ("cuts", "named"),
    [({"top_p": 0.01}, "top_p = 0.01"), ({"top_k": 3}, "top_k = 3"),
     ({"top_k": 3, "top_p": 0.5}, "top_k = 3, top_p = 0.5")],
)  # fmt: skip
def test_top_k_and_top_p_at_temperature_0_are_refused_not_ignored(cuts, named):
    # greedy decoding samples nothing, so the cuts would do nothing: said, not ignored
    logits = np.random.default_rng(0).standard_normal((20, 9))
    with pytest.raises(ValueError, match=f"^{named} does nothing at temperature = 0"):
        sample_next(logits, temperature=0, **cuts)
    np.testing.assert_array_equal(sample_next(logits, temperature=0), logits.argmax(-1))


def test_a_small_top_p_is_the_argmax():
    logits = np.random.default_rng(1).standard_normal((30, 50))
    np.testing.assert_array_equal(sample_next(logits, top_p=1e-9, rng=0), logits.argmax(-1))


@pytest.mark.parametrize("top_p", [0.3, 0.9])
def test_top_p_keeps_the_smallest_group_that_reaches_p(top_p):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((200, 30)) * 2
    probs = softmax(logits)
    kept = weights(logits, 1.0, None, top_p) > 0  # (B, V)
    for row, keep in zip(probs, kept, strict=True):
        inside, outside = row[keep], row[~keep]
        assert inside.sum() >= top_p  # it reaches p ...
        assert inside.sum() - inside.min() < top_p  # ... and one token fewer would not
        assert outside.size == 0 or outside.max() <= inside.min()  # the most probable ones


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
# reference: transformers' TopPLogitsWarper
# ============================================================================================


def transformers_kept(logits, temperature, top_k, top_p):
    """The tokens transformers' warpers keep, in its order: temperature, top-k, top-p."""
    torch = pytest.importorskip("torch")
    lp = pytest.importorskip("transformers.generation.logits_process")
    scores = torch.from_numpy(logits)  # float64, as ours
    warpers = [lp.TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        warpers.append(lp.TopKLogitsWarper(top_k))
    warpers.append(lp.TopPLogitsWarper(top_p))
    for warp in warpers:
        scores = warp(None, scores)
    return torch.isfinite(scores).numpy()


@pytest.mark.parametrize(("B", "V"), [(1, 2), (4, 7), (16, 50), (3, 1000)])
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.6, None), (1.7, 5)])
def test_top_p_keeps_the_tokens_transformers_keeps(B, V, top_p, temperature, top_k):
    rng = np.random.default_rng([B, V, int(top_p * 100), int(temperature * 10)])
    logits = rng.standard_normal((B, V)) * 3
    top_k = None if top_k is None else min(top_k, V)
    theirs = transformers_kept(logits, temperature, top_k, top_p)
    mine = weights(logits, temperature, top_k, top_p) > 0
    assert (mine == theirs).all(), (
        f"mine keeps {mine.sum(-1).tolist()} tokens per row, transformers {theirs.sum(-1).tolist()}"
    )


def test_a_tie_at_the_threshold_is_split_as_transformers_splits_it():
    # 0.4, then three tokens of 0.2: top_p = 0.7 keeps two of them (0.8 >= 0.7)
    logits = np.log([[0.2, 0.4, 0.2, 0.2]])
    theirs = transformers_kept(logits, 1.0, None, 0.7)
    mine = weights(logits, 1.0, None, 0.7) > 0
    assert mine.sum() == theirs.sum() == 3 and mine[0, 1] and theirs[0, 1]
    np.testing.assert_array_equal(mine, [[False, True, True, True]])  # the lowest index goes


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
    with pytest.raises(
        TypeError,
        match=r"^sample_next: logits must be a float array of shape \(B, V\), "
        r"got int64 of shape \(1, 2\)$",
    ):
        sample_next(np.array([[1, 2]]))


def test_logits_of_the_wrong_rank():
    with pytest.raises(
        ValueError, match=r"logits must be a float array of shape \(B, V\), .*of shape \(3,\)$"
    ):
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


@pytest.mark.parametrize(
    ("top_p", "error", "match"),
    [
        (0, ValueError, r"top_p must be a number in \(0, 1\], got 0.0"),
        (-0.5, ValueError, r"top_p must be a number in \(0, 1\], got -0.5"),
        (1.5, ValueError, r"top_p must be a number in \(0, 1\], got 1.5"),
        (np.nan, ValueError, r"top_p must be a number in \(0, 1\], got nan"),
        (np.inf, ValueError, r"top_p must be a number in \(0, 1\], got inf"),
        (True, TypeError, r"top_p must be a number in \(0, 1\] or None, got True \(bool\)"),
        ("0.9", TypeError, r"top_p must be a number in \(0, 1\] or None, got '0.9' \(str\)"),
        (np.array([0.9]), TypeError, r"top_p must be a number in \(0, 1\] or None"),
    ],
)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_bad_top_p(top_p, error, match, temperature):
    with pytest.raises(error, match=match):
        sample_next(np.zeros((1, 3)), temperature=temperature, top_p=top_p)


def test_numpy_top_p_is_accepted():
    out = sample_next(np.array([[1.0, 3.0, 2.0]]), top_p=np.float32(0.5), rng=0)
    assert out.tolist() == [1]
