"""Attention masks: the causal (look-ahead) mask and the key-padding mask. Page: attention.md.

A mask is boolean, True = may attend and False = blocked, and broadcasts against the scores.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Integer

from ._checks.boundary import checked
from ._checks.functions import check_causal_mask, check_padding_mask

__all__ = ["causal_mask", "padding_mask"]


@checked(check_causal_mask)
# --8<-- [start:causal_mask]
def causal_mask(n, offset=0):
    r"""Boolean causal (look-ahead) mask: query ``i`` may attend to the keys ``j <= offset + i``.

    Parameters
    ----------
    n : int
        Number of queries, > 0.
    offset : int, default 0
        Number of earlier positions that every query also sees, >= 0: with a
        :class:`~transformer_np.KVCache` holding ``offset`` positions, the ``n`` queries are
        the positions ``offset .. offset + n - 1``.

    Returns
    -------
    ndarray of bool, shape (n, offset + n)
        ``mask[i, j]`` is True when query ``i`` may attend to key ``j``.
    """
    return np.tri(n, offset + n, offset, dtype=bool)  # (n, offset + n): True where j <= offset + i


# --8<-- [end:causal_mask]


@checked(check_padding_mask)
# --8<-- [start:padding_mask]
def padding_mask(lengths: Integer[np.ndarray, " B"], max_len=None):
    r"""Boolean key-padding mask from the true lengths of the sequences of a batch.

    Parameters
    ----------
    lengths : array_like of int, shape (B,)
        Number of real tokens of each sequence, ``0 <= lengths[b] <= max_len``: the first
        ``lengths[b]`` positions (right padding).
    max_len : int, optional
        Padded sequence length; defaults to ``max(lengths)``.

    Returns
    -------
    ndarray of bool, shape (B, 1, 1, max_len)
        True where the key is a real token; the singleton axes broadcast over the heads and
        the queries of scores (B, H, n_q, max_len). A length of 0 blocks every key.
    """
    mask = np.arange(max_len) < lengths[:, None]  # (B, max_len)
    return mask[:, None, None, :]  # (B, max_len) -> (B, 1, 1, max_len)


# --8<-- [end:padding_mask]
