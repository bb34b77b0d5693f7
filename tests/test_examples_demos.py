"""examples/reverse.py and examples/charlm.py: the command lines of the two training demos.

Sections: values (the file --save writes is the one the command names), the reversal demo's
validation and test sets (disjoint from each other and from every training batch; the early stop
reads only the validation set, the reported score only the test set), errors (every bad value a
usage error, exit status 2, before any training; a --save that names no .npz file). The demos'
training itself is tested in test_train.py.
"""

import importlib
import os
import re

import numpy as np
import pytest

DEMOS = {"reverse": "train_reverse", "charlm": "train_charlm"}


@pytest.fixture(params=sorted(DEMOS))
def demo(request, monkeypatch):
    """The demo's module, whose training fails the test if it starts."""
    module = importlib.import_module(f"transformer_np.examples.{request.param}")
    monkeypatch.setattr(module, DEMOS[request.param], lambda **kw: pytest.fail("training ran"))
    return module


# ============================================================================================
# values
# ============================================================================================


def test_save_prints_the_file_it_wrote(tmp_path, capsys):
    from transformer_np.examples import reverse

    argv = ["--quick", "--steps", "1", "--no-progress", "--save", str(tmp_path / "m")]
    assert reverse.main(argv) == 0
    out = capsys.readouterr().out
    assert f"saved to {tmp_path / 'm.npz'}\n" in out
    assert os.listdir(tmp_path) == ["m.npz"]
    assert "validation exact match: " in out and "test exact match: " in out


# ============================================================================================
# the reversal demo: validation and test sets
# ============================================================================================


def digit_tuples(src):
    """The digit sequences of a source array, one tuple per row (padding dropped)."""
    from transformer_np.examples.reverse import decode_digits

    return [tuple(int(d) for d in decode_digits(row)) for row in src]


def test_reverse_validation_and_test_sets_are_distinct_and_disjoint():
    from transformer_np.examples.reverse import heldout_splits

    val, test = heldout_splits(np.random.default_rng(0), 300, 1000, 3, 10)
    assert len(val) == len(set(val)) == 300
    assert len(test) == len(set(test)) == 1000
    assert not set(val) & set(test)
    assert all(3 <= len(s) <= 10 for s in val + test)


def test_reverse_heldout_sets_refuse_to_take_half_of_all_sequences():
    from transformer_np.examples.reverse import heldout_splits

    # 110 sequences of 1 or 2 digits: 60 held out would leave 50 for training
    with pytest.raises(ValueError, match=r"n_val \+ n_test = 60 .* only 110 sequences of 1 to 2"):
        heldout_splits(np.random.default_rng(0), 20, 40, 1, 2)


def test_reverse_stops_on_validation_and_scores_on_test(monkeypatch):
    from transformer_np.examples import reverse

    config = dict(min_len=2, max_len=3, n_val=40, n_test=60, seed=3)
    val, test = reverse.heldout_splits(
        np.random.default_rng(config["seed"]), 40, 60, config["min_len"], config["max_len"]
    )
    batches, scored = [], []
    make_batch = reverse.make_batch

    def recording_make_batch(*args, **kwargs):
        batch = make_batch(*args, **kwargs)
        batches.extend(digit_tuples(batch[0]))
        return batch

    def fake_exact_match(model, src, tgt_out, **kwargs):
        # a perfect score on the validation set, zero on the test set: the early stop and the
        # reported score tell which one each of them read
        seqs = digit_tuples(src)
        scored.append(seqs)
        assert seqs in (val, test), "exact match measured on sequences of neither set"
        return 1.0 if seqs == val else 0.0

    monkeypatch.setattr(reverse, "make_batch", recording_make_batch)
    monkeypatch.setattr(reverse, "exact_match", fake_exact_match)
    _, history, splits = reverse.train_reverse(
        **config,
        d_model=16,
        n_layers=1,
        batch_size=16,
        steps=50,
        eval_every=10,
        warmup=10,
        progress=False,
    )
    assert digit_tuples(splits["val"][0]) == val and digit_tuples(splits["test"][0]) == test
    # the validation score (1.0 >= target) stopped the training at the first evaluation
    assert history["stopped"] == "callback" and history["step"][-1] == 10
    assert [m["exact_match"] for _, m in history["eval"]] == [1.0, 1.0]
    # the test set was read once, at the end, and gave the reported score
    assert scored[:-1] == [val] * (len(scored) - 1) and scored[-1] == test
    assert history["test_accuracy"] == 0.0
    assert (history["n_val"], history["n_test"]) == (40, 60)
    # no training batch held a validation or test sequence
    assert len(batches) == 10 * 16 and not set(batches) & (set(val) | set(test))


# ============================================================================================
# errors
# ============================================================================================


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "argument --steps: must be an integer >= 1, got '0'"),
        (["--steps", "-5"], "argument --steps: must be an integer >= 1, got '-5'"),
        (["--steps", "1.5"], "argument --steps: must be an integer >= 1, got '1.5'"),
        (["--time-limit", "0"], "argument --time-limit: must be a finite number > 0, got '0'"),
        (["--time-limit", "nan"], "argument --time-limit: must be a finite number > 0, got 'nan'"),
        (["--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
    ],
)
def test_bad_values_are_usage_errors_before_training(demo, argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        demo.main(["--quick", "--no-progress", *argv])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("runs", r"cannot save to '.*runs': it is a directory; give --save a file name inside it"),
        ("runs/", r"cannot save to '.*runs/': it is a directory"),
        ("runs/.npz", r"--save '.*runs/\.npz' has no file name before \.npz"),
        ("model.pt", r"--save '.*model\.pt' ends in '\.pt': a checkpoint is an \.npz archive"),
    ],
)
def test_save_that_names_no_npz_file_is_a_usage_error(demo, tmp_path, name, message, capsys):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as stop:
        demo.main(["--quick", "--no-progress", "--save", os.path.join(tmp_path, name)])
    assert stop.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert os.listdir(tmp_path) == ["runs"] and os.listdir(tmp_path / "runs") == []
