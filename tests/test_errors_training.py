"""Bad input to the optimiser, the training loop and checkpoints: a clear ValueError or TypeError
(or FileExistsError, FloatingPointError where that is the meaning) that names the argument, and
never a silent NaN, a half-updated optimiser or a lost file."""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

from transformer_np.losses import CrossEntropyLoss, cross_entropy
from transformer_np.model import LanguageModel, LanguageModelConfig
from transformer_np.optim import Adam, NoamSchedule, clip_grad_norm, global_norm, noam_lr
from transformer_np.train import TrainingDiverged, fit, load_model, save_model, train_step


def make_lm(seed=0):
    cfg = LanguageModelConfig(vocab_size=10, d_model=8, n_heads=2, max_len=6, dtype="float64")
    return LanguageModel(cfg, rng=seed)


IDS = np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])
BATCH = (IDS, (IDS + 1) % 10)


def snapshot(model):
    return {k: v.copy() for k, v in model.parameters().items()}


def assert_unchanged(model, before):
    for k, v in model.parameters().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def opt_state(opt):
    return opt.m.copy(), opt.v.copy(), opt.t


def assert_opt_unchanged(opt, state):
    m, v, t = state
    np.testing.assert_array_equal(opt.m, m)
    np.testing.assert_array_equal(opt.v, v)
    assert opt.t == t


# ------------------------------------------------------------------ Adam.load_state_dict


def stepped_optimizer():
    params = {"a": np.array([1.0, 2.0]), "b": np.array([[3.0], [4.0]])}
    opt = Adam(params, lr=0.1)
    opt.step({"a": np.array([0.5, -0.5]), "b": np.array([[1.0], [2.0]])})
    return opt


def test_load_state_dict_without_t_changes_nothing():
    opt = stepped_optimizer()
    state = opt_state(opt)
    with pytest.raises(ValueError, match=r"state must have exactly the keys.*missing \['t'\]"):
        opt.load_state_dict({"m": np.ones(4), "v": np.ones(4)})
    assert_opt_unchanged(opt, state)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"m": np.ones(2)}, ValueError, r"state\['m'\] must have shape \(4,\).*got \(2,\)"),
        ({"v": np.ones((2, 2))}, ValueError, r"state\['v'\] must have shape \(4,\)"),
        ({"m": np.array([1.0, np.nan, 0, 0])}, ValueError, r"state\['m'\] contains NaN"),
        ({"v": np.array([1.0, np.inf, 0, 0])}, ValueError, r"state\['v'\] contains inf"),
        ({"v": -np.ones(4)}, ValueError, r"state\['v'\] must be >= 0"),
        ({"m": np.array(["a"] * 4)}, TypeError, r"state\['m'\] must be an array of real numbers"),
        ({"t": -1}, ValueError, r"state\['t'\] must be an integer >= 0.*-1"),
        ({"t": 1.5}, ValueError, r"state\['t'\] must be an integer >= 0.*float"),
        ({"t": np.array(True)}, ValueError, r"state\['t'\] must be an integer >= 0"),
        ({"extra": np.ones(1)}, ValueError, r"unexpected \['extra'\]"),
    ],
)
def test_load_state_dict_checks_everything_before_copying(change, error, message):
    opt = stepped_optimizer()
    state = opt_state(opt)
    bad = {"m": np.full(4, 7.0), "v": np.full(4, 7.0), "t": np.array(9)} | change
    with pytest.raises(error, match=message):
        opt.load_state_dict(bad)
    assert_opt_unchanged(opt, state)


def test_load_state_dict_rejects_a_non_dict_and_still_round_trips():
    opt = stepped_optimizer()
    with pytest.raises(TypeError, match="state must be a dict with keys 'm', 'v' and 't'"):
        opt.load_state_dict([1, 2, 3])
    other = Adam({"a": np.zeros(2), "b": np.zeros((2, 1))})
    other.load_state_dict(opt.state_dict())
    np.testing.assert_array_equal(other.m, opt.m)
    assert other.t == opt.t == 1


# ------------------------------------------------------------------ Adam hyperparameters


@pytest.mark.parametrize("wd", [float("nan"), float("inf"), -0.1, "0", None, True])
def test_bad_weight_decay_is_refused_at_construction(wd):
    with pytest.raises(ValueError, match="weight_decay must be a finite number >= 0"):
        Adam({"w": np.ones(2)}, weight_decay=wd)


@pytest.mark.parametrize(
    ("betas", "error", "message"),
    [
        ((0.9,), ValueError, r"betas must be a pair \(beta1, beta2\).*\(0\.9,\)"),
        (0.9, TypeError, r"betas must be a pair \(beta1, beta2\).*float"),
        ("ab", TypeError, "betas must be a pair"),
        ((0.9, 0.98, 0.5), ValueError, "betas must be a pair"),
        ((0.9, float("nan")), ValueError, r"betas\[1\] must be a number in \[0, 1\), got nan"),
        ((1.0, 0.9), ValueError, r"betas\[0\] must be a number in \[0, 1\), got 1\.0"),
        (("0.9", 0.98), ValueError, r"betas\[0\] must be a number in \[0, 1\).*str"),
        ((0.9, None), ValueError, r"betas\[1\] must be a number"),
    ],
)
def test_bad_betas(betas, error, message):
    with pytest.raises(error, match=message):
        Adam({"w": np.ones(2)}, betas=betas)


@pytest.mark.parametrize("eps", [0.0, float("nan"), float("inf"), "1e-9", None])
def test_bad_eps(eps):
    with pytest.raises(ValueError, match="eps must be a positive finite number"):
        Adam({"w": np.ones(2)}, eps=eps)


@pytest.mark.parametrize("lr", [float("inf"), True, None, "0.1"])
def test_bad_lr_at_construction(lr):
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        Adam({"w": np.ones(2)}, lr=lr)


# ------------------------------------------------------------------ Adam.step


def two_params():
    params = {"a": np.zeros(2), "b": np.zeros(4)}
    opt = Adam(params, lr=0.1)
    opt.step({"a": np.ones(2), "b": np.ones(4)})
    return params, opt


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_gradient_is_refused_and_nothing_changes(bad):
    params, opt = two_params()
    before = {k: v.copy() for k, v in params.items()}
    state = opt_state(opt)
    g = np.ones(4)
    g[2] = bad
    with pytest.raises(FloatingPointError, match=r"grads\['b'\] contains (NaN|inf).*\(2,\)"):
        opt.step({"a": np.ones(2), "b": g})
    assert_opt_unchanged(opt, state)
    for k, v in params.items():
        np.testing.assert_array_equal(v, before[k])


def test_gradient_that_overflows_the_parameter_dtype_is_refused():
    params = {"w": np.zeros(2, dtype=np.float32)}
    opt = Adam(params, lr=0.1)
    with pytest.raises(FloatingPointError, match=r"grads\['w'\] overflows float32"):
        opt.step({"w": np.array([1e300, 1.0])})
    assert opt.t == 0 and not opt.m.any() and not params["w"].any()


@pytest.mark.parametrize(
    ("grads", "error", "message"),
    [
        (
            {"a": np.arange(4.0), "b": np.arange(2.0)},
            ValueError,
            r"grads\['a'\] must have the shape of params\['a'\], \(2,\), got \(4,\)",
        ),
        ({"a": np.ones(2), "b": np.ones(5)}, ValueError, r"grads\['b'\] must have the shape"),
        ({"a": np.ones((2, 1)), "b": np.ones(4)}, ValueError, r"got \(2, 1\)"),
        (
            {"a": np.array(["x", "y"]), "b": np.ones(4)},
            TypeError,
            r"grads\['a'\] must be an array of real numbers",
        ),
        ({"a": np.ones(2, bool), "b": np.ones(4)}, TypeError, r"grads\['a'\].*dtype bool"),
        ({"a": np.ones(2)}, ValueError, r"missing \['b'\]"),
        ([np.ones(2), np.ones(4)], TypeError, "grads must be a dict"),
    ],
)
def test_bad_gradients_are_refused_before_any_change(grads, error, message):
    params, opt = two_params()
    before = {k: v.copy() for k, v in params.items()}
    state = opt_state(opt)
    with pytest.raises(error, match=message):
        opt.step(grads)
    assert_opt_unchanged(opt, state)
    for k, v in params.items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.parametrize("lr", ["0.1", 0.0, float("nan"), lambda step: -1.0])
def test_bad_lr_argument_of_step_changes_nothing(lr):
    params, opt = two_params()
    before = {k: v.copy() for k, v in params.items()}
    state = opt_state(opt)
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        opt.step({"a": np.ones(2), "b": np.ones(4)}, lr=lr)
    assert_opt_unchanged(opt, state)
    for k, v in params.items():
        np.testing.assert_array_equal(v, before[k])


def test_step_accepts_integer_gradients_and_a_schedule_for_lr():
    w = {"x": np.array([1.0, -2.0])}
    opt = Adam(w, lr=0.1)
    opt.step({"x": np.array([1, -1])}, lr=lambda step: 0.1 * step)
    assert w["x"].round(3).tolist() == [0.9, -1.9]


# ------------------------------------------------------------------ schedule and clipping


@pytest.mark.parametrize("step", [None, float("nan"), float("inf"), "3", 1.5, True, 2.0])
def test_noam_step_must_be_a_positive_integer(step):
    with pytest.raises(ValueError, match=r"step must be a positive integer.*counted from 1"):
        noam_lr(step, 64)


def test_noam_accepts_numpy_integers():
    assert noam_lr(np.int64(4000), np.int64(512)) == pytest.approx(noam_lr(4000, 512))


@pytest.mark.parametrize("name", ["d_model", "warmup_steps", "factor"])
@pytest.mark.parametrize("value", ["64", None, True, float("nan")])
def test_noam_hyperparameters_must_be_numbers(name, value):
    kwargs = {"d_model": 64, "warmup_steps": 100, "factor": 1.0, name: value}
    with pytest.raises(ValueError, match=f"{name} must be a positive finite number"):
        NoamSchedule(**kwargs)
    with pytest.raises(ValueError, match=f"{name} must be a positive finite number"):
        noam_lr(1, **kwargs)


@pytest.mark.parametrize(
    ("grads", "error", "message"),
    [
        ({"a": np.array([30, 40])}, TypeError, r"grads\['a'\] must be a floating-point ndarray"),
        ({"a": [3.0, 4.0]}, TypeError, r"grads\['a'\] must be a floating-point ndarray.*list"),
        ([np.ones(2)], TypeError, "grads must be a dict"),
    ],
)
def test_clip_grad_norm_bad_gradients(grads, error, message):
    with pytest.raises(error, match=message):
        clip_grad_norm(grads, 1.0)


def test_clip_grad_norm_checks_every_gradient_before_scaling_any():
    big = np.array([30.0, 40.0])
    with pytest.raises(TypeError, match=r"grads\['b'\]"):
        clip_grad_norm({"a": big, "b": np.array([1, 2])}, 1.0)
    assert big.tolist() == [30.0, 40.0]


def test_global_norm_of_integer_gradients_does_not_overflow():
    assert global_norm({"a": np.array([30, 40])}) == 50.0
    assert global_norm({"a": np.array([2**40, 0], dtype=np.int64)}) == 2.0**40


# ------------------------------------------------------------------ train_step


def test_train_step_refuses_an_optimizer_of_another_model():
    lm, other = make_lm(0), make_lm(1)
    opt = Adam(other.parameters(), lr=0.1)
    lm_before, other_before = snapshot(lm), snapshot(other)
    with pytest.raises(ValueError, match=r"optimizer was not built on this model's parameters"):
        train_step(lm, BATCH, opt)
    assert_unchanged(lm, lm_before)
    assert_unchanged(other, other_before)
    assert opt.t == 0


def test_train_step_refuses_an_optimizer_of_copies():
    lm = make_lm()
    opt = Adam({k: v.copy() for k, v in lm.parameters().items()})
    with pytest.raises(ValueError, match="not the model's own arrays"):
        train_step(lm, BATCH, opt)


def test_train_step_refuses_something_that_is_not_an_optimizer():
    lm = make_lm()
    with pytest.raises(TypeError, match=r"optimizer must be .*Adam\(model.parameters\(\)\)"):
        train_step(lm, BATCH, lm.parameters())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"clip_norm": "1"}, TypeError, r"clip_norm must be a positive number or None.*'1'"),
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
    lm = make_lm()
    opt = Adam(lm.parameters())
    before = snapshot(lm)
    with pytest.raises(error, match=message):
        train_step(lm, BATCH, opt, **kwargs)
    assert_unchanged(lm, before)
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
    lm = make_lm()
    with pytest.raises(error, match=message):
        train_step(lm, batch, Adam(lm.parameters()))


def test_loss_returning_a_tuple_is_a_clear_error():
    class TupleLoss(CrossEntropyLoss):
        def __call__(self, logits, targets):
            return cross_entropy(logits, targets)

    lm = make_lm()
    with pytest.raises(TypeError, match="loss_fn must return the loss as a number, got tuple"):
        train_step(lm, BATCH, Adam(lm.parameters()), TupleLoss())


# ------------------------------------------------------------------ fit


def run_fit(lm=None, **kwargs):
    lm = make_lm() if lm is None else lm
    args = {"steps": 2, "optimizer": Adam(lm.parameters()), "progress": False}
    args.update(kwargs)
    return fit(lm, lambda step: BATCH, **args)


@pytest.mark.parametrize("mode", [True, False])
def test_fit_restores_the_mode_the_model_had(mode):
    lm = make_lm().train(mode)
    run_fit(lm, eval_fn=lambda m: {"n": 1})
    assert lm.training is mode


def test_fit_restores_the_mode_after_an_error():
    lm = make_lm().train(True)

    def broken(m):
        raise RuntimeError("eval failed")

    with pytest.raises(RuntimeError, match="eval failed"):
        run_fit(lm, eval_fn=broken)
    assert lm.training is True


def test_fit_with_too_few_batches_says_how_many_were_used():
    lm = make_lm()
    with pytest.raises(ValueError, match=r"batches ran out after 2 batch\(es\), but steps=3"):
        fit(lm, [BATCH, BATCH], steps=3, optimizer=Adam(lm.parameters()), progress=False)


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
        ({"clip_norm": "1"}, TypeError, "clip_norm must be a positive number"),
        ({"eval_fn": 3}, TypeError, "eval_fn must be a callable"),
        ({"callback": "stop"}, TypeError, "callback must be a callable"),
        ({"overwrite_checkpoint": "yes"}, TypeError, "overwrite_checkpoint must be True or"),
    ],
)
def test_fit_bad_arguments_fail_before_training(kwargs, error, message):
    lm = make_lm()
    opt = Adam(lm.parameters())
    before = snapshot(lm)
    with pytest.raises(error, match=message):
        run_fit(lm, optimizer=opt, **kwargs)
    assert_unchanged(lm, before)
    assert opt.t == 0


def test_fit_refuses_batches_that_are_neither_callable_nor_iterable():
    lm = make_lm()
    with pytest.raises(TypeError, match="batches must be a callable batches"):
        fit(lm, 3, steps=1, optimizer=Adam(lm.parameters()), progress=False)


def test_fit_refuses_an_optimizer_of_another_model_before_training():
    lm, other = make_lm(0), make_lm(1)
    with pytest.raises(ValueError, match="optimizer was not built on this model's parameters"):
        run_fit(lm, optimizer=Adam(other.parameters()))


def test_eval_fn_must_return_a_dict():
    lm = make_lm()
    with pytest.raises(TypeError, match="eval_fn must return a dict of metrics.*got float 1.0"):
        run_fit(lm, eval_fn=lambda m: 1.0)


def test_fit_checks_the_checkpoint_directory_before_training(tmp_path):
    lm = make_lm()
    opt = Adam(lm.parameters())
    missing = tmp_path / "missing" / "m.npz"
    with pytest.raises(FileNotFoundError, match=r"directory .*missing.* does not exist"):
        run_fit(lm, optimizer=opt, checkpoint=missing)
    assert opt.t == 0


def test_fit_does_not_replace_an_existing_checkpoint_unless_allowed(tmp_path):
    path = tmp_path / "m.npz"
    path.write_bytes(b"the user's file")
    lm = make_lm()
    opt = Adam(lm.parameters())
    with pytest.raises(FileExistsError, match=r"m\.npz' already exists.*overwrite_checkpoint"):
        run_fit(lm, optimizer=opt, checkpoint=path)
    assert opt.t == 0  # refused before training
    assert path.read_bytes() == b"the user's file"
    run_fit(lm, optimizer=opt, checkpoint=path, overwrite_checkpoint=True)
    np.testing.assert_array_equal(
        load_model(path).parameters()["embed.W"], lm.parameters()["embed.W"]
    )


def test_fit_checkpoint_without_suffix_is_checked_as_npz(tmp_path):
    (tmp_path / "m.npz").write_bytes(b"the user's file")
    with pytest.raises(FileExistsError, match=r"m\.npz"):
        run_fit(checkpoint=tmp_path / "m")


def test_divergence_is_still_reported_as_training_diverged(tmp_path):
    lm = make_lm()

    def poison(step, history):
        lm.parameters()["embed.W"][0, 0] = np.nan

    with pytest.raises(TrainingDiverged, match="diverged at step 2"):
        run_fit(lm, callback=poison, checkpoint=tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()


# ------------------------------------------------------------------ save_model


def test_save_model_refuses_to_replace_a_file_with_overwrite_false(tmp_path):
    path = tmp_path / "keep.npz"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match=r"keep\.npz' already exists.*overwrite=True"):
        save_model(path, make_lm(), overwrite=False)
    assert path.read_bytes() == b"precious"


def test_save_model_refuses_to_replace_a_file_by_default(tmp_path):
    path = tmp_path / "m.npz"
    save_model(path, make_lm(0))
    with pytest.raises(FileExistsError, match=r"m\.npz' already exists.*overwrite=True"):
        save_model(path, make_lm(1))
    np.testing.assert_array_equal(  # the first model is still there
        load_model(path).parameters()["embed.W"], make_lm(0).parameters()["embed.W"]
    )


def test_save_model_overwrite_true_replaces_silently(tmp_path):
    path = tmp_path / "m.npz"
    save_model(path, make_lm(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_model(path, make_lm(1), overwrite=True)
    np.testing.assert_array_equal(
        load_model(path).parameters()["embed.W"], make_lm(1).parameters()["embed.W"]
    )


def test_interrupted_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    save_model(path, make_lm(0))
    before = path.read_bytes()

    def broken_savez(file, **arrays):
        file.write(b"PK half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(KeyboardInterrupt):
        save_model(path, make_lm(1), overwrite=True)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.npz"]  # no temporary file left behind


def test_saved_file_has_the_usual_permissions(tmp_path):
    reference = tmp_path / "ref"
    reference.write_bytes(b"")
    save_model(tmp_path / "m.npz", make_lm())
    assert os.stat(tmp_path / "m.npz").st_mode & 0o777 == os.stat(reference).st_mode & 0o777


def test_save_model_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"directory .*nope.* does not exist"):
        save_model(tmp_path / "nope" / "m.npz", make_lm())


@pytest.mark.parametrize("model", [None, "lm", Adam({"w": np.ones(2)})])
def test_save_model_refuses_what_is_not_a_model(tmp_path, model):
    with pytest.raises(TypeError, match="model must be a Transformer or a LanguageModel, got"):
        save_model(tmp_path / "m.npz", model)
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([np.ones(2)], "extra must be a dict name -> ndarray or None, got list"),
        ({1: np.ones(2)}, "extra keys must be non-empty strings, got 1"),
        ({"ragged": [[1], [1, 2]]}, r"extra\['ragged'\] must be an array"),
    ],
)
def test_save_model_bad_extra(tmp_path, extra, message):
    with pytest.raises(TypeError, match=message):
        save_model(tmp_path / "m.npz", make_lm(), extra=extra)
    assert not (tmp_path / "m.npz").exists()


# ------------------------------------------------------------------ load_model


def checkpoint_arrays(tmp_path):
    path = tmp_path / "good.npz"
    save_model(path, make_lm(), overwrite=True)
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def test_load_model_on_an_npy_file(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.ones(3))
    with pytest.raises(ValueError, match=r"x\.npy' is not a transformer_np checkpoint.*\.npy"):
        load_model(path)


def test_load_model_on_a_text_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ValueError, match=r"notes\.txt' is not a .*checkpoint.*not an \.npz"):
        load_model(path)


def test_load_model_on_a_truncated_file(tmp_path):
    save_model(tmp_path / "good.npz", make_lm())
    data = (tmp_path / "good.npz").read_bytes()
    path = tmp_path / "cut.npz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.npz.*truncated or corrupted"):
        load_model(path)


def test_load_model_without_config(tmp_path):
    arrays = checkpoint_arrays(tmp_path)
    del arrays["config"]
    np.savez(tmp_path / "c.npz", **arrays)
    with pytest.raises(ValueError, match=r"c\.npz': the checkpoint has no 'config' entry"):
        load_model(tmp_path / "c.npz")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[1, 2]", "'config' must be a JSON object.*got a JSON list"),
        ("{not json", "'config' is not valid JSON"),
        ('{"type": "Nope"}', "unknown model type 'Nope'"),
        ('{"type": "LanguageModelConfig", "d_model": "8"}', "invalid model configuration"),
        (np.array([1, 2]), "'config' must be a JSON string"),
    ],
)
def test_load_model_bad_config(tmp_path, config, message):
    arrays = checkpoint_arrays(tmp_path)
    arrays["config"] = np.array(config) if isinstance(config, str) else config
    np.savez(tmp_path / "c.npz", **arrays)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "c.npz")) + ".*" + message):
        load_model(tmp_path / "c.npz")


def test_load_model_refuses_nan_parameters(tmp_path):
    arrays = checkpoint_arrays(tmp_path)
    arrays["param/embed.W"][1, 2] = np.nan
    np.savez(tmp_path / "nan.npz", **arrays)
    with pytest.raises(ValueError, match=r"nan\.npz': parameter 'embed\.W' contains NaN"):
        load_model(tmp_path / "nan.npz")


def test_load_model_refuses_wrong_parameters(tmp_path):
    arrays = checkpoint_arrays(tmp_path)
    arrays["param/embed.W"] = arrays["param/embed.W"][:, :4]
    np.savez(tmp_path / "s.npz", **arrays)
    with pytest.raises(ValueError, match=r"s\.npz': .*embed\.W.*shape"):
        load_model(tmp_path / "s.npz")
    arrays = checkpoint_arrays(tmp_path)
    arrays["param/embed.W"] = np.array(["x"])
    np.savez(tmp_path / "t.npz", **arrays)
    with pytest.raises(ValueError, match=r"t\.npz': parameter 'embed\.W' must be an array of real"):
        load_model(tmp_path / "t.npz")
