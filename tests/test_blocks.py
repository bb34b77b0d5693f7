"""Unit tests of EncoderBlock: built from the package's layers, post-LN and pre-LN."""

import numpy as np
import pytest

from transformer_np import (
    EncoderBlock,
    FeedForward,
    LayerNorm,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
)


def _block(norm_first, seed=0, **kw):
    rng = np.random.default_rng(seed)
    block = EncoderBlock(16, 4, 32, norm_first=norm_first, rng=rng, **kw)
    for name in block.params:
        if name.endswith(("gamma", "beta")) or ".b" in name:
            base = 1.0 if name.endswith("gamma") else 0.0
            block.params[name] = base + 0.1 * rng.standard_normal(block.params[name].shape)
    return block, rng


def test_block_is_made_of_the_package_layers():
    block = EncoderBlock(16, 4, 32, rng=np.random.default_rng(0))
    assert isinstance(block.attn, MultiHeadAttention)
    assert isinstance(block.norm1, LayerNorm) and isinstance(block.norm2, LayerNorm)
    assert isinstance(block.ff, FeedForward)
    assert block.params["attn.W_q"] is block.attn.params["W_q"]
    assert block.params["ff.linear1.W"] is block.ff.linear1.params["W"]
    assert len(block.params) == 8 + 2 + 4 + 2


def test_post_ln_is_layernorm_of_x_plus_sublayer():
    block, rng = _block(norm_first=False)
    x = rng.standard_normal((2, 5, 16))
    mask = padding_mask([5, 3])
    a, _ = block.attn(x, mask=mask)
    h = block.norm1(x + a)
    ref = block.norm2(h + block.ff(h))
    np.testing.assert_allclose(block(x, mask=mask), ref, rtol=1e-14, atol=1e-14)


def test_pre_ln_is_x_plus_sublayer_of_layernorm():
    block, rng = _block(norm_first=True)
    x = rng.standard_normal((2, 5, 16))
    a, _ = block.attn(block.norm1(x), mask=causal_mask(5))
    h = x + a
    ref = h + block.ff(block.norm2(h))
    np.testing.assert_allclose(block(x, mask=causal_mask(5)), ref, rtol=1e-14, atol=1e-14)


def test_post_ln_output_is_normalised_and_pre_ln_output_is_not():
    x = np.random.default_rng(1).standard_normal((3, 7, 16)) * 5
    post = EncoderBlock(16, 4, 32, rng=np.random.default_rng(2))(x)
    pre = EncoderBlock(16, 4, 32, norm_first=True, rng=np.random.default_rng(2))(x)
    np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(post.var(-1), 1.0, atol=1e-4)  # var / (var + eps)
    assert np.abs(pre.var(-1) - 1.0).max() > 1.0  # keeps the large scale of x


def test_block_stores_attention_weights_and_masks_padding():
    block, rng = _block(norm_first=False)
    x = rng.standard_normal((2, 5, 16))
    block(x, mask=padding_mask([5, 2]))
    w = block.attention_weights
    assert w.shape == (2, 4, 5, 5)
    assert np.all(w[1, :, :, 2:] == 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-14)


def test_block_additive_bias_is_passed_to_attention():
    block, rng = _block(norm_first=False, eps=1e-12, activation="gelu")
    x = rng.standard_normal((2, 4, 16))
    pm = padding_mask([4, 3])
    y_mask = block(x, mask=pm)
    y_bias = block(x, bias=np.where(pm, 0.0, np.finfo(np.float64).min))  # as Hugging Face does
    np.testing.assert_allclose(y_bias, y_mask, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_keeps_dtype_and_accepts_unbatched_input(dtype):
    block = EncoderBlock(8, 2, 16, rng=np.random.default_rng(0), dtype=dtype)
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(dtype)
    y = block(x)
    assert y.dtype == dtype and y.shape == (5, 8)
    np.testing.assert_allclose(y, block(x[None])[0], rtol=1e-5 if dtype == np.float32 else 1e-14)


def test_blocks_stack():
    rng = np.random.default_rng(3)
    blocks = [EncoderBlock(8, 2, 16, rng=rng) for _ in range(3)]
    x = rng.standard_normal((2, 4, 8))
    for b in blocks:
        x = b(x)
    assert x.shape == (2, 4, 8) and np.all(np.isfinite(x))
