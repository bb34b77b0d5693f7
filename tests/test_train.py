"""Training loop, progress bar, NaN guard, checkpoints, and the demos in miniature."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from transformer_np.losses import CrossEntropyLoss
from transformer_np.model import LanguageModel, LanguageModelConfig, Transformer, TransformerConfig
from transformer_np.optim import Adam
from transformer_np.train import (
    ProgressBar,
    TrainingDiverged,
    fit,
    load_model,
    save_model,
    train_step,
)


def tiny_lm(**kw):
    cfg = {"vocab_size": 6, "d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16}
    cfg.update(kw)
    return LanguageModel(LanguageModelConfig(**cfg), rng=0)


def cyclic_batch(step=None):
    """Next-token prediction on the sequence 0 1 2 3 4 5 0 1 2 ... (a deterministic task)."""
    x = (np.arange(12)[None, :] + np.arange(8)[:, None]) % 6  # (8, 12), shifted copies
    return x[:, :-1], x[:, 1:]


def test_fit_learns_a_deterministic_sequence():
    model = tiny_lm()
    opt = Adam(model.parameters(), lr=3e-3)
    history = fit(model, cyclic_batch, steps=60, optimizer=opt, progress=False)
    assert history["stopped"] == "steps"
    assert len(history["loss"]) == 60
    assert history["loss"][-1] < 0.2 * history["loss"][0]
    x, y = cyclic_batch()
    assert np.mean(model(x).argmax(-1) == y) == 1.0


def test_fit_accepts_an_iterable_and_stops_on_callback_and_evaluates():
    model = tiny_lm()
    opt = Adam(model.parameters(), lr=1e-3)
    calls = []
    history = fit(
        model,
        (cyclic_batch() for _ in range(100)),
        steps=50,
        optimizer=opt,
        eval_fn=lambda m: calls.append(m.training) or {"n": len(calls)},
        eval_every=2,
        callback=lambda step, h: step == 5,
        progress=False,
    )
    assert history["stopped"] == "callback" and history["step"][-1] == 5
    assert calls == [False, False, False]  # steps 2, 4 and the end, always in eval mode
    assert not model.training


def test_progress_bar_writes_to_the_given_stream():
    out = io.StringIO()
    model = tiny_lm()
    fit(model, cyclic_batch, steps=20, optimizer=Adam(model.parameters()), stream=out)
    text = out.getvalue()
    assert "20/20" in text and "loss=" in text and "it/s" in text
    assert len(text.splitlines()) <= 11  # not a tty: about one line per 10%


def test_progress_bar_redraws_in_place_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bar = ProgressBar(3, desc="x", stream=out)
    for _ in range(3):
        bar.update()
    bar.close()
    assert "\r" in out.getvalue() and "3/3" in out.getvalue()


def test_train_step_clips_the_gradient():
    model = tiny_lm()
    opt = Adam(model.parameters(), lr=1e-3)
    loss, norm = train_step(model, cyclic_batch(), opt, clip_norm=1e-3)
    assert norm > 1e-3
    total = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in model.gradients().values()))
    assert total == pytest.approx(1e-3, rel=1e-3)


# --------------------------------------------------------------------------------------------
# divergence


def test_nan_loss_stops_training_with_a_message_and_saves_nothing(tmp_path):
    model = tiny_lm()
    opt = Adam(model.parameters(), lr=1e-3)

    def poison(step, history):
        if step == 3:
            model.parameters()["embed.W"][0, 0] = np.nan
        return False

    path = tmp_path / "model.npz"
    with pytest.raises(TrainingDiverged, match=r"diverged at step 4.*nothing was saved"):
        fit(
            model,
            cyclic_batch,
            steps=10,
            optimizer=opt,
            callback=poison,
            checkpoint=path,
            progress=False,
        )
    assert not path.exists()
    with pytest.raises(ValueError, match="refusing to save a diverged model"):
        save_model(path, model)
    assert not path.exists()


def test_non_finite_gradient_leaves_the_parameters_untouched():
    class NanGradient(CrossEntropyLoss):
        def backward(self, grad_output=1.0):
            g = super().backward(grad_output).copy()
            g[0, 0, 0] = np.inf
            return g

    model = tiny_lm()
    opt = Adam(model.parameters(), lr=1e-3)
    before = {k: v.copy() for k, v in model.parameters().items()}
    with pytest.raises(TrainingDiverged, match="gradient norm"):
        train_step(model, cyclic_batch(), opt, NanGradient())
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(v, before[k])
    assert opt.t == 0


def test_huge_learning_rate_diverges_cleanly_or_stays_finite():
    """With lr = 1e4 and no clipping training explodes; it must end in TrainingDiverged (never
    with NaN parameters), or else stay finite."""
    model = tiny_lm(norm_first=False)
    opt = Adam(model.parameters(), lr=1e4)
    try:
        fit(model, cyclic_batch, steps=30, optimizer=opt, clip_norm=None, progress=False)
    except TrainingDiverged:
        pass
    for v in model.parameters().values():
        assert np.isfinite(v).all()


def test_fit_rejects_bad_arguments():
    model = tiny_lm()
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        fit(model, cyclic_batch, steps=0, optimizer=Adam(model.parameters()))


# --------------------------------------------------------------------------------------------
# checkpoints


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_save_and_load_round_trip_without_pickle(tmp_path, kind):
    if kind == "lm":
        model = tiny_lm(tie_embeddings=False, dropout=0.1)
        inputs = (np.array([[1, 2, 3]]),)
    else:
        cfg = TransformerConfig(
            src_vocab_size=7,
            tgt_vocab_size=8,
            d_model=16,
            n_heads=2,
            norm_first=True,
            tie_embeddings=True,
        )
        model = Transformer(cfg, rng=1)
        inputs = (np.array([[3, 4, 0]]), np.array([[1, 5]]))
    path = tmp_path / "ckpt.npz"
    save_model(path, model, extra={"vocab": np.array(list("abcdef"))})
    loaded, extra = load_model(path, return_extra=True)
    assert type(loaded) is type(model) and loaded.config == model.config
    np.testing.assert_array_equal(loaded(*inputs), model.eval()(*inputs))
    assert extra["vocab"].tolist() == list("abcdef")
    with np.load(path, allow_pickle=False) as data:  # plain arrays only
        assert str(data["config"]).startswith("{")
        assert all(data[k].dtype != object for k in data.files)
    with zipfile.ZipFile(path) as z:
        assert all(name.endswith(".npy") for name in z.namelist())


def test_load_rejects_files_that_are_not_checkpoints(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, a=np.zeros(3))
    with pytest.raises(ValueError, match="not a transformer_np checkpoint"):
        load_model(path)


def test_save_rejects_object_arrays(tmp_path):
    with pytest.raises(TypeError, match="pickle"):
        save_model(tmp_path / "x.npz", tiny_lm(), extra={"bad": np.array([{}], dtype=object)})


# --------------------------------------------------------------------------------------------
# the demos, in miniature (the full runs are command-line scripts)


def test_reverse_demo_learns_in_miniature():
    from transformer_np.examples.reverse import train_reverse

    _, history, _ = train_reverse(
        min_len=2,
        max_len=4,
        d_model=32,
        n_layers=1,
        steps=150,
        eval_every=50,
        warmup=50,
        n_heldout=100,
        target=2.0,
        progress=False,
    )
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert history["heldout_accuracy"] > 0.3


def test_charlm_demo_improves_in_miniature():
    from transformer_np.examples.charlm import CharVocab, load_text, train_charlm

    text = load_text()
    assert text.startswith("C'era una volta") and "Geppetto" in text
    vocab = CharVocab(text)
    assert vocab.decode(vocab.encode("Pinocchio")) == "Pinocchio"
    _, _, history, samples = train_charlm(
        steps=60,
        context=32,
        batch_size=16,
        d_model=32,
        n_layers=1,
        sample_every=30,
        sample_len=20,
        progress=False,
    )
    val = [metrics["val_loss"] for _, metrics in history["eval"]]
    assert val[-1] < val[0] < np.log(len(vocab)) + 0.5
    assert [step for step, _ in samples] == [0, 30, 60]
    assert all(text.startswith("C'era una volta") for _, text in samples)


@pytest.mark.parametrize("module", ["reverse", "charlm"])
def test_demo_command_lines_run_and_save_a_checkpoint(module, tmp_path, capsys):
    import importlib

    demo = importlib.import_module(f"transformer_np.examples.{module}")
    path = tmp_path / f"{module}.npz"
    assert demo.main(["--quick", "--steps", "10", "--no-progress", "--save", str(path)]) == 0
    out = capsys.readouterr().out
    assert "parameters" in out and f"saved to {path}" in out
    model, extra = load_model(path, return_extra=True)
    assert len(extra["loss"]) == 10


@pytest.mark.parametrize("demo", ["reverse", "charlm"])
def test_demo_save_keeps_an_existing_file_unless_overwrite(demo, tmp_path, capsys):
    import importlib

    main = importlib.import_module(f"transformer_np.examples.{demo}").main
    mine = tmp_path / "mine.npz"
    mine.write_bytes(b"precious")
    with pytest.raises(SystemExit) as stop:  # refused before any training
        main(["--quick", "--save", str(mine), "--no-progress"])
    assert stop.value.code == 2
    assert "already exists: pass --overwrite" in capsys.readouterr().err
    assert mine.read_bytes() == b"precious"
    with pytest.raises(SystemExit):
        main(["--quick", "--save", str(tmp_path / "missing" / "m.npz"), "--no-progress"])
    assert "does not exist" in capsys.readouterr().err
