"""train.py: one step (train_step), the loop (fit) with its progress bar and NaN guard, and the
demos in miniature.

Sections: values, then errors (bad arguments of train_step and fit, the checkpoint path checked
before training, divergence). The optimiser is tested in test_optim.py, saving and loading in
test_checkpoints.py.
"""

from __future__ import annotations

import importlib
import io
import re

import numpy as np
import pytest

from transformer_np.checkpoints import load_model, save_model
from transformer_np.losses import CrossEntropyLoss, cross_entropy
from transformer_np.model import LanguageModel, LanguageModelConfig
from transformer_np.optim import Adam
from transformer_np.train import TrainingDiverged, fit, train_step

from helpers import assert_parameters_unchanged, parameter_snapshot, rounding_tol


def tiny_lm(**kw):
    """A float32 language model of 6 tokens, small enough for 60 steps in a test."""
    cfg = {"vocab_size": 6, "d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16}
    cfg.update(kw)
    return LanguageModel(LanguageModelConfig(**cfg), rng=0)


def cyclic_batch(step=None):
    """Next-token prediction on the sequence 0 1 2 3 4 5 0 1 2 ... (a deterministic task)."""
    x = (np.arange(12)[None, :] + np.arange(8)[:, None]) % 6  # (8, 12), shifted copies
    return x[:, :-1], x[:, 1:]


def float64_lm(seed=0):
    """A float64 language model of 10 tokens, for the error tests."""
    cfg = LanguageModelConfig(vocab_size=10, d_model=8, n_heads=2, max_len=6, dtype="float64")
    return LanguageModel(cfg, rng=seed)


IDS = np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])
BATCH = (IDS, (IDS + 1) % 10)


def run_fit(lm=None, **kwargs):
    """Two steps of ``fit`` on ``BATCH``, no progress bar; ``kwargs`` override the arguments."""
    lm = float64_lm() if lm is None else lm
    args = {"steps": 2, "optimizer": Adam(lm.params), "progress": False}
    args.update(kwargs)
    return fit(lm, lambda step: BATCH, **args)


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self):
        return True


# ============================================================================================
# values
# ============================================================================================


def test_fit_learns_a_deterministic_sequence():
    model = tiny_lm()
    opt = Adam(model.params, lr=3e-3)
    history = fit(model, cyclic_batch, steps=60, optimizer=opt, progress=False)
    assert history["stopped"] == "steps"
    assert len(history["loss"]) == 60
    assert history["loss"][-1] < 0.2 * history["loss"][0]
    x, y = cyclic_batch()
    assert np.mean(model(x).argmax(-1) == y) == 1.0


def test_fit_accepts_an_iterable_and_stops_on_callback_and_evaluates():
    model = tiny_lm()
    opt = Adam(model.params, lr=1e-3)
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


@pytest.mark.parametrize("mode", [True, False])
def test_fit_restores_the_mode_the_model_had(mode):
    lm = float64_lm().train(mode)
    run_fit(lm, eval_fn=lambda m: {"n": 1})
    assert lm.training is mode


def test_train_step_clips_the_gradient():
    model = tiny_lm()
    opt = Adam(model.params, lr=1e-3)
    loss, norm = train_step(model, cyclic_batch(), opt, clip_norm=1e-3)
    assert norm > 1e-3
    grads = model.grads.values()
    total = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    assert total == pytest.approx(1e-3, rel=1e-3)  # 1e-3 norm / (norm + 1e-6): near 1e-3
    # exactly that scale, up to the roundings of the float32 gradients (the scale cast to
    # float32 and the product) and of the sums of squares in float64 (and the sqrt)
    expected = 1e-3 / (norm + 1e-6) * norm
    n_values = sum(g.size for g in grads)
    rel = rounding_tol(np.float32, 2) + rounding_tol(np.float64, n_values + 6)
    assert total == pytest.approx(expected, rel=rel, abs=0)


def test_progress_bar_writes_to_the_given_stream():
    out = io.StringIO()
    model = tiny_lm()
    fit(model, cyclic_batch, steps=20, optimizer=Adam(model.params), stream=out)
    text = out.getvalue()
    assert "20/20" in text and "loss=" in text and "it/s" in text
    draws = [line for line in re.split(r"[\r\n]", text) if line.strip()]  # tqdm redraws on "\r"
    assert len(draws) <= 11  # not a tty: about one draw per 10%
    assert "20/20" in draws[-1] and "loss=" in draws[-1]


def test_progress_bar_redraws_in_place_on_a_terminal():
    out = Terminal()
    model = tiny_lm()
    fit(model, cyclic_batch, steps=3, optimizer=Adam(model.params), stream=out, desc="x")
    assert "\r" in out.getvalue() and "3/3" in out.getvalue()
    assert out.getvalue().lstrip("\r").startswith("x:")  # the label, then the bar


def test_progress_bar_shows_the_evaluations_on_lines_of_their_own():
    out = io.StringIO()
    model = tiny_lm()
    fit(
        model,
        cyclic_batch,
        steps=10,
        optimizer=Adam(model.params),
        eval_fn=lambda m: {"val": 0.25, "n": 3},
        eval_every=5,
        stream=out,
    )
    lines = re.split(r"[\r\n]", out.getvalue())  # the bar is redrawn after "\r"
    assert "step 5: val=0.25 n=3" in lines and "step 10: val=0.25 n=3" in lines


def test_progress_false_writes_nothing():
    out = io.StringIO()
    model = tiny_lm()
    fit(
        model,
        cyclic_batch,
        steps=4,
        optimizer=Adam(model.params),
        eval_fn=lambda m: {"val": 1.0},
        eval_every=2,
        progress=False,
        stream=out,
    )
    assert out.getvalue() == ""


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
        n_val=50,
        n_test=100,
        target=2.0,
        progress=False,
    )
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert history["test_accuracy"] > 0.3


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
    demo = importlib.import_module(f"transformer_np.examples.{module}")
    path = tmp_path / f"{module}.npz"
    assert demo.main(["--quick", "--steps", "10", "--no-progress", "--save", str(path)]) == 0
    out = capsys.readouterr().out
    assert "parameters" in out and f"saved to {path}" in out
    model, extra = load_model(path, return_extra=True)
    assert len(extra["loss"]) == 10


# ============================================================================================
# errors
# ============================================================================================

# -------------------------------------------------------------- bad arguments of train_step


def test_train_step_refuses_an_optimizer_of_another_model():
    lm, other = float64_lm(0), float64_lm(1)
    opt = Adam(other.params, lr=0.1)
    lm_before, other_before = parameter_snapshot(lm), parameter_snapshot(other)
    with pytest.raises(ValueError, match=r"optimizer was not built on this model's parameters"):
        train_step(lm, BATCH, opt)
    assert_parameters_unchanged(lm, lm_before)
    assert_parameters_unchanged(other, other_before)
    assert opt.t == 0


def test_train_step_refuses_an_optimizer_of_copies():
    lm = float64_lm()
    opt = Adam({k: v.copy() for k, v in lm.params.items()})
    n = len(lm.params)
    with pytest.raises(ValueError, match=rf"{n} of {n} arrays \(first 'embed.W'\) are not the mo"):
        train_step(lm, BATCH, opt)


def test_train_step_refuses_an_optimizer_of_part_of_the_model():
    lm = float64_lm()
    opt = Adam({k: v for k, v in lm.params.items() if k != "embed.W"})
    with pytest.raises(ValueError, match=r"other parameter names \(the model's \['embed.W'\] are"):
        train_step(lm, BATCH, opt)


def test_train_step_accepts_the_model_arrays_in_any_order():
    lm = float64_lm()
    opt = Adam(dict(reversed(list(lm.params.items()))))
    train_step(lm, BATCH, opt)
    assert opt.t == 1


def test_train_step_refuses_something_that_is_not_an_optimizer():
    lm = float64_lm()
    with pytest.raises(TypeError, match=r"optimizer must be .*Adam\(model.params\)"):
        train_step(lm, BATCH, lm.params)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"clip_norm": "1"}, TypeError, r"clip_norm must be a positive finite number or None.*'1'"),
        ({"clip_norm": 0}, ValueError, "clip_norm must be a positive finite number or None"),
        ({"clip_norm": float("nan")}, ValueError, "clip_norm must be a positive finite"),
        (
            {"loss_fn": cross_entropy},
            TypeError,
            r"loss_fn must be a loss object.*function cross_entropy.*CrossEntropyLoss\(\)",
        ),
    ],
)
def test_train_step_bad_arguments(kwargs, error, message):
    lm = float64_lm()
    opt = Adam(lm.params)
    before = parameter_snapshot(lm)
    with pytest.raises(error, match=message):
        train_step(lm, BATCH, opt, **kwargs)
    assert_parameters_unchanged(lm, before)
    assert opt.t == 0


@pytest.mark.parametrize(
    ("batch", "error", "message"),
    [
        (IDS, TypeError, r"batch must be a tuple \(\*inputs, targets\), \(ids, next_ids\)"),
        ((IDS,), ValueError, r"batch for a LanguageModel must have 2 elements.*got 1"),
        ((IDS, IDS, IDS), ValueError, "must have 2 elements"),
    ],
)
def test_train_step_bad_batch(batch, error, message):
    lm = float64_lm()
    with pytest.raises(error, match=message):
        train_step(lm, batch, Adam(lm.params))


def test_bad_token_ids_are_an_error_not_a_divergence():
    lm = float64_lm()
    ids = IDS.copy()
    ids[0, 0] = 99  # outside the vocabulary of 10
    with pytest.raises(ValueError, match=r"token ids in \[0, 10\)") as error:
        train_step(lm, (ids, IDS), Adam(lm.params))
    assert not isinstance(error.value, TrainingDiverged)


def test_loss_returning_a_tuple_is_a_clear_error():
    class TupleLoss(CrossEntropyLoss):
        def __call__(self, logits, targets):
            return cross_entropy(logits, targets)

    lm = float64_lm()
    with pytest.raises(TypeError, match="loss_fn must return the loss as a number, got tuple"):
        train_step(lm, BATCH, Adam(lm.params), TupleLoss())


# -------------------------------------------------------------------- bad arguments of fit


def test_fit_rejects_bad_arguments():
    model = tiny_lm()
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        fit(model, cyclic_batch, steps=0, optimizer=Adam(model.params))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"time_limit": "5"}, TypeError, "time_limit must be a positive number.*str"),
        ({"time_limit": float("nan")}, ValueError, "time_limit must be a positive finite"),
        ({"eval_every": -1}, ValueError, r"eval_every must be an integer >= 0.*-1"),
        ({"eval_every": 1.5}, TypeError, r"eval_every must be an integer >= 0.*float"),
        ({"eval_every": True}, TypeError, r"eval_every must be an integer >= 0.*bool"),
        ({"steps": True}, TypeError, "steps must be a positive integer.*bool"),
        ({"steps": 1.5}, TypeError, "steps must be a positive integer"),
        ({"clip_norm": "1"}, TypeError, "clip_norm must be a positive finite number or None"),
        ({"progress": "no"}, TypeError, "progress must be True or False, got 'no'"),
        ({"single_blas_thread": 1}, TypeError, "single_blas_thread must be True or False"),
        ({"eval_fn": 3}, TypeError, "eval_fn must be a callable"),
        ({"callback": "stop"}, TypeError, "callback must be a callable"),
        ({"overwrite_checkpoint": "yes"}, TypeError, "overwrite_checkpoint must be True or"),
        ({"stream": 2}, TypeError, r"stream must be a text stream with a write\(\) method.*int"),
    ],
)
def test_fit_bad_arguments_fail_before_training(kwargs, error, message):
    lm = float64_lm()
    opt = Adam(lm.params)
    before = parameter_snapshot(lm)
    with pytest.raises(error, match=message):
        run_fit(lm, optimizer=opt, **kwargs)
    assert_parameters_unchanged(lm, before)
    assert opt.t == 0


def test_fit_refuses_batches_that_are_neither_callable_nor_iterable():
    lm = float64_lm()
    with pytest.raises(TypeError, match="batches must be a callable batches"):
        fit(lm, 3, steps=1, optimizer=Adam(lm.params), progress=False)


def test_fit_refuses_an_optimizer_of_another_model_before_training():
    lm, other = float64_lm(0), float64_lm(1)
    with pytest.raises(ValueError, match="optimizer was not built on this model's parameters"):
        run_fit(lm, optimizer=Adam(other.params))


def test_eval_fn_must_return_a_dict():
    lm = float64_lm()
    with pytest.raises(TypeError, match="eval_fn must return a dict of metrics.*got float 1.0"):
        run_fit(lm, eval_fn=lambda m: 1.0)


def test_fit_with_too_few_batches_says_how_many_were_used():
    lm = float64_lm()
    with pytest.raises(ValueError, match=r"batches ran out after 2 batch\(es\), but steps=3"):
        fit(lm, [BATCH, BATCH], steps=3, optimizer=Adam(lm.params), progress=False)


def test_fit_restores_the_mode_after_an_error():
    lm = float64_lm().train(True)

    def broken(m):
        raise RuntimeError("eval failed")

    with pytest.raises(RuntimeError, match="eval failed"):
        run_fit(lm, eval_fn=broken)
    assert lm.training is True


# ------------------------------------------------------- the checkpoint path, before training


def test_fit_checks_the_checkpoint_directory_before_training(tmp_path):
    lm = float64_lm()
    opt = Adam(lm.params)
    missing = tmp_path / "missing" / "m.npz"
    with pytest.raises(FileNotFoundError, match=r"directory .*missing.* does not exist"):
        run_fit(lm, optimizer=opt, checkpoint=missing)
    assert opt.t == 0


def test_fit_does_not_replace_an_existing_checkpoint_unless_allowed(tmp_path):
    path = tmp_path / "m.npz"
    path.write_bytes(b"the user's file")
    lm = float64_lm()
    opt = Adam(lm.params)
    with pytest.raises(FileExistsError, match=r"m\.npz' already exists.*overwrite_checkpoint"):
        run_fit(lm, optimizer=opt, checkpoint=path)
    assert opt.t == 0  # refused before training
    assert path.read_bytes() == b"the user's file"
    run_fit(lm, optimizer=opt, checkpoint=path, overwrite_checkpoint=True)
    np.testing.assert_array_equal(load_model(path).params["embed.W"], lm.params["embed.W"])


def test_fit_checkpoint_without_suffix_is_checked_as_npz(tmp_path):
    (tmp_path / "m.npz").write_bytes(b"the user's file")
    with pytest.raises(FileExistsError, match=r"m\.npz"):
        run_fit(checkpoint=tmp_path / "m")


@pytest.mark.parametrize("demo", ["reverse", "charlm"])
def test_demo_save_keeps_an_existing_file_unless_overwrite(demo, tmp_path, capsys):
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


# ------------------------------------------------------------------------------ divergence


def test_nan_loss_stops_training_with_a_message_and_saves_nothing(tmp_path):
    model = tiny_lm()
    opt = Adam(model.params, lr=1e-3)

    def poison(step, history):
        if step == 3:
            model.params["embed.W"][0, 0] = np.nan
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
    opt = Adam(model.params, lr=1e-3)
    before = {k: v.copy() for k, v in model.params.items()}
    with pytest.raises(TrainingDiverged, match=r"grad_logits contains inf"):
        train_step(model, cyclic_batch(), opt, NanGradient())
    for k, v in model.params.items():
        np.testing.assert_array_equal(v, before[k])
    assert opt.t == 0


def test_nan_loss_of_a_loss_of_ones_own_is_a_divergence():
    class NanLoss(CrossEntropyLoss):
        def __call__(self, logits, targets):
            return float("nan")

    lm = float64_lm()
    opt = Adam(lm.params)
    before = parameter_snapshot(lm)
    with pytest.raises(TrainingDiverged, match="the loss is nan"):
        train_step(lm, BATCH, opt, NanLoss())
    assert_parameters_unchanged(lm, before)
    assert opt.t == 0


def test_huge_learning_rate_diverges_and_keeps_the_last_finite_parameters(tmp_path):
    """With lr = 1e5 and no clipping, float32 training explodes within a few steps: the norm of
    the gradients overflows to inf. fit must stop there with TrainingDiverged, keep the
    parameters of the last finite step (all finite) and save nothing."""
    model = tiny_lm(norm_first=False)
    opt = Adam(model.params, lr=1e5)
    finished = {"step": 0, "params": parameter_snapshot(model)}

    def remember(step, history):  # called after every step that ended well
        finished["step"], finished["params"] = step, parameter_snapshot(model)

    path = tmp_path / "model.npz"
    with pytest.raises(TrainingDiverged, match=r"the gradient norm is inf") as diverged:
        fit(
            model,
            cyclic_batch,
            steps=30,
            optimizer=opt,
            clip_norm=None,
            callback=remember,
            checkpoint=path,
            progress=False,
        )
    assert 1 <= finished["step"] < 29  # it trained, and diverged well before the end
    assert f"diverged at step {finished['step'] + 1} (" in str(diverged.value)
    assert opt.t == finished["step"]  # the diverging step made no update
    for name, value in model.params.items():
        assert np.isfinite(value).all(), name
        np.testing.assert_array_equal(value, finished["params"][name], err_msg=name)
    assert not path.exists()


def test_divergence_is_still_reported_as_training_diverged(tmp_path):
    lm = float64_lm()

    def poison(step, history):
        lm.params["embed.W"][0, 0] = np.nan

    with pytest.raises(TrainingDiverged, match="diverged at step 2"):
        run_fit(lm, callback=poison, checkpoint=tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()
