"""Memory-efficient attention: the online softmax of FlashAttention, tile by tile, with memory
``O(tile^2 + n d)`` per head instead of ``O(n^2)``. Page: efficient-attention.md.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Shaped

from ._checks.boundary import checked, to_compute
from ._checks.functions import check_blockwise_attention
from ._kernels.attention import overflow_error
from ._kernels.threads import num_threads, parallel_for

__all__ = ["blockwise_attention"]

# Big enough for the matrix products to run near peak speed, small enough for a tile of scores
# (8 heads x 256 x 256 float32 = 2 MB) to stay in the cache between the steps that read it.
DEFAULT_TILE_SIZE = 256

# Below this many score entries (over all heads) one thread does the job faster than two.
PARALLEL_MIN_SCORES = 1 << 20


@checked(check_blockwise_attention)
def blockwise_attention(
    q: Float[np.ndarray, "*#B Tq Dk"],
    k: Float[np.ndarray, "*#B Tk Dk"],
    v: Float[np.ndarray, "*#B Tk Dv"],
    mask: Shaped[np.ndarray, "..."] | None = None,
    *,
    tile_size: int = DEFAULT_TILE_SIZE,
    causal: bool = False,
    bias: Float[np.ndarray, "..."] | None = None,
):
    """Scaled dot-product attention computed tile by tile, without the ``(n_q, n_k)`` matrix.

    The result equals ``scaled_dot_product_attention(q, k, v, mask)[0]`` up to rounding, but the
    scores are never stored for more than one ``(tile_size, tile_size)`` tile per head. For each
    query row it keeps a running maximum m, sum l and weighted sum a of the values; the output
    is a / l. Page: efficient-attention.md.

    Parameters
    ----------
    q : ndarray of shape (..., n_q, d_k)
        Queries, with any leading batch/head axes.
    k : ndarray of shape (..., n_k, d_k)
        Keys.
    v : ndarray of shape (..., n_k, d_v)
        Values.
    mask : array_like, broadcastable to (..., n_q, n_k), optional
        True where query i may attend to key j. An explicit causal mask costs O(n_q n_k) bytes:
        prefer ``causal=True`` for long sequences.
    tile_size : int, default 256
        Rows of queries and of keys per tile, any positive integer.
    causal : bool, default False
        Query i attends only to keys j <= i, without building the mask (and with ``mask`` if given).
    bias : ndarray of float, broadcastable to (..., n_q, n_k), optional
        Added to the scaled scores before the softmax (``-inf`` blocks).

    Returns
    -------
    output : ndarray of shape (..., n_q, d_v)
        A query row that every key is blocked for gets 0, as in ``scaled_dot_product_attention``.

    Raises
    ------
    TypeError, ValueError
        The errors of ``scaled_dot_product_attention`` for bad ``q``, ``k``, ``v`` or ``mask``,
        and a ``tile_size`` that is not a positive integer.
    """
    dtype = q.dtype  # of q, k and v: float16 is computed in float32, then given back
    q, k, v = (to_compute(t) for t in (q, k, v))
    n_q, d_k = q.shape[-2:]
    n_k, d_v = v.shape[-2:]
    # Give a mask and a bias (at least) the two axes (n_q, n_k), so tiles can be sliced.
    mask, bias = (
        None if a is None else a.reshape((1,) * (2 - a.ndim) + a.shape) for a in (mask, bias)
    )
    lead = np.broadcast_shapes(
        q.shape[:-2],
        k.shape[:-2],
        v.shape[:-2],
        *(a.shape[:-2] for a in (mask, bias) if a is not None),
    )
    # Give q every leading axis (a view, no copy) so each tile of scores has the full shape.
    q = np.broadcast_to(q, lead + (n_q, d_k))
    out = np.empty(lead + (n_q, d_v), dtype=q.dtype)  # (..., n_q, d_v)
    scale = q.dtype.type(1.0 / np.sqrt(d_k))

    def one_query_tile(qs: int) -> None:
        qe = min(qs + tile_size, n_q)
        attend_query_tile(q, k, v, mask, bias, causal, scale, qs, qe, tile_size, out[..., qs:qe, :])

    starts = range(0, n_q, tile_size)
    big_enough = int(np.prod(lead, dtype=np.int64)) * n_q * n_k >= PARALLEL_MIN_SCORES
    parallel_for(
        one_query_tile, starts, threads=num_threads() if big_enough else 1, one_blas_thread=True
    )
    if not np.isfinite(out).all():  # finite inputs, so the sums of weights times v overflowed
        raise ValueError(
            f"the output overflowed {out.dtype}: the running sums of weights times v (up to "
            f"n_k max|v| = {n_k} x {float(np.max(np.abs(v))):.3g}) do not fit in it; scale v "
            "down" + ("" if out.dtype == np.float64 else " or use float64")
        )
    return out.astype(dtype, copy=False)


def tile_of(a, qs, qe, ks, ke):
    """Tile (qs:qe, ks:ke) of an array broadcastable to (..., n_q, n_k); axes of size 1 stay."""
    a = a[..., qs:qe, :] if a.shape[-2] > 1 else a
    return a[..., ks:ke] if a.shape[-1] > 1 else a


# --8<-- [start:query_tile]
def attend_query_tile(q, k, v, mask, bias, causal, scale, qs, qe, tile_size, out) -> None:
    """Attention output of the query rows ``qs:qe``, visiting the keys one tile at a time, with
    each row's running maximum ``row_max`` (m), sum ``row_sum`` (l) and ``acc`` (a)."""
    n_k = k.shape[-2]
    q_tile = q[..., qs:qe, :] * scale  # (..., bq, d_k), scaled once here, not in every tile
    row_max = np.full(q_tile.shape[:-1], -np.inf, dtype=q.dtype)  # (..., bq)
    row_sum = np.zeros(q_tile.shape[:-1], dtype=q.dtype)  # (..., bq)
    acc = np.zeros(out.shape, dtype=q.dtype)  # (..., bq, d_v)

    # With causal=True, row i sees keys 0..i only: the tiles right of column qe - 1 are skipped.
    k_end = min(n_k, qe) if causal else n_k
    for ks in range(0, k_end, tile_size):
        ke = min(ks + tile_size, k_end)

        # Which (query, key) pairs of this tile may attend; None when all of them may.
        allowed = None
        if mask is not None:
            allowed = tile_of(mask, qs, qe, ks, ke)  # bool (made so by blockwise_attention)
            if not allowed.any():
                continue  # every pair blocked: the tile changes nothing
            if allowed.all():
                allowed = None
        if causal and ke - 1 > qs:  # the tile crosses the diagonal
            below = np.arange(ks, ke) <= np.arange(qs, qe)[:, None]  # (bq, bk): key j <= query i
            allowed = below if allowed is None else allowed & below

        # 1. scores of the tile (already scaled, through q_tile)
        kt = k[..., ks:ke, :].swapaxes(-1, -2)  # (..., bk, d_k) -> (..., d_k, bk)
        s = q_tile @ kt  # (..., bq, d_k) @ (..., d_k, bk) -> (..., bq, bk)
        # 2. additive bias; blocked pairs get -inf, so their weight is exactly exp(-inf) = 0
        if bias is not None:
            s += tile_of(bias, qs, qe, ks, ke)
        if allowed is not None:
            np.copyto(s, -np.inf, where=~allowed)
        # 3. new running max m' = max(m, max_j s_j); a row that saw only blocked keys keeps -inf
        new_max = np.maximum(row_max, s.max(axis=-1))  # (..., bq, bk) -> (..., bq)
        if not (new_max < np.inf).all():  # +inf or NaN: q k^T overflowed the dtype
            raise overflow_error(q.dtype)
        shift = np.where(new_max == -np.inf, 0, new_max)  # avoids (-inf) - (-inf) = NaN
        # 4. p_j = exp(s_j - m'), in place
        s -= shift[..., None]
        np.exp(s, out=s)  # (..., bq, bk), entries in [0, 1]
        # 5. rescale the old sums by exp(m - m') (0 while m = -inf), then add this tile
        rescale = np.exp(row_max - shift)  # (..., bq)
        row_sum *= rescale
        row_sum += s.sum(axis=-1)
        acc *= rescale[..., None]
        acc += s @ v[..., ks:ke, :]  # (..., bq, bk) @ (..., bk, d_v) -> (..., bq, d_v)
        row_max = new_max

    # 6. output = a / l; a row with every key blocked has l = 0 (and a = 0) and gets 0
    empty = row_sum == 0
    np.divide(acc, row_sum[..., None], out=out, where=~empty[..., None])
    if empty.any():
        out[empty] = 0


# --8<-- [end:query_tile]
