"""beam.py: beam search with the key/value cache, and KVCache.reorder.

Sections: values (num_beams=1 is greedy; the cache and the slow reference give the same
sequences and scores; the GNMT length penalty by hand; KVCache.reorder), errors, reference
(transformers' ``generate(num_beams=...)`` on a tiny LlamaForCausalLM in float64).
"""

import inspect
import itertools
import textwrap

import numpy as np
import pytest

from transformer_np import KVCache, LlamaConfig, LlamaModel, beam_search, generate, translate
from transformer_np.beam import search, translate_beams
from transformer_np.model import LanguageModel, LanguageModelConfig, Transformer, TransformerConfig

from helpers import hf_llama_config, hf_llama_in_input_dtype, hf_rope_float64, load_llama_model

SMALL = dict(vocab_size=61, d_model=48, n_layers=2, n_heads=6, n_kv_heads=2, d_ff=80, max_len=64)


def small_llama(rng, dtype="float64"):
    model = LlamaModel(LlamaConfig(**SMALL, rope_base=500.0, dtype=dtype), rng=rng)
    for name, value in model.params.items():  # gains away from 1, to test that they are used
        if name.endswith("gamma"):
            model.params[name] = (1 + 0.3 * rng.standard_normal(value.shape)).astype(dtype)
    return model


def tiny_lm(rng, vocab_size=6):
    cfg = LanguageModelConfig(vocab_size=vocab_size, d_model=8, n_heads=2, max_len=16)
    return LanguageModel(cfg, rng=rng)


# ============================================================================================
# values
# ============================================================================================


def test_one_beam_is_greedy_decoding(rng):
    model = small_llama(rng)
    prompt = rng.integers(0, 61, (1, 5))
    sequence, _ = beam_search(model, prompt, 12, num_beams=1)
    np.testing.assert_array_equal(sequence, generate(model, prompt, 12))


def test_generate_with_beams_calls_beam_search(rng):
    model = small_llama(rng)
    prompt = rng.integers(0, 61, (1, 5))
    options = dict(num_beams=3, length_penalty=1.0, early_stopping=True, eos_id=7)
    sequence, _ = beam_search(model, prompt, 10, **options)
    np.testing.assert_array_equal(generate(model, prompt, 10, **options), sequence)


@pytest.mark.parametrize("penalty", ["gnmt", "transformers"])
@pytest.mark.parametrize("early_stopping", [False, True, "never"])
def test_cache_and_slow_reference_give_the_same_beams(rng, penalty, early_stopping):
    model = small_llama(rng)
    for _ in range(3):
        prompt = rng.integers(0, 61, (1, int(rng.integers(1, 8))))
        options = dict(num_beams=4, early_stopping=early_stopping, penalty=penalty)
        eos = int(generate(model, prompt, 3)[0, -1])  # a token that comes early
        cached = beam_search(model, prompt, 15, eos_id=eos, **options)
        slow = beam_search(model, prompt, 15, eos_id=eos, use_cache=False, **options)
        np.testing.assert_array_equal(cached[0], slow[0])
        # float64: the two paths sum the same products in other orders (about 1e-14 apart)
        np.testing.assert_allclose(cached[1], slow[1], rtol=0, atol=1e-11)


def test_gnmt_penalty_by_hand():
    # A model whose logits do not depend on the context (all weights zero but the output
    # bias): every step has the log-probabilities log p, so the hypotheses score by hand.
    cfg = LanguageModelConfig(vocab_size=4, d_model=8, n_heads=2, max_len=16, dtype="float64")
    model = LanguageModel(cfg, rng=0)
    for name, value in model.params.items():
        model.params[name] = np.zeros_like(value)
    logp = np.log([0.05, 0.5, 0.4, 0.05])  # token 1 the most probable, 2 the end token
    model.params["out.b"] = logp.copy()
    options = dict(num_beams=2, length_penalty=1.0, eos_id=2)
    # Two steps. Step 1: "1" goes on, "2" ends (score log p2 / lp(1)). Step 2 (the last):
    # "1 1" and "1 2" end, with log p1 + log p1 and log p1 + log p2, divided by lp(2).
    # GNMT: lp(1) = 1, lp(2) = 7/6; "2" (-0.916) beats "1 1" (2 log 0.5 / (7/6) = -1.188).
    sequence, score = beam_search(model, np.array([[0]]), 2, **options)
    assert sequence.tolist() == [[0, 2]]
    assert score[0] == pytest.approx(logp[2] / ((5 + 1) / 6) ** 1.0, abs=1e-12)
    # transformers' n ** alpha: lp(2) = 2, and "1 1" (log 0.5 = -0.693) wins
    sequence, score = beam_search(model, np.array([[0]]), 2, penalty="transformers", **options)
    assert sequence.tolist() == [[0, 1, 1]]
    assert score[0] == pytest.approx(2 * logp[1] / 2**1.0, abs=1e-12)
    # alpha = 0.6, the paper's: "1 1" scores 2 log 0.5 / (7/6) ** 0.6 = -1.263, "2" still wins
    sequence, score = beam_search(model, np.array([[0]]), 2, num_beams=2, eos_id=2)
    assert sequence.tolist() == [[0, 2]] and score[0] == pytest.approx(logp[2], abs=1e-12)


def test_kv_cache_reorder_takes_rows_in_place(rng):
    cache = KVCache(6)
    k, v = rng.standard_normal((2, 3, 2, 4, 5))  # (B, Hkv, n, Dh) each
    cache.append(k, v)
    keys_buffer = cache._keys
    cache.reorder(np.array([2, 2, 0]))
    keys, values = cache.stored()
    np.testing.assert_array_equal(keys, k[[2, 2, 0]])
    np.testing.assert_array_equal(values, v[[2, 2, 0]])
    assert cache._keys is keys_buffer  # the same batch size: the same buffers
    cache.reorder([1])  # another batch size
    np.testing.assert_array_equal(cache.stored()[0], k[[2]])
    assert cache.length == 4
    new_k = rng.standard_normal((1, 2, 1, 5))
    keys, _ = cache.append(new_k, new_k)  # appending goes on after the reorder
    np.testing.assert_array_equal(keys[:, :, 4:], new_k)


# ============================================================================================
# errors
# ============================================================================================


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(num_beams=0), ValueError, "num_beams"),
        (dict(num_beams=2.0), TypeError, "num_beams"),
        (dict(num_beams=4), ValueError, r"num_beams must be at most vocab_size / 2 = 3"),
        (dict(num_beams=2, early_stopping="sometimes"), ValueError, "early_stopping must be"),
        (dict(num_beams=2, penalty="wu"), ValueError, 'penalty must be "gnmt"'),
        (dict(num_beams=2, length_penalty="0.6"), TypeError, "length_penalty must be a number"),
        (dict(num_beams=2, length_penalty=float("nan")), ValueError, "finite"),
        (dict(num_beams=2, eos_id=6), ValueError, r"eos_id must be a token id in \[0, 6\)"),
    ],
)
def test_bad_arguments_are_named(rng, kwargs, error, message):
    with pytest.raises(error, match=message):
        beam_search(tiny_lm(rng), np.array([[1, 2]]), 3, **kwargs)


def test_a_batch_of_prompts_is_refused(rng):
    batch = np.array([[1, 2], [3, 4]])
    expected = r"prompt must be an integer array of shape \(1, T0\), got int64 of shape \(2, 2\)"
    with pytest.raises(ValueError, match=expected):  # beam_search's signature says B = 1
        beam_search(tiny_lm(rng), batch, 3, num_beams=2)
    with pytest.raises(
        ValueError, match=r"beam search takes one prompt .* got 2 \(shape \(2, 2\)\)"
    ):
        generate(tiny_lm(rng), batch, 3, num_beams=2)  # generate's (B, T0): its validator says it


def test_beams_that_would_slide_the_window_are_refused(rng):
    with pytest.raises(ValueError, match="max_new_tokens must be at most 15: beam search does"):
        beam_search(tiny_lm(rng), np.array([[1, 2]]), 16, num_beams=2)


def test_generate_refuses_sampling_arguments_with_beams(rng):
    with pytest.raises(ValueError, match="leave temperature, top_k at the default"):
        generate(tiny_lm(rng), np.array([[1, 2]]), 3, num_beams=2, temperature=1.0, top_k=2)


def test_generate_refuses_an_end_token_without_beams(rng):
    with pytest.raises(ValueError, match="eos_id = 3 is read by beam search only"):
        generate(tiny_lm(rng), np.array([[1, 2]]), 3, eos_id=3)


def test_kv_cache_reorder_rows_are_checked(rng):
    cache = KVCache(4)
    with pytest.raises(RuntimeError, match="empty"):
        cache.reorder([0])
    k = rng.standard_normal((2, 1, 1, 2))
    cache.append(k, k)
    with pytest.raises(ValueError, match=r"rows in \[0, 2\), got 2"):
        cache.reorder([0, 2])
    with pytest.raises(TypeError, match="integer batch rows"):
        cache.reorder([0.0, 1.0])


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


def hf_beam_search_in_float64(monkeypatch):
    """Make transformers' beam search keep its scores in the model's float64.

    ``_beam_search`` converts the logits to float32 and keeps the beam scores in float32
    (whatever the model's dtype), which would limit a comparison to about 1e-7; the search is
    the same. Its source is recompiled with float64 in those three places.
    """
    from transformers.generation import utils

    source = textwrap.dedent(inspect.getsource(utils.GenerationMixin._beam_search))
    changes = [("dtype=torch.float32", "dtype=torch.float64", 1),
               ("dtype=torch.float,", "dtype=torch.float64,", 2)]  # fmt: skip
    for old, new, count in changes:
        assert source.count(old) == count, f"transformers' _beam_search changed: {old!r}"
        source = source.replace(old, new)
    namespace = {}
    exec(compile(source, utils.__file__, "exec"), vars(utils), namespace)  # noqa: S102
    monkeypatch.setattr(utils.GenerationMixin, "_beam_search", namespace["_beam_search"])


def hf_model(torch, model, monkeypatch):
    from transformers import LlamaForCausalLM

    hf_llama_in_input_dtype(monkeypatch)
    hf_beam_search_in_float64(monkeypatch)
    ref = LlamaForCausalLM(hf_llama_config(model.config)).eval().to(torch.float64)
    hf_rope_float64(ref.model.rotary_emb)
    load_llama_model(ref, model)
    return ref


SETTINGS = [
    dict(num_beams=2, length_penalty=1.0, early_stopping=False),
    dict(num_beams=4, length_penalty=0.6, early_stopping=False),
    dict(num_beams=4, length_penalty=2.0, early_stopping=True),
    dict(num_beams=2, length_penalty=0.6, early_stopping=True),
    dict(num_beams=4, length_penalty=1.0, early_stopping="never"),
    dict(num_beams=4, length_penalty=-0.5, early_stopping=False),
    # a long hypothesis beats the finished ones: the stopping rule decides (the 6th prompt)
    dict(num_beams=4, length_penalty=2.0, early_stopping=False),
    dict(num_beams=2, length_penalty=2.0, early_stopping="never"),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s.values())))
def test_beam_search_matches_transformers_generate(torch, rng, monkeypatch, setting):
    model = small_llama(rng)
    ref = hf_model(torch, model, monkeypatch)
    ended, n = 0, 12
    for i in range(6):
        prompt = rng.integers(0, 61, (1, int(rng.integers(1, 8))))
        # the end token: the 4th of the greedy continuation (early), or any token
        eos = int(generate(model, prompt, 4)[0, -1]) if i % 2 else int(rng.integers(0, 61))
        with torch.no_grad():
            expected = ref.generate(torch.from_numpy(prompt), max_new_tokens=n, do_sample=False,
                                    eos_token_id=eos, pad_token_id=eos, output_scores=True,
                                    return_dict_in_generate=True, **setting)  # fmt: skip
        sequence, score = beam_search(model, prompt, n, eos_id=eos, penalty="transformers",
                                      **setting)  # fmt: skip
        np.testing.assert_array_equal(sequence, expected.sequences.numpy())
        # the same search in float64 on both sides; the logits differ by rounding (~1e-14)
        np.testing.assert_allclose(score, expected.sequences_scores.numpy(), rtol=0, atol=1e-9)
        ended += 1 < sequence.shape[1] - prompt.shape[1] < n  # the best ended, not first
    # alpha = 2 favours long hypotheses, which may always win; otherwise the end token is tested
    if setting["length_penalty"] <= 1:
        assert ended > 0, "the best hypothesis never ended with the end token after 2 .. n - 1"


# ============================================================================================
# the search, exhaustively
# ============================================================================================


def test_search_with_every_hypothesis_kept_is_exact():
    # With num_beams large enough that no candidate is ever dropped (3 tokens, at most 4 steps:
    # at most 8 running beams and 24 candidates) and early_stopping="never" (the stopping
    # rule then scores a running beam at its most favourable length), beam search is an
    # exhaustive search: it must find the best of all hypotheses, enumerated here.
    rng = np.random.default_rng(7)
    V, L, eos = 3, 4, 2
    table = {}

    def logits_after(prefix):  # any fixed function of the prefix: a "model"
        return table.setdefault(tuple(prefix), 3 * rng.standard_normal(V))

    def logp(prefix):
        z = logits_after(prefix)
        return z - np.log(np.exp(z).sum())

    def advance(rows, tokens):
        return np.stack([logits_after(t) for t in tokens])

    for alpha, penalty in [(0.6, "gnmt"), (1.0, "transformers"), (2.0, "gnmt"), (0.0, "gnmt")]:
        best = None
        for n in range(1, L + 1):  # every hypothesis: n - 1 tokens, then the end or not
            for body in itertools.product([t for t in range(V) if t != eos], repeat=n - 1):
                for last in range(V) if n == L else [eos]:
                    seq = (*body, last)
                    total = sum(logp(seq[:i])[seq[i]] for i in range(n))
                    lp = ((5 + n) / 6) ** alpha if penalty == "gnmt" else n**alpha
                    if best is None or total / lp > best[0]:
                        best = (total / lp, seq)
        options = dict(length_penalty=alpha, early_stopping="never", eos_id=eos, penalty=penalty)
        sequence, score = search(logits_after(()), advance, L, 32, **options)
        assert tuple(sequence.tolist()) == best[1]
        assert score == pytest.approx(best[0], abs=1e-12)


# ============================================================================================
# translate (the encoder-decoder)
# ============================================================================================


def translator(rng, dtype="float64", norm_first=False):
    sizes = dict(src_vocab_size=13, tgt_vocab_size=13, d_model=16, n_heads=2, d_ff=24)
    cfg = TransformerConfig(**sizes, max_len=12, pad_id=0, norm_first=norm_first, dtype=dtype)
    model = Transformer(cfg, rng=rng)
    for name, value in model.params.items():  # biases and gains away from 0 and 1
        model.params[name] = (value + 0.3 * rng.standard_normal(value.shape)).astype(dtype)
    model.params["out.b"][2] += 3.0  # the end token (2) comes after a few tokens
    return model


SOURCES = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12], [5, 6, 0, 0, 0, 0]])


def test_translate_with_one_beam_is_greedy(rng):
    model = translator(rng)
    greedy = translate(model, SOURCES, 10, bos_id=1, eos_id=2)
    np.testing.assert_array_equal(translate(model, SOURCES, 10, bos_id=1, eos_id=2, num_beams=1),
                                  greedy)  # fmt: skip


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("early_stopping", [False, True, "never"])
def test_translate_beams_with_cache_and_slow_reference_agree(rng, norm_first, early_stopping):
    model = translator(rng, norm_first=norm_first)
    options = dict(bos_id=1, eos_id=2, num_beams=4, length_penalty=0.6)
    cached = translate_beams(model, SOURCES, 10, early_stopping=early_stopping, penalty="gnmt",
                             use_cache=True, **options)  # fmt: skip
    slow = translate_beams(model, SOURCES, 10, early_stopping=early_stopping, penalty="gnmt",
                           use_cache=False, **options)  # fmt: skip
    for (a, score_a), (b, score_b) in zip(cached, slow, strict=True):
        np.testing.assert_array_equal(a, b)
        assert score_a == pytest.approx(score_b, abs=1e-11)
    out = translate(model, SOURCES, 10, early_stopping=early_stopping, **options)
    for row, (tokens, _) in zip(out, cached, strict=True):  # each row's best, then padding
        np.testing.assert_array_equal(row[: len(tokens)], tokens)
        assert (row[len(tokens) :] == 0).all() and (len(tokens) == 10 or tokens[-1] == 2)


def test_translate_beams_never_generate_padding(rng):
    model = translator(rng)
    model.params["out.b"][0] = 30.0  # padding would win every step
    out = translate(model, SOURCES, 6, bos_id=1, num_beams=3)
    assert out.shape == (3, 6) and not (out == 0).any()


def test_translate_refuses_too_many_beams_and_sampling(rng):
    model = translator(rng)
    with pytest.raises(ValueError, match=r"num_beams must be at most 6: .* the 12 tokens"):
        translate(model, SOURCES, 5, bos_id=1, num_beams=7)
    with pytest.raises(ValueError, match="leave temperature, rng at the default"):
        translate(model, SOURCES, 5, bos_id=1, num_beams=2, temperature=1.0, rng=0)
    with pytest.raises(ValueError, match='penalty must be "gnmt"'):
        translate(model, SOURCES, 5, bos_id=1, num_beams=2, penalty="wu")


def test_the_reversal_model_decoded_with_four_beams_reverses(rng):
    from transformer_np.examples.reverse import BOS, EOS, load_trained

    model, _ = load_trained()
    src = np.array([[4, 5, 6, 7, 8, 9, 10, 11, 12, 3], [3, 3, 7, 5, 0, 0, 0, 0, 0, 0]])
    out = translate(model, src, 11, bos_id=BOS, eos_id=EOS, num_beams=4, length_penalty=0.6)
    assert out[0].tolist() == [3, 12, 11, 10, 9, 8, 7, 6, 5, 4, EOS]
    assert out[1].tolist()[:5] == [5, 7, 3, 3, EOS]


# ============================================================================================
# translate against transformers (a MarianMTModel with our Transformer's weights)
# ============================================================================================


def hf_marian(torch, model):
    """A MarianMTModel computing what our post-LN Transformer computes: the sinusoidal table
    (Marian's has sines then cosines, ours interleaved: ours is copied in), the embeddings
    scaled by sqrt(D), separate embeddings and output layer, ReLU."""
    from transformers import MarianConfig, MarianMTModel

    cfg = model.config
    V, F = cfg.tgt_vocab_size, cfg.d_ff
    hc = MarianConfig(
        vocab_size=cfg.src_vocab_size, decoder_vocab_size=V, d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=F, decoder_ffn_dim=F, activation_function="relu",
        max_position_embeddings=cfg.max_len, scale_embedding=True, pad_token_id=cfg.pad_id,
        eos_token_id=2, decoder_start_token_id=1, forced_eos_token_id=None,
        share_encoder_decoder_embeddings=False, tie_word_embeddings=False, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    ref = MarianMTModel(hc).eval().to(torch.float64)
    P = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in model.params.items()}
    pe = torch.from_numpy(np.asarray(model.pe, np.float64))
    m = ref.model

    def copy(dst, src):
        assert dst.shape == src.shape, (dst.shape, src.shape)
        dst.copy_(src)

    def attention(a, name):
        for n, proj in zip("qkvo", (a.q_proj, a.k_proj, a.v_proj, a.out_proj), strict=True):
            copy(proj.weight, P[f"{name}.W_{n}"].T)
            copy(proj.bias, P[f"{name}.b_{n}"])

    def norm(ln, name):
        copy(ln.weight, P[f"{name}.gamma"])
        copy(ln.bias, P[f"{name}.beta"])

    def feed_forward(layer, name):
        for fc, n in ((layer.fc1, "linear1"), (layer.fc2, "linear2")):
            copy(fc.weight, P[f"{name}.{n}.W"].T)
            copy(fc.bias, P[f"{name}.{n}.b"])

    with torch.no_grad():
        copy(m.encoder.embed_tokens.weight, P["src_embed.W"])
        copy(m.decoder.embed_tokens.weight, P["tgt_embed.W"])
        copy(m.encoder.embed_positions.weight, pe)
        copy(m.decoder.embed_positions.weight, pe)
        copy(ref.lm_head.weight, P["out.W"].T)
        copy(ref.final_logits_bias, P["out.b"][None])
        for i, layer in enumerate(m.encoder.layers):
            attention(layer.self_attn, f"encoder.{i}.attn")
            norm(layer.self_attn_layer_norm, f"encoder.{i}.norm1")
            feed_forward(layer, f"encoder.{i}.ff")
            norm(layer.final_layer_norm, f"encoder.{i}.norm2")
        for i, layer in enumerate(m.decoder.layers):
            attention(layer.self_attn, f"decoder.{i}.self_attn")
            norm(layer.self_attn_layer_norm, f"decoder.{i}.norm1")
            attention(layer.encoder_attn, f"decoder.{i}.cross_attn")
            norm(layer.encoder_attn_layer_norm, f"decoder.{i}.norm2")
            feed_forward(layer, f"decoder.{i}.ff")
            norm(layer.final_layer_norm, f"decoder.{i}.norm3")
    return ref


def test_marian_computes_what_our_transformer_computes(torch, rng):
    model = translator(rng)
    ref = hf_marian(torch, model)
    tgt = rng.integers(1, 13, (3, 7))
    with torch.no_grad():
        theirs = ref(input_ids=torch.from_numpy(SOURCES),
                     attention_mask=torch.from_numpy(SOURCES != 0),
                     decoder_input_ids=torch.from_numpy(tgt)).logits.numpy()  # fmt: skip
    # float64 on both sides: the same sums in other orders
    np.testing.assert_allclose(model(SOURCES, tgt), theirs, rtol=0, atol=1e-12)


TRANSLATE_SETTINGS = [
    dict(num_beams=2, length_penalty=1.0, early_stopping=False),
    dict(num_beams=4, length_penalty=0.6, early_stopping=False),
    dict(num_beams=4, length_penalty=2.0, early_stopping=True),
    dict(num_beams=3, length_penalty=0.6, early_stopping=True),
    dict(num_beams=4, length_penalty=1.0, early_stopping="never"),
    dict(num_beams=4, length_penalty=-0.5, early_stopping=False),
    dict(num_beams=5, length_penalty=2.0, early_stopping="never"),
]


@pytest.mark.parametrize(
    "setting", TRANSLATE_SETTINGS, ids=lambda s: "-".join(map(str, s.values()))
)
def test_translate_beams_match_transformers_generate(torch, rng, monkeypatch, setting):
    model = translator(rng)
    ref = hf_marian(torch, model)
    hf_beam_search_in_float64(monkeypatch)
    ended = 0
    for _ in range(4):
        lengths = rng.integers(2, 10, 4)
        src = np.zeros((4, 9), np.int64)  # four sources with padding after them
        for row, n in zip(src, lengths, strict=True):
            row[:n] = rng.integers(3, 13, n)
        n_new = 10
        with torch.no_grad():
            expected = ref.generate(
                input_ids=torch.from_numpy(src), attention_mask=torch.from_numpy(src != 0),
                max_new_tokens=n_new, do_sample=False, eos_token_id=2, pad_token_id=0,
                decoder_start_token_id=1, suppress_tokens=[0], output_scores=True,
                return_dict_in_generate=True, **setting,
            )  # fmt: skip
        best = translate_beams(model, src, n_new, bos_id=1, eos_id=2, penalty="transformers",
                               use_cache=True, **setting)  # fmt: skip
        out = translate(model, src, n_new, bos_id=1, eos_id=2, penalty="transformers", **setting)
        for row, (tokens, _), theirs in zip(out, best, expected.sequences.numpy(), strict=True):
            n = len(tokens)  # theirs: BOS, the hypothesis, then the end token repeated
            np.testing.assert_array_equal(tokens, theirs[1 : 1 + n])
            np.testing.assert_array_equal(row[:n], tokens)
            assert (theirs[1 + n :] == 2).all() and (row[n:] == 0).all()
        scores = np.array([score for _, score in best])
        np.testing.assert_allclose(scores, expected.sequences_scores.numpy(), rtol=0, atol=1e-9)
        ended += sum(1 < len(tokens) < n_new for tokens, _ in best)
    if setting["length_penalty"] < 1:  # (alpha >= 1 may favour the longest hypotheses)
        assert ended > 0, "no best hypothesis ended with the end token after 2 .. n - 1"
