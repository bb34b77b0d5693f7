r"""Attention masks: the causal (look-ahead) mask and the key-padding mask.

A mask says which keys each query may look at. Both builders return boolean arrays that
broadcast against attention scores, and :func:`~transformer_np.scaled_dot_product_attention`
(and every layer built on it) takes them as they are.

Conventions
-----------
* A **mask** is boolean: ``True`` means "may attend", ``False`` means "blocked".
* The causal mask has shape ``(n, offset + n)`` (query, key); the padding mask has shape
  ``(B, 1, 1, n_k)``, whose singleton axes broadcast over the heads and the queries.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked
from ._checks.functions import check_causal_mask, check_padding_mask

__all__ = ["causal_mask", "padding_mask"]


@checked(check_causal_mask)
def causal_mask(n, offset=0):
    r"""Boolean causal (look-ahead) mask: query ``i`` may attend to the keys ``j <= offset + i``.

    Parameters
    ----------
    n : int
        Number of queries, > 0.
    offset : int, default 0
        Number of earlier positions that every query may also see, >= 0: with a
        :class:`~transformer_np.KVCache` holding ``offset`` positions, the ``n`` new queries are
        the positions ``offset .. offset + n - 1`` and the keys are all ``offset + n`` of them.

    Returns
    -------
    ndarray of bool, shape (n, offset + n)
        ``mask[i, j]`` is True when query ``i`` may attend to key ``j``. It broadcasts against
        scores of shape ``(..., n, offset + n)``.

    Notes
    -----
    .. math:: M_{ij} = [\, j \le \mathrm{offset} + i \,]

    Examples
    --------
    >>> from transformer_np import causal_mask
    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    >>> causal_mask(2, offset=3).astype(int)
    array([[1, 1, 1, 1, 0],
           [1, 1, 1, 1, 1]])
    """
    return np.tri(n, offset + n, offset, dtype=bool)  # (n, offset + n)


@checked(check_padding_mask)
def padding_mask(lengths, max_len=None):
    r"""Boolean key-padding mask from the true lengths of the sequences of a batch.

    Parameters
    ----------
    lengths : array_like of int, shape (B,)
        Number of real (non-padding) tokens of each sequence, ``0 <= lengths[b] <= max_len``.
        The real tokens are the first ``lengths[b]`` positions (right padding).
    max_len : int, optional
        Padded sequence length; defaults to ``max(lengths)``.

    Returns
    -------
    ndarray of bool, shape (B, 1, 1, max_len)
        True where the key is a real token. The two singleton axes broadcast over the heads
        and the query positions of multi-head scores of shape ``(B, H, n_q, max_len)``; for
        single-head scores ``(B, n_q, n_k)`` use ``mask[:, 0]`` of shape ``(B, 1, max_len)``.

    Notes
    -----
    .. math:: M_{b,j} = [\, j < \mathrm{lengths}_b \,]

    A sequence of length 0 blocks every key: its attention weights are all 0 and its output
    is 0 (see :func:`~transformer_np.scaled_dot_product_attention`).

    Examples
    --------
    >>> from transformer_np import padding_mask
    >>> m = padding_mask([3, 1])
    >>> m.shape
    (2, 1, 1, 3)
    >>> m[:, 0, 0].astype(int)
    array([[1, 1, 1],
           [1, 0, 0]])
    """
    mask = np.arange(max_len) < lengths[:, None]  # (B, max_len)
    return mask[:, None, None, :]  # (B, max_len) -> (B, 1, 1, max_len)
