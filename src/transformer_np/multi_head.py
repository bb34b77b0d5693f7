"""Multi-head attention: H heads side by side, each attending in its own subspace.

Shape glossary: B batch, H query heads, Hkv key/value heads, T query positions, S key
positions, D = d_model, Dh = D / H the size of one head.

:class:`MultiHeadAttention` projects the input into queries, keys and values (three
:class:`~transformer_np.Linear` maps), splits them into heads (:func:`split_heads`), runs the
steps of attention in every head at once, merges the heads (:func:`merge_heads`) and projects
the result (a fourth Linear). With ``n_kv_heads`` < ``n_heads`` it is grouped-query attention,
and with ``rope_base`` it rotates queries and keys by their positions (RoPE), as in LLaMA.
While generating, a :class:`KVCache` keeps the keys and values of the positions already seen.
Pages: multi-head.md (the layer), modern-block.md (grouped queries and RoPE), decoding.md.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from jaxtyping import Float

from ._checks.boundary import checked
from ._checks.calls import user_entry
from ._checks.functions import check_merge_heads, check_split_heads
from ._checks.general import as_grad
from ._checks.generation import check_kv_reorder
from ._checks.models import (
    check_kv_append,
    check_kv_length,
    check_mha_call,
    check_mha_init,
    check_mha_saved,
)
from .attention import attention_backward, scaled_dot_product_attention
from .layers import Linear
from .masks import causal_mask
from .module import NamedMaps
from .rope import apply_rope, apply_rope_backward, rope_angles

__all__ = ["KVCache", "MultiHeadAttention", "merge_heads", "split_heads"]


@checked(check_split_heads)
# --8<-- [start:split_heads]
def split_heads(x: Float[np.ndarray, "B T D"], n_heads: int) -> Float[np.ndarray, "B H T Dh"]:
    """Head h gets the features h*Dh .. (h+1)*Dh - 1 (Dh = D / H)."""
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)


# --8<-- [end:split_heads]


@checked(check_merge_heads)
# --8<-- [start:merge_heads]
def merge_heads(x: Float[np.ndarray, "B H T Dh"]) -> Float[np.ndarray, "B T D"]:
    """The heads side by side again (the inverse of split_heads)."""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


# --8<-- [end:merge_heads]


class KVCache:
    """The keys and values of one attention layer, kept between the steps of generation.

    Self-attention appends the keys and values of each new position; cross-attention fills
    the cache once with the encoder output's and reads it at every step. The buffers, of
    ``max_len`` positions, are allocated by the first :meth:`append`. ``length`` counts the
    positions stored; setting it to a smaller value forgets the later ones (0 starts again,
    and then another batch size or dtype may follow).
    """

    def __init__(self, max_len):
        self.max_len = int(check_kv_length(max_len, "max_len", 1, None))
        self._length = 0
        self._keys = self._values = None

    def __repr__(self):
        return f"KVCache(length={self.length}, max_len={self.max_len})"

    @property
    def length(self):
        return self._length

    @length.setter
    def length(self, n):
        self._length = check_kv_length(n, "length", 0, self._length)

    def append(self, k, v):
        """Store k, v (B, Hkv, n, Dh) after the stored positions; return all stored."""
        if user_entry():  # (the attention's own appends are not checked)
            check_kv_append(self, k, v)
        B, H, n, Dh = k.shape
        t0 = self._length
        if t0 == 0:  # a new sequence: buffers for this batch size and dtype
            self._keys = np.empty((B, H, self.max_len, Dh), k.dtype)
            self._values = np.empty((B, H, self.max_len, Dh), v.dtype)
        self._keys[:, :, t0 : t0 + n] = k
        self._values[:, :, t0 : t0 + n] = v
        self._length = t0 + n
        return self.stored()

    def reorder(self, indices):
        """Keep the batch rows ``indices`` (B',) of the stored keys and values, in place.

        Row i of the cache becomes row ``indices[i]`` of the old one, for every stored position
        (a row may be taken twice, or not at all): beam search calls this when it chooses the
        beams that continue, each a batch row. With B' = B the buffers are reused; another
        length B' gives the cache new buffers of that batch size.
        """
        keys, values = self.stored()  # (B, Hkv, length, Dh) each
        idx = check_kv_reorder(indices, keys.shape[0])  # (B',) of rows in [0, B)
        if idx.size == keys.shape[0]:  # the same batch size: copy into the same buffers
            keys[:], values[:] = keys[idx], values[idx]  # (B, Hkv, length, Dh), gathered first
        else:  # another batch size (e.g. one prompt row to num_beams rows): new buffers
            B, H, _, Dh = self._keys.shape
            new_keys = np.empty((idx.size, H, self.max_len, Dh), self._keys.dtype)
            new_values = np.empty((idx.size, H, self.max_len, Dh), self._values.dtype)
            new_keys[:, :, : self._length] = keys[idx]
            new_values[:, :, : self._length] = values[idx]
            self._keys, self._values = new_keys, new_values

    def stored(self):
        """The stored keys and values, (B, Hkv, length, Dh) each (views, no copy)."""
        if self._keys is None:
            raise RuntimeError("the KVCache is empty: nothing was appended to it yet")
        return self._keys[:, :, : self._length], self._values[:, :, : self._length]


def rope_table(n, d_head, base, dtype):
    """cos and sin (N, Dh) of positions 0 .. N - 1 for RoPE, N = n rounded up to a power of 2.

    Every layer rotates by the same angles: the table is computed once per size and shared,
    read-only, so a table serves many steps of generation before a longer one is needed.
    """
    size = 1 << max(n - 1, 0).bit_length()
    return angle_table(size, int(d_head), float(base), np.dtype(dtype))


@functools.lru_cache(maxsize=8)
def angle_table(size, d_head, base, dtype):
    """The table of :func:`rope_table`, kept per (size, head size, base, dtype)."""
    cos, sin = rope_angles(np.arange(size), d_head, base, dtype=dtype)  # (size, Dh) each
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


class MultiHeadAttention(NamedMaps):
    r"""Multi-head attention: four Linear maps around the attention of every head at once.

    .. math:: \mathrm{MultiHead}(X_q, X_{kv}) = \mathrm{Concat}(\mathrm{head}_1, \dots,
              \mathrm{head}_H)\, W^O + b^O, \quad
              \mathrm{head}_h = \mathrm{Attention}(X_q W^Q_h + b^Q_h,\;
              X_{kv} W^K_h + b^K_h,\; X_{kv} W^V_h + b^V_h)

    Parameters
    ----------
    d_model : int
        Model width D.
    n_heads : int
        Query heads H; must divide ``d_model``.
    n_kv_heads : int, optional
        Key/value heads Hkv, shared by groups of H / Hkv query heads (grouped-query
        attention); must divide ``n_heads``. Default: ``n_heads``.
    rope_base : float, optional
        With a base theta, queries and keys are rotated by their positions (RoPE;
        self-attention only, Dh even). Default: no rotation.
    bias : bool, default True
        Whether the four maps have biases.
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
    init : bool, default True
        Xavier-uniform weights and zero biases; False leaves all at zero (for a loader).

    Attributes
    ----------
    q, k, v, o : Linear
        The maps D -> D, D -> Hkv*Dh, D -> Hkv*Dh and D -> D.
    params : NestedParams
        Their parameters with the paper's names: ``W_q``, ``b_q``, ..., ``W_o``, ``b_o``.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import MultiHeadAttention
    >>> rng = np.random.default_rng(0)
    >>> mha = MultiHeadAttention(d_model=16, n_heads=4, rng=rng)
    >>> out, w = mha(rng.standard_normal((2, 5, 16)))  # batch 2, 5 tokens
    >>> out.shape, w.shape
    ((2, 5, 16), (2, 4, 5, 5))
    """

    check_init, check_call = check_mha_init, check_mha_call

    def __init__(
        self, d_model, n_heads, *, n_kv_heads=None, rope_base=None, bias=True, rng=None,
        dtype=np.float64, init=True,
    ):  # fmt: skip
        super().__init__()
        self.d_model, self.n_heads = int(d_model), int(n_heads)
        self.n_kv_heads = self.n_heads if n_kv_heads is None else int(n_kv_heads)
        self.d_head = self.d_model // self.n_heads
        self.rope_base = None if rope_base is None else float(rope_base)
        self.has_bias = bool(bias)
        d_kv = self.n_kv_heads * self.d_head
        rng = np.random.default_rng(rng)
        kw = {"bias": bias, "rng": rng, "dtype": dtype, "init": "xavier" if init else "zeros"}
        self.q = Linear(self.d_model, self.d_model, **kw)
        self.k = Linear(self.d_model, d_kv, **kw)
        self.v = Linear(self.d_model, d_kv, **kw)
        self.o = Linear(self.d_model, self.d_model, **kw)
        self.add_children(q=self.q, k=self.k, v=self.v, o=self.o)

    def __repr__(self):
        extra = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        extra += "" if self.rope_base is None else f", rope_base={self.rope_base:g}"
        return (
            f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}{extra}, "
            f"bias={self.has_bias})"
        )

    # --8<-- [start:mha_forward]
    def forward(self, x_q, x_kv=None, mask=None, *, bias=None, kv_cache=None):
        """x_q (B, T, D), x_kv (B, S, D) or None (self-attention) -> (B, T, D), weights.

        With a ``kv_cache`` (generation, no backward pass), self-attention appends the new
        keys and values to the cache, and the T new queries see every cached position and,
        causally, each other; cross-attention projects ``x_kv`` once, on the first call.
        """
        B, T, D = x_q.shape
        H, Hkv = self.n_heads, self.n_kv_heads
        self_attention = x_kv is None  # the sequence answers itself
        x_kv = x_q if self_attention else x_kv
        start = 0 if kv_cache is None else kv_cache.length  # positions already cached
        # 1. projections, split into heads: (B, T, D) -> (B, H, T, Dh)
        q = split_heads(self.q.forward(x_q), H)
        if kv_cache is not None and not self_attention and start:
            k, v = kv_cache.stored()  # cross-attention: the encoder's, projected once
        else:
            k = split_heads(self.k.forward(x_kv), Hkv)  # (B, S, D) -> (B, Hkv, S, Dh)
            v = split_heads(self.v.forward(x_kv), Hkv)
            if self.rope_base is not None:  # 2. rotary positions, after the cached ones
                q, k = self.rotate(q, start), self.rotate(k, start)
            if kv_cache is not None:  # (B, Hkv, S, Dh) -> (B, Hkv, start + S, Dh)
                k, v = kv_cache.append(k, v)
                if self_attention and T > 1:  # new query i sees keys up to start + i
                    causal = causal_mask(T, offset=start)  # (T, start + T)
                    mask = causal if mask is None else mask & causal
        # 3. attention in every head at once
        need_weights = kv_cache is None  # only a backward pass needs them
        ctx, weights = self.attend(q, k, v, mask, bias, need_weights)
        # 4. concatenate the heads and project: (B, H, T, Dh) -> (B, T, D)
        out = self.o.forward(merge_heads(ctx))
        self.cache = {"q": q, "k": k, "v": v, "weights": weights, "shape": (B, T, k.shape[2])}
        self.cache.update(self_attention=self_attention)
        return out, weights  # (B, T, D), (B, H, T, S)

    # --8<-- [end:mha_forward]

    # --8<-- [start:mha_grouped]
    def rotate(self, x, start):
        """RoPE on x (B, heads, T, Dh): position start + t turned by its angles."""
        T = x.shape[2]
        cos, sin = rope_table(start + T, self.d_head, self.rope_base, x.dtype)
        return apply_rope(x, cos[start : start + T], sin[start : start + T])

    def attend(self, q, k, v, mask, bias, need_weights):
        """The attention of q (B, H, T, Dh) to k, v (B, Hkv, S, Dh); grouped when Hkv < H."""
        B, H, T, Dh = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        if Hkv == H:
            return scaled_dot_product_attention(q, k, v, mask, bias=bias, need_weights=need_weights)
        # the G = H / Hkv query heads of a group as the rows of one attention on its keys:
        # head h = g*G + j reads key/value head g; the keys are never copied G times
        G = H // Hkv
        q = q.reshape(B, Hkv, G * T, Dh)
        if mask is not None:  # broadcastable to (B, H, T, S) -> (B, Hkv, G*T, S)
            mask = np.broadcast_to(mask, (B, H, T, S)).reshape(B, Hkv, G * T, S)
        if bias is not None:
            bias = np.broadcast_to(bias, (B, H, T, S)).reshape(B, Hkv, G * T, S)
        ctx, w = scaled_dot_product_attention(q, k, v, mask, bias=bias, need_weights=need_weights)
        return ctx.reshape(B, H, T, Dh), None if w is None else w.reshape(B, H, T, S)

    # --8<-- [end:mha_grouped]

    # --8<-- [start:mha_decode_step]
    def decode_step(self, B, watch=None, *, cross=False):
        """:meth:`forward` with a ``kv_cache`` for one new query per sequence, on (B, D) rows.

        Self-attention appends this position's key and value to the cache (three plain Linear
        maps: one product for the three); cross-attention projects the memory (B, S, D) into its
        cache at the first step. The G = H / Hkv query heads of a group read its keys together,
        as in :meth:`attend`.
        """
        H, Hkv, Dh, D = self.n_heads, self.n_kv_heads, self.d_head, self.d_model
        G, scale = H // Hkv, math.sqrt(Dh)  # (a Python float: the arrays keep their dtype)
        maps, o_map = (self.q, self.k, self.v), self.o.decode_step(B)
        fused = not cross and all(type(m) is Linear for m in maps)
        if fused:  # the three maps as one, x @ [W_q W_k W_v]: (B, D) -> (B, D + 2 Hkv Dh)
            W_qkv = np.concatenate([m.params["W"] for m in maps], axis=1)
            b_qkv = np.concatenate([m.params["b"] for m in maps]) if self.has_bias else None
            ends = (D, D + Hkv * Dh)
        elif cross:  # the memory's B S rows, once: a bias of one row fits any number of rows
            q_map = self.q.decode_step(B)
            k_map, v_map = self.k.decode_step(1), self.v.decode_step(1)
        else:
            q_map, k_map, v_map = (m.decode_step(B) for m in maps)

        def project(x):
            """x (B, D) -> q (B, H, 1, Dh), k and v (B, Hkv, 1, Dh)."""
            if fused:
                y = np.dot(x, W_qkv)  # (B, D + 2 Hkv Dh)
                if b_qkv is not None:
                    y += b_qkv
                q, k, v = y[:, : ends[0]], y[:, ends[0] : ends[1]], y[:, ends[1] :]
            else:
                q, k, v = q_map(x), k_map(x), v_map(x)
            return q.reshape(B, H, 1, Dh), k.reshape(B, Hkv, 1, Dh), v.reshape(B, Hkv, 1, Dh)

        def attend(x, cache, mask=None, memory=None):
            """x (B, D) -> (B, D); ``mask`` additive (0 or -inf), broadcastable to (B, 1, 1, S)."""
            t = cache.length  # positions already cached
            if not cross:  # 1. projections, 2. rotary positions (position t), into the cache
                q, k, v = project(x)
                if self.rope_base is not None:
                    q, k = self.rotate(q, t), self.rotate(k, t)
                keys, values = cache.append(k, v)  # (B, Hkv, t + 1, Dh)
            else:
                q = q_map(x).reshape(B, H, 1, Dh)
                if t == 0:  # the first step: the memory's keys and values
                    S = memory.shape[1]
                    rows = memory.reshape(B * S, D)
                    k, v = (
                        m(rows).reshape(B, S, Hkv, Dh).transpose(0, 2, 1, 3) for m in (k_map, v_map)
                    )
                    keys, values = cache.append(k, v)  # (B, Hkv, S, Dh)
                else:
                    keys, values = cache.stored()
            # 3. attention: the G heads of a group are the G rows of its query
            scores = (q.reshape(B, Hkv, G, Dh) / scale) @ keys.swapaxes(-1, -2)  # (B, Hkv, G, S)
            if mask is not None:
                scores = scores + mask
            scores = np.exp(scores - np.maximum.reduce(scores, axis=-1, keepdims=True))
            ctx = (scores @ values) / np.add.reduce(scores, axis=-1, keepdims=True)
            return o_map(ctx.reshape(B, D))  # 4. heads side by side, projected: (B, D)

        return attend

    # --8<-- [end:mha_decode_step]

    def backward(self, grad_output):
        r"""dL/d(output) (B, T, D) -> dL/dx (self-attention) or (dL/dx_q, dL/dx_kv).

        The attention's own backward is :func:`~transformer_np.attention_backward`; the four
        maps are Linear layers, each with its own backward. A 2-D ``grad_output`` (T, D)
        answers a call on 2-D input, and gives 2-D gradients back. With groups, each key and
        value head gets the sum of the gradients of the query heads it serves; with RoPE the
        gradients of the queries and keys are rotated back.
        """
        c = check_mha_saved(self)  # the cache of a call without kv_cache
        B, T, S = c["shape"]
        unbatched = np.ndim(grad_output) == 2 and B == 1
        g = as_grad(grad_output, (T, self.d_model) if unbatched else (B, T, self.d_model),
                    c["q"].dtype).reshape(B, T, self.d_model)  # fmt: skip
        # 4. output projection, then the heads apart again: (B, T, D) -> (B, H, T, Dh)
        dctx = split_heads(self.o.backward(g), self.n_heads)
        # 3. attention in every head: dq (B, H, T, Dh), dk and dv (B, Hkv, S, Dh)
        dq, dk, dv = self.attend_backward(dctx, c["q"], c["k"], c["v"], c["weights"])
        if self.rope_base is not None:  # 2. rotary positions: the rotation back
            dq, dk = self.rotate_back(dq), self.rotate_back(dk)
        # 1. the heads merged, through the three projections
        dx_q = self.q.backward(merge_heads(dq))  # (B, T, D)
        dx_k = self.k.backward(merge_heads(dk))  # (B, S, D)
        dx_kv = dx_k + self.v.backward(merge_heads(dv))
        if c["self_attention"]:
            dx_q += dx_kv  # x is query, key and value at once: the three paths add up
            return dx_q[0] if unbatched else dx_q
        return (dx_q[0], dx_kv[0]) if unbatched else (dx_q, dx_kv)

    # --8<-- [start:mha_grouped_backward]
    def rotate_back(self, g):
        """The backward of ``rotate(x, 0)`` on g (B, heads, T, Dh): the rotation back."""
        T = g.shape[2]
        cos, sin = rope_table(T, self.d_head, self.rope_base, g.dtype)
        return apply_rope_backward(g, cos[:T], sin[:T])

    def attend_backward(self, dctx, q, k, v, weights):
        """The gradients of :meth:`attend`: dq (B, H, T, Dh), dk and dv (B, Hkv, S, Dh)."""
        B, H, T, Dh = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        if Hkv == H:
            return attention_backward(dctx, q, k, v, weights)
        # the rows of attend: the G query heads of a group as G*T rows on its keys, so that
        # dk = ds^T q and dv = w^T dctx sum over the G heads that read the same key and value
        G = H // Hkv
        dq, dk, dv = attention_backward(
            dctx.reshape(B, Hkv, G * T, Dh), q.reshape(B, Hkv, G * T, Dh), k, v,
            weights.reshape(B, Hkv, G * T, S),
        )  # fmt: skip
        return dq.reshape(B, H, T, Dh), dk, dv

    # --8<-- [end:mha_grouped_backward]
