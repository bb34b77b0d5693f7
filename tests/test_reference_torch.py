"""Reference tests: the package against PyTorch (torch==2.13.0, CPU) on the same inputs and weights.

Tolerance: max abs difference <= 1e-5 in float32 and <= 1e-12 in float64. On failure the
assertion prints our value and PyTorch's at the worst position.
"""

import numpy as np
import pytest
import torch

from transformer_np import (
    EncoderBlock,
    LayerNorm,
    MultiHeadAttention,
    causal_mask,
    erf,
    gelu,
    layer_norm,
    padding_mask,
    scaled_dot_product_attention,
)
from transformer_np.attention import _scores_are_bounded

TOL = {np.float32: 1e-5, np.float64: 1e-12}
TORCH_DTYPE = {np.float32: torch.float32, np.float64: torch.float64}
DTYPES = [np.float32, np.float64]


def assert_close(mine, theirs, dtype, what):
    mine = np.asarray(mine, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    assert mine.shape == theirs.shape, f"{what}: shape {mine.shape} vs torch {theirs.shape}"
    diff = np.abs(mine - theirs)
    worst = np.unravel_index(np.argmax(diff), diff.shape) if diff.size else ()
    msg = (
        f"{what} ({np.dtype(dtype).name}): max abs diff {diff.max():.3e} > {TOL[dtype]:.0e} "
        f"at {worst}: mine {mine[worst]!r} vs torch {theirs[worst]!r}"
    )
    print(f"{what}: max abs diff {diff.max():.3e}")
    assert diff.max() <= TOL[dtype], msg


def t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


# ------------------------------------------------------------------ element-wise


@pytest.mark.parametrize("dtype", DTYPES)
def test_erf_matches_torch_special_erf(dtype):
    x = np.linspace(-6, 6, 20001).astype(dtype)
    ref = torch.special.erf(t(x)).numpy()
    # float32: ours is correctly rounded (computed in float64); torch's within 1-2 ulp
    tol = 2.5e-7 if dtype == np.float32 else 1e-15
    diff = np.abs(erf(x).astype(np.float64) - ref)
    print("max abs diff", diff.max())
    assert diff.max() <= tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(dtype, approximate):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-10, 10, 4001), rng.standard_normal(200_000) * 3])
    x = x.astype(dtype)
    ref = torch.nn.functional.gelu(t(x), approximate=approximate).numpy()
    # float32: torch's own exact kernel is off by up to ~5e-7 absolute near |x| = 4
    assert_close(gelu(x, approximate=approximate), ref, dtype, f"gelu({approximate})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [1e-5, 1e-12])
def test_layer_norm_matches_torch_layernorm(dtype, eps):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 7, 32)) * 2 + 0.5).astype(dtype)
    ln = LayerNorm(32, eps=eps, dtype=dtype)
    ln.params["gamma"] = rng.standard_normal(32).astype(dtype)
    ln.params["beta"] = rng.standard_normal(32).astype(dtype)
    ref_ln = torch.nn.LayerNorm(32, eps=eps, dtype=TORCH_DTYPE[dtype])
    with torch.no_grad():
        ref_ln.weight.copy_(t(ln.params["gamma"]))
        ref_ln.bias.copy_(t(ln.params["beta"]))
        ref = ref_ln(t(x)).numpy()
    assert_close(ln(x), ref, dtype, "LayerNorm")
    assert_close(
        layer_norm(x, ln.params["gamma"], ln.params["beta"], eps), ref, dtype, "layer_norm"
    )


# ------------------------------------------------------------------ scaled dot-product attention


def _sdpa_inputs(dtype, lead=(2, 3), n_q=6, n_k=9, d=8, d_v=5, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(lead + (n_q, d)).astype(dtype)
    k = rng.standard_normal(lead + (n_k, d)).astype(dtype)
    v = rng.standard_normal(lead + (n_k, d_v)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", [(), (4,), (2, 3)])
def test_sdpa_without_mask_matches_torch(dtype, lead):
    q, k, v = _sdpa_inputs(dtype, lead)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v)).numpy()
    assert out.dtype == dtype and w.dtype == dtype
    assert_close(out, ref, dtype, "sdpa output")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_with_boolean_mask_matches_torch(dtype):
    q, k, v = _sdpa_inputs(dtype)
    rng = np.random.default_rng(1)
    mask = rng.random((2, 1, 6, 9)) < 0.5  # broadcast over heads
    mask[..., 0] = True  # no fully blocked row (torch returns NaN there)
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = torch.nn.functional.scaled_dot_product_attention(
        t(q), t(k), t(v), attn_mask=t(mask)
    ).numpy()
    assert_close(out, ref, dtype, "sdpa output, bool mask")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_with_causal_mask_matches_torch_is_causal(dtype):
    q, k, v = _sdpa_inputs(dtype, n_q=7, n_k=7)
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(7))
    ref = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True)
    assert_close(out, ref.numpy(), dtype, "sdpa output, causal")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_with_additive_float_mask_matches_torch(dtype):
    q, k, v = _sdpa_inputs(dtype)
    rng = np.random.default_rng(2)
    bias = rng.standard_normal((6, 9)).astype(dtype)
    bias[rng.random((6, 9)) < 0.3] = -np.inf
    bias[:, 0] = 0.0
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    ref = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(bias))
    assert_close(out, ref.numpy(), dtype, "sdpa output, additive mask")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_weights_match_softmax_of_torch_scores(dtype):
    q, k, v = _sdpa_inputs(dtype)
    mask = causal_mask(9)[:6]
    _, w = scaled_dot_product_attention(q, k, v, mask=mask)
    scores = t(q) @ t(k).transpose(-1, -2) / np.sqrt(8)
    scores = scores.masked_fill(~t(mask), float("-inf"))
    assert_close(w, torch.softmax(scores, dim=-1).numpy(), dtype, "sdpa weights")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_sdpa_fast_path_matches_torch(dtype, need_weights):
    # 2 x 4 x 512 x 640 scores (several MiB): the blocked path on both cores, which skips the row
    # maximum when the scores are provably small (they are, here) and, without the weights,
    # divides the output instead of the weights
    q, k, v = _sdpa_inputs(dtype, lead=(2, 4), n_q=512, n_k=640, d=32, d_v=24, seed=3)
    assert _scores_are_bounded(q, k, v, None)
    mask = np.tril(np.ones((512, 640), bool), k=128)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=need_weights)
    ref = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask))
    assert_close(out, ref.numpy(), dtype, f"sdpa output, fast path, need_weights={need_weights}")
    assert (w is None) == (not need_weights)


# ------------------------------------------------------------------ multi-head attention


def _torch_mha_from(mha, dtype):
    """torch.nn.MultiheadAttention with our weights: torch applies x @ W.T with W (3D, D)."""
    D = mha.d_model
    ref = torch.nn.MultiheadAttention(
        D, mha.n_heads, bias=True, batch_first=True, dtype=TORCH_DTYPE[dtype]
    )
    p = mha.params
    with torch.no_grad():
        ref.in_proj_weight.copy_(t(np.concatenate([p["W_q"].T, p["W_k"].T, p["W_v"].T])))
        ref.in_proj_bias.copy_(t(np.concatenate([p["b_q"], p["b_k"], p["b_v"]])))
        ref.out_proj.weight.copy_(t(p["W_o"].T))
        ref.out_proj.bias.copy_(t(p["b_o"]))
    return ref.eval()


def _mha_pair(dtype, d_model=24, n_heads=4, seed=0):
    rng = np.random.default_rng(seed)
    mha = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
    for name in ("b_q", "b_k", "b_v", "b_o"):  # nonzero biases, so they are checked too
        mha.params[name] = (rng.standard_normal(d_model) * 0.1).astype(dtype)
    return mha, _torch_mha_from(mha, dtype), rng


def _run_torch_mha(ref, x_q, x_kv, **kw):
    with torch.no_grad():
        out, w = ref(t(x_q), t(x_kv), t(x_kv), need_weights=True, average_attn_weights=False, **kw)
    return out.numpy(), w.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_self_attention_matches_torch(dtype):
    mha, ref, rng = _mha_pair(dtype)
    x = rng.standard_normal((3, 5, 24)).astype(dtype)
    out, w = mha(x)
    ref_out, ref_w = _run_torch_mha(ref, x, x)
    assert_close(out, ref_out, dtype, "MHA self output")
    assert_close(w, ref_w, dtype, "MHA self weights")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_cross_attention_with_key_padding_mask_matches_torch(dtype):
    mha, ref, rng = _mha_pair(dtype, seed=1)
    x_q = rng.standard_normal((3, 4, 24)).astype(dtype)
    x_kv = rng.standard_normal((3, 7, 24)).astype(dtype)
    lengths = np.array([7, 3, 5])
    out, w = mha(x_q, x_kv, mask=padding_mask(lengths))
    key_padding_mask = np.arange(7) >= lengths[:, None]  # torch: True = ignore this key
    ref_out, ref_w = _run_torch_mha(ref, x_q, x_kv, key_padding_mask=t(key_padding_mask))
    assert_close(out, ref_out, dtype, "MHA cross output, key padding")
    assert_close(w, ref_w, dtype, "MHA cross weights, key padding")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_with_causal_attn_mask_and_padding_matches_torch(dtype):
    mha, ref, rng = _mha_pair(dtype, seed=2)
    x = rng.standard_normal((2, 6, 24)).astype(dtype)
    lengths = np.array([6, 4])
    mask = causal_mask(6) & padding_mask(lengths)  # (T, T) & (B, 1, 1, T) -> (B, 1, T, T)
    out, w = mha(x, mask=mask)
    ref_out, ref_w = _run_torch_mha(
        ref,
        x,
        x,
        attn_mask=t(~causal_mask(6)),  # torch: True = not allowed
        key_padding_mask=t(np.arange(6) >= lengths[:, None]),
    )
    assert_close(out, ref_out, dtype, "MHA output, causal + padding")
    assert_close(w, ref_w, dtype, "MHA weights, causal + padding")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_with_additive_bias_matches_torch_float_attn_mask(dtype):
    mha, ref, rng = _mha_pair(dtype, seed=3)
    x = rng.standard_normal((2, 5, 24)).astype(dtype)
    bias = rng.standard_normal((5, 5)).astype(dtype)
    out, w = mha(x, bias=bias)
    ref_out, ref_w = _run_torch_mha(ref, x, x, attn_mask=t(bias))
    assert_close(out, ref_out, dtype, "MHA output, float attn_mask")
    assert_close(w, ref_w, dtype, "MHA weights, float attn_mask")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_unbatched_input_matches_torch(dtype):
    mha, ref, rng = _mha_pair(dtype, seed=4)
    x = rng.standard_normal((5, 24)).astype(dtype)
    out, w = mha(x)
    ref_out, ref_w = _run_torch_mha(ref, x, x)
    assert_close(out, ref_out, dtype, "MHA unbatched output")
    assert_close(w, ref_w, dtype, "MHA unbatched weights")


# ------------------------------------------------------------------ encoder block


def _torch_encoder_layer_from(block, dtype):
    D = block.d_model
    ref = torch.nn.TransformerEncoderLayer(
        D,
        block.n_heads,
        dim_feedforward=block.d_ff,
        dropout=0.0,
        activation=block.ff.activation,
        layer_norm_eps=block.norm1.eps,
        batch_first=True,
        norm_first=block.norm_first,
        dtype=TORCH_DTYPE[dtype],
    )
    p = block.params
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(
            t(np.concatenate([p["attn.W_q"].T, p["attn.W_k"].T, p["attn.W_v"].T]))
        )
        ref.self_attn.in_proj_bias.copy_(
            t(np.concatenate([p["attn.b_q"], p["attn.b_k"], p["attn.b_v"]]))
        )
        ref.self_attn.out_proj.weight.copy_(t(p["attn.W_o"].T))
        ref.self_attn.out_proj.bias.copy_(t(p["attn.b_o"]))
        ref.linear1.weight.copy_(t(p["ff.linear1.W"].T))
        ref.linear1.bias.copy_(t(p["ff.linear1.b"]))
        ref.linear2.weight.copy_(t(p["ff.linear2.W"].T))
        ref.linear2.bias.copy_(t(p["ff.linear2.b"]))
        for i in (1, 2):
            getattr(ref, f"norm{i}").weight.copy_(t(p[f"norm{i}.gamma"]))
            getattr(ref, f"norm{i}").bias.copy_(t(p[f"norm{i}.beta"]))
    # training mode with dropout 0 is the plain computation (eval mode may take a fused
    # "fast path" whose numerics differ slightly)
    return ref.train()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_matches_torch_transformer_encoder_layer(dtype, norm_first, activation):
    rng = np.random.default_rng(10)
    block = EncoderBlock(
        32, 4, 64, norm_first=norm_first, activation=activation, rng=rng, dtype=dtype
    )
    for name in block.params:  # non-trivial LayerNorm and bias values
        if name.endswith(("gamma", "beta")) or ".b" in name:
            shape = block.params[name].shape
            base = 1.0 if name.endswith("gamma") else 0.0
            block.params[name] = (base + 0.1 * rng.standard_normal(shape)).astype(dtype)
    ref = _torch_encoder_layer_from(block, dtype)
    x = rng.standard_normal((3, 6, 32)).astype(dtype)
    lengths = np.array([6, 2, 4])
    y = block(x, mask=padding_mask(lengths))
    assert y.dtype == dtype
    with torch.no_grad():
        ref_y = ref(t(x), src_key_padding_mask=t(np.arange(6) >= lengths[:, None])).numpy()
    assert_close(y, ref_y, dtype, f"EncoderBlock({norm_first=}, {activation})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_encoder_block_with_causal_mask_matches_torch(dtype):
    rng = np.random.default_rng(11)
    block = EncoderBlock(16, 2, 32, rng=rng, dtype=dtype, eps=1e-12, activation="gelu")
    ref = _torch_encoder_layer_from(block, dtype)
    x = rng.standard_normal((2, 5, 16)).astype(dtype)
    y = block(x, mask=causal_mask(5))
    with torch.no_grad():
        ref_y = ref(t(x), src_mask=t(~causal_mask(5))).numpy()
    assert_close(y, ref_y, dtype, "EncoderBlock causal")
