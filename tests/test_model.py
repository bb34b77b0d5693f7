"""The full models: configuration, shapes, masks, dropout, tied embeddings, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np import EncoderBlock
from transformer_np.model import (
    DecoderBlock,
    EncoderLayer,
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)


def small_seq2seq(**kw):
    base = {"src_vocab_size": 11, "tgt_vocab_size": 12, "d_model": 16, "n_heads": 4}
    base.update(kw)
    return Transformer(TransformerConfig(**base), rng=0)


def small_lm(**kw):
    base = {"vocab_size": 10, "d_model": 16, "n_heads": 2, "max_len": 12}
    base.update(kw)
    return LanguageModel(LanguageModelConfig(**base), rng=0)


# --------------------------------------------------------------------------------------------
# configuration


def test_config_defaults_follow_the_paper_where_it_matters():
    cfg = TransformerConfig(src_vocab_size=5, tgt_vocab_size=5, d_model=32)
    assert cfg.d_ff == 4 * 32  # d_ff = 4 d_model
    assert cfg.norm_first is False  # post-LN
    assert cfg.activation == "relu"


def test_config_is_frozen_and_round_trips_through_json():
    cfg = LanguageModelConfig(vocab_size=7, d_model=8, n_heads=2, dropout=0.1)
    with pytest.raises(AttributeError):
        cfg.d_model = 16
    assert LanguageModelConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="describes a LanguageModelConfig"):
        TransformerConfig.from_json(cfg.to_json())


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"d_model": 30, "n_heads": 4}, ValueError, "d_model must be divisible by n_heads"),
        ({"d_model": 5, "n_heads": 5}, ValueError, "d_model must be even"),
        ({"dropout": 1.0}, ValueError, r"dropout must be < 1"),
        ({"dropout": -0.1}, ValueError, r"dropout must be >= 0"),
        ({"activation": "tanh"}, ValueError, "activation must be"),
        ({"dtype": "float16"}, ValueError, "dtype must be"),
        ({"n_layers": 0}, ValueError, r"n_layers must be >= 1"),
        ({"max_len": 2.5}, TypeError, "max_len must be an integer"),
        ({"norm_first": 1}, TypeError, "norm_first must be True or False"),
        ({"vocab_size": 0}, ValueError, "vocab_size must be >= 1"),
    ],
)
def test_bad_language_model_config_names_the_field(kw, error, match):
    base = {"vocab_size": 10, "d_model": 16, "n_heads": 2}
    base.update(kw)
    with pytest.raises(error, match=match):
        LanguageModelConfig(**base)


def test_pad_id_must_exist_in_both_vocabularies():
    with pytest.raises(ValueError, match="pad_id must be a valid id"):
        TransformerConfig(src_vocab_size=5, tgt_vocab_size=8, pad_id=6)


def test_model_rejects_a_config_of_the_wrong_kind():
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        Transformer(LanguageModelConfig(vocab_size=5, d_model=8, n_heads=2))


# --------------------------------------------------------------------------------------------
# forward pass


def test_transformer_shapes_dtype_and_parameter_names():
    model = small_seq2seq()
    src = np.array([[3, 4, 5, 0], [6, 7, 8, 9]])
    tgt = np.array([[1, 5, 4], [1, 9, 8]])
    logits = model(src, tgt)
    assert logits.shape == (2, 3, 12) and logits.dtype == np.float32
    names = set(model.parameters())
    assert {"encoder.0.attn.W_q", "decoder.1.cross_attn.W_k", "out.W", "tgt_embed.W"} <= names
    assert model.attention_weights[0].shape == (2, 4, 3, 4)


def test_float64_model_computes_in_float64():
    model = small_lm(dtype="float64")
    assert model(np.array([[1, 2, 3]])).dtype == np.float64


def test_language_model_is_causal():
    model = small_lm()
    x = np.array([[1, 2, 3, 4, 5, 6]])
    y = x.copy()
    y[0, 4:] = [9, 9]
    a, b = model(x), model(y)
    np.testing.assert_array_equal(a[:, :4], b[:, :4])
    assert not np.allclose(a[:, 4:], b[:, 4:])


def test_decoder_cannot_see_future_target_tokens():
    model = small_seq2seq()
    src = np.array([[3, 4, 5, 6]])
    a = model(src, np.array([[1, 5, 6, 7]]))
    b = model(src, np.array([[1, 5, 9, 10]]))
    np.testing.assert_allclose(a[:, :2], b[:, :2], atol=1e-6)


def test_source_padding_changes_nothing():
    """Extra padding at the end of the source is masked out everywhere."""
    model = small_seq2seq()
    tgt = np.array([[1, 5, 6]])
    a = model(np.array([[3, 4, 5]]), tgt)
    b = model(np.array([[3, 4, 5, 0, 0, 0]]), tgt)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_positional_encoding_makes_order_matter():
    model = small_lm()
    a = model(np.array([[1, 2, 3]]))[0, -1]
    b = model(np.array([[2, 1, 3]]))[0, -1]
    assert not np.allclose(a, b, atol=1e-4)


def test_encoder_layer_without_dropout_equals_encoder_block():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 16))
    for norm_first in (False, True):
        layer = EncoderLayer(16, 4, 32, norm_first=norm_first, rng=1)
        block = EncoderBlock(16, 4, 32, norm_first=norm_first, rng=1)
        np.testing.assert_array_equal(layer(x), block(x))


def test_dropout_only_in_training_mode():
    model = small_lm(dropout=0.3)
    x = np.array([[1, 2, 3, 4]])
    model.eval()
    a, b = model(x), model(x)
    np.testing.assert_array_equal(a, b)
    model.train()
    c = model(x)
    assert not np.allclose(a, c)
    reference = small_lm(dropout=0.0)  # same seed, same weights
    np.testing.assert_allclose(a, reference(x), atol=1e-6)


def test_tied_embeddings_share_the_matrix():
    model = small_lm(tie_embeddings=True)
    assert "out.W" not in model.parameters()
    x = np.array([[1, 2, 3]])
    logits = model(x)
    h = model.out._cache["h"].reshape(1, 3, 16)
    W = model.parameters()["embed.W"]
    np.testing.assert_allclose(logits, h @ W.T + model.parameters()["out.b"], atol=1e-5)
    untied = small_lm(tie_embeddings=False)
    assert "out.W" in untied.parameters()
    assert untied.num_parameters() == model.num_parameters() + 16 * 10


def test_decoder_block_post_ln_output_is_normalised():
    rng = np.random.default_rng(0)
    block = DecoderBlock(16, 4, 32, rng=rng)
    y = block(rng.standard_normal((2, 3, 16)) * 5, rng.standard_normal((2, 4, 16)))
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-7)
    np.testing.assert_allclose(y.std(-1), 1, atol=1e-3)


def test_load_parameters_checks_names_and_shapes():
    model = small_lm()
    params = {k: v.copy() for k, v in model.parameters().items()}
    params["embed.W"] = np.zeros((10, 8))
    with pytest.raises(ValueError, match="'embed.W' must have shape"):
        model.load_parameters(params)
    del params["embed.W"]
    with pytest.raises(ValueError, match="missing"):
        model.load_parameters(params)


# --------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (np.array([[1, -1, 2]]), ValueError, r"token ids in \[0, 10\), got values from -1"),
        (np.array([[1, 10, 2]]), ValueError, r"token ids in \[0, 10\).*to 10"),
        (np.arange(13)[None] % 10, ValueError, "longer than the positional table"),
        (np.array([1, 2, 3]), ValueError, r"must have shape \(B, T\)"),
        (np.array([[1.0, 2.0]]), TypeError, "integer token ids"),
        (np.zeros((1, 0), dtype=int), ValueError, "at least one"),
    ],
)
def test_language_model_bad_ids_raise_clear_errors(ids, error, match):
    with pytest.raises(error, match=match):
        small_lm()(ids)


def test_transformer_mismatched_batches_raise():
    model = small_seq2seq()
    with pytest.raises(ValueError, match="same batch size"):
        model(np.array([[3, 4], [5, 6]]), np.array([[1, 2, 3]]))


def test_transformer_ids_out_of_range_name_the_argument():
    model = small_seq2seq()
    with pytest.raises(ValueError, match=r"tgt must hold token ids in \[0, 12\)"):
        model(np.array([[3, 4]]), np.array([[1, 12]]))
    with pytest.raises(ValueError, match=r"src must hold token ids in \[0, 11\)"):
        model(np.array([[3, 11]]), np.array([[1, 2]]))
