"""Scaled dot-product attention and multi-head attention.

Shape glossary: B batch, H heads, T (or n_q) query positions, S (or n_k) key positions,
D = d_model, Dh = d_model / H the size of one head.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ._kernels.threads import CHUNK_BYTES, parallel_for, row_chunks
from ._validation import (
    as_float_array,
    check_bool,
    check_broadcastable,
    check_dtype,
    check_finite,
    check_ndim,
    check_positive_int,
    check_rng,
    compute_dtype,
    shape_str,
)
from .functional import softmax_inplace
from .layers import _backward_cache, _check_grad, _zero_grads

__all__ = ["MultiHeadAttention", "scaled_dot_product_attention"]


# --------------------------------------------------------------------------------------------
# scaled dot-product attention
# --------------------------------------------------------------------------------------------


def _as_bool_mask(mask) -> np.ndarray:
    """Convert a mask to bool (True = may attend), rejecting what is likely a mistake."""
    try:
        m = np.asarray(mask)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"mask must be an array of booleans, got {type(mask).__name__}") from exc
    if m.dtype == bool:
        return m
    if m.dtype.kind in "iu":
        return m != 0
    if m.dtype.kind == "f":
        if np.isin(m, (0, 1)).all():
            return m != 0
        raise ValueError(
            "mask must hold True/False (or 1/0): True = may attend, False = blocked; got a float "
            "array with other values. For an additive mask (0 where allowed, -inf or a large "
            "negative number where blocked) pass it as bias=... instead."
        )
    raise TypeError(f"mask must be an array of booleans (True = may attend), got dtype {m.dtype}")


def _check_bias(bias, scores_shape, desc: str) -> np.ndarray:
    b = as_float_array(bias, "bias")
    check_broadcastable(b.shape, scores_shape, "bias", desc)
    check_finite(b, "bias", allow_neg_inf=True)
    return b


def _check_sdpa_inputs(q, k, v, mask, bias):
    """Validate the inputs of attention; return arrays ready for :func:`_sdpa`.

    Returns ``(q, k, v, mask, bias, out_dtype)`` with q, k, v in the compute dtype (float16 is
    computed in float32), ``mask`` a bool array or None, ``bias`` a float array or None.
    """
    q = as_float_array(q, "q")
    k = as_float_array(k, "k")
    v = as_float_array(v, "v")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ValueError(
                f"{name} must have at least 2 axes (..., positions, features), "
                f"got shape {shape_str(t.shape)}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k, got q {shape_str(q.shape)} "
            f"and k {shape_str(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys n_k (axis -2), got k "
            f"{shape_str(k.shape)} and v {shape_str(v.shape)}"
        )
    if q.shape[-1] == 0:
        raise ValueError(f"d_k must be positive, got q {shape_str(q.shape)}")
    if k.shape[-2] == 0:
        raise ValueError(f"n_k must be positive (at least one key), got k {shape_str(k.shape)}")
    try:
        lead_qk = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        np.broadcast_shapes(lead_qk, v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the leading (batch/head) axes of q, k and v must broadcast together, got q "
            f"{shape_str(q.shape)}, k {shape_str(k.shape)} and v {shape_str(v.shape)}"
        ) from None
    scores_shape = lead_qk + (q.shape[-2], k.shape[-2])
    desc = "the attention scores (..., n_q, n_k) ="
    if mask is not None:
        mask = _as_bool_mask(mask)
        check_broadcastable(mask.shape, scores_shape, "mask", desc)
    if bias is not None:
        bias = _check_bias(bias, scores_shape, desc)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_finite(t, name)
    out_dtype = np.result_type(q, k, v)
    dt = compute_dtype(out_dtype)
    q, k, v = (t.astype(dt, copy=False) for t in (q, k, v))
    return q, k, v, mask, bias, out_dtype


def _sdpa(q, k, v, mask=None, bias=None, *, need_weights=True):
    """Attention kernel on validated arrays of one float dtype: returns ``(output, weights)``.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v); ``mask`` bool (True = may
    attend) and ``bias`` float, both broadcastable to (..., n_q, n_k). With
    ``need_weights=False`` the weights are not kept and ``weights`` is None.

    Small problems run :func:`_attention_steps` once on the whole arrays. Big ones run it on
    blocks of query rows (of one or a few batch/head items), spread over the cores by
    :func:`~transformer_np._parallel.parallel_for`: each block of scores is small enough to
    stay in the CPU cache from the first step to the last, and the element-wise steps
    (``exp``, max, division), which NumPy runs on one core, run on all of them. On big
    problems the row maximum is not subtracted when a cheap bound proves it unnecessary
    (:func:`_scores_are_bounded`), and without ``need_weights`` each thread reuses one
    buffer for its blocks of scores instead of writing the whole (..., n_q, n_k) matrix.
    """
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])  # batch/head axes
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    output = np.empty(lead + (n_q, d_v), dtype=q.dtype)  # (..., n_q, d_v)
    scores_shape = lead + (n_q, n_k)
    weights = np.empty(scores_shape, dtype=q.dtype) if need_weights else None
    blocks = _sdpa_blocks(lead, n_q, n_k, q.dtype.itemsize, need_weights)
    if blocks is None:  # small: one vectorised pass
        scores = weights if need_weights else np.empty(scores_shape, dtype=q.dtype)
        _attention_steps(q, k, v, mask, bias, output, scores, keep_weights=need_weights)
        return output, weights
    shift = not _scores_are_bounded(q, k, v, bias)
    # Every input as a view with all the leading axes (no copy), so a block index fits them all.
    q, k, v, mask, bias = (
        None if a is None else np.broadcast_to(a, lead + np.shape(a)[-2:])
        for a in (q, k, v, _at_least_2d(mask), _at_least_2d(bias))
    )
    buffers = {}  # without the weights: one buffer of scores per thread, reused block by block

    def one_block(block):
        items, rows = block  # index into the leading axes, slice of query rows
        q_blk = q[items][..., rows, :]
        if need_weights:
            scores = weights[items][..., rows, :]
        else:
            scores = _thread_buffer(buffers, q_blk.shape[:-1] + (n_k,), q.dtype)
        _attention_steps(
            q_blk,
            k[items],
            v[items],
            None if mask is None else _rows(mask[items], rows),
            None if bias is None else _rows(bias[items], rows),
            output[items][..., rows, :],
            scores,
            shift=shift,
            keep_weights=need_weights,
        )

    parallel_for(one_block, blocks, one_blas_thread=True)
    return output, weights


def _thread_buffer(buffers: dict, shape: tuple, dtype) -> np.ndarray:
    """An array of ``shape`` on the calling thread's buffer in ``buffers`` (grown when needed).

    For work split by :func:`~transformer_np._parallel.parallel_for`: each thread reuses one
    block of memory for all its pieces instead of allocating one per piece.
    """
    size = math.prod(shape)
    buf = buffers.get(threading.get_ident())
    if buf is None or buf.size < size:
        buf = buffers[threading.get_ident()] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)


# Blocks of fewer query rows make the products slower: OpenBLAS packs all of k (and of v) again
# for every block. Measured at n = 16384 on one core: 32 rows 10.1 ns per score, 128 rows 8.5.
MIN_BLOCK_ROWS = 128


def _sdpa_blocks(lead, n_q, n_k, itemsize, need_weights):
    """The blocks of query rows of :func:`_sdpa` (see ``row_chunks``), or None: one pass.

    About 4 MiB of scores per block with the weights; 2 MiB without them (the buffer is reused
    and smaller blocks did better); at least ``MIN_BLOCK_ROWS`` rows when n_k is large.
    """
    row_bytes = n_k * itemsize
    block_bytes = CHUNK_BYTES if need_weights else CHUNK_BYTES // 2
    block_bytes = max(block_bytes, MIN_BLOCK_ROWS * row_bytes)
    return row_chunks(lead, n_q, row_bytes, chunk_bytes=block_bytes)


def _scores_are_bounded(q, k, v, bias) -> bool:
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


def _overflow_error(dtype) -> ValueError:
    """The error for scores q . k too large for ``dtype`` (finite inputs, infinite products)."""
    advice = "scale the inputs down" + ("" if dtype == np.float64 else " or use float64")
    return ValueError(
        f"the attention scores overflowed {dtype} (the dot products q . k are too large); {advice}"
    )


def _at_least_2d(a):
    """A mask or bias with at least the two axes (n_q, n_k) (a 1-D one is a row of keys)."""
    return None if a is None else a.reshape((1,) * (2 - a.ndim) + a.shape)


def _rows(a, rows):
    """Rows ``rows`` of an array broadcastable to (..., n_q, n_k); an axis of size 1 stays."""
    return a[..., rows, :] if a.shape[-2] > 1 else a


# --8<-- [start:attention_steps]
def _attention_steps(q, k, v, mask, bias, output, weights, *, shift=True, keep_weights=True):
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
            raise _overflow_error(q.dtype)
    row_sum = softmax_inplace(scores, -1, row_max, shift=shift, normalise=keep_weights)
    # 5. output = weighted average of the values
    np.matmul(scores, v, out=output)  # (..., n_q, n_k) @ (..., n_k, d_v) -> (..., n_q, d_v)
    if not keep_weights:  # divide the n_q x d_v output, not the n_q x n_k exponentials
        output /= row_sum


# --8<-- [end:attention_steps]


def scaled_dot_product_attention(q, k, v, mask=None, *, bias=None, need_weights=True):
    r"""Scaled dot-product attention, ``softmax(q k^T / sqrt(d_k)) v``.

    Parameters
    ----------
    q : ndarray of shape (..., n_q, d_k)
        Queries. Any number of leading batch/head axes.
    k : ndarray of shape (..., n_k, d_k)
        Keys. Leading axes broadcast against those of ``q``.
    v : ndarray of shape (..., n_k, d_v)
        Values.
    mask : array_like of bool, broadcastable to (..., n_q, n_k), optional
        ``True`` (or nonzero) = the query may attend to the key, ``False`` (or 0) = blocked.
        Blocked positions get a weight of exactly 0. See :func:`~transformer_np.causal_mask`
        and :func:`~transformer_np.padding_mask`.
    bias : ndarray of float, broadcastable to (..., n_q, n_k), optional
        Added to the scaled scores before the softmax (keyword only). ``-inf`` entries block
        like a False mask entry; a large negative number (as in BERT's additive padding
        mask) gives a weight that underflows to 0.
    need_weights : bool, default True
        Whether to return the weights (keyword only). With ``False`` the second value returned
        is None, and on large problems the call is faster and needs less memory: each thread
        computes its blocks of scores in one reused buffer, and the (..., n_q, n_k) weights are
        neither normalised nor stored (as in ``torch.nn.functional.scaled_dot_product_attention``).

    Returns
    -------
    output : ndarray of shape (..., n_q, d_v)
    weights : ndarray of shape (..., n_q, n_k), or None if ``need_weights=False``
        The attention weights; every row sums to 1, except a row in which every key is
        blocked: such a row has all weights 0 and its output is 0 (never NaN).

    Notes
    -----
    .. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(
              \frac{Q K^\top}{\sqrt{d_k}} + B + M\right) V,
              \qquad M_{ij} = \begin{cases} 0 & \text{may attend} \\
              -\infty & \text{blocked} \end{cases}

    Steps: 1. scores, 2. bias, 3. mask (``-inf``, so ``exp`` gives exactly 0; the ``-1e9`` of
    many tutorials is not representable in float16, whose largest finite value is 65504),
    4. softmax per row, 5. weighted sum of the values.

    float32 stays float32 and float64 stays float64; float16 is computed in float32 and the
    results cast back to float16.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import causal_mask, scaled_dot_product_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 4, 8))  # batch 2, 4 positions, d_k = 8
    >>> out, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(4))
    >>> out.shape, w.shape
    ((2, 4, 8), (2, 4, 4))
    >>> bool(np.allclose(w.sum(axis=-1), 1.0)), float(w[0, 0, 1])
    (True, 0.0)
    """
    q, k, v, mask, bias, out_dtype = _check_sdpa_inputs(q, k, v, mask, bias)
    need_weights = check_bool(need_weights, "need_weights")
    output, weights = _sdpa(q, k, v, mask, bias, need_weights=need_weights)
    output = output.astype(out_dtype, copy=False)
    return output, None if weights is None else weights.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------------------------
# multi-head attention
# --------------------------------------------------------------------------------------------


class MultiHeadAttention:
    r"""Multi-head attention with its own parameters, created once.

    Parameters
    ----------
    d_model : int
        Model width D (> 0).
    n_heads : int
        Number of heads H (> 0); must divide ``d_model``. Each head has size Dh = D / H.
    rng : np.random.Generator or int, optional
        Source of randomness for the initial weights.
    bias : bool, default True
        Whether the four projections have biases ``b_q, b_k, b_v, b_o``.
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters.

    Attributes
    ----------
    params : dict of str to ndarray
        ``W_q, W_k, W_v, W_o`` of shape (D, D), applied as ``x @ W``; with ``bias=True`` also
        ``b_q, b_k, b_v, b_o`` of shape (D,). The columns ``h*Dh:(h+1)*Dh`` of ``W_q`` (and
        ``W_k``, ``W_v``) are head ``h``'s projection; the rows ``h*Dh:(h+1)*Dh`` of ``W_o``
        read head ``h``'s output. Weights are Xavier/Glorot-uniform, biases zero.
    d_model, n_heads, d_head : int

    Notes
    -----
    .. math:: \mathrm{MultiHead}(X_q, X_{kv}) = \mathrm{Concat}(\mathrm{head}_1, \dots,
              \mathrm{head}_H)\, W^O + b^O, \quad
              \mathrm{head}_h = \mathrm{Attention}(X_q W^Q_h + b^Q_h,\;
              X_{kv} W^K_h + b^K_h,\; X_{kv} W^V_h + b^V_h)

    All heads are computed together: one (B*T, D) @ (D, D) product per projection, a
    reshape to (B, H, T, Dh), and batched attention over the (B, H) axes; there is no Python
    loop over heads. The computation runs in the input's dtype (float16 in float32).

    After each call ``self._cache`` holds what a backward pass needs (see
    :meth:`__call__`).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import MultiHeadAttention
    >>> rng = np.random.default_rng(0)
    >>> mha = MultiHeadAttention(d_model=16, n_heads=4, rng=rng)
    >>> x = rng.standard_normal((2, 5, 16))  # batch 2, 5 tokens
    >>> out, w = mha(x)
    >>> out.shape, w.shape
    ((2, 5, 16), (2, 4, 5, 5))
    """

    def __init__(self, d_model, n_heads, *, rng=None, bias=True, dtype=np.float64):
        d_model = check_positive_int(d_model, "d_model")
        n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model = {d_model} and "
                f"n_heads = {n_heads} (d_model / n_heads = {d_model / n_heads:g})"
            )
        check_bool(bias, "bias")
        dtype = check_dtype(dtype)
        rng = check_rng(rng)
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.has_bias = bool(bias)
        # Xavier/Glorot uniform for a (D, D) map: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
        limit = math.sqrt(6.0 / (2 * d_model))
        self.params = {}
        for name in ("W_q", "W_k", "W_v", "W_o"):
            self.params[name] = rng.uniform(-limit, limit, (d_model, d_model)).astype(dtype)
        if bias:
            for name in ("b_q", "b_k", "b_v", "b_o"):
                self.params[name] = np.zeros(d_model, dtype)
        self.grads = {}  # filled by backward(), same keys as params
        self._cache = None

    def __repr__(self):
        return (
            f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}, "
            f"bias={self.has_bias})"
        )

    def _check_params(self):
        d = self.d_model
        expected = {"W_q": (d, d), "W_k": (d, d), "W_v": (d, d), "W_o": (d, d)}
        if self.has_bias:
            expected.update({"b_q": (d,), "b_k": (d,), "b_v": (d,), "b_o": (d,)})
        for name, shape in expected.items():
            if name not in self.params:
                raise KeyError(f"params is missing {name!r}")
            p = self.params[name]
            if not isinstance(p, np.ndarray) or p.shape != shape:
                got = shape_str(p.shape) if isinstance(p, np.ndarray) else type(p).__name__
                raise ValueError(f"params[{name!r}] must be an ndarray of shape {shape}, got {got}")
            check_finite(p, f"params[{name!r}]")

    def _check_input(self, x, name):
        x = as_float_array(x, name)
        check_ndim(x, name, (2, 3), "(T, d_model) or (B, T, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} must have last dimension d_model = {self.d_model}, "
                f"got shape {shape_str(x.shape)}"
            )
        if x.shape[-2] == 0:
            raise ValueError(f"{name} must hold at least one position, got {shape_str(x.shape)}")
        check_finite(x, name)
        return x

    def __call__(self, x_q, x_kv=None, mask=None, *, bias=None):
        """Attend from ``x_q`` to ``x_kv`` (to ``x_q`` itself when ``x_kv`` is None).

        Parameters
        ----------
        x_q : ndarray of shape (B, T, D) or (T, D)
            The sequence that asks (queries).
        x_kv : ndarray of shape (B, S, D) or (S, D), optional
            The sequence that answers (keys and values); same rank and batch size as ``x_q``.
            None means self-attention (``x_kv = x_q``).
        mask : array_like of bool, optional
            True = may attend. Broadcastable to (B, H, T, S) for 3-D input, (H, T, S) for 2-D
            input: ``causal_mask(T)`` of shape (T, T), or ``padding_mask(lengths)`` of shape
            (B, 1, 1, S).
        bias : ndarray of float, optional
            Additive bias with the same broadcasting as ``mask`` (keyword only).

        Returns
        -------
        output : ndarray of shape (B, T, D) or (T, D)
        weights : ndarray of shape (B, H, T, S) or (H, T, S)

        Notes
        -----
        ``self._cache`` is a dict with the 2-D inputs ``x_q`` (B*T, D) and ``x_kv`` (B*S, D)
        (the same array for self-attention), the head-split ``q`` (B, H, T, Dh), ``k`` and
        ``v`` (B, H, S, Dh), ``weights`` (B, H, T, S), the concatenated head outputs
        ``context`` (B*T, D), the bool ``mask`` and float ``bias`` as passed to the kernel
        (or None), ``shape`` = (B, T, S), ``squeeze`` (True for 2-D input),
        ``self_attention`` and the compute ``dtype``.
        """
        self._check_params()
        x_q = self._check_input(x_q, "x_q")
        self_attention = x_kv is None
        if self_attention:
            x_kv = x_q
        else:
            x_kv = self._check_input(x_kv, "x_kv")
            if x_kv.ndim != x_q.ndim:
                raise ValueError(
                    f"x_q and x_kv must have the same rank, got x_q {shape_str(x_q.shape)} "
                    f"and x_kv {shape_str(x_kv.shape)}"
                )
            if x_q.ndim == 3 and x_kv.shape[0] != x_q.shape[0]:
                raise ValueError(
                    f"x_q and x_kv must have the same batch size, got x_q "
                    f"{shape_str(x_q.shape)} and x_kv {shape_str(x_kv.shape)}"
                )
        squeeze = x_q.ndim == 2
        H, Dh, D = self.n_heads, self.d_head, self.d_model
        T, S = x_q.shape[-2], x_kv.shape[-2]
        B = 1 if squeeze else x_q.shape[0]
        scores_shape = (H, T, S) if squeeze else (B, H, T, S)
        desc = "the attention scores " + ("(H, T, S) =" if squeeze else "(B, H, T, S) =")
        if mask is not None:
            mask = _as_bool_mask(mask)
            check_broadcastable(mask.shape, scores_shape, "mask", desc)
        if bias is not None:
            bias = _check_bias(bias, scores_shape, desc)

        out_dtype = np.result_type(x_q, x_kv)
        dt = compute_dtype(out_dtype)
        p = {name: w.astype(dt, copy=False) for name, w in self.params.items()}

        # --8<-- [start:mha_forward]
        # 1. projections as 2-D matrix products over all tokens of the batch
        xq2 = x_q.astype(dt, copy=False).reshape(B * T, D)  # (B, T, D) -> (B*T, D)
        xkv2 = xq2 if self_attention else x_kv.astype(dt, copy=False).reshape(B * S, D)
        q = xq2 @ p["W_q"]  # (B*T, D) @ (D, D) -> (B*T, D)
        k = xkv2 @ p["W_k"]  # (B*S, D) -> (B*S, D)
        v = xkv2 @ p["W_v"]  # (B*S, D) -> (B*S, D)
        if self.has_bias:
            q += p["b_q"]
            k += p["b_k"]
            v += p["b_v"]
        # 2. split the heads: (B*T, D) -> (B, T, H, Dh) -> (B, H, T, Dh)
        q = q.reshape(B, T, H, Dh).transpose(0, 2, 1, 3)  # (B*T, D) -> (B, H, T, Dh)
        k = k.reshape(B, S, H, Dh).transpose(0, 2, 1, 3)  # (B*S, D) -> (B, H, S, Dh)
        v = v.reshape(B, S, H, Dh).transpose(0, 2, 1, 3)  # (B*S, D) -> (B, H, S, Dh)
        # 3. attention in every head at once
        ctx, weights = _sdpa(q, k, v, mask, bias)  # (B, H, T, Dh), (B, H, T, S)
        # 4. concatenate the heads and project
        context = ctx.transpose(0, 2, 1, 3).reshape(B * T, D)  # (B, H, T, Dh) -> (B*T, D)
        out = context @ p["W_o"]  # (B*T, D) @ (D, D) -> (B*T, D)
        if self.has_bias:
            out += p["b_o"]
        out = out.reshape(B, T, D)  # (B*T, D) -> (B, T, D)
        # --8<-- [end:mha_forward]

        self._cache = {
            "x_q": xq2,
            "x_kv": xkv2,
            "q": q,
            "k": k,
            "v": v,
            "weights": weights,
            "context": context,
            "mask": mask,
            "bias": bias,
            "shape": (B, T, S),
            "squeeze": squeeze,
            "self_attention": self_attention,
            "dtype": dt,
        }
        if squeeze:
            out, weights = out[0], weights[0]  # (1, T, D) -> (T, D), (1, H, T, S) -> (H, T, S)
        return out.astype(out_dtype, copy=False), weights.astype(out_dtype, copy=False)

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (B, T, D) or (T, D)
            dL/d(output) (the gradient of the first returned array; the weights are treated as
            a by-product, not an output to differentiate).

        Returns
        -------
        ndarray of shape (B, T, D), or a tuple of two
            Self-attention: dL/dx, the three paths (query, key, value) summed. Cross-attention
            (``x_kv`` given): ``(dL/dx_q, dL/dx_kv)`` with shapes (B, T, D) and (B, S, D).
            ``self.grads`` gets every key of ``params``.

        Notes
        -----
        Per head, with :math:`S = Q K^\top / \sqrt{d_k}`, :math:`A = \mathrm{softmax}(S)` (rows)
        and :math:`O = A V`; :math:`G = \partial L / \partial O`:

        .. math::
            \frac{\partial L}{\partial V} = A^\top G, \qquad
            \frac{\partial L}{\partial A} = G V^\top, \\
            \frac{\partial L}{\partial S_{ij}} = A_{ij}\left(\frac{\partial L}{\partial A_{ij}}
                - \sum_k A_{ik} \frac{\partial L}{\partial A_{ik}}\right), \\
            \frac{\partial L}{\partial Q} = \frac{1}{\sqrt{d_k}}
                \frac{\partial L}{\partial S} K, \qquad
            \frac{\partial L}{\partial K} = \frac{1}{\sqrt{d_k}}
                \left(\frac{\partial L}{\partial S}\right)^\top Q

        The third line is the softmax Jacobian :math:`\partial A_{ij} / \partial S_{il} =
        A_{ij} (\delta_{jl} - A_{il})` applied row by row, never built as a matrix. A blocked
        key has :math:`A_{ij} = 0`, so its score gets gradient exactly 0 (a mask is a constant).
        The projections are Linear maps: :math:`\partial L / \partial W^Q = X_q^\top
        (\partial L / \partial Q)` and so on, with the heads merged back to (B*T, D).
        """
        c = _backward_cache(self, "MultiHeadAttention")
        B, T, S = c["shape"]
        H, Dh, D = self.n_heads, self.d_head, self.d_model
        dt = c["dtype"]
        g2 = _check_grad(grad_output, (T, D) if c["squeeze"] else (B, T, D), dt)
        g2 = g2.reshape(B * T, D)  # (B, T, D) -> (B*T, D)
        p = {name: w.astype(dt, copy=False) for name, w in self.params.items()}
        grads = {}
        # 4. output projection: out = context @ W_o + b_o
        grads["W_o"] = c["context"].T @ g2  # (D, B*T) @ (B*T, D) -> (D, D)
        if self.has_bias:
            grads["b_o"] = g2.sum(axis=0)
        dctx = g2 @ p["W_o"].T  # (B*T, D) @ (D, D) -> (B*T, D)
        dctx = dctx.reshape(B, T, H, Dh).transpose(0, 2, 1, 3)  # (B*T, D) -> (B, H, T, Dh)
        # --8<-- [start:attention_backward]
        # 3. attention: ctx = w @ v, w = softmax(s), s = (q / sqrt(Dh)) @ k^T (+ bias, mask)
        w, q, k, v = c["weights"], c["q"], c["k"], c["v"]
        dv = np.swapaxes(w, -1, -2) @ dctx  # (B, H, S, T) @ (B, H, T, Dh) -> (B, H, S, Dh)
        ds = dctx @ np.swapaxes(v, -1, -2)  # (B, H, T, Dh) @ (B, H, Dh, S) -> (B, H, T, S)
        # softmax Jacobian, row by row: ds_j = w_j (dw_j - sum_i w_i dw_i)
        ds -= np.einsum("...ij,...ij->...i", ds, w)[..., None]  # (B, H, T, S) - (B, H, T, 1)
        ds *= w
        ds *= dt.type(1.0 / math.sqrt(Dh))  # the scale folded into q in the forward pass
        dq = ds @ k  # (B, H, T, S) @ (B, H, S, Dh) -> (B, H, T, Dh)
        dk = np.swapaxes(ds, -1, -2) @ q  # (B, H, S, T) @ (B, H, T, Dh) -> (B, H, S, Dh)
        # --8<-- [end:attention_backward]
        # 2. merge the heads back
        dq = dq.transpose(0, 2, 1, 3).reshape(B * T, D)  # (B, H, T, Dh) -> (B*T, D)
        dk = dk.transpose(0, 2, 1, 3).reshape(B * S, D)  # (B, H, S, Dh) -> (B*S, D)
        dv = dv.transpose(0, 2, 1, 3).reshape(B * S, D)  # (B, H, S, Dh) -> (B*S, D)
        # 1. input projections
        xq2, xkv2 = c["x_q"], c["x_kv"]  # (B*T, D), (B*S, D)
        grads["W_q"] = xq2.T @ dq  # (D, B*T) @ (B*T, D) -> (D, D)
        grads["W_k"] = xkv2.T @ dk  # (D, B*S) @ (B*S, D) -> (D, D)
        grads["W_v"] = xkv2.T @ dv
        if self.has_bias:
            grads["b_q"] = dq.sum(axis=0)
            grads["b_k"] = dk.sum(axis=0)
            grads["b_v"] = dv.sum(axis=0)
        self.grads = {
            name: grads[name].astype(self.params[name].dtype, copy=False) for name in self.params
        }
        dxq = dq @ p["W_q"].T  # (B*T, D) @ (D, D) -> (B*T, D)
        dxkv = dk @ p["W_k"].T  # (B*S, D)
        dxkv += dv @ p["W_v"].T
        q_shape = (T, D) if c["squeeze"] else (B, T, D)
        if c["self_attention"]:
            dxq += dxkv  # x is query, key and value at once: the three paths add up
            return dxq.reshape(q_shape)
        kv_shape = (S, D) if c["squeeze"] else (B, S, D)
        return dxq.reshape(q_shape), dxkv.reshape(kv_shape)

    def zero_grad(self):
        """Set ``grads`` to zeros shaped like ``params``."""
        _zero_grads(self)
