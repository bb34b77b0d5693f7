"""The validators of evaluation: perplexity and bits_per_byte.

Each takes its entry point's arguments by name (defaults filled in) and returns them checked, as
a dict (see :func:`.boundary.checked`). The model is recognised by its configuration, as in
:mod:`.generation` (:func:`.generation.check_decoder_only`).
"""

from __future__ import annotations

import numbers

import numpy as np

from .general import as_typed_array, check_positive_int, shape_str
from .generation import check_decoder_only
from .models import check_id_range


def check_perplexity(model, ids, window, stride):
    cfg = check_decoder_only(model)
    ids = check_text_ids(ids, cfg.vocab_size)
    window, stride = check_window(window, stride, cfg.max_len)
    return {"model": model, "ids": ids, "window": window, "stride": stride}


def check_bits_per_byte(model, ids, n_bytes, window, stride):
    checked = check_perplexity(model, ids, window, stride)
    return {**checked, "n_bytes": check_positive_int(n_bytes, "n_bytes")}


def check_text_ids(ids, vocab_size) -> np.ndarray:
    """One sequence of N >= 2 token ids in [0, vocab_size), (N,) or (1, N): as (N,) int64."""
    arr = as_typed_array(ids, "ids", "iu", "an array of integer token ids")
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise ValueError(
            f"ids must be one sequence of token ids, of shape (N,) or (1, N), "
            f"got shape {shape_str(arr.shape)}"
        )
    if arr.shape[0] < 2:
        raise ValueError(
            f"ids must hold at least 2 tokens (the first one is only context: the model "
            f"predicts tokens 1 .. N - 1), got {arr.shape[0]}"
        )
    return check_id_range(arr, "ids", vocab_size).astype(np.int64, copy=False)


def check_window(window, stride, max_len) -> tuple[int, int]:
    """``(window, stride)``: 2 <= window <= max_len (default max_len), 1 <= stride <= window
    (default window // 2)."""
    if window is None:
        if max_len < 2:
            raise ValueError(
                f"the model's context (max_len = {max_len}) holds a single token: a window of "
                "at least 2 tokens is needed to predict one from another"
            )
        window = max_len
    else:
        expected = f"window must be an integer in [2, max_len = {max_len}]"
        if isinstance(window, bool | np.bool_) or not isinstance(window, numbers.Integral):
            raise TypeError(f"{expected} or None, got {window!r} ({type(window).__name__})")
        if not 2 <= window <= max_len:
            why = (
                "the model reads at most max_len tokens"
                if window > max_len
                else "a window predicts each of its tokens from the ones before it, so it "
                "needs at least 2"
            )
            raise ValueError(f"{expected} ({why}), got {window}")
        window = int(window)
    if stride is None:
        return window, max(window // 2, 1)
    stride = check_positive_int(stride, "stride")
    if stride > window:
        raise ValueError(
            f"stride must be at most window = {window} (a longer step would skip tokens), "
            f"got stride = {stride}"
        )
    return window, stride
