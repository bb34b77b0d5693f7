"""Bad and edge inputs across the public functions, one test per class of input.

The classes: a path (a folder where a file is expected, a file that is missing, a file object
opened in text mode), a model of the wrong kind, a sampling or decoding setting (out of range, or
one that would do nothing), a tokenizer input (an empty conversation) and a result beyond the
float range (perplexity, a training run that diverges). Each error names the argument, what was
expected and what was received; each result is the right one.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from transformer_np import (
    Adam,
    LlamaConfig,
    LlamaModel,
    TrainingDiverged,
    beam_search,
    bits_per_byte,
    fit,
    generate,
    load_model,
    perplexity,
    sample_next,
    save_model,
    stream,
    translate,
)
from transformer_np.pretrained.checkpoint import ModelFileError, read_config, read_safetensors
from transformer_np.pretrained.gguf import read_gguf

from helpers import small_language_model, small_transformer

PROMPT = np.array([[1, 2, 3]])
SRC = np.array([[3, 4, 5, 6]])

# -- paths ------------------------------------------------------------------------------------

MODEL_FILE_READERS = {
    "read_gguf": (read_gguf, ".gguf"),
    "read_config": (read_config, ""),
    "read_safetensors": (lambda path: read_safetensors(path, {}), ""),
}


@pytest.mark.parametrize("reader", sorted(MODEL_FILE_READERS))
def test_a_folder_given_as_a_model_file_is_named_a_folder(reader, tmp_path):
    read, suffix = MODEL_FILE_READERS[reader]
    (tmp_path / f"model{suffix or '.json'}").write_bytes(b"")
    with pytest.raises(ModelFileError, match=f"model file {tmp_path} is a folder") as info:
        read(tmp_path)
    assert "expected the path of a" in str(info.value)
    assert "pip install" not in str(info.value)  # nothing to install: the path is wrong
    if suffix:  # the files it holds are named, to pick from
        assert "(it holds model.gguf)" in str(info.value)


@pytest.mark.parametrize("reader", sorted(MODEL_FILE_READERS))
def test_a_missing_model_file_is_named_with_how_to_install_it(reader, tmp_path):
    read, _ = MODEL_FILE_READERS[reader]
    missing = tmp_path / "nothing-here"
    with pytest.raises(ModelFileError, match=f"model file {missing} not found; install"):
        read(missing)


@pytest.mark.parametrize(
    ("call", "mode"),
    [
        (lambda f: save_model(f, small_language_model()), "w"),
        (lambda f: load_model(f), "r"),
    ],
    ids=["save_model", "load_model"],
)
def test_a_text_mode_file_object_is_refused_before_any_byte_moves(call, mode, tmp_path):
    path = tmp_path / "model.npz"
    path.write_text("")
    with open(path, mode) as file, pytest.raises(TypeError) as info:
        call(file)
    message = str(info.value)
    assert message.startswith("path must be a path or a binary file object")
    assert f"(open(..., '{mode}b'))" in message
    assert f"got a text-mode TextIOWrapper (mode '{mode}')" in message
    with pytest.raises(TypeError, match="got a text-mode StringIO: a checkpoint is bytes"):
        load_model(io.StringIO(""))
    assert path.read_text() == ""  # nothing was written


# -- a model of the wrong kind ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda m: generate(m, PROMPT, 2), "a LanguageModel or a LlamaModel"),
        (lambda m: stream(m, PROMPT, 2), "a LanguageModel or a LlamaModel"),
        (lambda m: beam_search(m, PROMPT, 2, num_beams=2), "a LanguageModel or a LlamaModel"),
        (lambda m: perplexity(m, PROMPT), "LanguageModel"),
        (lambda m: translate(m, SRC, 3, bos_id=1), "a Transformer"),
        (lambda m: save_model("x.npz", m), "a Transformer or a LanguageModel"),
    ],
    ids=["generate", "stream", "beam_search", "perplexity", "translate", "save_model"],
)
def test_a_model_of_the_wrong_kind_is_named_with_the_kinds_expected(call, expected):
    wrong = small_transformer() if "Transformer" not in expected else small_language_model()
    if "LanguageModel" in expected and "Transformer" in expected:
        wrong = object()
    with pytest.raises(TypeError, match="model must be") as info:
        result = call(wrong)
        next(iter(result))  # stream checks when it starts
    assert expected in str(info.value)
    assert type(wrong).__name__ in str(info.value)


# -- sampling and decoding settings -------------------------------------------------------------

SAMPLERS = {
    "sample_next": lambda **kw: sample_next(np.zeros((1, 10)), **kw),
    "generate": lambda **kw: generate(small_language_model(), PROMPT, 2, **kw),
    "stream": lambda **kw: next(stream(small_language_model(), PROMPT, 2, **kw)),
    "translate": lambda **kw: translate(small_transformer(), SRC, 3, bos_id=1, **kw),
}


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            {"temperature": -1.0},
            r"temperature must be a finite number >= 0 \(0 = greedy\), got -1.0",
        ),
        ({"temperature": 1.0, "top_k": 0}, r"top_k must be in \[1, vocab_size = \d+\], got 0"),
        ({"temperature": 1.0, "top_p": 1.5}, r"top_p must be a number in \(0, 1\], got 1.5"),
        ({"temperature": 0, "top_p": 0.9}, "top_p = 0.9 does nothing at temperature = 0"),
        ({"temperature": 0, "top_k": 5}, "top_k = 5 does nothing at temperature = 0"),
    ],
    ids=["negative-temperature", "top_k-0", "top_p-above-1", "top_p-greedy", "top_k-greedy"],
)
def test_a_sampling_setting_out_of_range_or_without_effect_is_refused(sampler, setting, message):
    with pytest.raises(ValueError, match=message):
        SAMPLERS[sampler](**setting)


BEAM_SEARCHES = {
    "beam_search": lambda **kw: beam_search(small_language_model(), PROMPT, 8, num_beams=2, **kw),
    "generate": lambda **kw: generate(small_language_model(), PROMPT, 8, num_beams=2, **kw),
    "translate": lambda **kw: translate(small_transformer(), SRC, 8, bos_id=1, num_beams=2, **kw),
}


@pytest.mark.parametrize("search", sorted(BEAM_SEARCHES))
@pytest.mark.parametrize("alpha", [1e4, -1e4])
@pytest.mark.parametrize("penalty", ["gnmt", "transformers"])
def test_a_length_penalty_that_would_overflow_the_scores_is_refused(search, alpha, penalty):
    # lp(8) = base ** alpha with base (5 + 8) / 6 or 8: |alpha| ln(base) must stay <= 354.9
    base = 13 / 6 if penalty == "gnmt" else 8
    most = math.log(np.finfo(np.float64).max) / 2 / math.log(base)
    with pytest.raises(ValueError, match=r"^length_penalty must be in \[-[\d.]+, [\d.]+\]") as info:
        BEAM_SEARCHES[search](length_penalty=alpha, penalty=penalty)
    assert f"[-{most:.4g}, {most:.4g}]" in str(info.value)
    assert f"Got length_penalty = {alpha:g}" in str(info.value)
    # just inside the bound, the search runs and its score is finite
    sequences, scores = beam_search(
        small_language_model(), PROMPT, 8, num_beams=2, length_penalty=0.99 * most * np.sign(alpha),
        penalty=penalty,
    )  # fmt: skip
    assert np.isfinite(scores).all() and sequences.shape[1] > PROMPT.shape[1]


def test_beam_search_stops_at_the_models_own_end_token_by_default():
    # as transformers takes eos_token_id from the model: config.eos_id, unless told another
    cfg = dict(vocab_size=12, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=24, max_len=32)
    plain = LlamaModel(LlamaConfig(**cfg, dtype="float64"), rng=0)
    free, _ = beam_search(plain, PROMPT, 12, num_beams=2)
    assert free.shape[1] == PROMPT.shape[1] + 12  # no end token: the search runs to the end
    end = int(free[0, PROMPT.shape[1] + 2])  # a token the best beam writes at step 3
    with_end = LlamaModel(LlamaConfig(**cfg, dtype="float64", eos_id=end), rng=0)
    by_default = beam_search(with_end, PROMPT, 12, num_beams=2)
    told = beam_search(plain, PROMPT, 12, num_beams=2, eos_id=end)
    np.testing.assert_array_equal(by_default[0], told[0])
    assert by_default[0][0, -1] == end and by_default[0].shape[1] <= PROMPT.shape[1] + 3
    with pytest.raises(
        ValueError, match=r"LlamaConfig.eos_id must be a token id below vocab_size = 12"
    ):
        LlamaConfig(**cfg, eos_id=12)


# -- tokenizer input ------------------------------------------------------------------------------


def test_an_empty_conversation_is_refused():
    pytest.importorskip("jinja2")
    from transformer_np.pretrained import load_smollm2_tokenizer

    tokenizer = load_smollm2_tokenizer()
    for call in (tokenizer.chat_ids, tokenizer.apply_chat_template):
        with pytest.raises(
            ValueError, match=r"messages must hold at least one message.*got an empty list"
        ):
            call([])


# -- results beyond the float range ---------------------------------------------------------------


def test_a_perplexity_beyond_the_largest_float_is_inf_not_an_overflow_error():
    model = small_language_model(dtype="float64")
    model.params["out.b"][:] = 0.0
    model.params["out.b"][0] = 1e4  # every token but 0 costs about 1e4 nats
    ids = np.array([3, 4, 5, 6, 7, 8])
    assert perplexity(model, ids) == math.inf
    assert 1e4 / math.log(2) * 0.99 < bits_per_byte(model, ids, 5) < math.inf  # still finite
    model.params["out.b"][0] = 700.0  # a mean within a few nats of 700: a finite perplexity
    assert 1e290 < perplexity(model, ids) < math.inf


def test_training_that_overflows_a_layer_norm_is_a_training_divergence():
    model = small_language_model(d_model=16, n_layers=2)
    ids = np.random.default_rng(0).integers(0, 10, (4, 9))

    def batches(step):
        return ids[:, :-1], ids[:, 1:]

    with pytest.raises(TrainingDiverged, match=r"^training diverged at step \d+ \(") as info:
        fit(model, batches, steps=50, optimizer=Adam(model.params, lr=1e8), clip_norm=None,
            progress=False)  # fmt: skip
    assert "nothing was saved" in str(info.value)
    assert all(np.isfinite(p).all() for p in model.params.values())
