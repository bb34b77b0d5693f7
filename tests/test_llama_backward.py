"""llama.py, the backward pass: the LLaMA block and LlamaModel with tied embeddings.

Sections: values (the block's backward is the encoder block's; finite differences of the block
and of the whole model; the tied table gets the gradient of both its uses; gradients are
overwritten, not accumulated), errors, reference (PyTorch autograd on transformers'
LlamaDecoderLayer and LlamaForCausalLM, float64, grouped heads, every parameter).
"""

import numpy as np
import pytest
from rounding_llama import llama_block_rounded, llama_model_rounded, rope_roundings

from transformer_np import (
    EncoderBlock,
    LlamaBlock,
    LlamaConfig,
    LlamaModel,
    causal_mask,
    cross_entropy,
    padding_mask,
    rope_angles,
)

from helpers import (
    assert_within,
    gradcheck_layer,
    gradcheck_model,
    hf_llama_config,
    hf_llama_in_input_dtype,
    hf_rope_float64,
    load_llama_block,
    load_llama_model,
    to_torch,
    to_torch64,
)
from rounding import cross_entropy_rounded, exact

# grouped heads (6 query heads, 2 key/value heads: groups of 3), tied embeddings
SMALL = dict(vocab_size=61, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=80, max_len=64)
TINY = dict(vocab_size=13, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, max_len=16)

# The acceptance figure: every gradient within 1e-10 of PyTorch's in float64. The tests
# compare within the bound of the arithmetic (rounding_llama.py, a worst case of about 1e-11 to
# 1e-10 here) and check the figure on the largest difference.
ACCEPTANCE = 1e-10


def llama(rng, sizes=SMALL, **changes):
    """A float64 LlamaModel with gains away from 1 (so that they are used)."""
    fields = {**sizes, "rope_base": 500.0, "dtype": "float64", **changes}
    model = LlamaModel(LlamaConfig(**fields), rng=rng)
    for name, value in model.params.items():
        if name.endswith("gamma"):
            model.params[name] = (1 + 0.3 * rng.standard_normal(value.shape)).astype(value.dtype)
    return model


# ============================================================================================
# values
# ============================================================================================


def test_block_backward_is_the_encoder_blocks(rng):
    block = LlamaBlock(16, 4, 24, n_kv_heads=2, rng=rng)
    assert type(block).backward is EncoderBlock.backward  # written once, for both blocks


def test_block_backward_matches_finite_differences(rng):
    block = LlamaBlock(16, 4, 24, n_kv_heads=2, rope_base=100.0, rng=rng)
    for name in ("norm1.gamma", "norm2.gamma"):
        block.params[name] = 1 + 0.3 * rng.standard_normal(16)
    x = rng.standard_normal((2, 5, 16))
    mask = causal_mask(5) & padding_mask([5, 3])  # (2, 1, 5, 5)
    gradcheck_layer(lambda x: block(x, mask), block.backward, block, [x], rng)


def test_model_backward_matches_finite_differences(rng):
    model = llama(rng, TINY, rope_base=100.0)
    ids, targets = rng.integers(0, 13, (2, 6)), rng.integers(0, 13, (2, 6))
    targets[1, 4:] = -100  # padding: no loss there

    def loss_fn(backward):
        loss, g = cross_entropy(model(ids), targets, ignore_index=-100)
        if backward:
            model.backward(g)
        return loss

    gradcheck_model(model, loss_fn, rng)


def test_tied_table_gets_the_gradient_of_both_uses(rng):
    model = llama(rng, TINY)
    ids = rng.integers(0, 13, (2, 6))
    logits = model(ids)
    g = rng.standard_normal(logits.shape)
    model.backward(g)
    shares = model.embed.grad_shares
    assert set(shares) == {"lookup", "output"}
    # the output's share is g^T h exactly as computed, and rows of absent tokens get only it
    np.testing.assert_array_equal(model.grads["embed.W"], shares["lookup"] + shares["output"])
    absent = np.setdiff1d(np.arange(13), ids)
    assert absent.size and not shares["lookup"][absent].any()
    assert set(model.grads) == set(model.params)


def test_gradients_are_overwritten_not_accumulated(rng):
    model = llama(rng, TINY)
    ids = rng.integers(0, 13, (1, 5))
    g = rng.standard_normal((1, 5, 13))
    model(ids)
    model.backward(g)
    first = {k: v.copy() for k, v in model.grads.items()}
    model(ids)
    model.backward(g)
    for k, v in first.items():
        np.testing.assert_array_equal(model.grads[k], v, err_msg=k)


def test_float32_model_gives_float32_gradients(rng):
    model = llama(rng, TINY, dtype="float32")
    logits = model(rng.integers(0, 13, (2, 4)))
    model.backward(np.ones_like(logits))
    assert all(model.grads[k].dtype == np.float32 for k in model.params)


# ============================================================================================
# errors
# ============================================================================================


def test_backward_before_forward_is_a_clear_error():
    with pytest.raises(RuntimeError, match="LlamaModel.backward was called before a forward"):
        LlamaModel(LlamaConfig(**TINY), rng=0).backward(np.ones((1, 2, 13)))


def test_grad_logits_of_the_wrong_shape_is_named(rng):
    model = llama(rng, TINY)
    model(np.array([[1, 2, 3]]))
    with pytest.raises(ValueError, match=r"grad_logits must have the shape of the last output"):
        model.backward(np.ones((1, 3, 12)))
    with pytest.raises(ValueError, match="grad_logits contains NaN"):
        model.backward(np.full((1, 3, 13), np.nan))


def test_backward_after_a_cached_step_is_refused(rng):
    model = llama(rng, TINY)
    model(np.array([[1, 2, 3]]), kv_cache=model.new_cache(8))
    with pytest.raises(RuntimeError, match="after a call with a kv_cache"):
        model.backward(np.ones((1, 3, 13)))


# ============================================================================================
# reference (PyTorch autograd on transformers' Llama)
# ============================================================================================


OUR_NAMES = {  # ours -> transformers', in a block (weights transposed: x @ W vs x W^T)
    "attn.W_q": "self_attn.q_proj.weight",
    "attn.W_k": "self_attn.k_proj.weight",
    "attn.W_v": "self_attn.v_proj.weight",
    "attn.W_o": "self_attn.o_proj.weight",
    "ff.W_gate": "mlp.gate_proj.weight",
    "ff.W_up": "mlp.up_proj.weight",
    "ff.W_down": "mlp.down_proj.weight",
    "norm1.gamma": "input_layernorm.weight",
    "norm2.gamma": "post_attention_layernorm.weight",
}


def torch_block_grads(hf_layer):
    """The gradients of a transformers LlamaDecoderLayer under a LlamaBlock's names."""
    theirs = dict(hf_layer.named_parameters())
    grads = {}
    for ours, name in OUR_NAMES.items():
        g = theirs[name].grad.numpy()
        grads[ours] = g if ours.endswith("gamma") else g.T
    return grads


def assert_gradient_matches(ours, theirs, tol, what):
    """Within the bound of the arithmetic, and within the acceptance figure."""
    assert_within(ours, theirs, tol, what)
    worst = np.abs(np.asarray(ours) - np.asarray(theirs)).max()
    assert worst <= ACCEPTANCE, f"{what}: |difference| {worst:.1e} above {ACCEPTANCE:.0e}"


def assert_gradients_match(ours, theirs, tols, what):
    """Every gradient of ``ours`` matches ``theirs`` (the same names)."""
    assert set(ours) == set(theirs) == set(tols), what
    for name, tol in tols.items():
        assert_gradient_matches(ours[name], theirs[name], tol, f"{what}: {name}")


def test_block_grads_match_llama_decoder_layer(torch, rng, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    hf_llama_in_input_dtype(monkeypatch)  # float64 throughout (its softmax and norm)
    model = llama(rng)
    block = model.blocks.layers[1]
    ref = LlamaDecoderLayer(hf_llama_config(model.config), layer_idx=1).to(torch.float64)
    load_llama_block(ref, block)
    T = 11
    x, G = rng.standard_normal((2, 2, T, 48))
    mask = causal_mask(T) & padding_mask([T, 7])  # (2, 1, T, T): the second sequence padded
    cos, sin = rope_angles(np.arange(T), 8, 500.0)
    xt = to_torch64(x, requires_grad=True)
    additive = to_torch(np.where(mask, 0.0, -np.inf))
    out = ref(xt, attention_mask=additive, position_embeddings=(to_torch(cos)[None],
              to_torch(sin)[None]))  # fmt: skip
    out = out[0] if isinstance(out, tuple) else out
    (out * to_torch(G)).sum().backward()
    block(x, mask)
    dx = block.backward(G)
    # ours and theirs, on the same rotation tables
    dx_r, grads_r = llama_block_rounded(block, exact(x), mask)[1](exact(G))
    tols = {name: t.tol(np.float64, sides=2) for name, t in grads_r.items()}
    assert_gradient_matches(dx, xt.grad.numpy(), dx_r.tol(np.float64, sides=2), "dx")
    assert_gradients_match(block.grads, torch_block_grads(ref), tols, "LlamaDecoderLayer")


def test_model_grads_match_llama_for_causal_lm(torch, rng, monkeypatch):
    from transformers import LlamaForCausalLM

    hf_llama_in_input_dtype(monkeypatch)
    model = llama(rng)
    ref = LlamaForCausalLM(hf_llama_config(model.config)).to(torch.float64)
    hf_rope_float64(ref.model.rotary_emb)  # its angles in float64 too (its own, not ours)
    load_llama_model(ref, model)
    assert ref.lm_head.weight is ref.model.embed_tokens.weight  # tied on both sides
    T = 20
    ids, targets = rng.integers(0, 61, (2, T)), rng.integers(0, 61, (2, T))
    targets[1, 13:] = -100  # the second sequence is padding after 13 tokens: no loss there
    loss, g = cross_entropy(model(ids), targets, ignore_index=-100)
    model.backward(g)
    logits = ref(torch.from_numpy(ids)).logits
    ref_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, 61), torch.from_numpy(targets).reshape(-1), ignore_index=-100
    )
    ref_loss.backward()
    theirs = {"embed.W": ref.model.embed_tokens.weight.grad.numpy(),
              "blocks.norm.gamma": ref.model.norm.weight.grad.numpy()}  # fmt: skip
    for i, hf_layer in enumerate(ref.model.layers):
        theirs.update({f"blocks.{i}.{k}": v for k, v in torch_block_grads(hf_layer).items()})
    # ours and theirs in float64, each with its own rotation angles
    logits_r, back = llama_model_rounded(model, ids, rope=rope_roundings(T - 1))
    loss_r, g_r = cross_entropy_rounded(logits_r, targets, ignore_index=-100)
    assert abs(loss - ref_loss.item()) <= loss_r.tol(np.float64, sides=2)
    tols = {name: t.tol(np.float64, sides=2) for name, t in back(g_r).items()}
    assert_gradients_match(dict(model.grads), theirs, tols, "LlamaForCausalLM")
