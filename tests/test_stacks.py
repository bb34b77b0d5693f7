"""stacks.py: Stack, the encoder and the decoder: blocks in order, a final LayerNorm when pre-LN.

Sections: values (the blocks run in order, then the final norm; parameter names), backward
(against finite differences, the decoder's memory gradient summed over its blocks). The blocks
themselves are tested in test_blocks.py, the models built from the stacks in test_model.py.
"""

import numpy as np
import pytest

from transformer_np import (
    DecoderBlock,
    EncoderBlock,
    LayerNorm,
    Stack,
    causal_mask,
    padding_mask,
)

from helpers import assert_within, gradcheck_layer
from rounding import exact, stack_rounded


def stack(block, rng, *, norm_first, d_model=8, n_heads=2, d_ff=16, n_layers=2):
    """A Stack of encoder or decoder blocks as a model builds it (model.py's ``stack``): a
    final LayerNorm exactly when pre-LN."""
    kw = {"norm_first": norm_first, "eps": 1e-5, "dtype": np.float64, "rng": rng}
    layers = [block(d_model, n_heads, d_ff, **kw) for _ in range(n_layers)]
    return Stack(layers, LayerNorm(d_model, 1e-5) if norm_first else None)


# ============================================================================================
# values
# ============================================================================================


def test_encoder_runs_its_blocks_in_order_then_the_final_norm():
    rng = np.random.default_rng(0)
    encoder = stack(EncoderBlock, rng, norm_first=True)
    assert len(encoder.layers) == 2 and all(isinstance(b, EncoderBlock) for b in encoder.layers)
    assert isinstance(encoder.norm, LayerNorm)
    assert repr(encoder) == "Stack(2 x EncoderBlock, norm=LayerNorm)"
    x = rng.standard_normal((2, 5, 8))
    mask = padding_mask([5, 3])
    ref = encoder.norm(encoder.layers[1](encoder.layers[0](x, mask), mask))
    tol = stack_rounded(encoder, exact(x), mask)[0].tol(np.float64, sides=2)
    assert_within(encoder(x, mask), ref, tol, "pre-LN encoder")
    names = list(encoder.params)
    assert names[0] == "0.attn.W_q" and names[-2:] == ["norm.gamma", "norm.beta"]
    assert encoder.params["1.ff.linear1.W"] is encoder.layers[1].ff.linear1.params["W"]


def test_post_ln_encoder_has_no_final_norm():
    rng = np.random.default_rng(1)
    encoder = stack(EncoderBlock, rng, norm_first=False)
    assert encoder.norm is None
    assert not any(name.startswith("norm.") for name in encoder.params)
    x = rng.standard_normal((2, 5, 8))
    ref = encoder.layers[1](encoder.layers[0](x))
    tol = stack_rounded(encoder, exact(x))[0].tol(np.float64, sides=2)
    assert_within(encoder(x), ref, tol, "post-LN encoder")


def test_decoder_runs_its_blocks_in_order_then_the_final_norm():
    rng = np.random.default_rng(2)
    decoder = stack(DecoderBlock, rng, norm_first=True)
    assert len(decoder.layers) == 2 and all(isinstance(b, DecoderBlock) for b in decoder.layers)
    x = rng.standard_normal((2, 4, 8))
    memory = rng.standard_normal((2, 6, 8))
    self_mask, memory_mask = causal_mask(4), padding_mask([6, 2])
    h = x
    for block in decoder.layers:
        h = block(h, memory, self_mask, memory_mask)
    ref = decoder.norm(h)
    count, _ = stack_rounded(decoder, exact(x), self_mask, exact(memory), memory_mask)
    tol = count.tol(np.float64, sides=2)
    assert_within(decoder(x, memory, self_mask, memory_mask), ref, tol, "pre-LN decoder")
    assert list(decoder.params)[-2:] == ["norm.gamma", "norm.beta"]


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_backward_matches_finite_differences(rng, norm_first):
    encoder = stack(EncoderBlock, rng, norm_first=norm_first, d_model=4, d_ff=6)
    x = rng.standard_normal((2, 4, 4))
    mask = padding_mask([4, 3])
    gradcheck_layer(lambda x: encoder(x, mask), encoder.backward, encoder, [x], rng)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_backward_sums_the_memory_gradient_over_its_blocks(rng, norm_first):
    decoder = stack(DecoderBlock, rng, norm_first=norm_first, d_model=4, d_ff=6)
    x = rng.standard_normal((2, 4, 4))
    memory = rng.standard_normal((2, 5, 4))
    self_mask = causal_mask(4) & padding_mask([4, 3])
    memory_mask = padding_mask([5, 2])
    gradcheck_layer(
        lambda x, m: decoder(x, m, self_mask, memory_mask),
        decoder.backward,
        decoder,
        [x, memory],
        rng,
    )
