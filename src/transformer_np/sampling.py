r"""Choosing the next token from its scores: greedy, temperature, top-k and top-p sampling.

A model gives one row of scores (logits) per sequence for the next token; :func:`sample_next`
turns each row into one token id. The generation loops of :mod:`transformer_np.decoding` make
the same choice at every step. Page: decoding.md.

Shape glossary: B batch (one row per sequence), V vocabulary.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked, run_or_blame
from ._checks.generation import check_sample_next

__all__ = ["sample_next"]


@checked(check_sample_next)
# --8<-- [start:sample_next]
def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, rng=None):
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
    top_p : float, optional
        Nucleus sampling (Holtzman et al., 2020), ``0 < top_p <= 1``: sample only among the
        smallest set of most probable tokens whose total probability reaches ``top_p``, after
        the temperature and after ``top_k`` (transformers' order). None or 1.0: no cut. The
        most probable token always stays; ties at the threshold are split as transformers'
        ``TopPLogitsWarper`` splits them (see Notes). Ignored by greedy decoding.
    rng : np.random.Generator or int, optional
        Source of the uniform draws (one per row).

    Returns
    -------
    ndarray of int64, shape (B,)

    Notes
    -----
    .. math:: p_i = \frac{e^{z_i / \tau}}{\sum_{j \in K} e^{z_j / \tau}}
              \quad (i \in K), \qquad p_i = 0 \text{ otherwise}

    where :math:`K` is the top-:math:`k` set, cut further by top-:math:`p`. The top-p rule is
    transformers' ``TopPLogitsWarper`` (``min_tokens_to_keep=1``): sort the tokens from the
    least probable, and drop each token whose probability, added to that of all the tokens
    before it in that order, is at most :math:`1 - p`; the most probable token is never dropped.
    What stays is the smallest prefix of the tokens sorted from the most probable whose total
    reaches :math:`p`. Equal probabilities are ordered by index (a stable sort: the lower
    index counts as the less probable and goes first), so a tie at the threshold can be split.

    Examples
    --------
    >>> import numpy as np
    >>> logits = np.array([[1.0, 3.0, 2.0]])
    >>> sample_next(logits, temperature=0).tolist()
    [1]
    >>> sample_next(logits, top_k=1, rng=0).tolist()
    [1]
    >>> sample_next(logits, top_p=0.5, rng=0).tolist()  # token 1 alone has 67% of the mass
    [1]
    """
    if temperature == 0:  # greedy: the best token
        return np.argmax(logits, axis=-1).astype(np.int64)
    p = weights(logits, temperature, top_k, top_p)  # (B, V), un-normalised; 0 = never chosen
    cdf = np.cumsum(p, axis=-1)  # (B, V), un-normalised
    u = rng.random((p.shape[0], 1)) * cdf[:, -1:]  # (B, 1)
    # The first index whose cdf exceeds u (inverse-CDF sampling): since u < cdf[:, -1], its cdf
    # grew there, so its probability is > 0 and a masked token (p = 0) is never returned.
    idx = (cdf <= u).sum(axis=-1)
    return np.minimum(idx, p.shape[-1] - 1).astype(np.int64)


# --8<-- [end:sample_next]


# --8<-- [start:weights]
def weights(logits, temperature, top_k, top_p):
    """The distribution :func:`sample_next` draws from, up to a factor per row: (B, V) -> (B, V).

    The arguments are already checked, and ``temperature > 0``. Each row's most probable token
    has weight 1, the others less; a token that cannot be chosen has weight exactly 0.
    """
    z = logits.astype(np.float64)  # (B, V); a fresh array, the caller's logits are not touched
    V = z.shape[-1]
    # 1. top-k: the scores below the k-th largest are masked (ties at the threshold stay)
    if top_k is not None and top_k < V:
        k = V - top_k
        kth = np.partition(z, k, axis=-1)[:, k : k + 1]  # the k-th largest score, (B, 1)
        z[z < kth] = -np.inf
    # 2. temperature. Subtract the row maximum *before* dividing by the temperature: the
    # exponents are then <= 0 whatever tau is, and a tiny tau sends every non-maximal score to
    # -inf (probability 0) instead of overflowing to inf - inf = NaN: the result tends to greedy
    # as tau -> 0. (Top-k commutes with the temperature, so its place does not matter.)
    z -= z.max(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):
        z /= temperature
    p = np.exp(z)  # the maximum gives exp(0) = 1, so the total is >= 1; masked tokens give 0
    # 3. top-p, after the temperature: transformers' rule (see Notes)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(z, axis=-1, kind="stable")  # (B, V), from the least probable
        p_sorted = np.take_along_axis(p, order, axis=-1)  # (B, V)
        mass = np.cumsum(p_sorted / p_sorted.sum(axis=-1, keepdims=True), axis=-1)  # (B, V)
        drop = mass <= 1 - top_p  # this token and all the less probable ones: at most 1 - p
        drop[:, -1] = False  # the most probable token always stays (min_tokens_to_keep=1)
        np.put_along_axis(p, order, np.where(drop, 0.0, p_sorted), axis=-1)
    return p


# --8<-- [end:weights]


def next_logits(model, step, *args, **kwargs):
    """The logits (B, V) of the next token: the last position of ``step(*args, **kwargs)``,
    a forward pass of ``model`` (its bad parameter named if the logits are not finite).
    The generation loops (:mod:`~transformer_np.decoding`, :mod:`~transformer_np.beam`) call
    it at every step."""
    return run_or_blame(model, step, *args, **kwargs)[:, -1]
