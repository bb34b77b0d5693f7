r"""Grouped-query attention (GQA) with rotary positions, as in LLaMA 2/3, Mistral and SmolLM2.

Multi-head attention gives every head its own keys and values; GQA (Ainslie et al. 2023)
keeps ``n_heads`` query heads but only ``n_kv_heads`` key/value heads, each shared by a group
of ``G = n_heads / n_kv_heads`` query heads. The key/value cache, which dominates the memory
of generation, shrinks by the factor G (G = 1 is multi-head attention, ``n_kv_heads = 1`` is
multi-query attention). The queries and keys are rotated by their positions (RoPE,
:mod:`transformer_np.rope`) before attention; there is no positional table.

Shape glossary: B batch, T new positions, S key positions (cached + new), D = d_model,
H query heads, Hkv key/value heads, G = H / Hkv, Dh = D / H.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._validation import check_dtype, check_positive_float, check_positive_int, check_rng
from .attention import scaled_dot_product_attention
from .module import Module
from .multi_head import MultiHeadAttention, merge_heads, project, split_heads
from .rope import apply_rope, rope_angles

__all__ = ["GroupedQueryAttention", "rope_table"]


def rope_table(n, d_head, base, dtype):
    """cos and sin of :func:`~transformer_np.rope_angles` for positions 0 .. N-1, N >= n.

    Every layer of a model rotates by the same angles, so they are computed once and shared
    (read-only): N is n rounded up to a power of two, so a table serves many steps of
    generation before a longer one is needed.
    """
    return angle_table(1 << max(n - 1, 0).bit_length(), d_head, float(base), np.dtype(dtype))


@functools.lru_cache(maxsize=8)
def angle_table(n, d_head, base, dtype):
    """The table of :func:`rope_table`, kept per (size, head size, base, dtype)."""
    cos, sin = rope_angles(np.arange(n), d_head, base, dtype=dtype)  # (n, Dh) each
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


class GroupedQueryAttention(MultiHeadAttention):
    r"""Causal self-attention with ``n_kv_heads`` key/value heads shared by groups of queries.

    Parameters
    ----------
    d_model : int
        Model width D.
    n_heads : int
        Query heads H; must divide ``d_model`` (Dh = D / H must be even, for RoPE).
    n_kv_heads : int
        Key/value heads Hkv; must divide ``n_heads``.
    rope_base : float, default 10000.0
        The base theta of the rotary frequencies (SmolLM2: 100000).
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
    init : bool, default True
        False leaves the matrices at zero (for a loader that sets every one).

    Attributes
    ----------
    params : dict
        ``W_q`` (D, H*Dh), ``W_k`` and ``W_v`` (D, Hkv*Dh), ``W_o`` (H*Dh, D), applied as
        ``x @ W``; no biases.
    n_heads, n_kv_heads, d_head, rope_base

    Notes
    -----
    Query head ``h`` reads key/value head ``h // G``. The G query heads of a group are stacked
    as the rows of one attention: (B, H, T, Dh) -> (B, Hkv, G*T, Dh), against keys
    (B, Hkv, S, Dh); the keys and values are never copied G times.

    The positions of the new tokens start after those stored in the ``kv_cache``, so the
    same call serves the prompt (the prefill) and each generated token. Inference only
    (``backward`` raises).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import GroupedQueryAttention, causal_mask
    >>> gqa = GroupedQueryAttention(d_model=32, n_heads=4, n_kv_heads=2, rng=0)
    >>> out, w = gqa(np.ones((1, 5, 32)), mask=causal_mask(5))
    >>> out.shape, w.shape, gqa.params["W_k"].shape
    ((1, 5, 32), (1, 4, 5, 5), (32, 16))
    """

    def __init__(self, d_model, n_heads, n_kv_heads, *, rope_base=10000.0, rng=None,
                 dtype=np.float64, init=True):  # fmt: skip
        Module.__init__(self)
        d_model = check_positive_int(d_model, "d_model")
        n_heads = check_positive_int(n_heads, "n_heads")
        n_kv_heads = check_positive_int(n_kv_heads, "n_kv_heads")
        if d_model % n_heads or (d_model // n_heads) % 2:
            raise ValueError(
                f"d_model must be divisible by n_heads into heads of even size (RoPE rotates "
                f"pairs), got d_model = {d_model} and n_heads = {n_heads}"
            )
        if n_heads % n_kv_heads:
            raise ValueError(
                f"n_kv_heads must divide n_heads (each key/value head serves a group of query "
                f"heads), got n_heads = {n_heads} and n_kv_heads = {n_kv_heads}"
            )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.rope_base = check_positive_float(rope_base, "rope_base")
        self.has_bias = False
        dtype, rng = check_dtype(dtype), check_rng(rng)
        for name, shape in self.expected_shapes().items():
            if not init:  # a loader will overwrite them: zeros, no random draw
                self.params[name] = np.zeros(shape, dtype)
                continue
            limit = math.sqrt(6.0 / sum(shape))  # Xavier/Glorot uniform
            self.params[name] = rng.uniform(-limit, limit, shape).astype(dtype)

    def __repr__(self):
        return (
            f"GroupedQueryAttention(d_model={self.d_model}, n_heads={self.n_heads}, "
            f"n_kv_heads={self.n_kv_heads}, rope_base={self.rope_base:g})"
        )

    def expected_shapes(self):
        D, Dkv = self.d_model, self.n_kv_heads * self.d_head
        return {"W_q": (D, D), "W_k": (D, Dkv), "W_v": (D, Dkv), "W_o": (D, D)}

    def checked_call(self, x, x_kv=None, mask=None, *, bias=None, kv_cache=None):
        """Self-attention of ``x`` (B, T, D) or (T, D); see MultiHeadAttention's call.

        ``x_kv`` must be None: this layer only attends within its own sequence.
        """
        if x_kv is not None:
            raise ValueError("GroupedQueryAttention is self-attention only: x_kv must be None")
        return super().checked_call(x, None, mask, bias=bias, kv_cache=kv_cache)

    # --8<-- [start:gqa_forward]
    def forward(self, x, x_kv=None, mask=None, *, bias=None, kv_cache=None):
        """Grouped-query self-attention on a checked x (B, T, D) -> (B, T, D), weights."""
        B, T, D = x.shape
        H, Hkv, Dh = self.n_heads, self.n_kv_heads, self.d_head
        G = H // Hkv  # query heads per key/value head
        p = {name: w.astype(x.dtype, copy=False) for name, w in self.params.items()}
        x2 = x.reshape(B * T, D)  # (B, T, D) -> (B*T, D)
        # 1. projections: H query heads, only Hkv key and value heads
        q = split_heads(project(x2, p["W_q"]).reshape(B, T, H * Dh), H)  # (B, H, T, Dh)
        k = split_heads(project(x2, p["W_k"]).reshape(B, T, Hkv * Dh), Hkv)  # (B, Hkv, T, Dh)
        v = split_heads(project(x2, p["W_v"]).reshape(B, T, Hkv * Dh), Hkv)  # (B, Hkv, T, Dh)
        # 2. rotate queries and keys by their positions (after the cached ones)
        start = 0 if kv_cache is None else kv_cache.length
        cos, sin = rope_table(start + T, Dh, self.rope_base, x.dtype)  # (>= start + T, Dh)
        cos, sin = cos[start : start + T], sin[start : start + T]  # (T, Dh)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)  # (T, Dh) broadcast
        # 3. the key/value cache: keys and values of every position so far
        if kv_cache is not None:
            if T > 1:  # new query i sees the stored keys and the new ones up to its own
                mask = np.arange(start + T)[None, :] <= start + np.arange(T)[:, None]
            k, v = kv_cache.append(k, v)  # (B, Hkv, S, Dh), S = start + T
        S = k.shape[2]
        # 4. each group's G query heads as the rows of one attention against its keys
        q = q.reshape(B, Hkv, G * T, Dh)  # heads h = g*G + j, g = h // G: (B, Hkv, G, T, Dh)
        if mask is not None:  # broadcastable to (B, H, T, S) -> (B, Hkv, G*T, S)
            mask = np.broadcast_to(mask, (B, H, T, S)).reshape(B, Hkv, G * T, S)
        if bias is not None:
            bias = np.broadcast_to(bias, (B, H, T, S)).reshape(B, Hkv, G * T, S)
        need_weights = kv_cache is None
        ctx, w = scaled_dot_product_attention(q, k, v, mask, bias=bias, need_weights=need_weights)
        ctx = ctx.reshape(B, H, T, Dh)  # the groups back into heads
        weights = None if w is None else w.reshape(B, H, T, S)
        # 5. concatenate the heads and project: (B, H, T, Dh) -> (B*T, D) @ (D, D)
        out = project(merge_heads(ctx).reshape(B * T, D), p["W_o"])
        self.cache = {"squeeze": False}
        return out.reshape(B, T, D), weights

    # --8<-- [end:gqa_forward]

    def backward(self, grad_output):
        """Not available: the modern layers of this package are for inference."""
        raise NotImplementedError(
            "GroupedQueryAttention has no backward pass: it runs pretrained models "
            "(inference only); train with MultiHeadAttention"
        )
