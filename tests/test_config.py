"""config.py: TransformerConfig and LanguageModelConfig, frozen dataclasses that check their
fields.

Sections: values (the paper's defaults, frozen, the JSON round trip), errors (a bad field gets
an error that names the configuration, the field and the value).
"""

import pytest

from transformer_np import LanguageModelConfig, TransformerConfig

# ============================================================================================
# values
# ============================================================================================


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


# ============================================================================================
# errors
# ============================================================================================


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


def test_config_dropout_must_be_finite():
    with pytest.raises(ValueError, match="dropout .*finite"):
        LanguageModelConfig(vocab_size=10, dropout=float("nan"))


def test_pad_id_must_exist_in_both_vocabularies():
    with pytest.raises(ValueError, match="pad_id must be a valid id"):
        TransformerConfig(src_vocab_size=5, tgt_vocab_size=8, pad_id=6)


def test_config_checks_d_model_before_using_it():
    with pytest.raises(TypeError, match="LanguageModelConfig.d_model must be an integer, got None"):
        LanguageModelConfig(vocab_size=10, d_model=None)
    assert LanguageModelConfig(vocab_size=10, d_model=8, n_heads=2).d_ff == 32  # default 4 d


@pytest.mark.parametrize(
    "text, error, match",
    [
        ("x", ValueError, "text is not valid JSON for a LanguageModelConfig"),
        ("[1, 2]", ValueError, "must describe a JSON object .* got a JSON list"),
        (None, TypeError, "text must be a JSON string, got NoneType"),
    ],
)
def test_config_from_json_errors(text, error, match):
    with pytest.raises(error, match=match):
        LanguageModelConfig.from_json(text)


def test_from_json_names_the_first_byte_that_is_not_utf8():
    text = LanguageModelConfig(vocab_size=10).to_json().encode()
    with pytest.raises(ValueError, match="byte 0 is not UTF-8"):
        LanguageModelConfig.from_json(b"\xff" + text)
    assert LanguageModelConfig.from_json(text) == LanguageModelConfig(vocab_size=10)
