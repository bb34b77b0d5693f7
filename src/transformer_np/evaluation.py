"""Perplexity and bits per byte of a language model on a text, read in sliding windows as in
transformers' guide "Perplexity of fixed-length models". Page: decoding.md.

Shape glossary: N tokens in the text, L tokens in a window, V vocabulary.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks.boundary import checked
from ._checks.evaluation import check_bits_per_byte, check_perplexity
from .functional import log_softmax

__all__ = ["perplexity", "bits_per_byte", "windows"]


@checked(check_perplexity)
# --8<-- [start:perplexity]
def perplexity(model, ids, *, window=None, stride=None):
    r"""The perplexity of ``model`` on the token sequence ``ids``.

    The model runs in evaluation mode and is left in the mode it was in. Page: decoding.md.

    Parameters
    ----------
    model : LanguageModel or LlamaModel
    ids : ndarray of int, shape (N,) or (1, N)
        The text as token ids, N >= 2; token 0 is only context.
    window : int, optional
        Tokens read at once, in ``[2, config.max_len]`` (default ``config.max_len``).
    stride : int, optional
        How far the window moves, in ``[1, window]`` (default ``window // 2``): each token is
        scored once, with at least ``window - stride`` tokens of context (:func:`windows`).
        ``stride = window``: disjoint windows, whose first token is not scored.

    Returns
    -------
    float
        :math:`\exp` of the mean :math:`-\log p(x_i \mid c_i)` over the scored tokens: at least 1,
        and V for a model that guesses uniformly among V tokens; ``math.inf`` when it is beyond
        the largest float (a mean above 709.78 nats: :func:`bits_per_byte` stays finite).
    """
    nll, n_scored = negative_log_likelihood(model, ids, window, stride)
    try:
        return math.exp(nll / n_scored)
    except OverflowError:  # beyond the largest float
        return math.inf


# --8<-- [end:perplexity]


@checked(check_bits_per_byte)
def bits_per_byte(model, ids, n_bytes, *, window=None, stride=None):
    r"""How many bits per byte of text ``model`` needs for ``ids``: unlike the perplexity, it
    does not depend on the tokenizer. Page: decoding.md.

    Parameters
    ----------
    model, ids
        As in :func:`perplexity`.
    n_bytes : int
        The text's length in UTF-8 bytes; for a model that reads bytes, N - 1 counts exactly the
        scored bytes (the first token is never predicted).
    window, stride : int, optional
        As in :func:`perplexity`.

    Returns
    -------
    float
        :math:`-\sum_i \log p(x_i \mid c_i) / (n_{\text{bytes}} \ln 2)`: 8 for a model that
        guesses uniformly among the 256 bytes.
    """
    nll, _ = negative_log_likelihood(model, ids, window, stride)
    return nll / (n_bytes * math.log(2))


# --8<-- [start:windows]
def windows(n, window, stride):
    """The windows ``(begin, end, first)`` over ``n`` tokens: window k reads tokens
    ``begin = k * stride`` to ``end - 1`` and scores ``first`` to ``end - 1``, those no earlier
    window scored."""
    prev_end = 0
    for begin in range(0, n, stride):
        end = min(begin + window, n)
        yield begin, end, max(prev_end, begin + 1)
        prev_end = end
        if end == n:
            break


# --8<-- [end:windows]


# --8<-- [start:negative_log_likelihood]
def negative_log_likelihood(model, ids, window, stride):
    r"""The summed :math:`-\log p(x_i \mid c_i)` over the scored tokens of ``ids`` (N,), in
    float64, and their count."""
    total, n_scored = 0.0, 0
    with model.evaluation_mode():
        for begin, end, first in windows(ids.shape[0], window, stride):
            # 1. The logits of the window: row j predicts token begin + j + 1.
            logits = model(ids[None, begin:end])[0]  # (L, V)
            # 2. The rows that predict the tokens first .. end - 1, in float64.
            rows = logits[first - 1 - begin : end - 1 - begin].astype(np.float64)  # (n, V)
            # 3. The log-probability of each token that came, summed.
            logp = log_softmax(rows)  # (n, V)
            targets = ids[first:end]  # (n,)
            total -= float(logp[np.arange(targets.shape[0]), targets].sum())
            n_scored += targets.shape[0]
    return total, n_scored


# --8<-- [end:negative_log_likelihood]
