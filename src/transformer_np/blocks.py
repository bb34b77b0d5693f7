"""The Transformer blocks: the encoder block and the decoder block, each written once.

Every model of the package is a stack of these: the encoder-decoder ``Transformer`` stacks
both, the decoder-only ``LanguageModel`` (GPT) and ``LlamaModel`` stack encoder blocks with a
causal mask, and MiniLM (BERT) stacks encoder blocks. Generation calls the same blocks with a
key/value cache. Page: transformer.md.

Shape glossary: B batch, T positions of the block's input, S positions of the encoder output
(the "memory"), D = d_model, H heads.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks.models import (
    check_decoder_block_call,
    check_decoder_block_init,
    check_encoder_block_call,
    check_encoder_block_init,
)
from .feed_forward import FeedForward
from .layers import Dropout, LayerNorm
from .module import Module
from .multi_head import MultiHeadAttention

__all__ = ["DecoderBlock", "EncoderBlock"]


class EncoderBlock(Module):
    """One encoder layer: self-attention and a feed-forward network, each with a residual
    connection and a normalisation: post-LN (the paper) ``h = LN(x + MHA(x))``, or pre-LN
    (GPT-2 and most recent models) ``h = x + MHA(LN(x))``, then the same around the FFN.
    Page: transformer.md.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Model width D, attention heads (dividing D), hidden width of the feed-forward.
    norm_first : bool, default False
        Pre-LN instead of post-LN.
    activation : {"relu", "gelu"}, default "relu"
        Activation of the feed-forward network (``"gelu"`` is the exact GELU).
    eps : float, default 1e-5
        Epsilon of both normalisations (BERT uses 1e-12).
    dropout : float, default 0.0
        Dropout on each sublayer's output before the residual sum, in training mode only.
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
    attn, ff : Module, optional
        The sublayers already built (default: ``MultiHeadAttention(d_model, n_heads)`` and
        ``FeedForward(d_model, d_ff, activation)``); the LLaMA block passes grouped-query
        attention with RoPE and SwiGLU.
    norm : class, default LayerNorm
        The normalisation, built twice as ``norm(d_model, eps, dtype=dtype)`` (RMSNorm for LLaMA).

    Attributes
    ----------
    attn, norm1, ff, norm2, drop1, drop2 : Module
    attention_weights : ndarray of shape (B, H, T, T), or None
        The attention weights of the last call.
    """

    check_init, check_call = check_encoder_block_init, check_encoder_block_call

    def __init__(
        self, d_model, n_heads, d_ff, *, norm_first=False, activation="relu", eps=1e-5,
        dropout=0.0, rng=None, dtype=np.float64, attn=None, ff=None, norm=LayerNorm,
    ):  # fmt: skip
        super().__init__()
        rng = np.random.default_rng(rng)
        self.attn = attn or MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm1 = norm(d_model, eps, dtype=dtype)
        self.ff = ff or FeedForward(d_model, d_ff, activation=activation, rng=rng, dtype=dtype)
        self.norm2 = norm(d_model, eps, dtype=dtype)
        self.drop1, self.drop2 = Dropout(dropout, rng), Dropout(dropout, rng)
        self.d_model, self.n_heads, self.d_ff = int(d_model), int(n_heads), int(d_ff)
        self.norm_first, self.dropout = bool(norm_first), float(dropout)
        self.add_children(attn=self.attn, norm1=self.norm1, ff=self.ff, norm2=self.norm2)
        self.add_children(drop1=self.drop1, drop2=self.drop2)  # no parameters: train()/eval()
        self.attention_weights = None

    def __repr__(self):
        return (
            f"EncoderBlock(d_model={self.d_model}, n_heads={self.n_heads}, d_ff={self.d_ff}, "
            f"norm_first={self.norm_first}, attn={self.attn!r}, ff={self.ff!r}, "
            f"norm={type(self.norm1).__name__}, eps={self.norm1.eps:g}, dropout={self.dropout:g})"
        )

    # --8<-- [start:encoder_block]
    def forward(self, x, mask=None, *, bias=None, kv_cache=None):
        """(B, T, D) -> (B, T, D); ``mask`` and ``bias`` broadcastable to (B, H, T, T)."""
        attn, ff = self.attn.forward, self.ff.forward
        norm1, norm2 = self.norm1.forward, self.norm2.forward
        drop1, drop2 = self.drop1.forward, self.drop2.forward
        if self.norm_first:  # pre-LN: x + Sublayer(LayerNorm(x))
            a, w = attn(norm1(x), mask=mask, bias=bias, kv_cache=kv_cache)
            h = x + drop1(a)  # residual around the attention
            y = h + drop2(ff(norm2(h)))  # residual around the feed-forward
        else:  # post-LN, as in the paper: LayerNorm(x + Sublayer(x))
            a, w = attn(x, mask=mask, bias=bias, kv_cache=kv_cache)
            h = norm1(x + drop1(a))
            y = norm2(h + drop2(ff(h)))
        self.attention_weights = w  # (B, H, T, T)
        self.cache = {}
        return y

    # --8<-- [end:encoder_block]

    # --8<-- [start:encoder_block_decode_step]
    def decode_step(self, B, watch=None):
        """:meth:`forward` in evaluation mode with a ``kv_cache``, for one new position of each
        of B sequences: (B, D) rows through the sublayers' own steps."""
        attn, ff = self.attn.decode_step(B, watch), self.ff.decode_step(B, watch)
        norm1, norm2 = self.norm1.decode_step(B, watch), self.norm2.decode_step(B, watch)

        def pre_ln(x, cache, memory=None, memory_mask=None):  # x + Sublayer(LayerNorm(x))
            h = x + attn(norm1(x), cache)
            return h + ff(norm2(h))

        def post_ln(x, cache, memory=None, memory_mask=None):  # LayerNorm(x + Sublayer(x))
            h = norm1(x + attn(x, cache))
            return norm2(h + ff(h))

        return pre_ln if self.norm_first else post_ln

    # --8<-- [end:encoder_block_decode_step]

    def source_step(self, B, S, watch=None):
        """:meth:`forward` in evaluation mode on the B S rows of B sequences of S positions
        (an encoder's source, all at once), with an additive ``bias`` (B, 1, 1, S) or None."""
        attn, H, Dh = self.attn, self.attn.n_heads, self.attn.d_head
        *maps, o_map = (m.decode_step(1) for m in (attn.q, attn.k, attn.v, attn.o))
        ff, scale = self.ff.decode_step(1), math.sqrt(Dh)  # (a Python float keeps the dtype)
        norm1, norm2 = self.norm1.decode_step(B * S, watch), self.norm2.decode_step(B * S, watch)

        def self_attention(x, bias):  # (B S, D) -> (B S, D)
            q, k, v = (m(x).reshape(B, S, H, Dh).transpose(0, 2, 1, 3) for m in maps)
            scores = (q / scale) @ k.swapaxes(-1, -2)  # (B, H, S, S)
            if bias is not None:  # (B, 1, 1, S): -inf at the source's padding
                scores = scores + bias
            scores = np.exp(scores - np.maximum.reduce(scores, axis=-1, keepdims=True))
            ctx = (scores @ v) / np.add.reduce(scores, axis=-1, keepdims=True)  # (B, H, S, Dh)
            return o_map(ctx.transpose(0, 2, 1, 3).reshape(B * S, -1))  # heads side by side

        def step(x, bias):
            if self.norm_first:
                h = x + self_attention(norm1(x), bias)
                return h + ff(norm2(h))
            h = norm1(x + self_attention(x, bias))
            return norm2(h + ff(h))

        return step

    def backward(self, grad_output):
        """dL/dy (B, T, D) -> dL/dx; each sublayer fills its own ``grads``."""
        self.saved()  # a clear error before any forward pass
        unbatched = np.ndim(grad_output) == 2  # a call on (T, D)
        g = grad_output[None] if unbatched else grad_output
        drop1, drop2 = self.drop1.backward, self.drop2.backward
        if self.norm_first:
            dh = g + self.norm2.backward(self.ff.backward(drop2(g)))  # y = h + ff(norm2(h))
            dx = dh + self.norm1.backward(self.attn.backward(drop1(dh)))  # h = x + attn(norm1(x))
        else:
            dz2 = self.norm2.backward(g)  # y = norm2(z2), z2 = h + ff(h)
            dh = dz2 + self.ff.backward(drop2(dz2))
            dz1 = self.norm1.backward(dh)  # h = norm1(z1), z1 = x + attn(x)
            dx = dz1 + self.attn.backward(drop1(dz1))
        return dx[0] if unbatched else dx


class DecoderBlock(Module):
    """One decoder layer: masked self-attention, cross-attention to the encoder output
    ("memory"), and a feed-forward network, each with a residual connection and LayerNorm.
    Page: transformer.md.

    Parameters
    ----------
    d_model, n_heads, d_ff, norm_first, activation, eps, dropout, rng, dtype
        As for :class:`EncoderBlock`.

    Attributes
    ----------
    self_attn, norm1, cross_attn, norm2, ff, norm3 : Module
    self_attention_weights : ndarray of shape (B, H, T, T), or None
    cross_attention_weights : ndarray of shape (B, H, T, S), or None
    """

    check_init, check_call = check_decoder_block_init, check_decoder_block_call

    def __init__(
        self, d_model, n_heads, d_ff, *, norm_first=False, activation="relu", eps=1e-5,
        dropout=0.0, rng=None, dtype=np.float64,
    ):  # fmt: skip
        super().__init__()
        rng = np.random.default_rng(rng)
        self.self_attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps, dtype=dtype)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, rng=rng, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps, dtype=dtype)
        self.drop1, self.drop2, self.drop3 = (Dropout(dropout, rng) for _ in range(3))
        self.d_model, self.n_heads, self.d_ff = int(d_model), int(n_heads), int(d_ff)
        self.norm_first, self.dropout = bool(norm_first), float(dropout)
        self.add_children(
            self_attn=self.self_attn,
            norm1=self.norm1,
            cross_attn=self.cross_attn,
            norm2=self.norm2,
            ff=self.ff,
            norm3=self.norm3,
        )
        self.add_children(drop1=self.drop1, drop2=self.drop2, drop3=self.drop3)
        self.self_attention_weights = None
        self.cross_attention_weights = None

    def __repr__(self):
        return (
            f"DecoderBlock(d_model={self.d_model}, n_heads={self.n_heads}, d_ff={self.d_ff}, "
            f"norm_first={self.norm_first})"
        )

    # --8<-- [start:decoder_block]
    def forward(self, x, memory, self_mask=None, memory_mask=None, *, kv_cache=None):
        """x (B, T, D), memory (B, S, D) -> (B, T, D); ``kv_cache``: (self, cross) pair."""
        self_cache, cross_cache = (None, None) if kv_cache is None else kv_cache
        self_attn, cross_attn, ff = self.self_attn.forward, self.cross_attn.forward, self.ff.forward
        norm1, norm2, norm3 = self.norm1.forward, self.norm2.forward, self.norm3.forward
        drop1, drop2, drop3 = self.drop1.forward, self.drop2.forward, self.drop3.forward
        if self.norm_first:  # pre-LN: x + Sublayer(LayerNorm(x)); the memory is not normalised
            a, w_self = self_attn(norm1(x), mask=self_mask, kv_cache=self_cache)
            h = x + drop1(a)  # 1. masked self-attention
            c, w_cross = cross_attn(norm2(h), memory, memory_mask, kv_cache=cross_cache)
            h2 = h + drop2(c)  # 2. cross-attention: queries from h, keys/values from memory
            y = h2 + drop3(ff(norm3(h2)))  # 3. feed-forward
        else:  # post-LN, as in the paper: LayerNorm(x + Sublayer(x))
            a, w_self = self_attn(x, mask=self_mask, kv_cache=self_cache)
            h = norm1(x + drop1(a))  # 1. masked self-attention
            c, w_cross = cross_attn(h, memory, memory_mask, kv_cache=cross_cache)
            h2 = norm2(h + drop2(c))  # 2. cross-attention
            y = norm3(h2 + drop3(ff(h2)))  # 3. feed-forward
        self.self_attention_weights = w_self  # (B, H, T, T)
        self.cross_attention_weights = w_cross  # (B, H, T, S)
        self.cache = {}
        return y

    # --8<-- [end:decoder_block]

    def decode_step(self, B, watch=None):
        """:meth:`forward` in evaluation mode with the (self, cross) caches, for one new
        position of each of B sequences: (B, D) rows through the sublayers' own steps."""
        attn = self.self_attn.decode_step(B, watch)
        cross = self.cross_attn.decode_step(B, watch, cross=True)
        ff = self.ff.decode_step(B, watch)
        norm1, norm2, norm3 = (
            n.decode_step(B, watch) for n in (self.norm1, self.norm2, self.norm3)
        )

        def pre_ln(x, caches, memory, memory_mask):
            self_cache, cross_cache = caches
            h = x + attn(norm1(x), self_cache)
            h2 = h + cross(norm2(h), cross_cache, memory_mask, memory)
            return h2 + ff(norm3(h2))

        def post_ln(x, caches, memory, memory_mask):
            self_cache, cross_cache = caches
            h = norm1(x + attn(x, self_cache))
            h2 = norm2(h + cross(h, cross_cache, memory_mask, memory))
            return norm3(h2 + ff(h2))

        return pre_ln if self.norm_first else post_ln

    def backward(self, grad_output):
        """dL/dy (B, T, D) -> (dL/dx, dL/dmemory); each sublayer fills its own ``grads``."""
        self.saved()  # a clear error before any forward pass
        g = grad_output
        drop1, drop2, drop3 = self.drop1.backward, self.drop2.backward, self.drop3.backward
        if self.norm_first:
            dh2 = g + self.norm3.backward(self.ff.backward(drop3(g)))
            dq, dmem = self.cross_attn.backward(drop2(dh2))
            dh = dh2 + self.norm2.backward(dq)
            dx = dh + self.norm1.backward(self.self_attn.backward(drop1(dh)))
            return dx, dmem
        dz3 = self.norm3.backward(g)
        dh2 = dz3 + self.ff.backward(drop3(dz3))
        dz2 = self.norm2.backward(dh2)
        dq, dmem = self.cross_attn.backward(drop2(dz2))
        dh = dz2 + dq
        dz1 = self.norm1.backward(dh)
        dx = dz1 + self.self_attn.backward(drop1(dz1))
        return dx, dmem
