"""checkpoints.py: save_model, load_model and checkpoint_path.

Sections: values (round trips, the atomic write, the path a checkpoint goes to), then errors
(what save_model refuses, files that load_model refuses, with a message naming the file).
"""

from __future__ import annotations

import io
import os
import re
import warnings
import zipfile

import numpy as np
import pytest

import transformer_np
from transformer_np import checkpoints
from transformer_np.checkpoints import FORMAT, checkpoint_path, load_model, save_model
from transformer_np.model import LanguageModel, LanguageModelConfig, Transformer, TransformerConfig
from transformer_np.optim import Adam


def tiny_lm(**kw):
    """A float32 language model of 6 tokens."""
    cfg = {"vocab_size": 6, "d_model": 16, "n_heads": 2, "n_layers": 1, "max_len": 16}
    cfg.update(kw)
    return LanguageModel(LanguageModelConfig(**cfg), rng=0)


def float64_lm(seed=0):
    """A float64 language model of 10 tokens; two seeds give two different models."""
    cfg = LanguageModelConfig(vocab_size=10, d_model=8, n_heads=2, max_len=6, dtype="float64")
    return LanguageModel(cfg, rng=seed)


def embedding_of(model):
    return model.params["embed.W"]


def checkpoint_arrays(tmp_path):
    """The arrays of a good checkpoint, to be spoiled one at a time by the error tests."""
    path = tmp_path / "good.npz"
    save_model(path, float64_lm(), overwrite=True)
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


# ============================================================================================
# values
# ============================================================================================


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
        assert str(data["format"]) == FORMAT == "transformer_np.checkpoint/1"
        assert all(data[k].dtype != object for k in data.files)
    with zipfile.ZipFile(path) as z:
        assert all(name.endswith(".npy") for name in z.namelist())


def test_save_and_load_through_file_objects():
    model = float64_lm()
    buffer = io.BytesIO()
    save_model(buffer, model)
    buffer.seek(0)
    assert not load_model(buffer).training  # loaded in evaluation mode
    buffer.seek(0)
    np.testing.assert_array_equal(embedding_of(load_model(buffer)), embedding_of(model))


def test_save_and_load_are_exported_by_the_package():
    assert checkpoints.save_model is transformer_np.save_model
    assert checkpoints.load_model is transformer_np.load_model


def test_save_model_overwrite_true_replaces_silently(tmp_path):
    path = tmp_path / "m.npz"
    save_model(path, float64_lm(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_model(path, float64_lm(1), overwrite=True)
    np.testing.assert_array_equal(embedding_of(load_model(path)), embedding_of(float64_lm(1)))


def test_interrupted_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    save_model(path, float64_lm(0))
    before = path.read_bytes()

    def broken_savez(file, **arrays):
        file.write(b"PK half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(KeyboardInterrupt):
        save_model(path, float64_lm(1), overwrite=True)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.npz"]  # no temporary file left behind


def test_interrupted_first_save_leaves_no_file_at_all(tmp_path, monkeypatch):
    def broken_savez(file, **arrays):
        file.write(b"PK half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(KeyboardInterrupt):
        save_model(tmp_path / "m.npz", float64_lm())
    assert os.listdir(tmp_path) == []


def test_saved_file_has_the_usual_permissions(tmp_path):
    reference = tmp_path / "ref"
    reference.write_bytes(b"")
    save_model(tmp_path / "m.npz", float64_lm())
    assert os.stat(tmp_path / "m.npz").st_mode & 0o777 == os.stat(reference).st_mode & 0o777


def test_save_without_hard_links_still_writes_the_file(tmp_path, monkeypatch):
    def no_hard_links(src, dst):
        raise OSError("hard links are not supported on this file system")

    monkeypatch.setattr(os, "link", no_hard_links)
    save_model(tmp_path / "m.npz", float64_lm())
    np.testing.assert_array_equal(
        embedding_of(load_model(tmp_path / "m.npz")), embedding_of(float64_lm())
    )
    assert os.listdir(tmp_path) == ["m.npz"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_save_through_a_symbolic_link_replaces_the_file_it_points_to(tmp_path):
    real, link = tmp_path / "real.npz", tmp_path / "link.npz"
    save_model(real, float64_lm(0))
    link.symlink_to(real)
    save_model(link, float64_lm(1), overwrite=True)
    assert link.is_symlink()
    np.testing.assert_array_equal(embedding_of(load_model(real)), embedding_of(float64_lm(1)))


def test_checkpoint_path_adds_the_npz_suffix_as_np_savez_does(tmp_path):
    assert checkpoint_path(tmp_path / "m") == str(tmp_path / "m.npz")
    assert checkpoint_path(str(tmp_path / "m.npz")) == str(tmp_path / "m.npz")
    (tmp_path / "m.npz").write_bytes(b"old")
    assert checkpoint_path(tmp_path / "m", overwrite=True) == str(tmp_path / "m.npz")
    assert (tmp_path / "m.npz").read_bytes() == b"old"  # only checked, never touched


# ============================================================================================
# errors
# ============================================================================================

# ----------------------------------------------------------------- save_model, checkpoint_path


def test_save_rejects_object_arrays(tmp_path):
    with pytest.raises(TypeError, match="pickle"):
        save_model(tmp_path / "x.npz", tiny_lm(), extra={"bad": np.array([{}], dtype=object)})


def test_save_model_refuses_to_replace_a_file_with_overwrite_false(tmp_path):
    path = tmp_path / "keep.npz"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match=r"keep\.npz' already exists.*overwrite=True"):
        save_model(path, float64_lm(), overwrite=False)
    assert path.read_bytes() == b"precious"


def test_save_model_refuses_to_replace_a_file_by_default(tmp_path):
    path = tmp_path / "m.npz"
    save_model(path, float64_lm(0))
    with pytest.raises(FileExistsError, match=r"m\.npz' already exists.*overwrite=True"):
        save_model(path, float64_lm(1))
    # the first model is still there
    np.testing.assert_array_equal(embedding_of(load_model(path)), embedding_of(float64_lm(0)))


@pytest.mark.parametrize("hard_links", [True, False])
def test_a_file_that_appears_during_the_save_is_not_replaced(tmp_path, monkeypatch, hard_links):
    path = tmp_path / "m.npz"
    savez = np.savez

    def savez_while_someone_writes_the_target(file, **arrays):
        savez(file, **arrays)
        path.write_bytes(b"written meanwhile")

    def no_hard_links(src, dst):
        raise OSError("hard links are not supported on this file system")

    monkeypatch.setattr(np, "savez", savez_while_someone_writes_the_target)
    if not hard_links:
        monkeypatch.setattr(os, "link", no_hard_links)
    with pytest.raises(FileExistsError, match=r"m\.npz' appeared while the model was being saved"):
        save_model(path, float64_lm())
    assert path.read_bytes() == b"written meanwhile"
    assert os.listdir(tmp_path) == ["m.npz"]  # no temporary file left behind


def test_save_model_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"directory .*nope.* does not exist"):
        save_model(tmp_path / "nope" / "m.npz", float64_lm())


def test_save_model_refuses_a_directory(tmp_path):
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(IsADirectoryError, match=r"d\.npz': it is a directory"):
        save_model(tmp_path / "d.npz", float64_lm(), overwrite=True)


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
        save_model(tmp_path / "m.npz", float64_lm(), extra=extra)
    assert not (tmp_path / "m.npz").exists()


def test_save_model_overwrite_must_be_a_bool(tmp_path):
    with pytest.raises(TypeError, match="overwrite must be True or False, got 'yes'"):
        save_model(tmp_path / "m.npz", float64_lm(), overwrite="yes")


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("runs", IsADirectoryError, r"'.*runs': it is a directory; give path a file name inside"),
        ("runs/", IsADirectoryError, r"runs/': it is a directory.*such as '.*runs/model\.npz'"),
        ("new/", ValueError, r"path must name a file, got '.*new/' \(a folder\)"),
        ("runs/.npz", ValueError, r"path '.*runs/\.npz' has no file name before \.npz"),
        ("model.pt", ValueError, r"path '.*model\.pt' ends in '\.pt'.*\.npz.*'model\.npz'"),
    ],
)
def test_save_model_refuses_a_path_that_names_no_npz_file(tmp_path, name, error, message):
    (tmp_path / "runs").mkdir()
    with pytest.raises(error, match=message):
        save_model(os.path.join(tmp_path, name), float64_lm())
    assert os.listdir(tmp_path) == ["runs"] and os.listdir(tmp_path / "runs") == []


def test_checkpoint_path_names_the_argument_and_the_option_in_its_messages(tmp_path):
    (tmp_path / "m.npz").write_bytes(b"mine")
    exists = r"--save '.*m\.npz' already exists: pass --overwrite"
    with pytest.raises(FileExistsError, match=exists):
        checkpoint_path(tmp_path / "m.npz", argument="--save", overwrite_option="--overwrite")
    with pytest.raises(TypeError, match="checkpoint must be a str or path-like.*got int"):
        checkpoint_path(3, argument="checkpoint")


# ------------------------------------------------------------------------------ load_model


def test_load_rejects_files_that_are_not_checkpoints(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, a=np.zeros(3))
    with pytest.raises(ValueError, match="not a transformer_np checkpoint"):
        load_model(path)


def test_load_model_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "nothing.npz")


def test_load_model_names_the_npz_file_beside_a_missing_path(tmp_path):
    save_model(tmp_path / "m", float64_lm())  # written as m.npz
    with pytest.raises(FileNotFoundError, match=r"no checkpoint file '.*m' \(there is '.*m\.npz'"):
        load_model(tmp_path / "m")
    with pytest.raises(IsADirectoryError, match=r"cannot load '.*': it is a directory"):
        load_model(tmp_path)


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
    save_model(tmp_path / "good.npz", float64_lm())
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


def test_load_model_refuses_weights_that_overflow_the_models_dtype(tmp_path):
    save_model(tmp_path / "good.npz", tiny_lm())  # a float32 model
    with np.load(tmp_path / "good.npz", allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["param/embed.W"] = arrays["param/embed.W"].astype(np.float64)
    arrays["param/embed.W"][0, 0] = 1e300  # finite in float64, inf in float32
    np.savez(tmp_path / "big.npz", **arrays)
    with pytest.raises(ValueError, match=r"big\.npz': parameter 'embed\.W' .*float32"):
        load_model(tmp_path / "big.npz")


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


def test_load_model_names_a_file_object_by_its_name(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, a=np.zeros(3))
    with open(path, "rb") as file:
        with pytest.raises(ValueError, match=r"other\.npz' is not a transformer_np checkpoint"):
            load_model(file)
    with pytest.raises(ValueError, match="the file object is not a transformer_np checkpoint"):
        load_model(io.BytesIO(path.read_bytes()))
