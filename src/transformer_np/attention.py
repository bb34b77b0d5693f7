"""Attention: the five steps of scaled dot-product attention.

Shape glossary: B batch, H heads, T (or n_q) query positions, S (or n_k) key positions,
D = d_model, Dh = d_model / H the size of one head.

:func:`attention_steps` is the computation written plainly, step by step, as the pages teach it.
:func:`scaled_dot_product_attention` checks its inputs once and runs the same steps in place,
and on big problems in chunks of query rows on every core (the private
``_kernels.attention``, tested equal to :func:`attention_steps`).
"""

from __future__ import annotations

import numpy as np

from ._kernels import attention as kernel
from ._validation import (
    as_float_array,
    check_bool,
    check_broadcastable,
    check_finite,
    compute_dtype,
    shape_str,
)
from .functional import softmax
from .module import checks_done

__all__ = [
    "attention_backward",
    "attention_steps",
    "scaled_dot_product_attention",
]


# --8<-- [start:attention_steps]
def attention_steps(q, k, v, mask=None, bias=None):
    """The five steps of attention, written plainly: ``softmax(q k^T / sqrt(d_k)) v``.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v); ``mask`` bool (True = may
    attend) and ``bias`` float, both broadcastable to (..., n_q, n_k). Returns
    ``(output, weights)``. No input checks: :func:`scaled_dot_product_attention` is the
    checked (and faster) entry point with the same result.
    """
    d_k = q.shape[-1]
    # 1. scores: every query against every key, scaled by 1/sqrt(d_k)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)  # (..., n_q, d_k) @ (..., d_k, n_k)
    # 2. additive bias (e.g. relative positions), if any
    if bias is not None:
        scores = scores + bias  # (..., n_q, n_k)
    # 3. mask: blocked positions get -inf, so that their weight is exactly exp(-inf) = 0
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # (..., n_q, n_k)
    # 4. softmax over the keys: each row sums to 1 (a row with every key blocked is all 0)
    weights = softmax(scores, axis=-1)  # (..., n_q, n_k)
    # 5. output: the weighted average of the values
    output = weights @ v  # (..., n_q, n_k) @ (..., n_k, d_v) -> (..., n_q, d_v)
    return output, weights


# --8<-- [end:attention_steps]


# --8<-- [start:attention_backward]
def attention_backward(grad_output, q, k, v, weights):
    r"""The gradients of :func:`attention_steps` with respect to q, k and v.

    ``grad_output`` (..., n_q, d_v) is dL/d(output); ``q``, ``k``, ``v`` and ``weights``
    (..., n_q, n_k) are those of the forward pass. Returns ``(dq, dk, dv)``, shaped like
    q, k, v. A mask and a bias are constants: a blocked key has weight 0, so its score gets
    gradient 0 here without being told.

    Notes
    -----
    With :math:`S = Q K^\top / \sqrt{d_k}`, :math:`A = \mathrm{softmax}(S)`, :math:`O = A V`
    and :math:`G = \partial L / \partial O`: :math:`\partial L/\partial V = A^\top G`,
    :math:`\partial L/\partial A = G V^\top`, :math:`\partial L/\partial S_{ij} =
    A_{ij} (\partial L/\partial A_{ij} - \sum_l A_{il}\, \partial L/\partial A_{il})`,
    :math:`\partial L/\partial Q = (\partial L/\partial S) K / \sqrt{d_k}`,
    :math:`\partial L/\partial K = (\partial L/\partial S)^\top Q / \sqrt{d_k}`.
    """
    d_k = q.shape[-1]
    # 5. output = weights @ v
    dv = np.swapaxes(weights, -1, -2) @ grad_output  # (..., n_k, n_q) @ (..., n_q, d_v)
    ds = grad_output @ np.swapaxes(v, -1, -2)  # dL/dweights: (..., n_q, d_v) @ (..., d_v, n_k)
    # 4. softmax, row by row: ds_j = w_j (dw_j - sum_i w_i dw_i) (its Jacobian, never built);
    # in place: ds holds dL/dweights, then dL/dscores
    ds -= np.einsum("...ij,...ij->...i", ds, weights)[..., None]  # (..., n_q, n_k)
    ds *= weights
    # 1. scores = q k^T / sqrt(d_k)
    ds *= ds.dtype.type(1.0 / np.sqrt(d_k))
    dq = ds @ k  # (..., n_q, n_k) @ (..., n_k, d_k) -> (..., n_q, d_k)
    dk = np.swapaxes(ds, -1, -2) @ q  # (..., n_k, n_q) @ (..., n_q, d_k) -> (..., n_k, d_k)
    return dq, dk, dv


# --8<-- [end:attention_backward]


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
        computes its chunks of scores in one reused buffer, and the (..., n_q, n_k) weights are
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
    results cast back to float16. Called by a user, it checks the inputs; called by a layer
    that has checked its own (:class:`~transformer_np.MultiHeadAttention`), it does not. The
    steps of
    :func:`attention_steps` run in place, and on big problems in chunks of query rows on every
    core (the private ``_kernels.attention``; the same result, tested).

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
    if checks_done():  # called by a layer (MultiHeadAttention) that checked its input
        return kernel.attention(q, k, v, mask, bias, need_weights=need_weights)
    q, k, v, mask, bias, out_dtype = check_attention_inputs(q, k, v, mask, bias)
    need_weights = check_bool(need_weights, "need_weights")
    output, weights = kernel.attention(q, k, v, mask, bias, need_weights=need_weights)
    output = output.astype(out_dtype, copy=False)
    return output, None if weights is None else weights.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------


def as_bool_mask(mask) -> np.ndarray:
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


def check_bias(bias, scores_shape, desc: str) -> np.ndarray:
    """``bias`` as a float array broadcastable to the scores, without NaN or +inf."""
    b = as_float_array(bias, "bias")
    check_broadcastable(b.shape, scores_shape, "bias", desc)
    check_finite(b, "bias", allow_neg_inf=True)
    return b


def check_attention_inputs(q, k, v, mask, bias):
    """Validate the inputs of attention; return arrays ready for the steps.

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
        mask = as_bool_mask(mask)
        check_broadcastable(mask.shape, scores_shape, "mask", desc)
    if bias is not None:
        bias = check_bias(bias, scores_shape, desc)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_finite(t, name)
    out_dtype = np.result_type(q, k, v)
    dt = compute_dtype(out_dtype)
    q, k, v = (t.astype(dt, copy=False) for t in (q, k, v))
    return q, k, v, mask, bias, out_dtype
