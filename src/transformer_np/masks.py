r"""Attention masks: the causal (look-ahead) mask and the key-padding mask.

A mask says which keys each query may look at. Both builders return boolean arrays that
broadcast against attention scores, and :func:`~transformer_np.scaled_dot_product_attention`
(and every layer built on it) takes them as they are.

Conventions
-----------
* A **mask** is boolean: ``True`` means "may attend", ``False`` means "blocked".
* The causal mask has shape ``(n, n)`` (query, key); the padding mask has shape
  ``(B, 1, 1, n_k)``, whose singleton axes broadcast over the heads and the queries.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_positive_int, shape_str

__all__ = ["causal_mask", "padding_mask"]


def causal_mask(n):
    r"""Boolean causal (look-ahead) mask: position ``i`` may attend to positions ``j <= i``.

    Parameters
    ----------
    n : int
        Sequence length, > 0.

    Returns
    -------
    ndarray of bool, shape (n, n)
        ``mask[i, j]`` is True when query ``i`` may attend to key ``j`` (lower triangle and
        diagonal). It broadcasts against scores of shape ``(..., n, n)``.

    Notes
    -----
    .. math:: M_{ij} = [\, j \le i \,]

    Examples
    --------
    >>> from transformer_np import causal_mask
    >>> causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    n = check_positive_int(n, "n")
    return np.tri(n, n, dtype=bool)


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
    arr = np.asarray(lengths)
    if arr.dtype.kind not in "iu" or arr.dtype == bool:
        raise TypeError(f"lengths must be an array of integers, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"lengths must be a non-empty 1-D array (one length per sequence), "
            f"got shape {shape_str(arr.shape)}"
        )
    if (arr < 0).any():
        raise ValueError(f"lengths must be >= 0, got {arr.tolist()}")
    if max_len is None:
        max_len = int(arr.max())
        if max_len == 0:
            raise ValueError("every length is 0: pass max_len to say how long the padded batch is")
    max_len = check_positive_int(max_len, "max_len")
    if (arr > max_len).any():
        raise ValueError(f"lengths must be <= max_len = {max_len}, got {arr.tolist()}")
    mask = np.arange(max_len) < arr[:, None]  # (B, max_len)
    return mask[:, None, None, :]  # (B, max_len) -> (B, 1, 1, max_len)
