"""The validators of the pretrained models: MiniLM and the loaders (SmolLM2's tokenizer is
checked in :mod:`.tokenizer`, with the other tokenizers).

Each ``check_<entry point>`` receives the arguments by name (a method's ``self`` too) and
returns them checked, as a dict (see :func:`.boundary.checked`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .files import ModelFileError
from .general import (
    as_float_array,
    check_bool,
    check_finite,
    check_ndim,
    first_index,
    is_a,
    shape_str,
    type_name,
)
from .tokenizer import check_text

# -- shared -------------------------------------------------------------------------------------


def check_float_dtype(dtype) -> np.dtype:
    """``np.dtype(dtype)`` if float32 or float64, else a TypeError (as :func:`check_dtype` of
    the layers). None is refused: NumPy would read it as float64, where the loaders' default is
    float32."""
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        got = repr(dtype) if dt is None or isinstance(dtype, str) else str(dt)
        default = " (the default is np.float32)" if dtype is None else ""
        raise TypeError(f"dtype must be np.float32 or np.float64, got {got}{default}")
    return dt


def check_path(path, name: str):
    """``path`` if it is None, a str or a path, else a TypeError."""
    if path is not None and not isinstance(path, str | Path):
        raise TypeError(f"{name} must be a str or a pathlib.Path, got {type_name(path)}")
    return path


def as_array(x, name: str, expected: str) -> np.ndarray:
    """``np.asarray(x)``, or a TypeError naming ``name`` when NumPy cannot make one (ragged)."""
    try:
        return np.asarray(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {expected}, got {type_name(x)}") from None


# -- MiniLM -------------------------------------------------------------------------------------


def check_sentences(sentences, name: str = "sentences") -> list[str]:
    """A non-empty list of str, each one encodable, else an error naming the bad sentence."""
    if isinstance(sentences, str):
        raise TypeError(
            f"{name} must be a list of strings, got a single str; wrap it in a list: [{name}]"
        )
    if isinstance(sentences, np.ndarray):
        sentences = sentences.tolist()
    if not isinstance(sentences, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {type_name(sentences)}")
    if len(sentences) == 0:
        raise ValueError(f"{name} must contain at least one sentence, got an empty list")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type_name(s)}: {s!r}")
        check_text(s, f"{name}[{i}]")
    return list(sentences)


def check_load_minilm(dtype, model_dir):
    dtype = check_float_dtype(dtype)
    if check_path(model_dir, "model_dir") is not None and not Path(model_dir).is_dir():
        raise ModelFileError(
            f"model_dir {model_dir} is not a folder (expected one with config.json, "
            "model.safetensors and tokenizer.json)"
        )
    return {"dtype": dtype, "model_dir": model_dir}


def check_minilm_init(self, config, tokenizer, dtype):
    if not is_a(config, "MiniLMConfig"):
        raise TypeError(f"config must be a MiniLMConfig, got {type_name(config)}")
    return {
        "self": self,
        "config": config,
        "tokenizer": tokenizer,
        "dtype": check_float_dtype(dtype),
    }


def check_minilm_tokenize(self, sentences):
    return {"self": self, "sentences": check_sentences(sentences)}


def check_minilm_sentence(self, sentence):
    return {"self": self, "sentence": check_text(sentence, "sentence")}


def check_minilm_encode(self, sentences, batch_size):
    if (
        isinstance(batch_size, bool | np.bool_)
        or not isinstance(batch_size, numbers.Integral)
        or batch_size <= 0
    ):
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return {"self": self, "sentences": check_sentences(sentences), "batch_size": int(batch_size)}


def check_attention_mask(mask, shape, expected: str) -> np.ndarray:
    """A mask of ``shape`` (B, T): 1 (or True) for real tokens, 0 for padding, and at least
    one real token per row. ``expected`` describes the shape, for the message."""
    mask = as_array(mask, "attention_mask", "an array of 0 and 1")
    if mask.shape != tuple(shape):
        raise ValueError(f"attention_mask must have {expected}, got {shape_str(mask.shape)}")
    if mask.dtype.kind not in "biuf":
        raise TypeError(
            "attention_mask must hold 1 (or True) for real tokens and 0 for padding, "
            f"got dtype {mask.dtype}"
        )
    not_binary = (mask != 0) & (mask != 1)
    if not_binary.any():
        i = first_index(not_binary)
        raise ValueError(
            "attention_mask must hold 1 (or True) for real tokens and 0 for padding, "
            f"got {mask[i].item()!r} at index {i}"
        )
    empty = ~(mask != 0).any(axis=1)
    if empty.any():
        row = int(np.argmax(empty))
        raise ValueError(
            f"attention_mask[{row}] is all 0: every sequence needs at least one real token"
        )
    return mask


def check_minilm_forward(self, input_ids, attention_mask, return_attentions):
    ids = as_array(input_ids, "input_ids", "a 2-D integer array (B, T)")
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise TypeError(
            f"input_ids must be a 2-D integer array (B, T), got {ids.dtype} "
            f"of shape {shape_str(ids.shape)}"
        )
    B, T = ids.shape
    if B == 0 or T == 0:
        raise ValueError(
            "input_ids must hold at least one sequence of one token, got shape "
            f"{shape_str(ids.shape)}"
        )
    cfg = self.config
    if T > cfg.max_position:
        raise ValueError(
            f"input_ids has {T} tokens, more than the {cfg.max_position} positions the model "
            "has learned"
        )
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= cfg.vocab_size:
        raise ValueError(
            f"input_ids must be in [0, vocab_size) = [0, {cfg.vocab_size}), got "
            f"{lo if lo < 0 else hi} (ids range from {lo} to {hi})"
        )
    expected = f"the shape of input_ids {shape_str(ids.shape)}"
    mask = check_attention_mask(attention_mask, ids.shape, expected)
    return {
        "self": self,
        "input_ids": ids,
        "attention_mask": mask,
        "return_attentions": check_bool(return_attentions, "return_attentions"),
    }


def check_minilm_pool(self, hidden, attention_mask):
    hidden = as_float_array(hidden, "hidden")
    check_ndim(hidden, "hidden", (3,), "the last hidden states, of shape (B, T, D)")
    if hidden.size == 0:
        raise ValueError(
            "hidden must hold at least one sequence of one token, got shape "
            f"{shape_str(hidden.shape)}"
        )
    check_finite(hidden, "hidden")
    B, T = hidden.shape[:2]
    expected = f"shape (B, T) = {shape_str((B, T))} to match hidden {shape_str(hidden.shape)}"
    mask = check_attention_mask(attention_mask, (B, T), expected)
    return {"self": self, "hidden": hidden, "attention_mask": mask}


# -- SmolLM2 ------------------------------------------------------------------------------------


def check_load_smollm2(dtype, path):
    return {"dtype": check_float_dtype(dtype), "path": check_path(path, "path")}


def check_load_smollm2_tokenizer(path):
    return {"path": check_path(path, "path")}
