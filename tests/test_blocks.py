"""blocks.py: the encoder block and the decoder block, post-LN and pre-LN.

Sections: values (built from the package's layers, the post-LN and pre-LN formulas, masks,
dtypes, where dropout sits, and the properties the chapters state, with hypothesis), errors
(bad arguments, input and memory), backward (against finite differences), reference (outputs
and gradients against torch.nn.TransformerEncoderLayer and TransformerDecoderLayer). Stacks of
blocks are tested in test_stacks.py.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_np import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    LayerNorm,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
)

from helpers import (
    PROPERTY_SETTINGS,
    assert_within,
    gradcheck_layer,
    load_decoder_layer,
    load_encoder_layer,
    randomise_biases,
    rounding_tol,
    to_torch,
    to_torch64,
    to_torch_blocked,
    torch_decoder_layer_grads,
    torch_dtype,
    torch_encoder_layer_grads,
)
from rounding import (
    OUR_FUNCTIONS,
    decoder_block_rounded,
    encoder_block_rounded,
    exact,
    torch_functions,
)


def encoder_block_with_random_biases(norm_first, seed=0, **kw):
    """EncoderBlock(16, 4, 32) with nonzero biases and LayerNorm betas, gammas near 1."""
    rng = np.random.default_rng(seed)
    block = EncoderBlock(16, 4, 32, norm_first=norm_first, rng=rng, **kw)
    randomise_biases(block.params, rng, scale=0.1)
    return block, rng


def mean_tol(y):
    """The tolerance of ``y.mean(-1)`` against its exact value, ``y`` the Rounded output of a
    block (float64): the mean of the entries' tolerances, and the mean's own D + 1 roundings."""
    D = y.value.shape[-1]
    return y.tol(np.float64).mean(-1) + rounding_tol(np.float64, D + 1, np.abs(y.value).mean(-1))


# ============================================================================================
# values
# ============================================================================================


def test_block_is_made_of_the_package_layers():
    block = EncoderBlock(16, 4, 32, rng=np.random.default_rng(0))
    assert isinstance(block.attn, MultiHeadAttention)
    assert isinstance(block.norm1, LayerNorm) and isinstance(block.norm2, LayerNorm)
    assert isinstance(block.ff, FeedForward)
    assert block.params["attn.W_q"] is block.attn.params["W_q"]
    assert block.params["ff.linear1.W"] is block.ff.linear1.params["W"]
    assert len(block.params) == 8 + 2 + 4 + 2


def test_post_ln_is_layernorm_of_x_plus_sublayer():
    block, rng = encoder_block_with_random_biases(norm_first=False)
    x = rng.standard_normal((2, 5, 16))
    mask = padding_mask([5, 3])
    a, _ = block.attn(x, mask=mask)
    h = block.norm1(x + a)
    ref = block.norm2(h + block.ff(h))
    tol = encoder_block_rounded(block, exact(x), mask)[0].tol(np.float64, sides=2)
    assert_within(block(x, mask=mask), ref, tol, "post-LN block")


def test_pre_ln_is_x_plus_sublayer_of_layernorm():
    block, rng = encoder_block_with_random_biases(norm_first=True)
    x = rng.standard_normal((2, 5, 16))
    a, _ = block.attn(block.norm1(x), mask=causal_mask(5))
    h = x + a
    ref = h + block.ff(block.norm2(h))
    tol = encoder_block_rounded(block, exact(x), causal_mask(5))[0].tol(np.float64, sides=2)
    assert_within(block(x, mask=causal_mask(5)), ref, tol, "pre-LN block")


def test_post_ln_output_is_normalised_and_pre_ln_output_is_not():
    x = np.random.default_rng(1).standard_normal((3, 7, 16)) * 5
    post_block = EncoderBlock(16, 4, 32, rng=np.random.default_rng(2))
    post = post_block(x)
    pre = EncoderBlock(16, 4, 32, norm_first=True, rng=np.random.default_rng(2))(x)
    assert_within(
        post.mean(-1), np.zeros((3, 7)), mean_tol(encoder_block_rounded(post_block, exact(x))[0])
    )
    np.testing.assert_allclose(post.var(-1), 1.0, atol=1e-4)  # var / (var + eps)
    assert np.abs(pre.var(-1) - 1.0).max() > 1.0  # keeps the large scale of x


def test_decoder_block_post_ln_output_is_normalised():
    rng = np.random.default_rng(0)
    block = DecoderBlock(16, 4, 32, rng=rng)
    x, memory = rng.standard_normal((2, 3, 16)) * 5, rng.standard_normal((2, 4, 16))
    y = block(x, memory)
    assert_within(
        y.mean(-1),
        np.zeros((2, 3)),
        mean_tol(decoder_block_rounded(block, exact(x), exact(memory))[0]),
    )
    np.testing.assert_allclose(y.std(-1), 1, atol=1e-3)


def test_block_stores_attention_weights_and_masks_padding():
    block, rng = encoder_block_with_random_biases(norm_first=False)
    x = rng.standard_normal((2, 5, 16))
    block(x, mask=padding_mask([5, 2]))
    w = block.attention_weights
    assert w.shape == (2, 4, 5, 5)
    assert np.all(w[1, :, :, 2:] == 0)
    # whatever the scores' errors, the weights are e_j / sum(e): the sum of 5 (4 roundings),
    # each division, then the 4 additions of w.sum
    assert_within(
        w.sum(-1), np.ones((2, 4, 5)), rounding_tol(np.float64, 2 * 5 - 1), "sum of the weights"
    )


def test_block_additive_bias_is_passed_to_attention():
    block, rng = encoder_block_with_random_biases(norm_first=False, eps=1e-12, activation="gelu")
    x = rng.standard_normal((2, 4, 16))
    pm = padding_mask([4, 3])
    y_mask = block(x, mask=pm)
    y_bias = block(x, bias=np.where(pm, 0.0, np.finfo(np.float64).min))  # as Hugging Face does
    tol = encoder_block_rounded(block, exact(x), pm)[0].tol(np.float64, sides=2)
    assert_within(y_bias, y_mask, tol, "bias vs mask")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_keeps_dtype_and_accepts_unbatched_input(dtype):
    block = EncoderBlock(8, 2, 16, rng=np.random.default_rng(0), dtype=dtype)
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(dtype)
    y = block(x)
    assert y.dtype == dtype and y.shape == (5, 8)
    tol = encoder_block_rounded(block, exact(x[None]))[0].tol(dtype, sides=2)[0]
    assert_within(y, block(x[None])[0], tol, "unbatched vs batched")


def test_encoder_block_with_zero_dropout_in_training_mode_equals_evaluation_mode():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 16))
    for norm_first in (False, True):
        training = EncoderBlock(16, 4, 32, norm_first=norm_first, dropout=0.0, rng=1).train()
        block = EncoderBlock(16, 4, 32, norm_first=norm_first, rng=1)
        np.testing.assert_array_equal(training(x), block(x))


def kept_dropout_mask(drop, shape):
    """The scaled mask a training-mode Dropout applied at its last call (0 or 1/(1-p)),
    checked to be a real one: the shape of the sublayer output, with zeros and kept values."""
    m = drop.cache
    assert m is not None and m.shape == shape
    assert set(np.unique(m).tolist()) == {0.0, 1 / (1 - drop.p)}
    return m


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_block_dropout_sits_on_sublayer_outputs(norm_first):
    # encoder: dropout on the attention output and on the feed-forward output, before each sum
    block, rng = encoder_block_with_random_biases(norm_first=norm_first, dropout=0.3)
    block.train()
    x = rng.standard_normal((2, 5, 16))
    mask = padding_mask([5, 3])
    y = block(x, mask=mask)
    m1, m2 = (kept_dropout_mask(d, x.shape) for d in (block.drop1, block.drop2))
    if norm_first:
        a, _ = block.attn(block.norm1(x), mask=mask)
        h = x + m1 * a
        ref = h + m2 * block.ff(block.norm2(h))
    else:
        a, _ = block.attn(x, mask=mask)
        h = block.norm1(x + m1 * a)
        ref = block.norm2(h + m2 * block.ff(h))
    count, _ = encoder_block_rounded(block, exact(x), mask, dropout_masks=(m1, m2))
    assert_within(y, ref, count.tol(np.float64, sides=2), "encoder block with dropout")
    assert not np.allclose(y, block.eval()(x, mask=mask))  # the masks did change the output
    assert block.drop1.cache is None and block.drop2.cache is None  # eval: no mask

    # decoder: the same on its three sublayers (self-attention, cross-attention, feed-forward)
    rng = np.random.default_rng(1)
    dec = DecoderBlock(16, 4, 32, norm_first=norm_first, dropout=0.3, rng=rng).train()
    randomise_biases(dec.params, rng, scale=0.1)
    x, memory = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 7, 16))
    self_mask, memory_mask = causal_mask(5) & padding_mask([5, 4]), padding_mask([7, 3])
    y = dec(x, memory, self_mask, memory_mask)
    m1, m2, m3 = (kept_dropout_mask(d, x.shape) for d in (dec.drop1, dec.drop2, dec.drop3))
    if norm_first:  # the memory is not normalised
        a, _ = dec.self_attn(dec.norm1(x), mask=self_mask)
        h = x + m1 * a
        c, _ = dec.cross_attn(dec.norm2(h), memory, memory_mask)
        h2 = h + m2 * c
        ref = h2 + m3 * dec.ff(dec.norm3(h2))
    else:
        a, _ = dec.self_attn(x, mask=self_mask)
        h = dec.norm1(x + m1 * a)
        c, _ = dec.cross_attn(h, memory, memory_mask)
        h2 = dec.norm2(h + m2 * c)
        ref = dec.norm3(h2 + m3 * dec.ff(h2))
    count, _ = decoder_block_rounded(
        dec, exact(x), exact(memory), self_mask, memory_mask, dropout_masks=(m1, m2, m3)
    )
    assert_within(y, ref, count.tol(np.float64, sides=2), "decoder block with dropout")
    assert not np.allclose(y, dec.eval()(x, memory, self_mask, memory_mask))
    assert all(d.cache is None for d in (dec.drop1, dec.drop2, dec.drop3))


def test_stacked_encoder_blocks_keep_the_shape_and_stay_finite():
    rng = np.random.default_rng(3)
    blocks = [EncoderBlock(8, 2, 16, rng=rng) for _ in range(3)]
    x = rng.standard_normal((2, 4, 8))
    for b in blocks:
        x = b(x)
    assert x.shape == (2, 4, 8) and np.all(np.isfinite(x))


# ------------------------------------------------------------------ properties (hypothesis)


@PROPERTY_SETTINGS
@given(st.integers(2, 8), st.data(), st.integers(0, 2**32 - 1))
def test_causal_encoder_block_output_at_i_ignores_tokens_after_i(T, data, seed):
    i = data.draw(st.integers(0, T - 2))
    rng = np.random.default_rng(seed)
    block = EncoderBlock(8, 2, 16, rng=rng)

    def run(x):
        return block(x, mask=causal_mask(T))

    x = rng.standard_normal((2, T, 8))
    x_changed = x.copy()
    x_changed[:, i + 1 :] = rng.standard_normal((2, T - i - 1, 8)) * 10
    tol = sum(
        encoder_block_rounded(block, exact(inputs), causal_mask(T))[0].tol(np.float64)
        for inputs in (x, x_changed)
    )
    assert_within(run(x_changed)[:, : i + 1], run(x)[:, : i + 1], tol[:, : i + 1])


@PROPERTY_SETTINGS
@given(st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_without_positions_encoder_block_is_permutation_equivariant(T, seed):
    rng = np.random.default_rng(seed)
    f = EncoderBlock(12, 3, 24, rng=rng)
    x = rng.standard_normal((T, 12))
    perm = rng.permutation(T)
    tol = encoder_block_rounded(f, exact(x[perm][None]))[0].tol(np.float64)[0]
    tol = tol + encoder_block_rounded(f, exact(x[None]))[0].tol(np.float64)[0][perm]
    assert_within(f(x[perm]), f(x)[perm], tol)


# ============================================================================================
# errors
# ============================================================================================


def test_encoder_block_errors():
    with pytest.raises(ValueError, match="d_model must be divisible by n_heads"):
        EncoderBlock(10, 4, 20)
    with pytest.raises(TypeError, match="norm_first must be True or False"):
        EncoderBlock(8, 2, 16, norm_first="yes")
    block = EncoderBlock(8, 2, 16, rng=0)
    with pytest.raises(ValueError, match=r"x must be \(T, d_model\) or \(B, T, d_model\)"):
        block(np.zeros(8))
    with pytest.raises(ValueError, match="x must have last dimension d_model = 8"):
        block(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="eps must be a positive finite number"):
        EncoderBlock(8, 2, 16, eps=-1.0)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: DecoderBlock(8, 2, 16, dropout=1.5), r"DecoderBlock.dropout must be < 1.0"),
        (lambda: EncoderBlock(8, 2, 16, dropout=float("inf")), r"EncoderBlock.dropout .*finite"),
    ],
)
def test_block_dropout_must_be_a_finite_probability(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    "memory, error, match",
    [
        (None, TypeError, "memory must be the encoder output.*got None"),
        (np.ones((1, 3, 4)), ValueError, "memory must have last dimension d_model = 8"),
        (np.ones((3, 8)), ValueError, "memory must be the encoder output, of shape"),
        (np.ones((2, 3, 8)), ValueError, r"memory must have the batch size .* \(1\)"),
        (np.ones((1, 3, 8), int), TypeError, "memory must be a floating-point array"),
        (np.full((1, 3, 8), np.nan), ValueError, "memory contains NaN"),
    ],
)
def test_decoder_block_checks_memory(memory, error, match):
    # memory=None once ran self-attention instead of cross-attention, without a word
    with pytest.raises(error, match=match):
        DecoderBlock(8, 2, 16, rng=0)(np.ones((1, 3, 8)), memory)


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_backward_matches_finite_differences(rng, norm_first, activation):
    block = EncoderBlock(4, 2, 6, norm_first=norm_first, activation=activation, rng=rng)
    x = rng.standard_normal((2, 4, 4))
    mask = padding_mask([4, 3])
    gradcheck_layer(lambda x: block(x, mask=mask), block.backward, block, [x], rng)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_backward_matches_finite_differences(rng, norm_first):
    block = DecoderBlock(4, 2, 6, norm_first=norm_first, activation="gelu", rng=rng)
    x = rng.standard_normal((2, 4, 4))
    memory = rng.standard_normal((2, 5, 4))
    self_mask = causal_mask(4) & padding_mask([4, 3])
    mem_mask = padding_mask([5, 2])
    gradcheck_layer(
        lambda x, m: block(x, m, self_mask, mem_mask), block.backward, block, [x, memory], rng
    )


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def torch_encoder_layer_like(torch, block, dtype):
    """torch.nn.TransformerEncoderLayer with the sizes and weights of our EncoderBlock."""
    ref = torch.nn.TransformerEncoderLayer(
        block.d_model,
        block.n_heads,
        dim_feedforward=block.d_ff,
        dropout=0.0,
        activation=block.ff.activation,
        layer_norm_eps=block.norm1.eps,
        batch_first=True,
        norm_first=block.norm_first,
        dtype=torch_dtype(dtype),
    )
    load_encoder_layer(ref, block)
    # training mode with dropout 0 is the plain computation (eval mode may take a fused
    # "fast path" whose numerics differ slightly)
    return ref.train()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_matches_torch_transformer_encoder_layer(
    torch, dtype, norm_first, activation
):
    rng = np.random.default_rng(10)
    block = EncoderBlock(
        32, 4, 64, norm_first=norm_first, activation=activation, rng=rng, dtype=dtype
    )
    randomise_biases(block.params, rng, scale=0.1)  # non-trivial LayerNorm and bias values
    ref = torch_encoder_layer_like(torch, block, dtype)
    x = rng.standard_normal((3, 6, 32)).astype(dtype)
    lengths = np.array([6, 2, 4])
    y = block(x, mask=padding_mask(lengths))
    assert y.dtype == dtype
    with torch.no_grad():
        key_padding = to_torch(np.arange(6) >= lengths[:, None])
        ref_y = ref(to_torch(x), src_key_padding_mask=key_padding).numpy()
    tol = sum(
        encoder_block_rounded(block, exact(x), padding_mask(lengths), functions=f)[0].tol(dtype)
        for f in (OUR_FUNCTIONS, torch_functions(dtype))  # ours, PyTorch's
    )
    assert_within(y, ref_y, tol, f"EncoderBlock({norm_first=}, {activation})")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_encoder_block_with_causal_mask_matches_torch(torch, dtype):
    rng = np.random.default_rng(11)
    block = EncoderBlock(16, 2, 32, rng=rng, dtype=dtype, eps=1e-12, activation="gelu")
    ref = torch_encoder_layer_like(torch, block, dtype)
    x = rng.standard_normal((2, 5, 16)).astype(dtype)
    y = block(x, mask=causal_mask(5))
    with torch.no_grad():
        ref_y = ref(to_torch(x), src_mask=to_torch(~causal_mask(5))).numpy()
    tol = sum(
        encoder_block_rounded(block, exact(x), causal_mask(5), functions=f)[0].tol(dtype)
        for f in (OUR_FUNCTIONS, torch_functions(dtype))  # ours, PyTorch's
    )
    assert_within(y, ref_y, tol, "EncoderBlock causal")


def torch_decoder_layer_like(torch, block, dtype):
    """torch.nn.TransformerDecoderLayer with the sizes and weights of our DecoderBlock."""
    ref = torch.nn.TransformerDecoderLayer(
        block.d_model,
        block.n_heads,
        dim_feedforward=block.d_ff,
        dropout=0.0,
        activation=block.ff.activation,
        layer_norm_eps=block.norm1.eps,
        batch_first=True,
        norm_first=block.norm_first,
        dtype=torch_dtype(dtype),
    )
    load_decoder_layer(ref, block)
    return ref.train()  # dropout 0: the plain computation, no fused fast path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_block_matches_torch_transformer_decoder_layer(
    torch, dtype, norm_first, activation
):
    rng = np.random.default_rng(12)
    block = DecoderBlock(
        32, 4, 64, norm_first=norm_first, activation=activation, rng=rng, dtype=dtype
    )
    randomise_biases(block.params, rng, scale=0.1)
    ref = torch_decoder_layer_like(torch, block, dtype)
    x = rng.standard_normal((3, 5, 32)).astype(dtype)  # T = 5 target positions
    memory = rng.standard_normal((3, 7, 32)).astype(dtype)  # S = 7 source positions
    tgt_pad, src_pad = padding_mask([5, 3, 4]), padding_mask([7, 2, 5])
    y = block(x, memory, self_mask=causal_mask(5) & tgt_pad, memory_mask=src_pad)
    assert y.dtype == dtype
    assert block.cross_attention_weights.shape == (3, 4, 5, 7)
    with torch.no_grad():
        ref_y = ref(
            to_torch(x),
            to_torch(memory),
            tgt_mask=to_torch_blocked(causal_mask(5)),
            tgt_key_padding_mask=to_torch_blocked(tgt_pad[:, 0, 0]),
            memory_key_padding_mask=to_torch_blocked(src_pad[:, 0, 0]),
        ).numpy()
    tol = sum(
        decoder_block_rounded(
            block, exact(x), exact(memory), causal_mask(5) & tgt_pad, src_pad, functions=f
        )[0].tol(dtype)
        for f in (OUR_FUNCTIONS, torch_functions(dtype))  # ours, PyTorch's
    )
    assert_within(y, ref_y, tol, f"DecoderBlock({norm_first=}, {activation})")


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_grads_match_torch_encoder_layer(torch, rng, norm_first, activation):
    D, H, Dff = 8, 2, 16
    block = EncoderBlock(D, H, Dff, norm_first=norm_first, activation=activation, rng=rng)
    randomise_biases(block.params, rng)
    tl = torch.nn.TransformerEncoderLayer(
        D,
        H,
        Dff,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        dtype=torch.float64,
    )
    load_encoder_layer(tl, block)
    x = rng.standard_normal((2, 5, D))
    G = rng.standard_normal((2, 5, D))
    pad = padding_mask([5, 3])
    xt = to_torch64(x, True)
    out = tl(xt, src_key_padding_mask=to_torch_blocked(pad[:, 0, 0]))
    (out * to_torch64(G)).sum().backward()
    block(x, mask=pad)
    dx, grads = encoder_block_rounded(block, exact(x), pad)[1](exact(G))
    assert_within(block.backward(G), xt.grad, dx.tol(np.float64, sides=2), "dx")
    for k, v in torch_encoder_layer_grads(tl).items():
        assert_within(block.grads[k], v, grads[k].tol(np.float64, sides=2), k)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_grads_match_torch_decoder_layer(torch, rng, norm_first):
    D, H, Dff = 8, 2, 16
    block = DecoderBlock(D, H, Dff, norm_first=norm_first, rng=rng)
    randomise_biases(block.params, rng)
    tl = torch.nn.TransformerDecoderLayer(
        D, H, Dff, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    )
    load_decoder_layer(tl, block)
    x = rng.standard_normal((2, 4, D))
    mem = rng.standard_normal((2, 6, D))
    G = rng.standard_normal((2, 4, D))
    tgt_pad, src_pad = padding_mask([4, 3]), padding_mask([6, 2])
    xt, mt = to_torch64(x, True), to_torch64(mem, True)
    out = tl(
        xt,
        mt,
        tgt_mask=to_torch_blocked(causal_mask(4)),
        tgt_key_padding_mask=to_torch_blocked(tgt_pad[:, 0, 0]),
        memory_key_padding_mask=to_torch_blocked(src_pad[:, 0, 0]),
    )
    (out * to_torch64(G)).sum().backward()
    block(x, mem, causal_mask(4) & tgt_pad, src_pad)
    dx, dmem = block.backward(G)
    _, back = decoder_block_rounded(block, exact(x), exact(mem), causal_mask(4) & tgt_pad, src_pad)
    (dx_r, dmem_r), grads = back(exact(G))
    assert_within(dx, xt.grad, dx_r.tol(np.float64, sides=2), "dx")
    assert_within(dmem, mt.grad, dmem_r.tol(np.float64, sides=2), "dmemory")
    for k, v in torch_decoder_layer_grads(tl).items():
        assert_within(block.grads[k], v, grads[k].tol(np.float64, sides=2), k)
