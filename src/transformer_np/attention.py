"""Attention: the five steps of scaled dot-product attention.

Shape glossary: B batch, H heads, T (or n_q) query positions, S (or n_k) key positions,
D = d_model, Dh = d_model / H the size of one head.

:func:`attention_steps` is the computation written plainly, step by step, as the pages teach it;
:func:`scaled_dot_product_attention` runs the same steps in place, and on big problems in chunks
of query rows on every core (the private ``_kernels.attention``, tested equal to
:func:`attention_steps`). :func:`attention_backward` gives the gradients. Each checks its
arguments when a user calls it (the layers call them as they are).
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Shaped

from ._checks.boundary import checked, to_compute
from ._checks.functions import (
    check_attention_backward,
    check_attention_steps,
    check_scaled_dot_product_attention,
)
from ._kernels.attention import attention as attention_kernel
from .functional import softmax

__all__ = [
    "attention_backward",
    "attention_steps",
    "scaled_dot_product_attention",
]


@checked(check_attention_steps)
# --8<-- [start:attention_steps]
def attention_steps(
    q: Float[np.ndarray, "*#B Tq Dk"],
    k: Float[np.ndarray, "*#B Tk Dk"],
    v: Float[np.ndarray, "*#B Tk Dv"],
    mask: Shaped[np.ndarray, "..."] | None = None,
    bias: Float[np.ndarray, "..."] | None = None,
):
    """The five steps of attention, written plainly: ``softmax(q k^T / sqrt(d_k)) v``.

    ``mask`` bool (True = may attend) and ``bias`` float, both broadcastable to (*B, Tq, Tk).
    Returns ``(output, weights)``, as :func:`scaled_dot_product_attention` (the faster way).
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


@checked(check_attention_backward)
# --8<-- [start:attention_backward]
def attention_backward(
    grad_output: Float[np.ndarray, "*#B Tq Dv"],
    q: Float[np.ndarray, "*#B Tq Dk"],
    k: Float[np.ndarray, "*#B Tk Dk"],
    v: Float[np.ndarray, "*#B Tk Dv"],
    weights: Float[np.ndarray, "*#B Tq Tk"],
):
    """The gradients of :func:`attention_steps` with respect to q, k and v.

    ``grad_output`` is dL/d(output); ``q``, ``k``, ``v`` and ``weights`` are those of the forward
    pass. Returns ``(dq, dk, dv)``, shaped like q, k, v. A mask and a bias are constants: a
    blocked key has weight 0, so its score gets gradient 0 here without being told.
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


@checked(check_scaled_dot_product_attention)
def scaled_dot_product_attention(
    q: Float[np.ndarray, "*#B Tq Dk"],
    k: Float[np.ndarray, "*#B Tk Dk"],
    v: Float[np.ndarray, "*#B Tk Dv"],
    mask: Shaped[np.ndarray, "..."] | None = None,
    *,
    bias: Float[np.ndarray, "..."] | None = None,
    need_weights: bool = True,
):
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
    results cast back to float16. The steps of :func:`attention_steps` run in place, and on big
    problems in chunks of query rows on every core (the private ``_kernels.attention``; the
    same result, tested).

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
    dtype = q.dtype  # of q, k and v: float16 is computed in float32, then given back
    q, k, v = (to_compute(t) for t in (q, k, v))
    output, weights = attention_kernel(q, k, v, mask, bias, need_weights=need_weights)
    if weights is not None:
        weights = weights.astype(dtype, copy=False)
    return output.astype(dtype, copy=False), weights
