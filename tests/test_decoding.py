"""decoding.py: generating tokens (generate, stream, translate) with a key/value cache.

Sections: values (the cache gives the same tokens as recomputing everything, the sliding
window, end of sequence, a tiny temperature is greedy, top_p reaches sample_next, the caller's
training mode), errors (bad
arguments: a clear ValueError or TypeError that names the argument, never a silent wrong
token). The choice of each token (sample_next) is tested in test_sampling.py, the cached
forward pass of a model in test_model.py.
"""

import re

import numpy as np
import pytest

from transformer_np import Dropout, softmax
from transformer_np._checks.generation import physical_memory
from transformer_np.decoding import generate, stream, translate

from helpers import assert_within, randomise_biases, small_language_model, small_transformer
from rounding import language_model_rounded, transformer_rounded

PROMPT = np.array([[1, 2], [3, 4]])
SRC = np.array([[3, 4, 5]])


def language_model(norm_first=True, dtype="float64"):
    """A LanguageModel with a vocabulary of 17 tokens and max_len 32, 4 heads, 2 blocks."""
    return small_language_model(
        vocab_size=17,
        n_heads=4,
        n_layers=2,
        max_len=32,
        norm_first=norm_first,
        dtype=dtype,
        rng=3,
    )


def translator(norm_first=False, dtype="float64"):
    """A Transformer with vocabularies of 13 (source) and 14 (target) tokens, max_len 20."""
    return small_transformer(
        src_vocab_size=13,
        tgt_vocab_size=14,
        max_len=20,
        norm_first=norm_first,
        dtype=dtype,
        rng=4,
    )


def short_language_model(max_len=6, dropout=0.1):
    """A float64 LanguageModel with a vocabulary of 10, d_model 8 and a short context."""
    return small_language_model(d_model=8, max_len=max_len, dropout=dropout, dtype="float64")


def small_translator(dropout=0.1):
    """A float64 Transformer with vocabularies of 8 tokens and d_model 8."""
    return small_transformer(
        src_vocab_size=8, tgt_vocab_size=8, d_model=8, n_heads=2, dropout=dropout, dtype="float64"
    )


# ============================================================================================
# values
# ============================================================================================

# ------------------------------------------------------------------ cached == uncached


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 0.0},
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 5},
        {"temperature": 1.2, "top_p": 0.8},
        {"temperature": 0.9, "top_k": 8, "top_p": 0.6},
    ],
)
def test_cached_and_uncached_generation_give_identical_tokens(norm_first, sampling):
    model = language_model(norm_first)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    a = generate(model, prompt, 20, rng=11, use_cache=True, **sampling)
    b = generate(model, prompt, 20, rng=11, use_cache=False, **sampling)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 23)
    np.testing.assert_array_equal(a[:, :3], prompt)


@pytest.mark.parametrize("keep", [None, 1, 31])
def test_generation_beyond_max_len_slides_the_window_identically(keep):
    model = language_model()  # max_len = 32
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    kw = {"temperature": 1.0, "rng": 2, "keep": keep}
    a = generate(model, prompt, 70, **kw)
    b = generate(model, prompt, 70, use_cache=False, **kw)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 73)


def test_cached_generation_identical_in_float32_too():
    model = language_model(dtype="float32")
    prompt = np.array([[1, 2, 3, 4]])
    tokens = generate(model, prompt, 16)
    np.testing.assert_array_equal(tokens, generate(model, prompt, 16, use_cache=False))
    # Each greedy choice wins by more than the rounding tolerance of the two logits it compares
    # (two computations: cached and not), so the tokens cannot depend on the CPU's kernels.
    logits = model(tokens[:, :-1])[:, prompt.shape[1] - 1 :]
    tol = language_model_rounded(model, tokens[:, :-1])[0].tol(np.float32, sides=2)
    tol = tol[:, prompt.shape[1] - 1 :]
    order = np.argsort(logits, axis=-1)[..., -2:]  # the runner-up, the chosen token
    top2, top2_tol = np.take_along_axis(logits, order, -1), np.take_along_axis(tol, order, -1)
    assert np.all(top2[..., 1] - top2[..., 0] > top2_tol.sum(-1))


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_and_uncached_translation_give_identical_tokens(norm_first):
    model = translator(norm_first)
    src = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]])
    for kw in (
        {"temperature": 0.0},
        {"temperature": 1.0, "top_k": 4},
        {"temperature": 1.0, "top_p": 0.7},
    ):
        a = translate(model, src, 15, bos_id=1, eos_id=None, rng=5, **kw)
        b = translate(model, src, 15, bos_id=1, eos_id=None, rng=5, use_cache=False, **kw)
        np.testing.assert_array_equal(a, b)
        assert a.shape == (2, 15)


def test_translation_stops_at_eos_and_pads_after_it():
    model = translator()
    src = np.array([[3, 4, 5], [6, 7, 8], [9, 10, 11], [3, 5, 7]])
    model.params["out.b"][2] = 3.0  # make EOS (id 2) likely at every step
    out = translate(model, src, 12, bos_id=1, eos_id=2, rng=0, temperature=1.0)
    ends = [int(np.flatnonzero(row == 2)[0]) for row in out if np.any(row == 2)]
    assert len(ends) == len(src)  # every sequence finished...
    assert out.shape[1] == max(ends) + 1 < 12  # ...and generation stopped with the last one
    assert min(ends) < max(ends)  # they finished at different steps
    for row, end in zip(out, ends, strict=True):
        assert np.all(row[end + 1 :] == 0)  # padding after EOS
        assert np.all(row[:end] != 0)
    model.params["out.b"][2] = 100.0  # EOS at once everywhere: one step only
    out = translate(model, src, 12, bos_id=1, eos_id=2)
    np.testing.assert_array_equal(out, [[2]] * 4)


def test_translation_never_generates_padding():
    model = translator()
    model.params["out.b"][0] = 100.0  # the model "wants" PAD everywhere
    out = translate(model, np.array([[3, 4, 5]]), 8, bos_id=1)
    assert not np.any(out == 0)


def test_generate_with_max_len_1_works_while_the_window_need_not_slide():
    model = short_language_model(max_len=1)
    for use_cache in (True, False):
        out = generate(model, np.array([[1], [2]]), 1, use_cache=use_cache)
        assert out.shape == (2, 2)


# ------------------------------------------------------------------ sampling inside generate


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_at_tiny_temperature_is_greedy(use_cache):
    model = short_language_model()
    greedy = generate(model, PROMPT, 8, use_cache=use_cache)
    tiny = generate(model, PROMPT, 8, temperature=1e-320, rng=0, use_cache=use_cache)
    np.testing.assert_array_equal(tiny, greedy)


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_tiny_top_p_is_greedy_in_generate_stream_and_translate(use_cache):
    # the nucleus of top_p = 1e-9 is the most probable token alone
    model, hot = short_language_model(), {"temperature": 1.5, "rng": 0, "use_cache": use_cache}
    greedy = generate(model, PROMPT, 8, use_cache=use_cache)
    np.testing.assert_array_equal(generate(model, PROMPT, 8, top_p=1e-9, **hot), greedy)
    steps = list(stream(model, PROMPT, 8, top_p=1e-9, **hot))
    np.testing.assert_array_equal(np.stack(steps, axis=1), greedy[:, 2:])
    tr = translator()
    src = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]])
    greedy = translate(tr, src, 10, bos_id=1, use_cache=use_cache)
    np.testing.assert_array_equal(translate(tr, src, 10, bos_id=1, top_p=1e-9, **hot), greedy)


def mass_before(model, tokens, T0):
    """For each generated token, the probability of the tokens more probable than it: (B, n)."""
    probs = softmax(model(tokens[:, :-1])[:, T0 - 1 :])  # (B, n, V): the step of each new token
    chosen = np.take_along_axis(probs, tokens[:, T0:, None], -1)  # (B, n, 1)
    return np.where(probs > chosen, probs, 0).sum(-1)


def test_generated_tokens_lie_in_the_nucleus():
    model, T0 = language_model().eval(), PROMPT.shape[1]
    out = generate(model, PROMPT, 20, temperature=1.0, top_p=0.5, rng=4)
    assert np.all(mass_before(model, out, T0) < 0.5)  # in the nucleus of top_p = 0.5
    out = generate(model, PROMPT, 20, temperature=1.0, rng=4)  # without top_p: some are not
    assert np.any(mass_before(model, out, T0) >= 0.5)


# ------------------------------------------------------------------ the caller's training mode


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_restores_the_callers_mode(mode, use_cache):
    model = short_language_model()
    model.train(mode)
    generate(model, PROMPT, 3, use_cache=use_cache)
    assert model.training is mode
    assert all(d.training is mode for d in [m for m in model.modules() if isinstance(m, Dropout)])


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize("use_cache", [True, False])
def test_translate_restores_the_callers_mode(mode, use_cache):
    model = small_translator()
    model.train(mode)
    translate(model, SRC, 3, bos_id=1, eos_id=2, use_cache=use_cache)
    assert model.training is mode
    assert all(d.training is mode for d in [m for m in model.modules() if isinstance(m, Dropout)])


# ------------------------------------------------------------------ streaming


@pytest.mark.parametrize(
    "sampling", [{"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 1.0, "top_p": 0.7}]
)
def test_stream_yields_the_tokens_of_generate(sampling):
    lm = small_language_model(max_len=16)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    steps = list(stream(lm, prompt, 20, rng=3, **sampling))
    assert len(steps) == 20 and steps[0].shape == (2,)
    expected = generate(lm, prompt, 20, rng=3, **sampling)[:, 3:]
    np.testing.assert_array_equal(np.stack(steps, axis=1), expected)


def test_stream_stopped_early_restores_the_training_mode():
    lm = small_language_model()
    lm.train()
    for i, _ in enumerate(stream(lm, np.array([[1, 2]]), 50)):
        assert not lm.training  # dropout off while generating
        if i == 2:
            break
    assert lm.training


def test_stream_checks_its_arguments_when_called():
    with pytest.raises(ValueError, match="max_new_tokens"):
        stream(small_language_model(), np.array([[1, 2]]), 0)  # no iteration needed


# ============================================================================================
# errors
# ============================================================================================

# ------------------------------------------------------------------ generate and translate


def test_bad_generation_arguments_raise_clear_errors():
    model = language_model()
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
        generate(translator(), prompt, 3)
    with pytest.raises(ValueError, match="longer than the positional table"):
        translate(translator(), np.array([[3, 4]]), 21, bos_id=1)
    with pytest.raises(ValueError, match="bos_id must be a token id"):
        translate(translator(), np.array([[3, 4]]), 5, bos_id=14)


@pytest.mark.parametrize(
    "bad, got",
    [
        (np.array([[1.0, 2.0]]), "float64 of shape (1, 2)"),
        (np.array([[True, False]]), "bool of shape (1, 2)"),
        (np.array([1, 2]), "int64 of shape (2,)"),
        ([[1, 2], [3]], "list"),
    ],
)
def test_token_ids_are_checked_by_their_annotation(bad, got):
    """The signature's (B, T0) or (B, S) integer array: the message names the argument, the
    expected dtype and shape, and what was received; ``stream`` says it when it is called."""
    calls = {
        "generate": (lambda: generate(language_model(), bad, 3), "prompt", "(B, T0)"),
        "stream": (lambda: stream(language_model(), bad, 3), "prompt", "(B, T0)"),
        "translate": (lambda: translate(translator(), bad, 3, bos_id=1), "src", "(B, S)"),
    }
    for where, (call, name, shape) in calls.items():
        expected = f"{where}: {name} must be an integer array of shape {shape}, got {got}"
        error = TypeError if got == "list" or not got.startswith("int") else ValueError
        with pytest.raises(error, match=re.escape(expected)):
            call()


def test_token_ids_as_lists_or_other_integer_dtypes_give_the_same_tokens():
    model, model_t = language_model(), translator()
    tokens = generate(model, PROMPT, 3)
    translated = translate(model_t, SRC, 3, bos_id=1)
    for ids, src in [
        (PROMPT.tolist(), SRC.tolist()),
        (PROMPT.astype(np.int32), SRC.astype(np.uint8)),
    ]:
        got = generate(model, ids, 3)
        assert got.dtype == np.int64 and np.array_equal(got, tokens)
        assert np.array_equal(np.column_stack([PROMPT, *stream(model, ids, 3)]), tokens)
        assert np.array_equal(translate(model_t, src, 3, bos_id=1), translated)


def test_empty_token_ids_are_refused_by_value():
    with pytest.raises(ValueError, match=r"prompt must hold at least one sequence of one token"):
        generate(language_model(), [[]], 3)  # a (1, 0) integer array: it fits the annotation
    with pytest.raises(ValueError, match=r"src must hold at least one sequence of one token"):
        translate(translator(), np.zeros((0, 3), dtype=int), 3, bos_id=1)


def test_mode_is_restored_when_translate_fails_on_the_source():
    model = small_translator().train()
    with pytest.raises(ValueError, match="src"):
        translate(model, np.array([[3, 99]]), 3, bos_id=1)
    assert model.training is True


def test_generate_with_max_len_1_names_max_len():
    model = short_language_model(max_len=1)
    with pytest.raises(ValueError, match=r"max_len = 1 leaves no room .*max_len >= 2"):
        generate(model, np.array([[1]]), 3)


@pytest.mark.parametrize("use_cache", ["no", 1, None])
def test_use_cache_must_be_a_bool(use_cache):
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        generate(short_language_model(), PROMPT, 2, use_cache=use_cache)
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        translate(small_translator(), SRC, 2, bos_id=1, use_cache=use_cache)


@pytest.mark.parametrize(
    ("name", "value"),
    [("bos_id", v) for v in (None, True, 1.0, "1")] + [("eos_id", v) for v in (True, 1.0, "1")],
)
def test_token_ids_must_be_ints(name, value):
    kw = {"bos_id": 1, name: value}
    with pytest.raises(TypeError, match=rf"{name} must be a token id \(an integer in \[0, 8\)\)"):
        translate(small_translator(), SRC, 3, **kw)


def test_token_ids_out_of_range_and_numpy_ints():
    with pytest.raises(ValueError, match=r"eos_id must be a token id in \[0, 8\), got -1"):
        translate(small_translator(), SRC, 3, bos_id=1, eos_id=-1)
    out = translate(small_translator(), SRC, 3, bos_id=np.int64(1), eos_id=np.int32(2))
    assert out.shape[0] == 1


@pytest.mark.parametrize(("value", "error"), [("3", TypeError), (2.0, TypeError), (0, ValueError)])
def test_max_new_tokens_must_be_a_positive_integer(value, error):
    with pytest.raises(error, match="max_new_tokens must be a positive integer"):
        generate(short_language_model(), PROMPT, value)


@pytest.mark.parametrize(("value", "error"), [(1.5, TypeError), (True, TypeError), (6, ValueError)])
def test_keep_must_be_an_integer_below_max_len(value, error):
    with pytest.raises(error, match=r"keep must be an integer in \[1, max_len = 6\)"):
        generate(short_language_model(), PROMPT, 8, keep=value)


def test_generate_rejects_temperature_and_top_k_like_sample_next():
    with pytest.raises(TypeError, match="temperature must be a number"):
        generate(short_language_model(), PROMPT, 2, temperature="0.5")
    with pytest.raises(TypeError, match="top_k must be a positive integer"):
        translate(small_translator(), SRC, 2, bos_id=1, temperature=1.0, top_k=2.0)


@pytest.mark.parametrize(
    ("top_p", "error", "match"),
    [
        (0.0, ValueError, r"top_p must be a number in \(0, 1\], got 0.0"),
        (1.01, ValueError, r"top_p must be a number in \(0, 1\], got 1.01"),
        ("0.9", TypeError, r"top_p must be a number in \(0, 1\] or None, got '0.9' \(str\)"),
        (False, TypeError, r"top_p must be a number in \(0, 1\] or None, got False \(bool\)"),
    ],
)
def test_generate_stream_and_translate_reject_top_p_like_sample_next(top_p, error, match):
    with pytest.raises(error, match=match):
        generate(short_language_model(), PROMPT, 2, temperature=1.0, top_p=top_p)
    with pytest.raises(error, match=match):
        stream(short_language_model(), PROMPT, 2, temperature=1.0, top_p=top_p)
    with pytest.raises(error, match=match):
        translate(small_translator(), SRC, 2, bos_id=1, temperature=1.0, top_p=top_p)


# ------------------------------------------------------------------ the special tokens of translate


def test_translate_refuses_bos_equal_to_pad():
    # The decoder masks padding as a key: without the cache BOS would be hidden, with it not.
    with pytest.raises(ValueError, match=r"bos_id must differ from pad_id = 0: .*Got bos_id = 0"):
        translate(small_translator(), SRC, 3, bos_id=0)
    model = small_transformer(src_vocab_size=8, tgt_vocab_size=8, pad_id=None)
    assert translate(model, SRC, 3, bos_id=0, eos_id=0).shape[0] == 1  # no padding: any id


def test_translate_refuses_eos_equal_to_pad():
    # Padding is never generated: an EOS that is padding would never end a sequence.
    with pytest.raises(ValueError, match=r"eos_id must differ from pad_id = 0: .*Got eos_id = 0"):
        translate(small_translator(), SRC, 3, bos_id=1, eos_id=0)


def test_translate_refuses_a_target_vocabulary_of_padding_only():
    model = small_transformer(src_vocab_size=8, tgt_vocab_size=1)  # pad_id = 0
    message = r"target vocabulary holds only the padding token \(tgt_vocab_size = 1, pad_id = 0\)"
    with pytest.raises(ValueError, match=message):
        translate(model, SRC, 3, bos_id=0)


# ------------------------------------------------------------------ sizes, seeds, parameters


@pytest.mark.skipif(physical_memory() is None, reason="the system does not give its memory size")
def test_generate_refuses_more_tokens_than_memory_holds_and_stream_keeps_none():
    n = 10**15  # 8 PB of int64 tokens
    message = rf"max_new_tokens must be at most \d+: generate returns .*Got max_new_tokens = {n}"
    with pytest.raises(ValueError, match=message):
        generate(short_language_model(), PROMPT, n)
    steps = stream(short_language_model(), PROMPT, n)  # only the window (max_len = 6) is kept
    tokens = np.stack([next(steps) for _ in range(10)], axis=1)  # the window slides
    np.testing.assert_array_equal(tokens, generate(short_language_model(), PROMPT, 10)[:, 2:])


def test_negative_seed_names_rng():
    with pytest.raises(ValueError, match=r"rng .*got -1"):
        generate(short_language_model(), PROMPT, 2, temperature=1.0, rng=-1)


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_nan_parameter_is_named_not_sampled(use_cache):
    lm = short_language_model()
    lm.params["out.b"][3] = np.nan
    with pytest.raises(ValueError, match=re.escape("LanguageModel.params['out.b'] contains NaN")):
        generate(lm, PROMPT, 2, use_cache=use_cache)
    model = small_translator()
    name = next(k for k in model.params if k.startswith("encoder."))
    model.params[name].flat[0] = np.nan
    with pytest.raises(ValueError, match=re.escape(f"Transformer.params[{name!r}] contains NaN")):
        translate(model, SRC, 3, bos_id=1, use_cache=use_cache)


# ------------------------------------------------ the one-token step (the layers' decode_step)


def steps_of_both(model, ids, fast, plain, context=()):
    """Feed ``ids`` (B, T) one token at a time to the fast and the plain forward, each with
    its own cache; return both lists of logits (B, V) and both caches."""
    cache_len = ids.shape[1]
    caches = [model.new_cache(cache_len, *(c.shape[1] for c in context[:1])) for _ in range(2)]
    out = ([], [])
    for t in range(ids.shape[1]):
        for side, forward in enumerate((fast, plain)):
            logits = forward(ids[:, t : t + 1], *context, kv_cache=caches[side])
            out[side].append(logits[:, -1])
    return out, caches


def flat(cache):
    return [c for pair in cache for c in (pair if isinstance(pair, tuple) else (pair,))]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
def test_fast_token_step_of_a_language_model_equals_its_forward(dtype, norm_first, batch):
    model = language_model(norm_first, dtype)
    randomise_biases(model.params, np.random.default_rng(0))
    ids = np.random.default_rng(1).integers(0, 17, (batch, 12))
    fast = model.one_token_forward()
    assert fast is not model.forward  # the layers' steps, not the forward
    (got, want), (c_fast, c_plain) = steps_of_both(model, ids, fast, model.forward)
    # the logits of all 12 positions, as the uncached model computes them once: the bound
    tol = language_model_rounded(model, ids)[0].tol(dtype, sides=2)  # (B, T, V)
    for t in range(ids.shape[1]):
        assert_within(got[t], want[t], tol[:, t], f"logits at position {t}")
    for a, b in zip(flat(c_fast), flat(c_plain), strict=True):
        assert a.length == b.length == 12
        np.testing.assert_allclose(a.stored()[0], b.stored()[0], rtol=0, atol=tol.max())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_fast_token_step_of_a_transformer_equals_its_decoder(dtype, norm_first):
    model = translator(norm_first, dtype)
    randomise_biases(model.params, np.random.default_rng(0))
    src = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12], [5, 0, 0, 0, 0, 0]])  # padding
    tgt = np.random.default_rng(1).integers(1, 14, (3, 9))
    memory = model.forward_encoder(src)
    tol = transformer_rounded(model, src, tgt)[0].tol(dtype, sides=2)  # (B, T, V)
    fast_memory = model.source_forward()(src)
    assert_within(fast_memory, memory, tol.max(), "memory")  # far below the logits' bound
    fast = model.one_token_forward()
    assert fast is not model.forward_decoder
    context = (memory, model.source_mask(src))
    # the first step fills the cross-attention's cache from the memory: the fast path too
    (got, want), (c_fast, c_plain) = steps_of_both(model, tgt, fast, model.forward_decoder, context)
    for t in range(tgt.shape[1]):
        assert_within(got[t], want[t], tol[:, t], f"logits at position {t}")
    for a, b in zip(flat(c_fast), flat(c_plain), strict=True):
        assert a.length == b.length
        np.testing.assert_allclose(a.stored()[1], b.stored()[1], rtol=0, atol=tol.max())


def test_every_layer_steps_by_its_own_step_or_by_its_forward():
    from transformer_np import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=11, d_model=8, n_heads=2, n_kv_heads=1, n_layers=1, d_ff=16)
    llama = LlamaModel(cfg)
    assert llama.one_token_forward() == llama.forward  # a LlamaModel steps by its forward
    model = language_model()
    model.train()
    assert model.one_token_forward() == model.forward  # dropout: only the forward has it
    model.eval()
    model.blocks.layers[1].ff = Dropout(0.0)  # a sublayer with no step of its own: its forward
    fast = model.one_token_forward()
    assert fast != model.forward
    ids = np.random.default_rng(1).integers(0, 17, (2, 5))
    tol = language_model_rounded(language_model(), ids)[0].tol("float64", sides=2).max()
    (got, want), _ = steps_of_both(model, ids, fast, model.forward)
    for a, b in zip(got, want, strict=True):
        assert_within(a, b, 10 * tol, "logits")  # (the bound of the model before the change)
    tr = translator()
    assert tr.source_forward() != tr.forward_encoder
    assert tr.one_token_forward() != tr.forward_decoder


def test_a_source_of_padding_only_takes_the_plain_path():
    model = translator()
    src = np.array([[0, 0, 0], [3, 4, 0]])  # the first row is padding only: attends to nothing
    memory = model.forward_encoder(src)
    np.testing.assert_array_equal(model.source_forward()(src), memory)
    context = (memory, model.source_mask(src))
    (got, want), _ = steps_of_both(model, np.array([[1, 5], [1, 6]]), model.one_token_forward(),
                                   model.forward_decoder, context)  # fmt: skip
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_row_too_large_to_normalise_is_reported_as_by_the_plain_path():
    model = language_model(dtype="float32")
    row = model.params["embed.W"][5]
    row[:] = 1e19 * (-1) ** np.arange(row.size)  # squared, it overflows float32
    cache = model.new_cache(8)
    fast = model.one_token_forward()
    fast(np.array([[1, 2]]), kv_cache=cache)
    with pytest.raises(ValueError, match="too large to normalise"):
        fast(np.array([[5]]), kv_cache=cache)
    assert [c.length for c in cache] == [2, 2]  # the fast step's keys and values taken back
    with pytest.raises(ValueError, match="too large to normalise"):
        generate(model, np.array([[1, 2, 5]]), 4)  # in the prompt: the plain path says it
