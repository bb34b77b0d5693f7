"""llama.py: the LLaMA block and the decoder-only model with tied embeddings.

Sections: values (the block is the pre-LN encoder block with other sublayers; the logits at
a position depend only on the tokens before it; generation with and without the cache),
errors, reference (Hugging Face's LlamaDecoderLayer and LlamaForCausalLM on random weights,
in float64 and float32; greedy generation).
"""

import numpy as np
import pytest

from transformer_np import (
    EncoderBlock,
    GroupedQueryAttention,
    LlamaBlock,
    LlamaConfig,
    LlamaModel,
    RMSNorm,
    SwiGLU,
    causal_mask,
    generate,
    rope_angles,
)

from helpers import (
    hf_llama_config,
    hf_llama_in_input_dtype,
    hf_rope_float64,
    load_llama_block,
    load_llama_model,
    to_torch,
)

SMALL = dict(vocab_size=61, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=80, max_len=64)


def small_llama(rng, dtype="float64", **changes):
    model = LlamaModel(LlamaConfig(**{**SMALL, "rope_base": 500.0, "dtype": dtype, **changes}),
                       rng=rng)  # fmt: skip
    for name, value in model.params.items():  # gains away from 1, to test that they are used
        if name.endswith("gamma"):
            model.params[name] = (1 + 0.3 * rng.standard_normal(value.shape)).astype(dtype)
    return model


# ============================================================================================
# values
# ============================================================================================


def test_block_is_the_pre_ln_encoder_block_with_new_sublayers(rng):
    block = LlamaBlock(16, 4, 24, n_kv_heads=2, rng=rng)
    assert isinstance(block, EncoderBlock) and block.norm_first
    assert type(block).forward is EncoderBlock.forward  # the block is written once
    assert isinstance(block.attn, GroupedQueryAttention)
    assert isinstance(block.norm1, RMSNorm) and isinstance(block.norm2, RMSNorm)
    assert isinstance(block.ff, SwiGLU)
    x = rng.standard_normal((2, 5, 16))
    h = x + block.attn(block.norm1(x), mask=causal_mask(5))[0]
    np.testing.assert_allclose(block(x, causal_mask(5)), h + block.ff(block.norm2(h)), rtol=1e-13)


def test_parameter_names_and_count(rng):
    model = small_llama(rng)
    names = list(model.params)
    assert names[0] == "embed.W" and names[-1] == "blocks.norm.gamma"
    assert "blocks.0.ff.W_gate" in names and "blocks.2.attn.W_k" in names
    D, F, V, Dkv = 48, 80, 61, 16
    per_block = 2 * D * D + 2 * D * Dkv + 3 * D * F + 2 * D
    assert model.num_parameters() == V * D + 3 * per_block + D  # tied: no output matrix


def test_logits_at_a_position_ignore_later_tokens(rng):
    model = small_llama(rng)
    ids = rng.integers(0, 61, (2, 10))
    changed = ids.copy()
    changed[:, 6:] = (changed[:, 6:] + 1) % 61
    np.testing.assert_allclose(model(ids)[:, :6], model(changed)[:, :6], rtol=1e-12)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_generation_is_the_same_with_and_without_the_cache(rng, temperature):
    model = small_llama(rng)
    prompt = rng.integers(0, 61, (2, 5))
    a = generate(model, prompt, 30, temperature=temperature, top_k=20, rng=7)
    b = generate(model, prompt, 30, temperature=temperature, top_k=20, rng=7, use_cache=False)
    np.testing.assert_array_equal(a, b)


def test_generation_slides_past_the_context(rng):
    model = small_llama(rng, max_len=8)
    prompt = rng.integers(0, 61, (1, 3))
    out = generate(model, prompt, 20)
    np.testing.assert_array_equal(out, generate(model, prompt, 20, use_cache=False))
    assert out.shape == (1, 23)


# ============================================================================================
# errors
# ============================================================================================


def test_ids_out_of_range_are_named(rng):
    with pytest.raises(ValueError, match=r"ids must hold token ids in \[0, 61\), got values"):
        small_llama(rng)(np.array([[1, 61]]))


def test_prompt_longer_than_the_context_is_refused(rng):
    model = small_llama(rng)
    message = r"longer than the context the model was trained for \(max_len = 64\); shorten"
    with pytest.raises(ValueError, match=message):
        model(np.zeros((1, 65), dtype=int))
    with pytest.raises(ValueError, match=message):
        generate(model, np.zeros((1, 65), dtype=int), 2)


def test_empty_prompt_is_refused(rng):
    with pytest.raises(ValueError, match="at least one sequence of one token"):
        generate(small_llama(rng), np.zeros((1, 0), dtype=int), 3)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"n_kv_heads": 4}, "n_kv_heads must divide n_heads"),
        ({"n_heads": 5}, "heads of even size"),
        ({"dtype": "float16"}, 'dtype must be "float32" or "float64"'),
        ({"rope_base": 0.0}, "rope_base must be > 0"),
    ],
)
def test_bad_config_is_named(changes, message):
    with pytest.raises(ValueError, match=message):
        LlamaConfig(**{**SMALL, **changes})


def test_config_must_be_a_llama_config():
    with pytest.raises(TypeError, match="config must be a LlamaConfig, got dict"):
        LlamaModel(SMALL)


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_block_matches_llama_decoder_layer(torch, rng, dtype, tol, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    hf_llama_in_input_dtype(monkeypatch)
    model = small_llama(rng, dtype=np.dtype(dtype).name)
    block = model.blocks.layers[1]
    ref = LlamaDecoderLayer(hf_llama_config(model.config), layer_idx=1)
    ref = ref.to(getattr(torch, np.dtype(dtype).name))
    load_llama_block(ref, block)
    T = 13
    x = rng.standard_normal((2, T, 48)).astype(dtype)
    cos, sin = rope_angles(np.arange(T), 8, 500.0, dtype=dtype)
    mask = to_torch(np.where(causal_mask(T), 0.0, -np.inf).astype(dtype))[None, None]
    expected = ref(to_torch(x), attention_mask=mask,
                   position_embeddings=(to_torch(cos)[None], to_torch(sin)[None]))  # fmt: skip
    expected = expected[0] if isinstance(expected, tuple) else expected
    np.testing.assert_allclose(block(x, causal_mask(T)), expected.detach().numpy(), atol=tol,
                               rtol=0)  # fmt: skip


def hf_model(torch, model, monkeypatch, exact_float64):
    from transformers import LlamaForCausalLM

    if exact_float64:
        hf_llama_in_input_dtype(monkeypatch)
    ref = LlamaForCausalLM(hf_llama_config(model.config)).eval()
    ref = ref.to(getattr(torch, model.config.dtype))
    if exact_float64:
        hf_rope_float64(ref.model.rotary_emb)
    load_llama_model(ref, model)
    return ref


def test_model_matches_llama_for_causal_lm_in_float64(torch, rng, monkeypatch):
    model = small_llama(rng)
    ref = hf_model(torch, model, monkeypatch, exact_float64=True)
    ids = rng.integers(0, 61, (2, 40))
    with torch.no_grad():
        expected = ref(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(model(ids), expected, rtol=0, atol=1e-12)


def test_model_matches_llama_for_causal_lm_in_float32(torch, rng, monkeypatch):
    model = small_llama(rng, dtype="float32")
    ref = hf_model(torch, model, monkeypatch, exact_float64=False)  # stock transformers
    ids = rng.integers(0, 61, (2, 40))
    with torch.no_grad():
        expected = ref(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(model(ids), expected, rtol=0, atol=5e-5)


def test_greedy_tokens_match_transformers_generate(torch, rng, monkeypatch):
    model = small_llama(rng)
    ref = hf_model(torch, model, monkeypatch, exact_float64=True)
    prompt = rng.integers(0, 61, (1, 6))
    with torch.no_grad():
        expected = ref.generate(torch.from_numpy(prompt), max_new_tokens=20, min_new_tokens=20,
                                do_sample=False, pad_token_id=0)  # fmt: skip
    np.testing.assert_array_equal(generate(model, prompt, 20), expected.numpy())


def test_init_false_builds_zero_matrices_and_unit_gains():
    model = LlamaModel(LlamaConfig(**SMALL), init=False)
    for name, value in model.params.items():
        expected = 1.0 if name.endswith("gamma") else 0.0
        assert np.all(value == expected), name
