"""The checks of files and command lines: checkpoint paths, save_model, load_model, argparse types.

A path names the file it will be: a checkpoint is written only where the caller can see it
(never ``<folder>.npz`` beside a folder, nor a hidden ``<folder>/.npz``), under the name given
or that name plus ``.npz``. The argparse ``type=`` functions make a bad command-line value a
usage error (exit status 2) as soon as the line is parsed, before any model is built or loaded.
"""

from __future__ import annotations

import argparse
import io
import math
import os
from collections.abc import Mapping

import numpy as np

from .general import check_bool, is_a, type_name

# -- paths ----------------------------------------------------------------------------------------

SUFFIX = ".npz"


def as_path_text(path, argument):
    """``os.fspath(path)`` as a str, else a TypeError naming ``argument``."""
    try:
        text = os.fspath(path)
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise TypeError(
            f"{argument} must be a str or path-like (or a binary file object), "
            f"got {type_name(path)}"
        )
    return text


class ModelFileError(FileNotFoundError):
    """A model file is missing, unreadable or not what the model expects.

    The message names the file and says how to install it. It subclasses
    ``FileNotFoundError`` so that ``except OSError`` catches it too.
    """


def check_save_path(path, overwrite, argument, overwrite_option):
    """The file a checkpoint saved at ``path`` goes to: the rules of ``checkpoint_path``."""
    given = as_path_text(path, argument)
    example = os.path.join(given, "model.npz")
    if os.path.isdir(given):
        raise IsADirectoryError(
            f"cannot save to {given!r}: it is a directory; give {argument} a file name inside "
            f"it, such as {example!r}"
        )
    name = os.path.basename(given)
    if name in ("", ".", ".."):
        raise ValueError(
            f"{argument} must name a file, got {given!r} (a folder): give a file name, such as "
            f"{example!r}"
        )
    stem, suffix = os.path.splitext(name)
    if name.lower() == SUFFIX:
        raise ValueError(f"{argument} {given!r} has no file name before {SUFFIX}")
    if suffix and suffix.lower() != SUFFIX:
        raise ValueError(
            f"{argument} {given!r} ends in {suffix!r}: a checkpoint is an .npz archive; give a "
            f"name ending in .npz, or no suffix and .npz is added ({stem + SUFFIX!r})"
        )
    check_writable_folder(os.path.dirname(os.path.abspath(given)), given, argument)
    target = given if suffix else given + SUFFIX
    return check_destination(target, overwrite, argument, overwrite_option)


def check_writable_folder(into, given, argument):
    """A new file or folder ``given`` (the value of ``argument``) is to be made in the folder
    ``into``, before any work: an OSError that says why not, unless ``into`` exists, is a
    folder (nothing can be created under a file) and the user may write in it."""
    existing = into
    while not os.path.exists(existing):  # the nearest part of the path that is there
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise NotADirectoryError(
            f"{argument} {given!r}: {existing!r} is a file, not a folder, so nothing can be "
            "created under it; expected a path in a folder you can write"
        )
    if existing != into:
        raise FileNotFoundError(f"{argument} {given!r}: the directory {into!r} does not exist")
    if not os.access(into, os.W_OK | os.X_OK):
        raise PermissionError(
            f"{argument} {given!r}: the folder {into!r} cannot be written (no permission); "
            "expected a path in a folder you can write"
        )


def check_destination(target, overwrite, argument, overwrite_option):
    """``target``, in a folder already checked, if it may be written (a file only with
    ``overwrite``)."""
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot save to {target!r}: it is a directory")
    if os.path.lexists(target) and not overwrite:
        raise FileExistsError(
            f"{argument} {target!r} already exists: pass {overwrite_option} to replace it "
            "(or choose another path)"
        )
    return target


def check_binary_file(file, mode):
    """A TypeError if the file object ``file`` was opened in text mode: a checkpoint is bytes."""
    text_mode = isinstance(file, io.TextIOBase) or "b" not in getattr(file, "mode", "b")
    if text_mode:
        opened = f" (mode {file.mode!r})" if isinstance(getattr(file, "mode", None), str) else ""
        raise TypeError(
            f"path must be a path or a binary file object (open(..., {mode!r})), got a text-mode "
            f"{type_name(file)}{opened}: a checkpoint is bytes"
        )


def check_load_path(path):
    """A binary file object, or the path of an existing file (a hint if only ``<path>.npz`` is)."""
    if hasattr(path, "read"):
        check_binary_file(path, "rb")
        return path
    given = as_path_text(path, "path")
    if os.path.isdir(given):
        raise IsADirectoryError(
            f"cannot load {given!r}: it is a directory; give the checkpoint file inside it"
        )
    if not os.path.exists(given):
        hint = ""
        if os.path.isfile(given + SUFFIX):
            hint = f" (there is {given + SUFFIX!r}: a name saved without .npz gets it added)"
        raise FileNotFoundError(f"no checkpoint file {given!r}{hint}")
    return path


# -- save_model, load_model ---------------------------------------------------------------------


def check_save_model(path, model, extra, overwrite):
    """The model, its parameters all finite, the extra arrays, then the destination."""
    if not is_a(model, "Transformer", "LanguageModel"):
        raise TypeError(
            f"model must be a Transformer or a LanguageModel, got {type(model).__name__}"
        )
    overwrite = check_bool(overwrite, "overwrite")
    for name, p in model.params.items():
        if not np.isfinite(p).all():
            raise ValueError(
                f"parameter {name!r} holds NaN or inf: refusing to save a diverged model"
            )
    extra = check_extra(extra)
    if hasattr(path, "write"):  # a file object is written as it is, if it takes bytes
        check_binary_file(path, "wb")
    else:
        path = check_save_path(path, overwrite, "path", "overwrite=True")
    return {"path": path, "model": model, "extra": extra, "overwrite": overwrite}


def check_extra(extra):
    """``extra`` as a dict of non-empty str to plain (non-object) arrays."""
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise TypeError(f"extra must be a dict name -> ndarray or None, got {type(extra).__name__}")
    arrays = {}
    for name, value in extra.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"extra keys must be non-empty strings, got {name!r}")
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"extra[{name!r}] must be an array (or convertible to one), "
                f"got {type(value).__name__}: {exc}"
            ) from exc
        if arr.dtype == object:
            raise TypeError(f"extra[{name!r}] must not be an object array (it would need pickle)")
        arrays[name] = arr
    return arrays


def check_load_model(path, return_extra):
    return {"path": check_load_path(path), "return_extra": check_bool(return_extra, "return_extra")}


# -- command-line values (argparse type= functions) ---------------------------------------------


def parsed(text, convert, expected, accept):
    """``convert(text)`` if ``accept`` takes it, else the ArgumentTypeError of a usage error."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
    return value


def positive_int(text):
    """argparse type: an integer >= 1 (a number of steps or tokens)."""
    return parsed(text, int, "an integer >= 1", lambda n: n >= 1)


def non_negative_int(text):
    """argparse type: an integer >= 0 (a seed)."""
    return parsed(text, int, "an integer >= 0", lambda n: n >= 0)


def positive_float(text):
    """argparse type: a finite number > 0 (seconds)."""
    return parsed(text, float, "a finite number > 0", lambda x: math.isfinite(x) and x > 0)


def non_negative_float(text):
    """argparse type: a finite number >= 0 (a temperature, 0 = greedy)."""
    return parsed(text, float, "a finite number >= 0", lambda x: math.isfinite(x) and x >= 0)


def probability(text):
    """argparse type: a number in (0, 1] (the mass that top-p keeps)."""
    return parsed(text, float, "a number in (0, 1]", lambda p: 0 < p <= 1)


def non_empty_text(text):
    """argparse type: a text with something other than spaces."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must not be empty, got {text!r}")
    return text


def path_text(text):
    """argparse type: a path (a file or a folder), not empty and not only spaces."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must be a path, got {text!r}")
    return text
