"""The validators of the attention layer, its cache, the blocks, the stacks and the models."""

from __future__ import annotations

import numbers
import os

import numpy as np

from .boundary import Prepared, to_compute
from .functions import as_bool_mask, check_bias
from .general import (
    as_float_array,
    check_bool,
    check_broadcastable,
    check_dtype,
    check_finite,
    check_ndim,
    check_positive_float,
    check_positive_int,
    check_rng,
    is_a,
    shape_str,
)

# -- KVCache ------------------------------------------------------------------------------------


def check_kv_length(n, name, low, high):
    """``n`` as an int in [low, high] (no upper bound for None), else a clear error."""
    if isinstance(n, bool | np.bool_) or not isinstance(n, numbers.Integral):
        raise TypeError(f"KVCache.{name} must be an integer, got {n!r} ({type(n).__name__})")
    if n < low or (high is not None and n > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}] (the positions stored)"
        raise ValueError(f"KVCache.{name} must be {allowed}, got {n}")
    return int(n)


def check_kv_append(cache, k, v):
    """Keys and values of the same shape (B, Hkv, n, Dh), fitting the cache and its contents."""
    for name, a in (("k", k), ("v", v)):
        if not isinstance(a, np.ndarray) or a.ndim != 4 or a.dtype.kind != "f":
            got = (
                f"shape {shape_str(a.shape)}, dtype {a.dtype}"
                if isinstance(a, np.ndarray)
                else (type(a).__name__)
            )
            raise ValueError(
                f"KVCache.append: {name} must be a float array (B, heads, positions, Dh), got {got}"
            )
    if k.shape != v.shape or k.dtype != v.dtype:
        raise ValueError(
            f"KVCache.append: k and v must have the same shape and dtype, got k "
            f"{shape_str(k.shape)} {k.dtype} and v {shape_str(v.shape)} {v.dtype}"
        )
    t0, n = cache.length, k.shape[2]
    if t0 + n > cache.max_len:
        raise ValueError(
            f"the KVCache holds at most max_len = {cache.max_len} positions, got "
            f"{t0} stored + {n} new"
        )
    if t0:
        held = cache.stored()[0]
        if held.shape[:2] != k.shape[:2] or held.shape[3] != k.shape[3] or held.dtype != k.dtype:
            raise ValueError(
                f"the KVCache holds {t0} positions of keys {shape_str(held.shape)} {held.dtype}, "
                f"got new keys {shape_str(k.shape)} {k.dtype}: another batch size, head count or "
                "dtype needs a new cache (or set cache.length = 0 to start again)"
            )


# -- MultiHeadAttention -------------------------------------------------------------------------


def check_mha_init(d_model, n_heads, n_kv_heads, rope_base, bias, rng, dtype, init):
    d_model = check_positive_int(d_model, "d_model")
    n_heads = check_positive_int(n_heads, "n_heads")
    if d_model % n_heads != 0:
        raise ValueError(
            f"d_model must be divisible by n_heads, got d_model = {d_model} and "
            f"n_heads = {n_heads} (d_model / n_heads = {d_model / n_heads:g})"
        )
    if n_kv_heads is not None:
        n_kv_heads = check_positive_int(n_kv_heads, "n_kv_heads")
        if n_heads % n_kv_heads:
            raise ValueError(
                f"n_kv_heads must divide n_heads (each key/value head serves a group of query "
                f"heads), got n_heads = {n_heads} and n_kv_heads = {n_kv_heads}"
            )
    if rope_base is not None:
        check_positive_float(rope_base, "rope_base")
        if (d_model // n_heads) % 2:
            raise ValueError(
                f"d_model must be divisible by n_heads into heads of even size (RoPE rotates "
                f"pairs), got d_model = {d_model} and n_heads = {n_heads}"
            )
    check_bool(bias, "bias")
    check_bool(init, "init")
    check_dtype(dtype)
    check_rng(rng)


def check_sequence(x, name, d_model):
    """A float array (T, D) or (B, T, D) with at least one position, all finite."""
    x = as_float_array(x, name)
    check_ndim(x, name, (2, 3), "(T, d_model) or (B, T, d_model)")
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have last dimension d_model = {d_model}, got shape {shape_str(x.shape)}"
        )
    if x.shape[-2] == 0:
        raise ValueError(f"{name} must hold at least one position, got {shape_str(x.shape)}")
    check_finite(x, name)
    return x


def is_kv_cache(x) -> bool:
    """A KVCache, told by its methods (multi_head.py imports this module)."""
    return callable(getattr(x, "append", None)) and callable(getattr(x, "stored", None))


def check_kv_cache(kv_cache, unbatched):
    """None, or a KVCache for 3-D input."""
    if kv_cache is None:
        return
    if not is_kv_cache(kv_cache):
        raise TypeError(f"kv_cache must be a KVCache, got {type(kv_cache).__name__}")
    if unbatched:
        raise ValueError("a kv_cache needs 3-D input (B, T, D)")


def attention_inputs(layer, x_q, x_kv, mask, bias, kv_cache, name="x_q"):
    """The checked ``(x_q, x_kv, mask, bias, unbatched)`` of an attention call, 3-D."""
    x_q = check_sequence(x_q, name, layer.d_model)
    if x_kv is not None:
        if layer.rope_base is not None:
            raise ValueError(
                "x_kv must be None: with rope_base this layer attends within its own sequence"
            )
        x_kv = check_sequence(x_kv, "x_kv", layer.d_model)
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
    unbatched = x_q.ndim == 2
    check_kv_cache(kv_cache, unbatched)
    T = x_q.shape[-2]
    S = T if x_kv is None else x_kv.shape[-2]
    if kv_cache is not None and kv_cache.length:  # keys: the cached positions and the new
        S = kv_cache.length + T if x_kv is None else kv_cache.length
    H = layer.n_heads
    scores = (H, T, S) if unbatched else (x_q.shape[0], H, T, S)
    desc = "the attention scores " + ("(H, T, S) =" if unbatched else "(B, H, T, S) =")
    if mask is not None:
        mask = as_bool_mask(mask)
        check_broadcastable(mask.shape, scores, "mask", desc)
    if bias is not None:
        bias = check_bias(bias, scores, desc)
    if unbatched:
        x_q = x_q[None]  # (T, D) -> (1, T, D)
        x_kv = None if x_kv is None else x_kv[None]
    return x_q, x_kv, mask, bias, unbatched


def check_mha_call(layer, x_q, x_kv=None, mask=None, *, bias=None, kv_cache=None):
    x_q, x_kv, mask, bias, unbatched = attention_inputs(layer, x_q, x_kv, mask, bias, kv_cache)
    dtype = x_q.dtype if x_kv is None else np.result_type(x_q, x_kv)
    x_q = to_compute(x_q.astype(dtype, copy=False))
    x_kv = None if x_kv is None else to_compute(x_kv.astype(dtype, copy=False))
    kwargs = {"bias": bias, "kv_cache": kv_cache}
    return Prepared((x_q, x_kv, mask), kwargs, dtype=dtype, squeeze=unbatched)


# -- blocks -------------------------------------------------------------------------------------


def check_mha_saved(layer):
    """The cache of a MultiHeadAttention's last forward pass, if a backward pass can use it:
    a call with a ``kv_cache`` (generation) keeps no attention weights."""
    cache = layer.saved()
    if cache["weights"] is None:
        raise RuntimeError(
            "MultiHeadAttention.backward after a call with a kv_cache: generation keeps no "
            "attention weights; call the layer without kv_cache before a backward pass"
        )
    return cache


def check_block_sizes(d_model, n_heads, d_ff, norm_first, eps, dropout, rng, dtype, owner):
    from .layers import check_probability

    check_positive_int(d_model, "d_model")
    check_positive_int(n_heads, "n_heads")
    check_positive_int(d_ff, "d_ff")
    check_bool(norm_first, "norm_first")
    check_positive_float(eps, "eps")
    check_probability(dropout, f"{owner}.dropout")
    check_rng(rng)
    check_dtype(dtype)


def check_encoder_block_init(
    d_model, n_heads, d_ff, norm_first, activation, eps, dropout, rng, dtype, attn, ff, norm,
    owner=None,
):  # fmt: skip
    check_block_sizes(
        d_model, n_heads, d_ff, norm_first, eps, dropout, rng, dtype, owner or "EncoderBlock"
    )
    if attn is None:
        check_mha_init(d_model, n_heads, None, None, True, rng, dtype, True)
    if ff is None and activation not in ("relu", "gelu"):
        raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')


def check_decoder_block_init(
    d_model, n_heads, d_ff, norm_first, activation, eps, dropout, rng, dtype
):
    check_encoder_block_init(
        d_model, n_heads, d_ff, norm_first, activation, eps, dropout, rng, dtype, None, None, None,
        "DecoderBlock",
    )  # fmt: skip


def check_encoder_block_call(layer, x, mask=None, *, bias=None, kv_cache=None):
    x_q, _, mask, bias, unbatched = attention_inputs(layer.attn, x, None, mask, bias, kv_cache, "x")
    kwargs = {"mask": mask, "bias": bias, "kv_cache": kv_cache}
    return Prepared((to_compute(x_q),), kwargs, dtype=x_q.dtype, squeeze=unbatched)


def check_memory(memory, batch, d_model):
    """The encoder output given to a decoder: a finite float array (batch, S, d_model)."""
    if memory is None:
        raise TypeError(
            "memory must be the encoder output, a float array of shape (B, S, d_model), got None"
        )
    memory = as_float_array(memory, "memory")
    check_ndim(memory, "memory", (3,), "the encoder output, of shape (B, S, d_model)")
    if memory.shape[-1] != d_model:
        raise ValueError(
            f"memory must have last dimension d_model = {d_model}, "
            f"got shape {shape_str(memory.shape)} (last dimension {memory.shape[-1]})"
        )
    if memory.shape[0] != batch:
        raise ValueError(
            f"memory must have the batch size of the target input ({batch}), "
            f"got shape {shape_str(memory.shape)}"
        )
    check_finite(memory, "memory")
    return memory


def check_decoder_block_call(layer, x, memory, self_mask=None, memory_mask=None, *, kv_cache=None):
    x = as_float_array(x, "x")
    check_ndim(x, "x", (3,), "(B, T, d_model)")
    memory = check_memory(memory, x.shape[0], layer.d_model)
    if kv_cache is not None and (not isinstance(kv_cache, tuple | list) or len(kv_cache) != 2):
        raise TypeError(
            "kv_cache must be a pair (self-attention KVCache, cross-attention KVCache), got "
            f"{type(kv_cache).__name__}"
        )
    self_cache, cross_cache = (None, None) if kv_cache is None else kv_cache
    x, _, self_mask, _, _ = attention_inputs(
        layer.self_attn, x, None, self_mask, None, self_cache, "x"
    )
    _, _, memory_mask, _, _ = attention_inputs(
        layer.cross_attn, x, memory, memory_mask, None, cross_cache
    )
    dtype = np.result_type(x, memory)
    args = (to_compute(x.astype(dtype)), to_compute(memory.astype(dtype)), self_mask, memory_mask)
    return Prepared(args, {"kv_cache": kv_cache}, dtype=dtype)


# -- models -------------------------------------------------------------------------------------


def check_ids(ids, name, vocab_size, max_len, start=0, context=None):
    """Token ids as a 2-D integer array (B, T), values in [0, vocab), start + T <= max_len.

    ``context`` is the model's ``context_limit``: what max_len is, and what to do about it.
    """
    from .general import as_typed_array

    arr = as_typed_array(ids, name, "iu", "an array of integer token ids")
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (B, T) (a batch of sequences), got {arr.shape}")
    return check_id_values(arr, name, vocab_size, max_len, start, context)


def check_id_values(arr, name, vocab_size, max_len, start=0, context=None):
    """``arr``, a 2-D integer array (B, T) of token ids (its dtype and number of axes checked,
    by :func:`check_ids` or by an annotation), if it holds at least one sequence of one token,
    start + T <= max_len and every id is in [0, vocab_size)."""
    limit, fix = context or ("the positional table", "build the model with a larger max_len")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one sequence of one token, got {arr.shape}")
    if start + arr.shape[1] > max_len:
        length = (
            f"{start} cached + {arr.shape[1]} new positions"
            if start
            else (f"sequences of length {arr.shape[1]}")
        )
        raise ValueError(f"{name} has {length}, longer than {limit} (max_len = {max_len}); {fix}")
    return check_id_range(arr, name, vocab_size)


def check_id_range(arr, name, vocab_size):
    """``arr`` (integers, not empty) if every id is in [0, vocab_size), else a ValueError."""
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name} must hold token ids in [0, {vocab_size}), got values from {lo} to {hi}"
        )
    return arr


def check_config(config, name: str):
    if not is_a(config, name):
        raise TypeError(f"config must be a {name}, got {type(config).__name__}")


def physical_memory() -> int:
    """This machine's memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def check_model_size(config, n_params):
    """A clear error, before any allocation, for a model larger than this machine's memory."""
    size = n_params * np.dtype(config.dtype).itemsize
    memory = physical_memory()
    if memory and size > memory:
        raise ValueError(
            f"config describes a model of about {n_params:.3g} parameters, {size / 2**30:.3g} GiB "
            f"in {config.dtype}, more than this machine's memory ({memory / 2**30:.3g} GiB); "
            "make vocab_size, d_model, d_ff or the number of layers smaller"
        )


def block_parameters(d, d_ff, cross=False):
    return (8 if cross else 4) * d * d + 2 * d * d_ff


def check_transformer_init(config, rng):
    check_config(config, "TransformerConfig")
    check_rng(rng)
    c = config
    n = (c.src_vocab_size + 2 * c.tgt_vocab_size) * c.d_model
    n += c.n_encoder_layers * block_parameters(c.d_model, c.d_ff)
    n += c.n_decoder_layers * block_parameters(c.d_model, c.d_ff, cross=True)
    check_model_size(c, n)


def check_language_model_init(config, rng):
    check_config(config, "LanguageModelConfig")
    check_rng(rng)
    c = config
    n = c.vocab_size * c.d_model * (1 if c.tie_embeddings else 2)
    check_model_size(c, n + c.n_layers * block_parameters(c.d_model, c.d_ff))


def check_transformer_call(model, src, tgt):
    cfg = model.config
    src = check_ids(src, "src", cfg.src_vocab_size, cfg.max_len)
    tgt = check_ids(tgt, "tgt", cfg.tgt_vocab_size, cfg.max_len)
    if src.shape[0] != tgt.shape[0]:
        raise ValueError(
            f"src and tgt must have the same batch size, got src {shape_str(src.shape)} "
            f"and tgt {shape_str(tgt.shape)}"
        )
    return Prepared((src, tgt))


def check_model_cache(model, kv_cache, n_layers):
    """None, or one KVCache per block (as ``model.new_cache`` makes); the stored positions."""
    if kv_cache is None:
        return 0
    if (
        not isinstance(kv_cache, list | tuple)
        or len(kv_cache) != n_layers
        or not all(is_kv_cache(c) for c in kv_cache)
    ):
        raise TypeError(
            f"kv_cache must be a list of {n_layers} KVCache, one per block (model.new_cache("
            f"max_len)), got {type(kv_cache).__name__}"
            + (f" of length {len(kv_cache)}" if isinstance(kv_cache, list | tuple) else "")
        )
    lengths = {c.length for c in kv_cache}
    if len(lengths) != 1:
        raise ValueError(f"the blocks' KVCache hold different lengths {sorted(lengths)}")
    return lengths.pop()


def check_language_model_call(model, ids, *, kv_cache=None):
    cfg = model.config
    start = check_model_cache(model, kv_cache, len(model.blocks.layers))
    ids = check_ids(ids, "ids", cfg.vocab_size, cfg.max_len, start, model.context_limit)
    if kv_cache is not None and start + ids.shape[1] > kv_cache[0].max_len:
        raise ValueError(
            f"kv_cache holds at most max_len = {kv_cache[0].max_len} positions, got {start} "
            f"cached + {ids.shape[1]} new ids; make it with model.new_cache(max_len)"
        )
    return Prepared((ids,), {"kv_cache": kv_cache})


def check_encode(model, src):
    cfg = model.config
    return check_ids(src, "src", cfg.src_vocab_size, cfg.max_len)


def check_decode(model, tgt, memory, src_mask):
    cfg = model.config
    tgt = check_ids(tgt, "tgt", cfg.tgt_vocab_size, cfg.max_len)
    memory = check_memory(memory, tgt.shape[0], cfg.d_model)
    if src_mask is not None:
        B, T, S = tgt.shape[0], tgt.shape[1], memory.shape[1]
        src_mask = as_bool_mask(src_mask)
        scores = (B, cfg.n_heads, T, S)
        check_broadcastable(src_mask.shape, scores, "src_mask", "the scores (B, H, T, S) =")
    return tgt, memory, src_mask


# -- LLaMA --------------------------------------------------------------------------------------


def check_llama_block_init(d_model, n_heads, d_ff, n_kv_heads, rope_base, eps, rng, dtype, init):
    check_block_sizes(d_model, n_heads, d_ff, True, eps, 0.0, rng, dtype, "LlamaBlock")
    check_mha_init(d_model, n_heads, n_kv_heads, rope_base, False, rng, dtype, init)


def check_llama_init(config, rng, init):
    check_config(config, "LlamaConfig")
    check_rng(rng)
    check_bool(init, "init")
    c = config
    check_model_size(
        c, c.vocab_size * c.d_model + c.n_layers * 3 * c.d_model * (c.d_model + c.d_ff)
    )


def check_llama_call(model, ids, *, kv_cache=None):
    return check_language_model_call(model, ids, kv_cache=kv_cache)
