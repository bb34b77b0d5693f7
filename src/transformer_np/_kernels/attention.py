"""Attention, in place and in chunks of query rows spread over the cores.

:func:`attention` computes what :func:`transformer_np.attention.attention_steps` computes (the five
steps, written plainly there), with three differences that change the speed, not the result:

* the scores are computed into one buffer and every later step works on it in place
  (:func:`attention_inplace`), so no other float array of that size is created;
* big problems are cut into chunks of query rows, small enough to stay in the CPU cache from
  the first step to the last, and the chunks are spread over the cores
  (:func:`~transformer_np._kernels.threads.parallel_for`): the element-wise steps (``exp``,
  max, division), which NumPy runs on one core, then run on all of them;
* on big problems the row maximum is not subtracted when a cheap bound proves it unnecessary
  (:func:`scores_are_bounded`), and without the weights each thread reuses one buffer for its
  chunks of scores instead of writing the whole (..., n_q, n_k) matrix.

Nothing here checks its inputs: :func:`transformer_np.scaled_dot_product_attention` and
:class:`transformer_np.MultiHeadAttention` do, once. ``tests/test_kernels_attention.py``
checks that every path equals the plain steps.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from .softmax import softmax_inplace
from .threads import CHUNK_BYTES, parallel_for, row_chunks

__all__ = ["attention", "attention_inplace", "overflow_error", "scores_are_bounded"]


def attention(q, k, v, mask=None, bias=None, *, need_weights=True):
    """Attention kernel on validated arrays of one float dtype: returns ``(output, weights)``.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v); ``mask`` bool (True = may
    attend) and ``bias`` float, both broadcastable to (..., n_q, n_k). With
    ``need_weights=False`` the weights are not kept and ``weights`` is None.

    Small problems run :func:`attention_inplace` once on the whole arrays; big ones run it on
    chunks of query rows (of one or a few batch/head items) spread over the cores, as the
    module docstring says.
    """
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])  # batch/head axes
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    output = np.empty(lead + (n_q, d_v), dtype=q.dtype)  # (..., n_q, d_v)
    scores_shape = lead + (n_q, n_k)
    weights = np.empty(scores_shape, dtype=q.dtype) if need_weights else None
    chunks = row_chunks_of_scores(lead, n_q, n_k, q.dtype.itemsize, need_weights)
    if chunks is None:  # small: one vectorised pass
        scores = weights if need_weights else np.empty(scores_shape, dtype=q.dtype)
        attention_inplace(q, k, v, mask, bias, output, scores, keep_weights=need_weights)
        return output, weights
    shift = not scores_are_bounded(q, k, v, bias)
    # Every input as a view with all the leading axes (no copy), so a chunk index fits them all.
    q, k, v, mask, bias = (
        None if a is None else np.broadcast_to(a, lead + np.shape(a)[-2:])
        for a in (q, k, v, at_least_2d(mask), at_least_2d(bias))
    )
    buffers = {}  # without the weights: one buffer of scores per thread, reused chunk by chunk

    def one_chunk(chunk):
        items, rows = chunk  # index into the leading axes, slice of query rows
        q_blk = q[items][..., rows, :]
        if need_weights:
            scores = weights[items][..., rows, :]
        else:
            scores = thread_buffer(buffers, q_blk.shape[:-1] + (n_k,), q.dtype)
        attention_inplace(
            q_blk,
            k[items],
            v[items],
            None if mask is None else rows_of(mask[items], rows),
            None if bias is None else rows_of(bias[items], rows),
            output[items][..., rows, :],
            scores,
            shift=shift,
            keep_weights=need_weights,
        )

    parallel_for(one_chunk, chunks, one_blas_thread=True)
    return output, weights


def thread_buffer(buffers: dict, shape: tuple, dtype) -> np.ndarray:
    """An array of ``shape`` on the calling thread's buffer in ``buffers`` (grown when needed).

    For work split by :func:`~transformer_np._kernels.threads.parallel_for`: each thread reuses one
    piece of memory for all its pieces instead of allocating one per piece.
    """
    size = math.prod(shape)
    buf = buffers.get(threading.get_ident())
    if buf is None or buf.size < size:
        buf = buffers[threading.get_ident()] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)


# Chunks of fewer query rows make the products slower: BLAS packs all of k (and of v) again
# for every chunk.
MIN_CHUNK_ROWS = 128


def row_chunks_of_scores(lead, n_q, n_k, itemsize, need_weights):
    """The chunks of query rows of :func:`attention` (see ``row_chunks``), or None: one pass.

    About 4 MiB of scores per chunk with the weights; 2 MiB without them (the buffer is reused
    and smaller chunks did better); at least ``MIN_CHUNK_ROWS`` rows when n_k is large.
    """
    row_bytes = n_k * itemsize
    chunk_bytes = CHUNK_BYTES if need_weights else CHUNK_BYTES // 2
    chunk_bytes = max(chunk_bytes, MIN_CHUNK_ROWS * row_bytes)
    return row_chunks(lead, n_q, row_bytes, chunk_bytes=chunk_bytes)


def scores_are_bounded(q, k, v, bias) -> bool:
    """Whether ``exp`` can be applied to the scores without subtracting the row maximum.

    The softmax is the same whatever number ``c`` is subtracted from a row; the maximum is the
    usual choice because it keeps every ``e^(s - c) <= 1``. It costs two passes over the scores
    (the maximum, the subtraction) and is not needed when the scores are known to be small:
    by Cauchy-Schwarz, ``|q . k| / sqrt(d_k) <= max|q_i| max|k_j| / sqrt(d_k) = B`` (norms of
    rows), plus the largest finite ``|bias|``. If ``B`` is at most half the log of the largest
    float (44 for float32, 354 for float64), no ``e^s`` overflows, the largest term of every
    row is at least ``e^-B`` (a normal number, so precision is kept), and the row sums and the
    products with ``v`` stay finite when ``n_k e^B max|v|`` does. Costs O((n_q + n_k) d).
    """
    log_max = math.log(np.finfo(q.dtype).max)
    with np.errstate(over="ignore", invalid="ignore"):  # a norm that overflows is inf: not bounded
        q_norm = math.sqrt(float(np.max(np.einsum("...d,...d->...", q, q))))
        k_norm = math.sqrt(float(np.max(np.einsum("...d,...d->...", k, k))))
        bound = q_norm * k_norm / math.sqrt(q.shape[-1])
        if bias is not None:
            bound += float(np.max(np.abs(bias), where=np.isfinite(bias), initial=0.0))
        v_max = max(float(np.max(v)), -float(np.min(v)))  # max |v| without an |v| array
    growth = bound + math.log(k.shape[-2]) + math.log(max(v_max, 1.0))
    return bound <= log_max / 2 and growth <= log_max - 2


def overflow_error(dtype) -> ValueError:
    """The error for scores q . k too large for ``dtype`` (finite inputs, infinite products)."""
    advice = "scale the inputs down" + ("" if dtype == np.float64 else " or use float64")
    return ValueError(
        f"the attention scores overflowed {dtype} (the dot products q . k are too large); {advice}"
    )


def at_least_2d(a):
    """A mask or bias with at least the two axes (n_q, n_k) (a 1-D one is a row of keys)."""
    return None if a is None else a.reshape((1,) * (2 - a.ndim) + a.shape)


def rows_of(a, rows):
    """Rows ``rows`` of an array broadcastable to (..., n_q, n_k); an axis of size 1 stays."""
    return a[..., rows, :] if a.shape[-2] > 1 else a


def attention_inplace(q, k, v, mask, bias, output, weights, *, shift=True, keep_weights=True):
    """The five steps of attention, written into ``output`` and ``weights`` (no checks).

    ``weights`` (..., n_q, n_k) holds the scores first: every step after the first works on it
    in place, and no other float array of that size is created (only the boolean ``~mask``,
    when a mask is given). With ``shift=False`` the row maximum
    is not subtracted (the caller has checked that the scores are small enough). With
    ``keep_weights=False`` the buffer ends with the exponentials, not the weights: only the
    output is divided by the row sums.
    """
    d_k = q.shape[-1]
    # 1. scores = q k^T, with the 1/sqrt(d_k) scale folded into q (n_q*d_k products, not n_q*n_k)
    scale = q.dtype.type(1.0 / math.sqrt(d_k))
    scores = weights
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected in step 4
        np.matmul(q * scale, np.swapaxes(k, -1, -2), out=scores)  # (..., n_q, n_k)
    # 2. additive bias (e.g. relative positions, or a padding mask written as 0 / -inf)
    if bias is not None:
        scores += bias
    # 3. blocked positions get -inf, so that their weight is exactly exp(-inf) = 0
    if mask is not None and not mask.all():
        np.copyto(scores, -np.inf, where=~mask)
    # 4. softmax over the keys, in place; a row with every key blocked becomes all zeros
    row_max = None
    if shift:
        row_max = np.max(scores, axis=-1, keepdims=True)  # (..., n_q, n_k) -> (..., n_q, 1)
        if not (row_max < np.inf).all():  # +inf or NaN: q k^T overflowed the dtype
            raise overflow_error(q.dtype)
    row_sum = softmax_inplace(scores, -1, row_max, shift=shift, normalise=keep_weights)
    # 5. output = weighted average of the values
    np.matmul(scores, v, out=output)  # (..., n_q, n_k) @ (..., n_k, d_v) -> (..., n_q, d_v)
    if not keep_weights:  # divide the n_q x d_v output, not the n_q x n_k exponentials
        output /= row_sum
