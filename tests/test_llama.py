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
    LlamaBlock,
    LlamaConfig,
    LlamaModel,
    MultiHeadAttention,
    RMSNorm,
    SwiGLU,
    causal_mask,
    generate,
    rope_angles,
    silu,
)

from helpers import (
    FUNCTION_ROUNDINGS,
    abs_product,
    assert_within,
    hf_llama_config,
    hf_llama_in_input_dtype,
    hf_rope_float64,
    load_llama_block,
    load_llama_model,
    rounding_tol,
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


# ------------------------------------------------------------------ tolerances
#
# Two computations of the same blocks (ours twice, or ours and transformers') differ by their
# rounding (helpers.py, "tolerances"): n counts the roundings along one path through a block,
# the length of each sum and each element-wise step, and the blocks add theirs; the magnitude
# is the size of the terms of the output (abs_product of the last products). A first-order
# count: that a layer passes on its input's relative error without amplifying it is assumed
# (the RMSNorms rescale), which the worst case of n roundings, where real rounding gives about
# sqrt(n) of them, covers many times.


def rope_roundings(max_position):
    """RoPE on q or k, when each side computes its own angles: omega = base**(-2i/Dh) (a power,
    two divisions) times the position m is an angle of up to m radians with a relative error
    of FUNCTION_ROUNDINGS + 3 roundings, so an absolute one of m times that (omega <= 1); then
    its cos and sin (FUNCTION_ROUNDINGS) and x cos + rot(x) sin (3)."""
    return (FUNCTION_ROUNDINGS + 3) * max(max_position, 1) + FUNCTION_ROUNDINGS + 3


def llama_block_roundings(d_model, n_heads, d_ff, n_keys, rope):
    """Roundings along one path through a LlamaBlock attending to ``n_keys`` keys; ``rope``
    those of the rotation (:func:`rope_roundings`, or 3 when both sides share the tables)."""
    D, F, Dh, FR = d_model, d_ff, d_model // n_heads, FUNCTION_ROUNDINGS
    rms_norm = D + 6  # the mean of D squares, + eps, sqrt, 1 / rms, the two products
    # q k v (sums of D), RoPE, the scores (Dh, then the scale), the softmax and the weighted sum
    # of the values (exp, two sums of n_keys, the shift and the division: as attention_tol), W_o
    attention = D + rope + (Dh + 1) + (FR + 2 * n_keys + 4) + D
    feed_forward = D + (FR + 3) + F  # gate and up, SiLU z / (1 + exp(-z)) and the product, down
    return 2 * rms_norm + attention + feed_forward + 2  # and the two residual sums


def llama_roundings(config, n_tokens, *, shared_angles=False):
    """Roundings along one path through a LlamaModel on ``n_tokens`` tokens, from the
    embeddings to the logits: the blocks, the final RMSNorm, the product with E^T (D)."""
    rope = 3 if shared_angles else rope_roundings(n_tokens - 1)
    block = llama_block_roundings(config.d_model, config.n_heads, config.d_ff, n_tokens, rope)
    return config.n_layers * block + (config.d_model + 6) + config.d_model


def logits_magnitude(model, ids):
    """The terms of every logit (B, T, V): |h| @ |E|^T, h the final RMSNorm's output."""
    h = model.blocks(model.embed(ids), causal_mask(ids.shape[1]))  # (B, T, D)
    return abs_product(h, model.params["embed.W"].T)


def block_magnitude(block, x, mask):
    """The terms of every output of a LlamaBlock, h + ff(norm2(h)) with h = x + attn(norm1(x)):
    |x| plus those of the two last products, |ctx| @ |W_o| and |silu(g W_gate) g W_up| @ |W_down|
    (ctx the heads' weighted values before W_o, g = norm2(h))."""
    attn, p = block.attn, block.params
    B, T, _ = x.shape
    a = block.norm1(x)
    out, w = attn(a, mask=mask)  # w (B, H, T, T)
    v = (a @ p["attn.W_v"]).reshape(B, T, attn.n_kv_heads, attn.d_head).transpose(0, 2, 1, 3)
    v = np.repeat(v, attn.n_heads // attn.n_kv_heads, axis=1)  # query head h reads h // G
    ctx = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, -1)  # (B, T, H*Dh)
    g = block.norm2(x + out)
    inner = silu(g @ p["ff.W_gate"]) * (g @ p["ff.W_up"])  # (B, T, F)
    return np.abs(x) + abs_product(ctx, p["attn.W_o"]) + abs_product(inner, p["ff.W_down"])


# ============================================================================================
# values
# ============================================================================================


def test_block_is_the_pre_ln_encoder_block_with_new_sublayers(rng):
    block = LlamaBlock(16, 4, 24, n_kv_heads=2, rng=rng)
    assert isinstance(block, EncoderBlock) and block.norm_first
    assert type(block).forward is EncoderBlock.forward  # the block is written once
    assert isinstance(block.attn, MultiHeadAttention)  # grouped-query, rotary, no biases
    assert (block.attn.n_kv_heads, block.attn.rope_base, block.attn.has_bias) == (2, 1e4, False)
    assert isinstance(block.norm1, RMSNorm) and isinstance(block.norm2, RMSNorm)
    assert isinstance(block.ff, SwiGLU)
    x = rng.standard_normal((2, 5, 16))
    h = x + block.attn(block.norm1(x), mask=causal_mask(5))[0]
    # two computations of the block (the same cached cos and sin tables)
    n = 2 * llama_block_roundings(16, 4, 24, n_keys=5, rope=3)
    tol = rounding_tol(np.float64, n, block_magnitude(block, x, causal_mask(5)))
    assert_within(block(x, causal_mask(5)), h + block.ff(block.norm2(h)), tol, "block - formula")


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
    # two computations of the first 6 positions, the masked keys included (same angle tables)
    n = 2 * llama_roundings(model.config, 10, shared_angles=True)
    tol = rounding_tol(np.float64, n, logits_magnitude(model, ids))
    assert_within(model(ids)[:, :6], model(changed)[:, :6], tol[:, :6], "logits, later changed")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_generation_is_the_same_with_and_without_the_cache(rng, temperature):
    model = small_llama(rng)
    prompt = rng.integers(0, 61, (2, 5))
    cut = {"top_k": 20} if temperature else {}  # top_k would do nothing when greedy
    a = generate(model, prompt, 30, temperature=temperature, rng=7, **cut)
    b = generate(model, prompt, 30, temperature=temperature, rng=7, use_cache=False, **cut)
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


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_block_matches_llama_decoder_layer(torch, rng, dtype, monkeypatch):
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
    # ours and transformers', each in dtype; the cos and sin tables are ours on both sides
    cfg = model.config
    n = 2 * llama_block_roundings(cfg.d_model, cfg.n_heads, cfg.d_ff, n_keys=T, rope=3)
    tol = rounding_tol(dtype, n, block_magnitude(block, x, causal_mask(T)))
    assert_within(block(x, causal_mask(T)), expected.detach().numpy(), tol, "ours - transformers")


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
    # ours and transformers' in float64, each with its own angles (hf_rope_float64)
    tol = rounding_tol(
        np.float64, 2 * llama_roundings(model.config, 40), logits_magnitude(model, ids)
    )
    assert_within(model(ids), expected, tol, "logits, ours - transformers")


def test_model_matches_llama_for_causal_lm_in_float32(torch, rng, monkeypatch):
    model = small_llama(rng, dtype="float32")
    ref = hf_model(torch, model, monkeypatch, exact_float64=False)  # stock transformers
    ids = rng.integers(0, 61, (2, 40))
    with torch.no_grad():
        expected = ref(torch.from_numpy(ids)).logits.numpy()
    # ours and transformers' in float32; their angles m * omega are float32 (rope_roundings)
    tol = rounding_tol(
        np.float32, 2 * llama_roundings(model.config, 40), logits_magnitude(model, ids)
    )
    assert_within(model(ids), expected, tol, "logits, ours - transformers")


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
