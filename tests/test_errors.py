"""Bad input gets a clear ValueError or TypeError that names the argument (never a NumPy traceback
from deep inside, never a silent NaN)."""

import numpy as np
import pytest

from transformer_np import (
    Embedding,
    EncoderBlock,
    FeedForward,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    causal_mask,
    erf,
    gelu,
    layer_norm,
    padding_mask,
    positional_encoding,
    positional_offset_matrix,
    relu,
    scaled_dot_product_attention,
    softmax,
)

rng = np.random.default_rng(0)
Q = rng.standard_normal((2, 5, 8))
K = rng.standard_normal((2, 6, 8))
V = rng.standard_normal((2, 6, 4))


# ------------------------------------------------------------------ scaled dot-product attention


def test_mismatched_d_k_between_q_and_k():
    with pytest.raises(ValueError, match=r"q and k .* d_k.*\(2, 5, 8\).*\(2, 6, 16\)"):
        scaled_dot_product_attention(Q, np.zeros((2, 6, 16)), V)


def test_mismatched_n_k_between_k_and_v():
    with pytest.raises(ValueError, match=r"k and v .* n_k.*\(2, 6, 8\).*\(2, 7, 4\)"):
        scaled_dot_product_attention(Q, K, np.zeros((2, 7, 4)))


def test_mask_that_does_not_broadcast_to_the_scores():
    with pytest.raises(
        ValueError, match=r"mask of shape \(5, 5\) does not broadcast .*\(2, 5, 6\)"
    ):
        scaled_dot_product_attention(Q, K, V, mask=np.ones((5, 5), bool))


def test_mask_with_extra_leading_axes_is_rejected():
    with pytest.raises(ValueError, match="mask"):
        scaled_dot_product_attention(Q, K, V, mask=np.ones((3, 2, 5, 6), bool))


def test_float_mask_with_additive_values_points_to_bias():
    additive = np.where(np.ones((5, 6), bool), 0.0, -np.inf)
    additive[0, 0] = -np.inf
    with pytest.raises(ValueError, match="bias="):
        scaled_dot_product_attention(Q, K, V, mask=additive)


def test_non_boolean_mask_dtype():
    with pytest.raises(TypeError, match="mask"):
        scaled_dot_product_attention(Q, K, V, mask=np.array([["a"] * 6] * 5))


def test_bias_that_does_not_broadcast():
    with pytest.raises(ValueError, match=r"bias of shape \(4,\)"):
        scaled_dot_product_attention(Q, K, V, bias=np.zeros(4))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bias_with_nan_or_plus_inf(bad):
    bias = np.zeros((5, 6))
    bias[1, 2] = bad
    with pytest.raises(ValueError, match="bias contains"):
        scaled_dot_product_attention(Q, K, V, bias=bias)


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_integer_inputs_are_type_errors(name):
    args = {"q": Q, "k": K, "v": V}
    args[name] = np.ones(args[name].shape, dtype=np.int64)
    with pytest.raises(TypeError, match=f"{name} must be a floating-point array.*int64"):
        scaled_dot_product_attention(**args)


def test_non_numeric_input_is_a_type_error():
    with pytest.raises(TypeError, match="q must be a floating-point array"):
        scaled_dot_product_attention([["a", "b"]], K, V)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_inputs(name, bad):
    args = {"q": Q.copy(), "k": K.copy(), "v": V.copy()}
    args[name][1, 2, 3] = bad
    with pytest.raises(ValueError, match=rf"{name} contains (NaN|inf).*\(1, 2, 3\)"):
        scaled_dot_product_attention(**args)


def test_input_of_rank_one():
    with pytest.raises(ValueError, match=r"q must have at least 2 axes.*\(8,\)"):
        scaled_dot_product_attention(np.ones(8), K[0], V[0])


def test_leading_axes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="leading"):
        scaled_dot_product_attention(Q, np.zeros((3, 6, 8)), np.zeros((3, 6, 4)))


def test_zero_keys_or_zero_width():
    with pytest.raises(ValueError, match="n_k must be positive"):
        scaled_dot_product_attention(Q, np.zeros((2, 0, 8)), np.zeros((2, 0, 4)))
    with pytest.raises(ValueError, match="d_k must be positive"):
        scaled_dot_product_attention(np.zeros((5, 0)), np.zeros((6, 0)), V[0])


def test_overflowing_scores_are_an_error_not_nan():
    big = np.full((2, 4), 1e20, dtype=np.float32)
    with pytest.raises(ValueError, match="overflowed float32"):
        scaled_dot_product_attention(big, big, big)


# ------------------------------------------------------------------ MultiHeadAttention


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model must be divisible by n_heads.*10.*3"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("d_model, n_heads", [(0, 1), (8, 0), (-8, 2)])
def test_non_positive_sizes(d_model, n_heads):
    with pytest.raises(ValueError, match="must be a positive integer"):
        MultiHeadAttention(d_model, n_heads)


@pytest.mark.parametrize("value", [8.0, "8", True, None])
def test_non_integer_sizes(value):
    with pytest.raises(TypeError, match="d_model must be a positive integer"):
        MultiHeadAttention(value, 2)


@pytest.fixture
def mha():
    return MultiHeadAttention(8, 2, rng=np.random.default_rng(0))


@pytest.mark.parametrize("shape", [(8,), (1, 2, 3, 8)])
def test_mha_wrong_input_rank(mha, shape):
    with pytest.raises(ValueError, match=r"x_q must be \(T, d_model\) or \(B, T, d_model\)"):
        mha(np.zeros(shape))


def test_mha_wrong_feature_size(mha):
    with pytest.raises(ValueError, match=r"x_q must have last dimension d_model = 8.*\(2, 3, 6\)"):
        mha(np.zeros((2, 3, 6)))
    with pytest.raises(ValueError, match="x_kv must have last dimension d_model = 8"):
        mha(np.zeros((2, 3, 8)), np.zeros((2, 3, 4)))


def test_mha_integer_input(mha):
    with pytest.raises(TypeError, match="x_q must be a floating-point array"):
        mha(np.zeros((3, 8), dtype=np.int32))


def test_mha_nan_input(mha):
    x = np.zeros((3, 8))
    x[2, 5] = np.nan
    with pytest.raises(ValueError, match="x_kv contains NaN"):
        mha(np.zeros((3, 8)), x)


def test_mha_batch_or_rank_mismatch_between_x_q_and_x_kv(mha):
    with pytest.raises(ValueError, match="same batch size"):
        mha(np.zeros((2, 3, 8)), np.zeros((3, 3, 8)))
    with pytest.raises(ValueError, match="same rank"):
        mha(np.zeros((2, 3, 8)), np.zeros((3, 8)))


def test_mha_mask_for_other_length(mha):
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 4\).*\(B, H, T, S\) = \(2, 2, 3, 3\)"
    ):
        mha(np.zeros((2, 3, 8)), mask=causal_mask(4))


def test_mha_batched_mask_with_unbatched_input(mha):
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 3\).*\(H, T, S\)"):
        mha(np.zeros((3, 8)), mask=padding_mask([3, 2]))


def test_mha_params_replaced_with_wrong_shape(mha):
    mha.params["W_k"] = np.zeros((8, 16))
    with pytest.raises(ValueError, match=r"params\['W_k'\] must be an ndarray of shape \(8, 8\)"):
        mha(np.zeros((3, 8)))


def test_bad_rng_and_dtype():
    with pytest.raises(TypeError, match="rng must be"):
        MultiHeadAttention(8, 2, rng="seed")
    with pytest.raises(TypeError, match="dtype must be np.float32 or np.float64"):
        MultiHeadAttention(8, 2, dtype=np.int32)


# ------------------------------------------------------------------ positional encoding


def test_odd_d_model_is_rejected_with_the_reason():
    with pytest.raises(ValueError, match=r"d_model must be even .*sin/cos pairs.*7"):
        positional_encoding(10, 7)
    with pytest.raises(ValueError, match="d_model must be even"):
        positional_offset_matrix(1, 7)


@pytest.mark.parametrize("max_len, d_model", [(0, 8), (-3, 8), (10, 0), (10, -2)])
def test_positional_encoding_non_positive_sizes(max_len, d_model):
    with pytest.raises(ValueError, match="must be a positive integer"):
        positional_encoding(max_len, d_model)


def test_positional_encoding_non_integer_size():
    with pytest.raises(TypeError, match="max_len must be a positive integer"):
        positional_encoding(10.5, 8)


def test_positional_offset_bad_k():
    with pytest.raises(TypeError, match="k must be a real number"):
        positional_offset_matrix("3", 8)
    with pytest.raises(ValueError, match="k must be finite"):
        positional_offset_matrix(np.inf, 8)


def test_positional_encoding_bad_base():
    with pytest.raises(ValueError, match="base must be a positive finite number"):
        positional_encoding(4, 8, base=-1.0)


# ------------------------------------------------------------------ functions


def test_softmax_errors():
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        softmax(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="x contains NaN"):
        softmax(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"x contains \+inf"):
        softmax(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        softmax(np.zeros((2, 2)), axis=2)


def test_elementwise_function_errors():
    with pytest.raises(ValueError, match="approximate must be"):
        gelu(np.zeros(3), approximate="fast")
    with pytest.raises(ValueError, match="x contains NaN"):
        gelu(np.array([np.nan]))
    with pytest.raises(ValueError, match="x contains inf"):
        relu(np.array([np.inf]))
    with pytest.raises(ValueError, match="x contains NaN"):
        erf(np.array([np.nan]))
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        gelu(np.arange(3))


def test_mask_builder_errors():
    with pytest.raises(ValueError, match="n must be a positive integer"):
        causal_mask(0)
    with pytest.raises(TypeError, match="n must be a positive integer"):
        causal_mask(2.5)
    with pytest.raises(ValueError, match=r"lengths must be <= max_len = 3"):
        padding_mask([2, 4], max_len=3)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        padding_mask([2, -1])
    with pytest.raises(TypeError, match="lengths must be an array of integers"):
        padding_mask([2.0, 1.0])
    with pytest.raises(ValueError, match="lengths must be a non-empty 1-D array"):
        padding_mask([[2, 1]])
    with pytest.raises(ValueError, match="pass max_len"):
        padding_mask([0, 0])


def test_layer_norm_function_errors():
    x = np.zeros((2, 4))
    with pytest.raises(ValueError, match=r"gamma must have shape \(D,\) = \(4,\).*\(3,\)"):
        layer_norm(x, np.ones(3), np.zeros(4))
    with pytest.raises(ValueError, match="eps must be a positive finite number"):
        layer_norm(x, np.ones(4), np.zeros(4), eps=0.0)
    with pytest.raises(TypeError, match="x must be a floating-point array"):
        layer_norm(np.zeros((2, 4), dtype=int), np.ones(4), np.zeros(4))


# ------------------------------------------------------------------ layers and blocks


def test_layer_feature_size_errors():
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., d_in\) with d_in = 4"):
        Linear(4, 2, rng=0)(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="x must have shape .* d_model = 6"):
        LayerNorm(6)(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="x must have shape .* d_model = 4"):
        FeedForward(4, 8, rng=0)(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="x contains NaN"):
        LayerNorm(2)(np.array([[np.nan, 0.0]]))


def test_feedforward_bad_activation():
    with pytest.raises(ValueError, match='activation must be "relu" or "gelu"'):
        FeedForward(4, 8, activation="tanh")


def test_layer_params_replaced_with_wrong_shape():
    lin = Linear(4, 2, rng=0)
    lin.params["W"] = np.zeros((2, 4))
    with pytest.raises(ValueError, match=r"Linear.params\['W'\] must have shape \(4, 2\)"):
        lin(np.zeros((1, 4)))


def test_embedding_id_errors():
    emb = Embedding(10, 4, rng=0)
    with pytest.raises(TypeError, match="ids must be an array of integer token ids.*float64"):
        emb(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"ids must be in \[0, vocab_size\) = \[0, 10\), got 10"):
        emb(np.array([3, 10]))
    with pytest.raises(ValueError, match="got -1"):
        emb(np.array([[-1, 2]]))
    with pytest.raises(TypeError, match="ids"):
        emb(np.array([True, False]))


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
