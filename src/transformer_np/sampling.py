r"""Choosing the next token from its scores: greedy, temperature and top-k sampling.

A model gives one row of scores (logits) per sequence for the next token. :func:`sample_next`
turns each row into one token id: the arg-max (greedy, ``temperature=0``), or a draw from the
softmax of the scores divided by the temperature, optionally restricted to the ``top_k`` best
tokens. The generation loops of :mod:`transformer_np.decoding` call the same choice at every
step.

Shape glossary: B batch (one row per sequence), V vocabulary.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ._validation import as_float_array, check_finite, check_ndim, check_rng, shape_str

__all__ = ["sample_next"]


def check_sampling(temperature, top_k, vocab_size):
    """The temperature as a float >= 0, after checking it and ``top_k``."""
    if isinstance(temperature, bool | np.bool_) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            f"temperature must be a number >= 0 (0 = greedy), got {temperature!r} "
            f"({type(temperature).__name__})"
        )
    t = float(temperature)
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t}")
    if top_k is not None:
        if isinstance(top_k, bool | np.bool_) or not isinstance(top_k, numbers.Integral):
            raise TypeError(
                f"top_k must be a positive integer or None, got {top_k!r} ({type(top_k).__name__})"
            )
        if not 1 <= top_k <= vocab_size:
            raise ValueError(f"top_k must be in [1, vocab_size = {vocab_size}], got {top_k}")
    return t


def check_logits(logits):
    """``logits`` as a float (B, V) array with V >= 1, no NaN or +inf, no row all -inf."""
    logits = as_float_array(logits, "logits")
    check_ndim(logits, "logits", (2,), "a 2-D array of shape (B, V)")
    if logits.shape[1] == 0:
        raise ValueError(
            f"logits has an empty vocabulary axis: shape {shape_str(logits.shape)}; "
            "expected at least one token score per row (V >= 1)"
        )
    # A -inf score is a masked token (probability exactly 0); NaN and +inf are bugs upstream.
    check_finite(logits, "logits", allow_neg_inf=True)
    dead = np.isneginf(logits.max(axis=-1)) if logits.size else np.zeros(0, bool)  # (B,)
    if dead.any():
        raise ValueError(
            f"logits has rows where every token is -inf, so no token can be chosen "
            f"({int(dead.sum())} of {dead.size} rows, first at row {int(np.argmax(dead))}); "
            "expected at least one finite score per row"
        )
    return logits


def sample_next(logits, *, temperature=1.0, top_k=None, rng=None):
    r"""Choose one token per row of ``logits``.

    Parameters
    ----------
    logits : float ndarray of shape (B, V), V >= 1
        Scores of the next token. ``-inf`` masks a token (it is never chosen); NaN, ``+inf``
        and a row that is ``-inf`` everywhere are rejected with a ValueError.
    temperature : float, default 1.0
        0 means greedy (the arg-max). Otherwise the scores are divided by it before the
        softmax: below 1 the distribution sharpens, above 1 it flattens. A tiny temperature
        gives the limit, greedy (up to ties between equal maxima).
    top_k : int, optional
        Sample only among the ``top_k`` highest-scoring tokens (ties at the threshold stay),
        ``1 <= top_k <= V``. Ignored by greedy decoding, which keeps the best token anyway.
    rng : np.random.Generator or int, optional
        Source of the uniform draws (one per row).

    Returns
    -------
    ndarray of int64, shape (B,)

    Notes
    -----
    .. math:: p_i = \frac{e^{z_i / \tau}}{\sum_{j \in \text{top-}k} e^{z_j / \tau}}
              \quad (i \in \text{top-}k), \qquad p_i = 0 \text{ otherwise}

    The row maximum is subtracted from the scores before they are divided by :math:`\tau`, so
    the exponents are :math:`\le 0` and nothing overflows, however small :math:`\tau` is.
    A token is drawn by inverse-CDF sampling: the first ``i`` whose cumulative probability
    exceeds a uniform draw ``u``.

    Examples
    --------
    >>> import numpy as np
    >>> logits = np.array([[1.0, 3.0, 2.0]])
    >>> sample_next(logits, temperature=0).tolist()
    [1]
    >>> sample_next(logits, top_k=1, rng=0).tolist()
    [1]
    """
    logits = check_logits(logits)
    t = check_sampling(temperature, top_k, logits.shape[-1])
    return choose_next(logits, t, top_k, check_rng(rng))


# --8<-- [start:choose_next]
def choose_next(logits, temperature, top_k, rng):
    """The choice of :func:`sample_next` on checked arguments: (B, V) -> (B,) token ids."""
    t = temperature
    if t == 0:  # greedy: the best token
        return np.argmax(logits, axis=-1).astype(np.int64)
    z = logits.astype(np.float64)  # (B, V); a fresh array, the caller's logits are not touched
    V = z.shape[-1]
    if top_k is not None and top_k < V:
        k = V - top_k
        kth = np.partition(z, k, axis=-1)[:, k : k + 1]  # the k-th largest score, (B, 1)
        z[z < kth] = -np.inf
    # Subtract the row maximum *before* dividing by the temperature: the exponents are then
    # <= 0 whatever tau is, and a tiny tau sends every non-maximal score to -inf (probability
    # 0) instead of overflowing to inf - inf = NaN: the result tends to greedy as tau -> 0.
    z -= z.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):
        z /= t
    p = np.exp(z)  # the maximum gives exp(0) = 1, so the total is >= 1; masked tokens give 0
    cdf = np.cumsum(p, axis=-1)  # (B, V), un-normalised
    u = rng.random((z.shape[0], 1)) * cdf[:, -1:]  # (B, 1)
    # The first index whose cdf exceeds u: since u < cdf[:, -1], its cdf grew there, so its
    # probability is > 0 and a masked token (p = 0) is never returned.
    idx = (cdf <= u).sum(axis=-1)
    return np.minimum(idx, V - 1).astype(np.int64)


# --8<-- [end:choose_next]
