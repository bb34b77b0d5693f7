"""One token's step of generation, as straight-line NumPy on the model's own arrays.

With a key/value cache, every step of generation runs the whole model on one new token: a few
dozen products of a (B, D) row block by a weight, where the plain layers spend more time on
their bookkeeping (each layer's call, its ``cache`` dict for a backward pass that generation
never runs, the attention kernel's choice of chunks, the checks of a public call) than on the
arithmetic. :func:`token_forward` returns a function with the signature of the model's forward
(``LanguageModel.forward`` or ``Transformer.forward_decoder``) that computes the same logits for
one new token, on (B, D) arrays, with the new keys and values written in place into the model's
:class:`~transformer_np.multi_head.KVCache` (the cross-attention's projected from the memory on
the first step). The steps are equivalent ones with fewer NumPy calls, each said where it is
made: the three projections of self-attention as one product, 1/sqrt(Dh) folded into W_q, the
layer norm's means as products, every constant vector repeated to (B, n) (NumPy combines arrays
of one shape faster than it broadcasts), ``np.dot`` for 2-D products, new small arrays rather
than writes into buffers. :func:`encoder_forward` does the same for the encoder of a
:class:`Transformer` on the (B S, D) rows of the source. Any other call (a prompt, no cache) goes
to the model's own forward, and so does every model or layer this module does not know (LLaMA,
a replaced sublayer) and a source of padding only: the plain code is the definition, this is
only its fast path. ``tests/test_decoding.py`` checks that both give the same logits, memory
and caches within the rounding bound of the computation.

Nothing here checks its inputs: :func:`~transformer_np.decoding.generate` and
:func:`~transformer_np.decoding.translate` did, once per call.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..blocks import DecoderBlock, EncoderBlock
from ..embedding import Embedding, TiedOutput
from ..feed_forward import FeedForward
from ..layers import LayerNorm, Linear
from ..model import LanguageModel, Transformer
from ..multi_head import MultiHeadAttention
from .gelu import TAIL32_D, TAIL32_MAX, TAIL32_N, gelu_range64

__all__ = ["encoder_forward", "token_forward"]

dot = np.dot


def token_forward(model):
    """``model``'s forward, fast for one new token with a cache; else the plain one.

    Returns ``model.forward`` (a :class:`LanguageModel`) or ``model.forward_decoder`` (a
    :class:`Transformer`) itself when the model has a part this module does not know, or is
    training (dropout). The parameters are read when this is called: call it again after
    changing them.
    """
    plain = model.forward_decoder if isinstance(model, Transformer) else model.forward
    if model.training or type(model) not in (LanguageModel, Transformer) or not known(model):
        return plain
    steps = {}  # one step per batch size B, its constants laid out as (B, n) arrays
    # the last memory mask, its additive form (None: nothing masked), whether a source is
    # padding only (then the plain path: its attention reads nothing); the last cache, flat
    seen = {"mask": None, "additive": None, "empty": False, "cache": None, "flat": None}

    def fast_or_plain(ids, *args, kv_cache=None):
        if kv_cache is None or ids.shape[1] != 1:  # a prompt, or no cache
            return plain(ids, *args, kv_cache=kv_cache)
        memory, memory_mask = args if args else (None, None)  # the decoder's context
        if memory_mask is not seen["mask"]:  # the same mask at every step: converted once
            masked = memory_mask is not None and not memory_mask.all()
            additive = np.where(memory_mask, 0, -np.inf) if masked else None
            seen.update(mask=memory_mask, empty=masked and not memory_mask.any(axis=-1).all())
            seen.update(additive=None if additive is None else additive.astype(model.config.dtype))
        if seen["empty"]:
            return plain(ids, *args, kv_cache=kv_cache)
        if kv_cache is not seen["cache"]:
            seen.update(cache=kv_cache, flat=flat_caches(kv_cache))
        caches = seen["flat"]
        B = ids.shape[0]
        step = steps.get(B) or steps.setdefault(B, model_step(model, B))
        lengths = [c.length for c in caches]
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
            logits = step(ids[:, 0], kv_cache, caches[0].length, memory, seen["additive"])
        if logits is None:  # back to where it was; the plain code raises the right error
            for c, n in zip(caches, lengths, strict=True):
                c.length = n
            return plain(ids, *args, kv_cache=kv_cache)
        return logits[:, None]  # (B, V) -> (B, 1, V)

    return fast_or_plain


def encoder_forward(model):
    """``model.forward_encoder`` (a :class:`Transformer`), its blocks written out on the
    (B S, D) rows of the source: the same steps; the plain one for a model with a part this
    module does not know, in training, or for a source that is padding only."""
    plain = model.forward_encoder
    if model.training or type(model) is not Transformer or not known(model):
        return plain
    cfg, dtype = model.config, np.dtype(model.config.dtype)
    if any(type(b) is not EncoderBlock for b in model.encoder.layers):
        return plain
    if model.encoder.norm is not None and type(model.encoder.norm) is not LayerNorm:
        return plain
    embedding = model.src_embed
    if type(embedding) is not Embedding:
        return plain
    scale = dtype.type(math.sqrt(embedding.d_model) if embedding.scale else 1.0)
    blocks = [encoder_block_plan(b, dtype) for b in model.encoder.layers]
    final = None if model.encoder.norm is None else norm_plan(model.encoder.norm, dtype, 1)

    def forward_encoder(src):
        B, S = src.shape
        keep = np.ones((B, S), bool) if cfg.pad_id is None else src != cfg.pad_id
        if not keep.any(axis=-1).all():
            return plain(src)
        bias = None if keep.all() else np.where(keep, 0, -np.inf).astype(dtype)[:, None, None]
        with np.errstate(over="ignore", invalid="ignore"):
            x = (embedding.params["W"][src] * scale + model.pe[:S]).reshape(B * S, -1)
            widest = np.zeros_like(x)  # (B S, D)
            for plan in blocks:
                x = plan(x, B, S, bias, widest)
            if final is not None:
                x = final(x, widest)
        if not widest.max() < np.inf:
            return plain(src)
        return x.reshape(B, S, -1)  # (B, S, D)

    return forward_encoder


def encoder_block_plan(block, dtype):
    """An encoder block on the (B S, D) rows of B sequences of S positions."""
    attn = block.attn
    H, Dh, D = attn.n_heads, attn.d_head, attn.d_model
    q_scale = dtype.type(1.0 / math.sqrt(Dh))
    maps = (attn.q, attn.k, attn.v)
    W = np.concatenate([m.params["W"] for m in maps], axis=1)
    b = np.concatenate([m.params["b"] for m in maps]) if attn.has_bias else None
    qkv, o_map = affine(W, b, 1, dtype), linear_plan(attn.o, dtype, 1)
    ff = feed_forward_plan(block.ff, dtype, 1)
    norm1, norm2 = norm_plan(block.norm1, dtype, 1), norm_plan(block.norm2, dtype, 1)

    def self_attention(x, B, S, bias):
        y = qkv(x).reshape(B, S, 3, H, Dh).transpose(2, 0, 3, 1, 4)  # (3, B, H, S, Dh)
        scores = (y[0] * q_scale) @ y[1].swapaxes(-1, -2)  # (B, H, S, S)
        if bias is not None:  # (B, 1, 1, S): -inf at the source's padding
            scores = scores + bias
        scores = np.exp(scores - np.maximum.reduce(scores, axis=-1, keepdims=True))
        ctx = (scores @ y[2]) / np.add.reduce(scores, axis=-1, keepdims=True)  # (B, H, S, Dh)
        return o_map(ctx.transpose(0, 2, 1, 3).reshape(B * S, D))  # heads side by side

    def encoder_block(x, B, S, bias, widest):
        if block.norm_first:
            h = x + self_attention(norm1(x, widest), B, S, bias)
            return h + ff(norm2(h, widest))
        h = norm1(x + self_attention(x, B, S, bias), widest)
        return norm2(h + ff(h), widest)

    return encoder_block


def flat_caches(kv_cache):
    return [c for pair in kv_cache for c in (pair if isinstance(pair, tuple) else (pair,))]


def parts(model):
    """The token embedding, the blocks, the final norm (or None) and the output layer."""
    if type(model) is Transformer:
        return model.tgt_embed, model.decoder.layers, model.decoder.norm, model.out
    return model.embed, model.blocks.layers, model.blocks.norm, model.out


def known(model):
    """Whether every part of ``model`` is one of the layers this module writes out."""
    embedding, blocks, norm, out = parts(model)
    decoder = type(model) is Transformer
    if type(embedding) is not Embedding or type(out) not in (TiedOutput, Linear):
        return False
    if norm is not None and type(norm) is not LayerNorm:
        return False
    for b in blocks:
        if type(b) is not (DecoderBlock if decoder else EncoderBlock):
            return False
        attentions = (b.self_attn, b.cross_attn) if decoder else (b.attn,)
        norms = (b.norm1, b.norm2, b.norm3) if decoder else (b.norm1, b.norm2)
        ff = b.ff
        if any(type(n) is not LayerNorm for n in norms):
            return False
        if type(ff) is not FeedForward or ff.activation not in ("relu", "gelu"):
            return False
        if any(type(m) is not Linear for m in (ff.linear1, ff.linear2)):
            return False
        for a in attentions:
            if type(a) is not MultiHeadAttention or a.n_kv_heads != a.n_heads:
                return False
            if a.rope_base is not None or any(type(m) is not Linear for m in (a.q, a.k, a.v, a.o)):
                return False
    return True


def model_step(model, B):
    """The step of ``model`` for B sequences: (ids (B,), kv_cache, position t, memory,
    additive memory mask or None) -> logits (B, V), or None when a row was too large to
    normalise."""
    dtype = np.dtype(model.config.dtype)
    embedding, layers, final_norm, out_layer = parts(model)
    blocks = [block_plan(b, dtype, B) for b in layers]
    final = None if final_norm is None else norm_plan(final_norm, dtype, B)
    out = output_plan(out_layer, dtype, B)
    table = embedding.params["W"]
    scale = dtype.type(math.sqrt(embedding.d_model) if embedding.scale else 1.0)
    pe = model.pe

    def step(ids, cache, t, memory, memory_mask):
        x = table[ids] * scale + pe[t]  # (B, D): the token at position t
        widest = np.zeros_like(x)  # the largest std of every layer norm, per row
        for plan, layer_cache in zip(blocks, cache, strict=True):
            x = plan(x, layer_cache, memory, memory_mask, widest)
        if final is not None:
            x = final(x, widest)
        if not widest.max() < np.inf:  # a row too large to normalise (or NaN): the plain
            return None  # path says which
        return out(x)  # (B, V)

    return step


# --------------------------------------------------------------------------------------------
# the parts, each a function of (B, n) arrays. Every constant vector is repeated to (B, n):
# NumPy combines two arrays of the same shape faster than it broadcasts a vector.
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def constant(shape, value, dtype):
    """A read-only array of ``shape`` filled with ``value``, made once and shared."""
    a = np.full(shape, value, dtype)
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=16)
def centring(D, dtype):
    """The read-only (D, D) matrix I - 1/D: ``x @ centring(D)`` is x minus its mean."""
    a = (np.eye(D) - 1 / D).astype(dtype)
    a.flags.writeable = False
    return a


def rows(v, B, dtype):
    """The vector v (n,) repeated as B rows: (B, n) (a view when B = 1)."""
    v = np.asarray(v).astype(dtype, copy=False)
    return v.reshape(1, -1) if B == 1 else np.tile(v, (B, 1))


def affine(W, b, B, dtype):
    """``x @ W + b`` on (B, d_in) (or ``x @ W`` when b is None). ``np.dot`` calls BLAS with
    less overhead than ``@`` on 2-D arrays."""
    W = W.astype(dtype, copy=False)
    if b is None:
        return lambda x: dot(x, W)
    bias = rows(b, B, dtype)
    return lambda x: dot(x, W) + bias


def linear_plan(layer, dtype, B):
    """:meth:`Linear.forward` on (B, d_in)."""
    return affine(layer.params["W"], layer.params["b"] if layer.has_bias else None, B, dtype)


def norm_plan(layer, dtype, B):
    """:func:`~transformer_np.functional.layer_norm` on (B, D), with products by two (D, D)
    matrices: C = I - 1/D centres a row, M = 1/D gives its mean repeated along the row; then
    divided by the standard deviation. ``widest`` (B, D) keeps the largest standard deviation
    seen (inf or NaN when a row overflowed, which the plain code reports). The squares are
    divided by D before they are summed, so a row whose sum of squares overflows the dtype but
    whose mean square does not (|x| near 1e19 in float32) is normalised here where the plain
    code refuses it."""
    D = layer.d_model
    gamma, beta = rows(layer.params["gamma"], B, dtype), rows(layer.params["beta"], B, dtype)
    eps = constant((B, D), layer.eps, dtype)
    mean = constant((D, D), 1 / D, dtype)  # x @ mean: every entry of a row is the row's mean
    centre = centring(D, dtype)  # x @ centre = x - x @ mean

    def norm(x, widest):
        x_hat = dot(x, centre)  # (B, D)
        std = np.sqrt(dot(x_hat * x_hat, mean) + eps)  # (B, D), the row's std repeated
        np.maximum(widest, std, out=widest)  # NaN stays NaN
        return x_hat / std * gamma + beta

    return norm


def output_plan(layer, dtype, B):
    """The projection to the vocabulary: (B, D) -> (B, V)."""
    if type(layer) is TiedOutput:
        return affine(layer.embedding.params["W"].T, layer.params["b"], B, dtype)
    return linear_plan(layer, dtype, B)


def attention_plan(layer, self_attention, dtype, B):
    """Multi-head attention of one new query row per sequence to the cached keys and values,
    as :meth:`MultiHeadAttention.forward` with a cache (no grouping, no RoPE). Self-attention's
    three projections are one product by [W_q W_k W_v]; the 1/sqrt(Dh) of the scores is
    folded into W_q and b_q (exact when Dh is a power of 4)."""
    H, Dh, D = layer.n_heads, layer.d_head, layer.d_model
    maps = (layer.q, layer.k, layer.v)
    W = [m.params["W"] for m in maps]
    b = [m.params["b"] for m in maps] if layer.has_bias else None
    scale = 1.0 / math.sqrt(Dh)
    W[0] = W[0] * W[0].dtype.type(scale)  # a new array: the model's is not touched
    if b is not None:
        b[0] = b[0] * b[0].dtype.type(scale)
    if self_attention:  # (B, D) -> (B, 3D)
        qkv = affine(np.concatenate(W, axis=1), None if b is None else np.concatenate(b), B, dtype)
    else:
        q_map = affine(W[0], None if b is None else b[0], B, dtype)
        k_map, v_map = (affine(m.params["W"], m.params.get("b"), 1, dtype) for m in maps[1:])
    o_map = linear_plan(layer.o, dtype, B)

    def attend(x, cache, mask, memory=None):
        """x (B, D) -> (B, D); self-attention appends this position's keys and values,
        cross-attention projects the memory (B, S, D) into its cache on the first step."""
        t = cache.length
        if self_attention:  # the new keys and values written in place at position t
            y = qkv(x).reshape(B, 3, H, Dh)  # (B, 3D) -> (B, 3, H, Dh)
            q = y[:, 0, :, None]  # (B, H, 1, Dh)
            if t == 0:  # the first position: the cache makes its buffers
                cache.append(y[:, 1, :, None], y[:, 2, :, None])
            else:
                cache._keys[:, :, t] = y[:, 1]
                cache._values[:, :, t] = y[:, 2]
            cache._length = t = t + 1
        else:  # the encoder's keys and values, projected on the first step only
            q = q_map(x).reshape(B, H, 1, Dh)
            if t == 0:
                S = memory.shape[1]
                k, v = (m(memory.reshape(-1, D)).reshape(B, S, H, Dh) for m in (k_map, v_map))
                cache.append(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))  # (B, H, S, Dh)
                t = S
        k, v = cache._keys[:, :, :t], cache._values[:, :, :t]  # (B, H, S, Dh) each
        # the five steps of attention_inplace, for one query row
        scores = q @ k.swapaxes(-1, -2)  # (B, H, 1, S), q already scaled
        if mask is not None:  # 0 where a key may be read, -inf where it is padding
            scores = scores + mask
        scores = np.exp(scores - np.maximum.reduce(scores, axis=-1, keepdims=True))
        ctx = (scores @ v) / np.add.reduce(scores, axis=-1, keepdims=True)  # (B, H, 1, Dh)
        return o_map(ctx.reshape(B, D))  # the heads side by side: (B, D)

    return attend


def feed_forward_plan(layer, dtype, B):
    """``act(x W_1 + b_1) W_2 + b_2`` on (B, D), as :meth:`FeedForward.forward`."""
    first, second = linear_plan(layer.linear1, dtype, B), linear_plan(layer.linear2, dtype, B)
    if layer.activation == "relu":
        zero = constant((B, layer.d_ff), 0, dtype)
        return lambda x: second(np.maximum(first(x), zero))
    if dtype == np.float32:
        return lambda x: second(gelu32(first(x)))

    def feed_forward(x):
        h = first(x)  # (B, d_ff)
        a = np.empty_like(h)
        gelu_range64(h.reshape(-1), a.reshape(-1))
        return second(a)

    return feed_forward


def block_plan(block, dtype, B):
    """An encoder block (decoder-only models) or a decoder block on (B, D), pre- or post-LN,
    as their ``forward`` in evaluation mode (dropout is the identity)."""
    ff = feed_forward_plan(block.ff, dtype, B)
    norm1, norm2 = norm_plan(block.norm1, dtype, B), norm_plan(block.norm2, dtype, B)
    pre = block.norm_first
    if type(block) is EncoderBlock:
        attn = attention_plan(block.attn, True, dtype, B)

        def encoder_block(x, cache, _memory, _mask, widest):
            if pre:  # x + Sublayer(LayerNorm(x))
                h = x + attn(norm1(x, widest), cache, None)
                return h + ff(norm2(h, widest))
            h = norm1(x + attn(x, cache, None), widest)  # LayerNorm(x + Sublayer(x))
            return norm2(h + ff(h), widest)

        return encoder_block

    attn = attention_plan(block.self_attn, True, dtype, B)
    cross = attention_plan(block.cross_attn, False, dtype, B)
    norm3 = norm_plan(block.norm3, dtype, B)

    def decoder_block(x, caches, memory, mask, widest):
        self_cache, cross_cache = caches
        if pre:
            h = x + attn(norm1(x, widest), self_cache, None)
            h2 = h + cross(norm2(h, widest), cross_cache, mask, memory)
            return h2 + ff(norm3(h2, widest))
        h = norm1(x + attn(x, self_cache, None), widest)
        h2 = norm2(h + cross(h, cross_cache, mask, memory), widest)
        return norm3(h2 + ff(h2), widest)

    return decoder_block


def gelu32(x):
    """The exact GELU of a small float32 array, :func:`~.gelu.gelu_range32`'s steps in the
    same order (so the same result), each a new array: on a few hundred numbers, a new small
    array costs less than writing into a buffer."""
    n, d = TAIL32_N, TAIL32_D
    a = np.abs(x)
    ac = np.minimum(a, TAIL32_MAX)
    e = np.exp(a * a * np.float32(-0.5))  # exp(-a^2 / 2)
    num = (((ac * n[4] + n[3]) * ac + n[2]) * ac + n[1]) * ac + n[0]
    den = ((((ac + d[4]) * ac + d[3]) * ac + d[2]) * ac + d[1]) * ac + d[0]
    return np.maximum(x, np.float32(0)) - num / den * e * a  # max(x, 0) - |x| Q(|x|)
