r"""Choosing the next token from its scores: greedy, temperature and top-k sampling.

A model gives one row of scores (logits) per sequence for the next token; :func:`sample_next`
turns each row into one token id. The generation loops of :mod:`transformer_np.decoding` make
the same choice at every step. Page: decoding.md.

Shape glossary: B batch (one row per sequence), V vocabulary.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked
from ._checks.generation import check_sample_next

__all__ = ["sample_next"]


@checked(check_sample_next)
def sample_next(logits, *, temperature=1.0, top_k=None, rng=None):
    r"""Choose one token per row of ``logits``: (B, V) -> (B,).

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

    Examples
    --------
    >>> import numpy as np
    >>> logits = np.array([[1.0, 3.0, 2.0]])
    >>> sample_next(logits, temperature=0).tolist()
    [1]
    >>> sample_next(logits, top_k=1, rng=0).tolist()
    [1]
    """
    if temperature == 0:  # greedy: the best token
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
        z /= temperature
    p = np.exp(z)  # the maximum gives exp(0) = 1, so the total is >= 1; masked tokens give 0
    cdf = np.cumsum(p, axis=-1)  # (B, V), un-normalised
    u = rng.random((z.shape[0], 1)) * cdf[:, -1:]  # (B, 1)
    # The first index whose cdf exceeds u (inverse-CDF sampling): since u < cdf[:, -1], its cdf
    # grew there, so its probability is > 0 and a masked token (p = 0) is never returned.
    idx = (cdf <= u).sum(axis=-1)
    return np.minimum(idx, V - 1).astype(np.int64)
