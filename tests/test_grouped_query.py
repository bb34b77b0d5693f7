"""multi_head.py, the grouped-query case: MultiHeadAttention with n_kv_heads < n_heads and
rotary positions (rope_base), as LLaMA's blocks build it.

Sections: values (the same as repeating each key/value head G times, in self-attention with
RoPE and in cross-attention without; multi-head attention when G = 1 at position 0; the cache
gives the same output step by step), backward (finite differences; the gradients of a shared key
and value are the sums over their group), errors, reference (Hugging Face's LlamaAttention in
float64 and float32, and its gradients by PyTorch autograd).
"""

import numpy as np
import pytest
from rounding_llama import gqa_rounded

from transformer_np import (
    KVCache,
    MultiHeadAttention,
    apply_rope,
    causal_mask,
    padding_mask,
    rope_angles,
    softmax,
)
from transformer_np.config import LlamaConfig

from helpers import (
    assert_within,
    gradcheck_layer,
    hf_llama_config,
    hf_llama_in_input_dtype,
    to_torch,
    to_torch64,
)
from rounding import TORCH_EXP_ROUNDINGS, TORCH_SCALE_ROUNDINGS, attention_layer_bound, exact

# Tolerances: attention_layer_bound (rounding.py) of each computation compared (two of
# ours, or ours and Hugging Face's), with the rotation's tables (the same on both sides).


def grouped(d_model, n_heads, n_kv_heads, *, rope_base=10000.0, **kw):
    """Grouped-query attention with RoPE and no biases, as a LlamaBlock builds it."""
    return MultiHeadAttention(
        d_model, n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base, bias=False, **kw
    )


def rope_of(gqa, T):
    """The (cos, sin) tables of positions 0 .. T - 1 of ``gqa``'s heads."""
    return rope_angles(np.arange(T), gqa.d_head, gqa.rope_base)


# ============================================================================================
# values
# ============================================================================================


def repeated_heads_attention(gqa, x, memory=None):
    """The definition written out: every key/value head copied for each query head it serves.

    Causal self-attention with RoPE, or (``memory`` given) cross-attention without rotation.
    """
    B, T, D = x.shape
    H, Hkv, Dh = gqa.n_heads, gqa.n_kv_heads, gqa.d_head
    p, x_kv = gqa.params, x if memory is None else memory
    heads = lambda y, n: y.reshape(B, -1, n, Dh).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = heads(x @ p["W_q"], H), heads(x_kv @ p["W_k"], Hkv), heads(x_kv @ p["W_v"], Hkv)
    if memory is None:
        cos, sin = rope_angles(np.arange(T), Dh, gqa.rope_base)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)  # (B, H, S, Dh)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(Dh)
    if memory is None:
        scores = np.where(causal_mask(T), scores, -np.inf)
    w = softmax(scores, axis=-1)
    return (w @ v).transpose(0, 2, 1, 3).reshape(B, T, D) @ p["W_o"], w


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_equals_keys_and_values_repeated_per_group(rng, n_kv_heads):
    gqa = grouped(32, 4, n_kv_heads, rope_base=1000.0, rng=rng)
    x = rng.standard_normal((2, 7, 32))
    out, w = gqa(x, mask=causal_mask(7))
    out_ref, w_ref = repeated_heads_attention(gqa, x)
    bound = attention_layer_bound(gqa, x, mask=causal_mask(7), rope=rope_of(gqa, 7))  # each side
    assert_within(out, out_ref, 2 * bound["out"], "output vs repeated heads")
    assert_within(w, w_ref, 2 * bound["weights"], "weights vs repeated heads")


def test_without_rotation_the_groups_serve_cross_attention(rng):
    gqa = MultiHeadAttention(32, 4, n_kv_heads=2, bias=False, rng=rng)  # no rope_base
    x, memory = rng.standard_normal((2, 5, 32)), rng.standard_normal((2, 7, 32))
    out, w = gqa(x, memory)
    out_ref, w_ref = repeated_heads_attention(gqa, x, memory)
    bound = attention_layer_bound(gqa, x, memory)  # each side
    assert_within(out, out_ref, 2 * bound["out"], "output vs repeated heads")
    assert_within(w, w_ref, 2 * bound["weights"], "weights vs repeated heads")


def test_one_group_per_head_at_one_position_is_plain_multi_head_attention(rng):
    gqa = grouped(16, 4, 4, rng=rng)
    mha = MultiHeadAttention(16, 4, bias=False, rng=rng)  # no groups, no rotation
    mha.params.update(gqa.params)
    x = rng.standard_normal((3, 1, 16))  # one position: the rotation is the identity
    tol = 2 * attention_layer_bound(mha, x)["out"]  # cos 1, sin 0: the same bound for both
    assert_within(gqa(x)[0], mha(x)[0], tol, "GQA with RoPE vs MHA")


def test_the_cache_gives_the_same_output_step_by_step(rng):
    gqa = grouped(24, 6, 2, rng=rng)
    x = rng.standard_normal((2, 9, 24))
    full, _ = gqa(x, mask=causal_mask(9))
    cache = KVCache(9)
    steps = [gqa(x[:, :4], kv_cache=cache)[0]]  # a prefill of 4, then one token at a time
    steps += [gqa(x[:, t : t + 1], kv_cache=cache)[0] for t in range(4, 9)]
    # each step computes rows of the full computation (on fewer keys): the same bound holds
    bound = attention_layer_bound(gqa, x, mask=causal_mask(9), rope=rope_of(gqa, 9))
    assert_within(np.concatenate(steps, axis=1), full, 2 * bound["out"], "steps vs full")
    assert cache.stored()[0].shape == (2, 2, 9, 4)  # only Hkv = 2 heads are stored


def test_unbatched_input(rng):
    gqa = grouped(16, 4, 2, rng=rng)
    x = rng.standard_normal((5, 16))
    out, w = gqa(x, mask=causal_mask(5))
    # exact: an unbatched input is run as a batch of one, the same steps on the same numbers
    np.testing.assert_array_equal(out, gqa(x[None], mask=causal_mask(5))[0][0])
    assert w.shape == (4, 5, 5)


def test_the_shared_angle_table_equals_rope_angles():
    from transformer_np.multi_head import rope_table

    cos, sin = rope_table(37, 8, 500.0, np.float32)
    assert cos.shape == (64, 8) and not cos.flags.writeable
    ref_cos, ref_sin = rope_angles(np.arange(64), 8, 500.0, dtype=np.float32)
    np.testing.assert_array_equal(cos, ref_cos)
    np.testing.assert_array_equal(sin, ref_sin)
    assert rope_table(40, 8, 500.0, np.float32)[0] is cos  # shared, not computed again


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])  # groups of 4, of 2, none (rotated)
def test_backward_matches_finite_differences(rng, n_kv_heads):
    gqa = grouped(16, 4, n_kv_heads, rope_base=100.0, rng=rng)
    x = rng.standard_normal((2, 5, 16))
    mask = causal_mask(5) & padding_mask([5, 3])
    gradcheck_layer(lambda x: gqa(x, mask=mask)[0], gqa.backward, gqa, [x], rng)


def test_backward_of_grouped_cross_attention_matches_finite_differences(rng):
    gqa = MultiHeadAttention(16, 4, n_kv_heads=2, rng=rng)  # no rotation, with biases
    x, memory = rng.standard_normal((2, 3, 16)), rng.standard_normal((2, 6, 16))
    mask = padding_mask([6, 4])
    gradcheck_layer(lambda a, b: gqa(a, b, mask)[0], gqa.backward, gqa, [x, memory], rng)


def test_unbatched_backward(rng):
    gqa = grouped(16, 4, 2, rng=rng)
    x, g = rng.standard_normal((2, 5, 16))
    gqa(x, mask=causal_mask(5))
    dx = gqa.backward(g)
    gqa(x[None], mask=causal_mask(5))
    # exact: the same steps on the same numbers, as a batch of one
    np.testing.assert_array_equal(dx, gqa.backward(g[None])[0])


def test_shared_key_and_value_gradients_sum_over_their_group(rng):
    # The definition: multi-head attention whose key/value maps repeat each of the Hkv heads
    # G times (head h reads group h // G). Its gradient with respect to the repeated matrices,
    # summed over each group's G copies, is the gradient of the shared ones.
    gqa = grouped(24, 6, 2, rope_base=500.0, rng=rng)
    full = grouped(24, 6, 6, rope_base=500.0, rng=rng)
    Dh, G = 4, 3
    for name in ("W_k", "W_v"):
        heads = gqa.params[name].reshape(24, 2, 1, Dh)
        full.params[name] = np.broadcast_to(heads, (24, 2, G, Dh)).reshape(24, 24).copy()
    full.params["W_q"], full.params["W_o"] = gqa.params["W_q"], gqa.params["W_o"]
    x, g = rng.standard_normal((2, 2, 7, 24))
    mask = causal_mask(7)
    gqa(x, mask=mask)
    full(x, mask=mask)
    dx = gqa.backward(g)
    # both computations are the same layer's (the same bound; the sum over G is counted in it)
    dx_r, grads_r = gqa_rounded(gqa, exact(x), mask)[1](exact(g))
    assert_within(full.backward(g), dx, dx_r.tol(np.float64, sides=2), "dx")
    for name in ("W_k", "W_v"):
        summed = full.grads[name].reshape(24, 2, G, Dh).sum(axis=2).reshape(24, 8)
        tol = grads_r[name].tol(np.float64, sides=2)
        assert_within(gqa.grads[name], summed, tol, f"{name}, summed over the group")


# ============================================================================================
# errors
# ============================================================================================


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads.*n_kv_heads = 3"):
        MultiHeadAttention(32, 4, n_kv_heads=3)


def test_heads_must_have_an_even_size():
    with pytest.raises(ValueError, match="heads of even size"):
        MultiHeadAttention(12, 4, n_kv_heads=2, rope_base=10000.0)  # Dh = 3


def test_cross_attention_with_rotation_is_refused(rng):
    gqa = grouped(16, 4, 2, rng=rng)
    with pytest.raises(ValueError, match="x_kv must be None: with rope_base this layer attends"):
        gqa(np.ones((1, 2, 16)), np.ones((1, 3, 16)))


def test_wrong_width_is_named(rng):
    with pytest.raises(ValueError, match="x_q must have last dimension d_model = 16"):
        grouped(16, 4, 2, rng=rng)(np.ones((1, 2, 8)))


def test_no_backward_after_a_cached_step(rng):
    # generation keeps no attention weights: refused, not a deep error or a wrong gradient
    gqa = grouped(16, 4, 2, rng=rng)
    gqa(rng.standard_normal((1, 2, 16)), kv_cache=KVCache(4))
    with pytest.raises(RuntimeError, match="after a call with a kv_cache"):
        gqa.backward(np.ones((1, 2, 16)))


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_llama_attention(torch, rng, dtype, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaAttention

    hf_llama_in_input_dtype(monkeypatch)  # its softmax would run in float32

    cfg = LlamaConfig(vocab_size=10, d_model=48, n_layers=1, n_heads=6, n_kv_heads=2, d_ff=8)
    tdtype = getattr(torch, np.dtype(dtype).name)
    ref = LlamaAttention(hf_llama_config(cfg), layer_idx=0).to(tdtype)
    gqa = grouped(48, 6, 2, rope_base=cfg.rope_base, rng=rng, dtype=dtype)
    with torch.no_grad():
        for ours, theirs in (("W_q", "q_proj"), ("W_k", "k_proj"), ("W_v", "v_proj")):
            getattr(ref, theirs).weight.copy_(to_torch(gqa.params[ours].T))
        ref.o_proj.weight.copy_(to_torch(gqa.params["W_o"].T))
    T = 11
    x = rng.standard_normal((2, T, 48)).astype(dtype)
    cos, sin = rope_angles(np.arange(T), 8, cfg.rope_base, dtype=dtype)
    additive = to_torch(np.where(causal_mask(T), 0.0, -np.inf).astype(dtype))[None, None]
    out_ref, w_ref = ref(to_torch(x), (to_torch(cos)[None], to_torch(sin)[None]), additive)
    out, w = gqa(x, mask=causal_mask(T))
    # ours and theirs (eager attention: its exp and its scale), on the same rotation tables
    kw = {"mask": causal_mask(T), "rope": (cos, sin)}
    ours = attention_layer_bound(gqa, x, **kw)
    theirs = attention_layer_bound(
        gqa, x, exp_roundings=TORCH_EXP_ROUNDINGS, scale_roundings=TORCH_SCALE_ROUNDINGS, **kw
    )
    out_tol, w_tol = ours["out"] + theirs["out"], ours["weights"] + theirs["weights"]
    assert_within(out, out_ref.detach().numpy(), out_tol, "output vs LlamaAttention")
    assert_within(w, w_ref.detach().numpy(), w_tol, "weights vs LlamaAttention")


def test_gradients_match_llama_attention_autograd(torch, rng, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaAttention

    hf_llama_in_input_dtype(monkeypatch)  # its softmax in float64 too

    cfg = LlamaConfig(vocab_size=10, d_model=48, n_layers=1, n_heads=6, n_kv_heads=2, d_ff=8)
    ref = LlamaAttention(hf_llama_config(cfg), layer_idx=0).to(torch.float64)
    gqa = grouped(48, 6, 2, rope_base=cfg.rope_base, rng=rng)
    with torch.no_grad():
        for name in ("q", "k", "v", "o"):
            getattr(ref, f"{name}_proj").weight.copy_(to_torch(gqa.params[f"W_{name}"].T))
    T = 11
    x, g = rng.standard_normal((2, 2, T, 48))
    mask = causal_mask(T) & padding_mask([T, 8])
    cos, sin = rope_angles(np.arange(T), 8, cfg.rope_base)
    xt = to_torch64(x, requires_grad=True)
    out_ref, _ = ref(xt, (to_torch(cos)[None], to_torch(sin)[None]),
                     to_torch(np.where(mask, 0.0, -np.inf)))  # fmt: skip
    (out_ref * to_torch(g)).sum().backward()
    gqa(x, mask=mask)
    dx = gqa.backward(g)
    # ours and theirs (repeat_kv, then autograd's sums over the copies), on the same tables
    dx_r, grads_r = gqa_rounded(gqa, exact(x), mask)[1](exact(g))
    assert_within(dx, xt.grad.numpy(), dx_r.tol(np.float64, sides=2), "dx")
    for name in ("q", "k", "v", "o"):
        theirs = getattr(ref, f"{name}_proj").weight.grad.numpy().T
        tol = grads_r[f"W_{name}"].tol(np.float64, sides=2)
        assert_within(gqa.grads[f"W_{name}"], theirs, tol, f"W_{name}")
