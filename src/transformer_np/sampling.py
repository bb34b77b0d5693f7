"""Choosing the next token from its scores: greedy, temperature, top-k and top-p sampling.
Page: decoding.md.

Shape glossary: B batch (one row per sequence), V vocabulary.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

from ._checks.boundary import checked, run_or_blame
from ._checks.generation import check_sample_next
from ._kernels.threads import share_cores

__all__ = ["sample_next"]


@checked(check_sample_next)
# --8<-- [start:sample_next]
def sample_next(
    logits: Float[np.ndarray, "B V"], *, temperature=1.0, top_k=None, top_p=None, rng=None
):
    """Choose one token per row of ``logits``: (B, V) -> (B,). Page: decoding.md.

    Parameters
    ----------
    logits : float ndarray of shape (B, V), V >= 1
        Scores of the next token; ``-inf`` masks a token. NaN, ``+inf`` and a row that is
        ``-inf`` everywhere raise a ValueError.
    temperature : float, default 1.0
        0 is greedy (the arg-max; ``top_k`` and ``top_p``, which would do nothing, are then a
        ValueError). Otherwise the scores
        are divided by it before the softmax: below 1 sharper, above 1 flatter.
    top_k : int, optional
        Only the ``top_k`` best tokens (ties at the threshold stay), ``1 <= top_k <= V``.
    top_p : float, optional
        Nucleus sampling, ``0 < top_p <= 1`` (None or 1.0: no cut): only the fewest most probable
        tokens whose total reaches ``top_p``, after the temperature and ``top_k``, by transformers'
        rule (``TopPLogitsWarper``: the best token always stays, ties are split by index).
    rng : np.random.Generator or int, optional
        Source of the uniform draws (one per row).

    Returns
    -------
    ndarray of int64, shape (B,)
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
    """The weights :func:`sample_next` draws from, (B, V) -> (B, V), for checked arguments and
    ``temperature > 0``: 1 for each row's best token, exactly 0 for a token never chosen."""
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
    # 3. top-p, after the temperature: transformers' rule (TopPLogitsWarper)
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
    """The logits (B, V) of the next token: the last position of ``step(*args, **kwargs)``, a
    forward pass of ``model`` (its bad parameter named if they are not finite), with BLAS on
    the cores that other processes leave free."""
    share_cores()
    return run_or_blame(model, step, *args, **kwargs)[:, -1]
