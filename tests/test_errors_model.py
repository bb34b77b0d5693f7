"""Bad input to the models, blocks, layer norm, attention and the MiniLM loader.

Each case once gave a silent wrong result, a half-changed model or an obscure NumPy traceback;
now it raises an error that names the argument, and a failed load leaves the model unchanged.
"""

import numpy as np
import pytest

from transformer_np import EncoderBlock, LayerNorm, MultiHeadAttention, layer_norm, softmax
from transformer_np import scaled_dot_product_attention as sdpa
from transformer_np.blockwise import blockwise_attention
from transformer_np.model import (
    DecoderBlock,
    Dropout,
    EncoderLayer,
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)


def small_lm(tie=True):
    cfg = LanguageModelConfig(
        vocab_size=10, d_model=8, n_heads=2, max_len=6, dtype="float64", tie_embeddings=tie
    )
    return LanguageModel(cfg, rng=0)


def snapshot(model):
    return {k: v.copy() for k, v in model.parameters().items()}


def assert_unchanged(model, before):
    after = model.parameters()
    assert all(np.array_equal(after[k], before[k]) for k in before)


# ------------------------------------------------------------------ loading parameters


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda v: np.full(v.shape, "x"), TypeError, "an array of real numbers, got dtype <U1"),
        (lambda v: np.full(v.shape, np.nan), ValueError, "contains NaN or inf"),
        (lambda v: np.zeros(v.shape + (1,)), ValueError, "must have shape"),
    ],
)
def test_load_parameters_checks_everything_before_copying(bad, error, match):
    lm = small_lm()
    before = snapshot(lm)
    params = {k: np.zeros_like(v) for k, v in before.items()}
    last = list(params)[-1]  # the others would be copied first by a key-by-key loop
    params[last] = bad(params[last])
    with pytest.raises(error, match=f"parameter '{last}' .*{match}"):
        lm.load_parameters(params)
    assert_unchanged(lm, before)


def test_load_parameters_wants_a_mapping():
    with pytest.raises(TypeError, match="params must be a mapping of names to arrays, got list"):
        small_lm().load_parameters([1, 2])


# ------------------------------------------------------------------ backward of the models


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize(
    "grad, error, match",
    [
        (np.zeros((1, 10, 3)), ValueError, r"grad_logits must have the shape .*\(1, 3, 10\)"),
        (np.zeros(30), ValueError, r"grad_logits must have the shape .*got \(30,\)"),
        (np.full((1, 3, 10), np.nan), ValueError, "grad_logits contains NaN"),
        (np.zeros((1, 3, 10), int), TypeError, "grad_logits must be a floating-point array"),
    ],
)
def test_language_model_backward_checks_grad_logits(tie, grad, error, match):
    lm = small_lm(tie)
    lm(np.array([[1, 2, 3]]))
    with pytest.raises(error, match=match):
        lm.backward(grad)


def test_backward_before_forward_names_the_model_or_block():
    with pytest.raises(RuntimeError, match="LanguageModel.backward was called before a forward"):
        small_lm().backward(np.zeros((1, 3, 10)))
    with pytest.raises(RuntimeError, match="EncoderBlock.backward was called before a forward"):
        EncoderBlock(8, 2, 16, rng=0).backward(np.ones((1, 3, 8)))
    with pytest.raises(RuntimeError, match="DecoderBlock.backward was called before a forward"):
        DecoderBlock(8, 2, 16, rng=0).backward(np.ones((1, 3, 8)))


# ------------------------------------------------------------------ decoder memory


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


def test_transformer_decode_takes_a_list_memory_and_names_it():
    cfg = TransformerConfig(src_vocab_size=9, tgt_vocab_size=10, d_model=8, n_heads=2, d_ff=16)
    tm = Transformer(cfg, rng=0)
    memory = tm.encode(np.array([[1, 2, 3]]))
    assert tm.decode(np.array([[1, 2]]), memory.tolist()).shape == (1, 2, 10)
    with pytest.raises(ValueError, match="memory must have the batch size"):
        tm.decode(np.array([[1, 2], [1, 2]]), memory)


# ------------------------------------------------------------------ configuration and dropout


def test_config_checks_d_model_before_using_it():
    with pytest.raises(TypeError, match="LanguageModelConfig.d_model must be an integer, got None"):
        LanguageModelConfig(vocab_size=10, d_model=None)
    assert LanguageModelConfig(vocab_size=10, d_model=8, n_heads=2).d_ff == 32  # default 4 d


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: LanguageModelConfig(vocab_size=10, dropout=float("nan")), "dropout .*finite"),
        (lambda: Dropout(float("nan")), r"Dropout.p must be a finite number, got nan"),
        (lambda: DecoderBlock(8, 2, 16, dropout=1.5), r"DecoderBlock.dropout must be < 1.0"),
        (lambda: EncoderLayer(8, 2, 16, dropout=float("inf")), r"EncoderLayer.dropout .*finite"),
    ],
)
def test_dropout_must_be_a_finite_probability(make, match):
    with pytest.raises(ValueError, match=match):
        make()


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


# ------------------------------------------------------------------ softmax and layer norm


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_softmax_of_nothing(shape):
    with pytest.raises(ValueError, match=r"x has no values along axis -1"):
        softmax(np.zeros(shape))


def test_layer_norm_checks_gamma_and_beta():
    x = np.ones((2, 4))
    with pytest.raises(ValueError, match="gamma contains NaN"):
        layer_norm(x, np.array([np.nan, 1, 1, 1]), np.zeros(4))
    with pytest.raises(ValueError, match="beta contains inf"):
        layer_norm(x, np.ones(4), np.array([np.inf, 0, 0, 0]))


@pytest.mark.parametrize("row", [[3e38, -3e38], [3e38, 3e38]])
def test_layer_norm_overflow_in_float32_is_an_error_not_zeros(row):
    x = np.array([row], np.float32)
    with pytest.raises(ValueError, match="x is too large to normalise in float32"):
        layer_norm(x, np.ones(2), np.zeros(2))
    with pytest.raises(ValueError, match="x is too large to normalise in float32"):
        LayerNorm(2, dtype=np.float32)(x)
    # float64 has the range: the same row normalises to +-1 (or to 0 for equal values)
    y = layer_norm(x.astype(np.float64), np.ones(2), np.zeros(2))
    assert np.all(np.isfinite(y))


# ------------------------------------------------------------------ attention


def test_overflow_advice_fits_the_dtype():
    big = np.full((2, 4), 1e160)
    with pytest.raises(ValueError, match=r"overflowed float64 .*scale the inputs down$"):
        sdpa(big, big, np.ones((2, 4)))
    big32 = np.full((2, 4), 1e30, np.float32)
    with pytest.raises(ValueError, match="overflowed float32 .*or use float64"):
        sdpa(big32, big32, np.ones((2, 4), np.float32))


def test_multi_head_attention_reports_a_nan_parameter_by_name():
    mha = MultiHeadAttention(8, 2, rng=0)
    mha.params["W_q"][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"params\['W_q'\] contains NaN"):
        mha(np.ones((1, 3, 8)))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_blockwise_output_overflow_is_an_error():
    q = np.ones((2, 4), np.float32)
    v = np.full((2, 4), 3e38, np.float32)
    assert np.all(sdpa(q, q, v)[0] == v)  # the full version normalises the weights first
    with pytest.raises(ValueError, match="the output overflowed float32.*or use float64"):
        blockwise_attention(q, q, v)


# ------------------------------------------------------------------ MiniLM


def test_minilm_helpers_check_their_arguments(tmp_path):
    pytest.importorskip("tokenizers")
    from transformer_np.pretrained import load_minilm, weight_map
    from transformer_np.pretrained.checkpoint import ModelFileError

    with pytest.raises(TypeError, match="config must be a MiniLMConfig or None, got str"):
        weight_map("x")
    with pytest.raises(ModelFileError, match="is not a folder"):
        load_minilm(model_dir=tmp_path / "missing")


def test_minilm_load_state_checks_every_tensor_before_copying():
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from transformer_np.pretrained import load_minilm, weight_map
    from transformer_np.pretrained.checkpoint import find_model_dir, read_safetensors

    model = load_minilm(np.float32)
    before = model.word_embeddings.params["W"].copy()
    tensors = dict(read_safetensors(find_model_dir() / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"] = np.zeros_like(before)  # copied first...
    last = list(weight_map(model.config))[-1]
    shape = tensors[last].shape
    tensors[last] = np.zeros((3,), np.float32)  # ...if the last one were checked only later
    with pytest.raises(ValueError, match=f"{last}: our .* has shape"):
        model.load_state(tensors)
    assert np.array_equal(model.word_embeddings.params["W"], before)
    tensors[last] = np.full(shape, np.nan, np.float32)
    with pytest.raises(ValueError, match=f"{last} contains NaN or inf"):
        model.load_state(tensors)
    assert np.array_equal(model.word_embeddings.params["W"], before)


def test_minilm_pool_and_tokenizer_arguments():
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from transformer_np.pretrained import load_minilm
    from transformer_np.pretrained.checkpoint import find_model_dir, read_tokenizer

    model = load_minilm(np.float32)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(B, T\) = \(1, 3\)"):
        model.pool(np.ones((1, 3, 384), np.float32), np.ones((1, 4)))
    with pytest.raises(ValueError, match="hidden must be the last hidden states"):
        model.pool(np.ones((3, 384), np.float32), np.ones((1, 3)))
    with pytest.raises(ValueError, match="max_length must be a positive integer, got -1"):
        read_tokenizer(find_model_dir() / "tokenizer.json", max_length=-1)


def test_minilm_config_with_a_bad_eps_names_the_file(tmp_path):
    pytest.importorskip("tokenizers")
    import json

    from transformer_np.pretrained.checkpoint import ModelFileError, find_model_dir
    from transformer_np.pretrained.minilm import MiniLMConfig

    cfg = json.loads((find_model_dir() / "config.json").read_text())
    for bad in ("abc", None):
        cfg["layer_norm_eps"] = bad
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(ModelFileError, match=r"config.json: layer_norm_eps must be a number"):
            MiniLMConfig.from_files(tmp_path)
