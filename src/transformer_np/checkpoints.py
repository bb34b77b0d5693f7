"""Checkpoints: a model saved to a plain ``.npz`` file and loaded back, with no pickle.
Page: training.md ("Saving and loading a model").

The archive holds ``param/<name>`` per parameter, ``extra/<name>`` per extra array, the
configuration as JSON (``config``) and the tag ``format`` = :data:`FORMAT`. It is read with
``allow_pickle=False``, so loading never runs code from the file; saving is atomic
(:func:`write_atomically`).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile

import numpy as np

from ._checks.boundary import checked
from ._checks.files import check_load_model, check_save_model, check_save_path
from .config import LanguageModelConfig, TransformerConfig
from .model import LanguageModel, Transformer

__all__ = ["FORMAT", "checkpoint_path", "load_model", "save_model"]

FORMAT = "transformer_np.checkpoint/1"

# The model classes a checkpoint can hold, by the "type" its configuration records.
_MODEL_CLASSES = {
    "TransformerConfig": (TransformerConfig, Transformer),
    "LanguageModelConfig": (LanguageModelConfig, LanguageModel),
}

# What reading a damaged or foreign file can raise (NumPy, zipfile and the OS).
_READ_ERRORS = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile)


# --------------------------------------------------------------------------------------------
# saving
# --------------------------------------------------------------------------------------------


def checkpoint_path(path, overwrite=False, *, argument="path", overwrite_option="overwrite=True"):
    """The ``.npz`` file a checkpoint saved at ``path`` goes to, checked before any work is done.

    ``.npz`` is kept, a name with no suffix gets it (``"runs/model"`` -> ``"runs/model.npz"``);
    another suffix, a folder, a missing directory or (without ``overwrite``) an existing file is
    an error. ``argument`` and ``overwrite_option`` are how the messages name the path and the
    option that replaces a file (``"--save"``, ``"--overwrite"`` for a command line).
    """
    return check_save_path(path, overwrite, argument, overwrite_option)


def write_atomically(target, write, overwrite, what="model"):
    """Write ``target`` in one step, never half a file: ``write(file)`` fills a file in a temporary
    directory beside it (the usual permissions, unlike ``mkstemp``'s), then moved onto ``target``:
    ``os.replace`` with ``overwrite``, else ``os.link``, which fails if a file appeared there."""
    real = os.path.realpath(target)  # through a symbolic link, replace the file, not the link
    folder, name = os.path.split(real)
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{name}.") as scratch:
        written = os.path.join(scratch, name)
        with open(written, "xb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())  # on disk before the move: a crash leaves old or new
        if overwrite:
            os.replace(written, real)
            return
        appeared = f"{target!r} appeared while the {what} was being saved: it was not replaced"
        try:
            os.link(written, real)
        except FileExistsError:
            raise FileExistsError(appeared) from None
        except OSError:  # no hard links on this file system
            if os.path.lexists(real):
                raise FileExistsError(appeared) from None
            os.replace(written, real)


def _arrays_to_save(model, extra):
    """The arrays of the checkpoint of ``model``: parameters, extras, format and configuration."""
    arrays = {f"param/{name}": p for name, p in model.params.items()}
    arrays.update({f"extra/{name}": value for name, value in extra.items()})
    arrays["format"] = np.array(FORMAT)
    arrays["config"] = np.array(model.config.to_json())
    return arrays


@checked(check_save_model, every_call=True)
def save_model(path, model, *, extra=None, overwrite=False):
    """Save a model's configuration and parameters to an ``.npz`` file (no pickle), in one step:
    an interrupted save never leaves half a file, nor loses the file that was there. Page:
    training.md.

    Parameters
    ----------
    path : str or path-like
        A name ending in ``.npz``, or with no suffix (``.npz`` is added), in an existing directory
        (the rules of :func:`checkpoint_path`); or a writable binary file object.
    model : Transformer or LanguageModel
    extra : dict of str to ndarray, optional
        More arrays to store (a vocabulary as an array of str, say), under ``extra/<name>``.
    overwrite : bool, default False
        Whether an existing ``path`` is replaced; False raises FileExistsError.

    Raises
    ------
    TypeError
        If ``model`` is not a Transformer or a LanguageModel, or ``extra`` is not a dict of
        str to (non-object) arrays.
    ValueError
        If a parameter holds NaN or inf (a diverged model is never written), or ``path`` has a
        suffix other than ``.npz`` or ends in ``/``.
    IsADirectoryError
        If ``path`` is a directory.
    FileExistsError
        If ``path`` exists and ``overwrite=False``.
    FileNotFoundError
        If the directory of ``path`` does not exist.
    """
    arrays = _arrays_to_save(model, extra)
    if hasattr(path, "write"):  # a file object: written as it is
        np.savez(path, **arrays)
    else:
        write_atomically(path, lambda file: np.savez(file, **arrays), overwrite)


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def _file_name_in_messages(path):
    """How error messages name the file: the quoted path, or the file object's name."""
    if hasattr(path, "read"):
        name = getattr(path, "name", None)
        return repr(name) if isinstance(name, str) else "the file object"
    return repr(os.fspath(path))


def _open_npz(path, not_a_checkpoint):
    """``np.load(path)`` of an ``.npz`` archive; ValueError (saying why) for any other file."""
    try:
        data = np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
        if isinstance(exc, zipfile.BadZipFile | EOFError):
            detail = f"a damaged .npz archive (truncated or corrupted: {exc})"
        elif "pickle" in str(exc):  # NumPy's words for "neither .npy nor .npz"
            detail = "not an .npz archive"
        else:
            detail = f"unreadable ({type(exc).__name__}: {exc})"
        raise ValueError(f"{not_a_checkpoint}: the file is {detail}") from exc
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(
            f"{not_a_checkpoint}: it holds a single array (.npy format), not an .npz archive "
            "written by save_model"
        )
    return data


def _read_entry(data, key, where):
    """The array ``data[key]`` of an open archive; ValueError naming the file if it is damaged."""
    try:
        return data[key]
    except _READ_ERRORS as exc:
        raise ValueError(f"{where}: the checkpoint is corrupted or truncated ({exc})") from exc


def _read_checkpoint(path, where):
    """The ``config`` entry, the parameters and the extras of the checkpoint at ``path``."""
    not_a_checkpoint = f"{where} is not a transformer_np checkpoint ({FORMAT})"
    with _open_npz(path, not_a_checkpoint) as data:
        keys = data.files
        if "format" not in keys or str(_read_entry(data, "format", where)) != FORMAT:
            raise ValueError(not_a_checkpoint)
        if "config" not in keys:
            raise ValueError(f"{where}: the checkpoint has no 'config' entry")
        config = _read_entry(data, "config", where)
        params = {
            key[len("param/") :]: _read_entry(data, key, where)
            for key in keys
            if key.startswith("param/")
        }
        extra = {
            key[len("extra/") :]: _read_entry(data, key, where)
            for key in keys
            if key.startswith("extra/")
        }
    return config, params, extra


def _model_config(config, where):
    """The configuration object stored in the ``config`` entry, and the class of its model."""
    if config.ndim != 0 or config.dtype.kind != "U":
        raise ValueError(
            f"{where}: 'config' must be a JSON string, got an array of dtype {config.dtype}"
        )
    text = str(config)
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: 'config' is not valid JSON ({exc})") from exc
    if not isinstance(settings, dict):
        raise ValueError(
            f"{where}: 'config' must be a JSON object with the model's settings, "
            f"got a JSON {type(settings).__name__}"
        )
    kind = settings.get("type")
    if kind not in _MODEL_CLASSES:
        raise ValueError(
            f"{where}: unknown model type {kind!r} (expected one of {list(_MODEL_CLASSES)})"
        )
    config_class, model_class = _MODEL_CLASSES[kind]
    try:
        return config_class.from_json(text), model_class
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: invalid model configuration: {exc}") from exc


@checked(check_load_model)
def load_model(path, *, return_extra=False):
    """Load a model saved by :func:`save_model` (``allow_pickle=False``), in evaluation mode.

    Parameters
    ----------
    path : str, path-like or binary file object
    return_extra : bool
        Also return the arrays saved with ``extra=``.

    Returns
    -------
    model : Transformer or LanguageModel
    extra : dict
        Only with ``return_extra=True``: the arrays saved with ``extra=``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist (the message names ``<path>.npz`` if that file exists).
    IsADirectoryError
        If ``path`` is a directory.
    ValueError
        If the file is not a checkpoint of :func:`save_model` (another format, truncated or
        corrupted, a missing or invalid configuration) or holds parameters of the wrong name,
        shape or type, or not finite in the model's dtype. The message names the file and the
        parameter.
    """
    where = _file_name_in_messages(path)
    # 1. read the archive, 2. rebuild the configuration, 3. the model with the saved parameters
    config_entry, params, extra = _read_checkpoint(path, where)
    config, model_class = _model_config(config_entry, where)
    model = model_class(config, rng=0)
    try:
        model.load_parameters(params)  # names, shapes, dtypes, finite in the model's dtype
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    model.eval()
    return (model, extra) if return_extra else model
