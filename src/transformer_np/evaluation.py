r"""Measuring a language model on a text: perplexity and bits per byte.

A decoder-only model (:class:`~transformer_np.model.LanguageModel`,
:class:`~transformer_np.llama.LlamaModel`) gives at every position the distribution of the next
token. Its loss on a text, the mean of :math:`-\log p(x_i \mid x_{<i})` over the tokens, is the
training loss; its exponential is the perplexity. A text longer than the model's context is read
in sliding windows, as in transformers' guide "Perplexity of fixed-length models"
(https://huggingface.co/docs/transformers/perplexity).

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

    The model runs in evaluation mode (dropout off) and is left in the mode it was in.

    Parameters
    ----------
    model : LanguageModel or LlamaModel
    ids : ndarray of int, shape (N,) or (1, N)
        The text as token ids, N >= 2. Token 0 is only context; tokens 1 .. N - 1 are scored.
    window : int, optional
        How many tokens the model reads at once, in ``[2, config.max_len]`` (default
        ``config.max_len``). A text of at most ``window`` tokens is read in one pass.
    stride : int, optional
        How far the window moves, in ``[1, window]`` (default ``window // 2``). Each window
        scores only the tokens that the ones before it did not reach, so every token is scored
        once, with at least ``window - stride`` tokens of context when the text has them. With
        ``stride = window`` the windows are disjoint and the first token of each one after the
        first is not scored (it has no context inside its window), as in the guide.

    Returns
    -------
    float
        :math:`\mathrm{PPL}`, at least 1; a model that guesses uniformly among V tokens has
        perplexity V.

    Notes
    -----
    With :math:`S` the scored positions and :math:`c_i` the context that the window of token
    :math:`i` holds (:math:`x_{<i}` when the text fits in one window),

    .. math:: \mathrm{PPL} = \exp\Big(-\frac{1}{|S|} \sum_{i \in S}
              \log p_\theta(x_i \mid c_i)\Big)

    The windows are those of the guide (:func:`windows`); the log-probabilities are taken in
    float64 and summed in float64, so the mean is the exact mean over the scored tokens.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import LanguageModel, LanguageModelConfig
    >>> lm = LanguageModel(LanguageModelConfig(vocab_size=10, d_model=16, n_heads=2), rng=0)
    >>> ppl = perplexity(lm, np.array([1, 2, 3, 4, 5, 6]))
    >>> 1 <= ppl < 100
    True
    """
    nll, n_scored = negative_log_likelihood(model, ids, window, stride)
    return math.exp(nll / n_scored)


# --8<-- [end:perplexity]


@checked(check_bits_per_byte)
def bits_per_byte(model, ids, n_bytes, *, window=None, stride=None):
    r"""How many bits per byte of text ``model`` needs to encode ``ids``: its compression rate.

    Unlike the perplexity, it does not depend on the tokenizer: a model with fewer, longer
    tokens and a model that reads bytes can be compared on the same text.

    Parameters
    ----------
    model : LanguageModel or LlamaModel
    ids : ndarray of int, shape (N,) or (1, N)
        The text as token ids, N >= 2, read as in :func:`perplexity`.
    n_bytes : int
        The length of the text in bytes (UTF-8). The first token is never predicted: for a model
        that reads bytes, pass N - 1 to count exactly the scored bytes; on a long text the
        difference is negligible.
    window, stride : int, optional
        As in :func:`perplexity`.

    Returns
    -------
    float

    Notes
    -----
    .. math:: \mathrm{BPB} = \frac{-\sum_{i \in S} \log p_\theta(x_i \mid c_i)}
              {n_{\text{bytes}} \ln 2}

    A model that guesses uniformly among the 256 bytes needs 8 bits per byte.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import LanguageModel, LanguageModelConfig
    >>> lm = LanguageModel(LanguageModelConfig(vocab_size=256, d_model=16, n_heads=2), rng=0)
    >>> text = "ciao, mondo".encode()
    >>> bpb = bits_per_byte(lm, np.frombuffer(text, np.uint8), len(text) - 1)
    >>> 0 < bpb < 16
    True
    """
    nll, _ = negative_log_likelihood(model, ids, window, stride)
    return nll / (n_bytes * math.log(2))


# --8<-- [start:windows]
def windows(n, window, stride):
    """The windows of transformers' perplexity guide over a text of ``n`` tokens.

    Window k reads the tokens ``begin .. end - 1``, with ``begin = k * stride`` and
    ``end = min(begin + window, n)``, until one reaches the end of the text. It scores the
    tokens ``first .. end - 1`` that no earlier window scored (``first`` is past ``begin``:
    the first token of a window has no context in it).

    Yields
    ------
    (begin, end, first) : tuple of int
    """
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
    """The summed :math:`-\\log p(x_i \\mid c_i)` over the scored tokens (float64), and their
    count, for checked arguments (``ids`` of shape (N,))."""
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
