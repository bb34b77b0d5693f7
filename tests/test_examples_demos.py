"""examples/reverse.py and examples/charlm.py: the command lines of the two training demos.

Sections: values (the file --save writes is the one the command names), errors (every bad
value a usage error, exit status 2, before any training; a --save that names no .npz file).
The demos' training itself is tested in test_train.py.
"""

import importlib
import os
import re

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
