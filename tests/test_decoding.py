"""Decoding: the key/value cache gives the same tokens as recomputing everything; sampling."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np.decoding import KVCache, _lm_step, generate, sample_next, translate
from transformer_np.functional import softmax
from transformer_np.model import (
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)


def lm(norm_first=True, dtype="float64", **kw):
    cfg = LanguageModelConfig(
        vocab_size=17,
        d_model=16,
        n_heads=4,
        n_layers=2,
        max_len=32,
        norm_first=norm_first,
        dtype=dtype,
        **kw,
    )
    return LanguageModel(cfg, rng=3)


def seq2seq(norm_first=False, dtype="float64"):
    cfg = TransformerConfig(
        src_vocab_size=13,
        tgt_vocab_size=14,
        d_model=16,
        n_heads=4,
        max_len=20,
        norm_first=norm_first,
        dtype=dtype,
    )
    return Transformer(cfg, rng=4)


# --------------------------------------------------------------------------------------------
# cached == uncached


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.7, "top_k": 5}],
)
def test_cached_and_uncached_generation_give_identical_tokens(norm_first, sampling):
    model = lm(norm_first)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    a = generate(model, prompt, 20, rng=11, use_cache=True, **sampling)
    b = generate(model, prompt, 20, rng=11, use_cache=False, **sampling)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 23)
    np.testing.assert_array_equal(a[:, :3], prompt)


@pytest.mark.parametrize("keep", [None, 1, 31])
def test_generation_beyond_max_len_slides_the_window_identically(keep):
    model = lm()  # max_len = 32
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    kw = {"temperature": 1.0, "rng": 2, "keep": keep}
    a = generate(model, prompt, 70, **kw)
    b = generate(model, prompt, 70, use_cache=False, **kw)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 73)


def test_cached_generation_identical_in_float32_too():
    model = lm(dtype="float32")
    prompt = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(
        generate(model, prompt, 16), generate(model, prompt, 16, use_cache=False)
    )


def test_cached_step_logits_equal_full_forward_logits():
    model = lm()
    x = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    full = model(x)
    cache = KVCache(2, 1, 4, 8, 4, np.float64)
    prefill = _lm_step(model, x[:, :3], cache)  # the prompt in one chunk
    steps = [_lm_step(model, x[:, t : t + 1], cache) for t in range(3, 8)]  # then one by one
    np.testing.assert_allclose(np.concatenate([prefill] + steps, axis=1), full, atol=1e-12)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_and_uncached_translation_give_identical_tokens(norm_first):
    model = seq2seq(norm_first)
    src = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]])
    for kw in ({"temperature": 0.0}, {"temperature": 1.0, "top_k": 4}):
        a = translate(model, src, 15, bos_id=1, eos_id=None, rng=5, **kw)
        b = translate(model, src, 15, bos_id=1, eos_id=None, rng=5, use_cache=False, **kw)
        np.testing.assert_array_equal(a, b)
        assert a.shape == (2, 15)


def test_translation_stops_at_eos_and_pads_after_it():
    model = seq2seq()
    src = np.array([[3, 4, 5], [6, 7, 8], [9, 10, 11], [3, 5, 7]])
    model.parameters()["out.b"][2] = 3.0  # make EOS (id 2) likely at every step
    out = translate(model, src, 12, bos_id=1, eos_id=2, rng=0, temperature=1.0)
    ends = [int(np.flatnonzero(row == 2)[0]) for row in out if np.any(row == 2)]
    assert len(ends) == len(src)  # every sequence finished...
    assert out.shape[1] == max(ends) + 1 < 12  # ...and generation stopped with the last one
    assert min(ends) < max(ends)  # they finished at different steps
    for row, end in zip(out, ends, strict=True):
        assert np.all(row[end + 1 :] == 0)  # padding after EOS
        assert np.all(row[:end] != 0)
    model.parameters()["out.b"][2] = 100.0  # EOS at once everywhere: one step only
    out = translate(model, src, 12, bos_id=1, eos_id=2)
    np.testing.assert_array_equal(out, [[2]] * 4)


def test_translation_never_generates_padding():
    model = seq2seq()
    model.parameters()["out.b"][0] = 100.0  # the model "wants" PAD everywhere
    out = translate(model, np.array([[3, 4, 5]]), 8, bos_id=1)
    assert not np.any(out == 0)


# --------------------------------------------------------------------------------------------
# sampling


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


# --------------------------------------------------------------------------------------------
# bad input


def test_bad_generation_arguments_raise_clear_errors():
    model = lm()
    prompt = np.array([[1, 2, 3]])
    with pytest.raises(ValueError, match="longer than the positional table"):
        generate(model, np.ones((1, 33), dtype=int), 3)
    with pytest.raises(ValueError, match=r"keep must be an integer in \[1, max_len = 32\)"):
        generate(model, prompt, 3, keep=32)
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        generate(model, prompt, 3, temperature=-1)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, vocab_size = 17\]"):
        generate(model, prompt, 3, temperature=1.0, top_k=18)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        generate(model, prompt, 0)
    with pytest.raises(ValueError, match=r"token ids in \[0, 17\)"):
        generate(model, np.array([[1, 17]]), 3)
    with pytest.raises(TypeError, match="model must be a LanguageModel"):
        generate(seq2seq(), prompt, 3)
    with pytest.raises(ValueError, match="longer than the positional table"):
        translate(seq2seq(), np.array([[3, 4]]), 21, bos_id=1)
    with pytest.raises(ValueError, match="bos_id must be a token id"):
        translate(seq2seq(), np.array([[3, 4]]), 5, bos_id=14)
