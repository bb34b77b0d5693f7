"""The models: the encoder-decoder ``Transformer`` and the decoder-only ``LanguageModel``,
each with a backward pass. Page: transformer.md.

A model is a :class:`~transformer_np.module.Module` whose ``params`` and ``grads`` are live
flat views with dotted names (``"encoder.0.attn.W_q"``), ready for
:class:`~transformer_np.optim.Adam`. Calling a model checks the token ids once; the blocks
and layers below it run without checks.

Shape glossary: B batch, S source positions, T target positions, D = d_model, H heads,
V vocabulary size.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import run_or_blame
from ._checks.general import as_grad
from ._checks.models import (
    check_decode,
    check_encode,
    check_language_model_call,
    check_language_model_init,
    check_transformer_call,
    check_transformer_init,
)
from ._checks.weights import checked_weights
from .blocks import DecoderBlock, EncoderBlock
from .config import LanguageModelConfig, TransformerConfig
from .embedding import Embedding, TiedOutput
from .layers import Dropout, LayerNorm, Linear
from .masks import causal_mask
from .module import Module
from .multi_head import KVCache
from .positional import positional_encoding
from .stacks import Stack

__all__ = ["LanguageModel", "Transformer"]


# --------------------------------------------------------------------------------------------
# what both models share
# --------------------------------------------------------------------------------------------


def stack(block, n_layers, cfg, rng, dtype):
    """``n_layers`` blocks of the config's sizes, with a final LayerNorm when pre-LN."""
    kw = {"norm_first": cfg.norm_first, "activation": cfg.activation, "eps": cfg.eps}
    kw.update(dropout=cfg.dropout, rng=rng, dtype=dtype)
    layers = [block(cfg.d_model, cfg.n_heads, cfg.d_ff, **kw) for _ in range(n_layers)]
    return Stack(layers, LayerNorm(cfg.d_model, cfg.eps, dtype=dtype) if cfg.norm_first else None)


def check_grad_logits(model, grad_logits):
    """A model's ``backward`` input, named ``grad_logits`` in the errors: after a forward pass,
    a finite float array of the logits' shape (a NaN here would reach every gradient)."""
    out = model.out
    if out.cache is None:
        raise RuntimeError(
            f"{type(model).__name__}.backward was called before a forward pass (no cache)"
        )
    vocab = out.embedding.vocab_size if isinstance(out, TiedOutput) else out.d_out
    g = np.asarray(grad_logits)
    as_grad(g, out.cache["shape"][:-1] + (vocab,), g.dtype, "grad_logits")  # finite too


def output_layer(cfg, embedding, vocab_size, rng, dtype):
    """The projection to the vocabulary: the embedding's own matrix when tied."""
    if cfg.tie_embeddings:
        return TiedOutput(embedding)
    return Linear(cfg.d_model, vocab_size, rng=rng, dtype=dtype)


class ModelBase(Module):
    """Loading parameters, and the embedding of tokens with their positions."""

    # what max_len is, and what to do about a longer sequence (for the error message)
    context_limit = ("the positional table", "build the model with a larger max_len")

    # --8<-- [start:embed_tokens]
    def embed_tokens(self, embedding, drop, ids, start=0):
        """sqrt(D) E[ids] + PE[start : start + T], then dropout: (B, T) -> (B, T, D)."""
        T = ids.shape[1]
        x = embedding.forward(ids)  # (B, T) -> (B, T, D), scaled by sqrt(D)
        x = x + self.pe[start : start + T]  # add the positions, (T, D) broadcast over B
        return drop.forward(x)

    # --8<-- [end:embed_tokens]

    def load_parameters(self, params):
        """Copy arrays (the names and shapes of ``params``) into the model, every one checked
        first: on an error the model is left as it was."""
        mine = self.params
        for k, value in checked_weights(params, "params", mine, "parameter").items():
            mine[k][...] = value

    # -- generation: one new token at a time ----------------------------------------------------

    def one_token_forward(self):
        """The forward (a Transformer's ``forward_decoder``) for generation: for one new token
        with a cache, in evaluation mode, :meth:`decode_step` on (B, D) rows (the same logits up
        to rounding); else the forward itself. Call it again after changing the parameters."""
        plain = self.forward_decoder if isinstance(self, Transformer) else self.forward
        if self.training:  # dropout: only the forward has it
            return plain
        steps, seen = {}, {"mask": None, "additive": None, "empty": False}  # one step per B

        def forward(ids, *context, kv_cache=None):
            if kv_cache is None or ids.shape[1] != 1:  # a prompt, or no cache
                return plain(ids, *context, kv_cache=kv_cache)
            memory, memory_mask = context if context else (None, None)  # the decoder's
            if memory_mask is not seen["mask"]:  # the same mask at every step: converted once
                masked = memory_mask is not None and not memory_mask.all()
                empty = masked and not memory_mask.any(axis=-1).all()  # a source of padding only
                additive = np.where(memory_mask, 0, -np.inf).astype(self.config.dtype)
                seen.update(mask=memory_mask, empty=empty, additive=additive if masked else None)
            if seen["empty"]:  # nothing to attend to: the forward says so
                return plain(ids, *context, kv_cache=kv_cache)
            B = ids.shape[0]
            step = steps.get(B) or steps.setdefault(B, self.decode_step(B))
            caches = [
                c for pair in kv_cache for c in (pair if isinstance(pair, tuple) else (pair,))
            ]
            lengths = [c.length for c in caches]
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
                logits = step(ids[:, 0], kv_cache, caches[0].length, memory, seen["additive"])
            if logits is None:  # a row too large to normalise: back, and the forward says which
                for c, n in zip(caches, lengths, strict=True):
                    c.length = n
                return plain(ids, *context, kv_cache=kv_cache)
            return logits[:, None]  # (B, V) -> (B, 1, V)

        return forward

    # --8<-- [start:model_decode_step]
    def decode_step(self, B, watch=None):
        """The model on one new token of each of B sequences: ``step(ids (B,), kv_cache, t, memory,
        additive memory mask) -> logits (B, V)``, or None when a row overflowed a normalisation
        (``watch``). Page: decoding.md."""
        embedding, stack, out = self.decoder_parts()
        dtype = embedding.params["W"].dtype
        watch = np.zeros((B, embedding.d_model), dtype)
        blocks = [block.decode_step(B, watch) for block in stack.layers]
        final = None if stack.norm is None else stack.norm.decode_step(B, watch)
        logits = out.decode_step(B, watch)
        table = embedding.params["W"]
        scale = dtype.type(np.sqrt(embedding.d_model) if embedding.scale else 1.0)

        def step(ids, cache, t, memory, memory_mask):
            watch[...] = 0
            x = table[ids] * scale + self.pe[t]  # (B, D): the token at position t
            for block, block_cache in zip(blocks, cache, strict=True):
                x = block(x, block_cache, memory, memory_mask)
            if final is not None:
                x = final(x)
            if not watch.max() < np.inf:  # a row too large to normalise (or NaN)
                return None
            return logits(x)  # (B, V)

        return step

    # --8<-- [end:model_decode_step]


# --------------------------------------------------------------------------------------------
# the models
# --------------------------------------------------------------------------------------------


class Transformer(ModelBase):
    """The encoder-decoder Transformer of "Attention Is All You Need", with backpropagation.

    The source padding is a blocked key for the encoder and the cross-attention; the decoder's
    self-attention is causal and blocks target padding too. Page: transformer.md.

    Parameters
    ----------
    config : TransformerConfig
    rng : np.random.Generator or int, optional
        Initial weights and dropout masks.

    Attributes
    ----------
    src_embed, tgt_embed : Embedding
    encoder, decoder : Stack
    out : Linear or TiedOutput
        Projection to the target vocabulary.
    pe : ndarray of shape (max_len, D)
        The sinusoidal positional table (fixed, not a parameter).
    params, grads : NestedParams
        Keys such as ``"encoder.0.attn.W_q"``, ``"decoder.1.cross_attn.W_k"``, ``"out.W"``.
    """

    check_init, check_call = check_transformer_init, check_transformer_call

    def __init__(self, config: TransformerConfig, rng=None):
        super().__init__()
        self.config = cfg = config
        rng = np.random.default_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.src_embed = Embedding(cfg.src_vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.encoder = stack(EncoderBlock, cfg.n_encoder_layers, cfg, rng, dtype)
        self.decoder = stack(DecoderBlock, cfg.n_decoder_layers, cfg, rng, dtype)
        self.out = output_layer(cfg, self.tgt_embed, cfg.tgt_vocab_size, rng, dtype)
        self.src_drop = Dropout(cfg.dropout, rng)
        self.tgt_drop = Dropout(cfg.dropout, rng)
        self.pe = positional_encoding(cfg.max_len, cfg.d_model, dtype=dtype)
        self.add_children(
            src_embed=self.src_embed,
            tgt_embed=self.tgt_embed,
            encoder=self.encoder,
            decoder=self.decoder,
            out=self.out,
        )
        self.add_children(src_drop=self.src_drop, tgt_drop=self.tgt_drop)

    def __repr__(self):
        return f"Transformer({self.config})"

    def decoder_parts(self):
        """The target embedding, the decoder and the output layer."""
        return self.tgt_embed, self.decoder, self.out

    # -- masks --------------------------------------------------------------------------------

    def source_mask(self, src):
        """Key mask of the source, shape (B, 1, 1, S): False at padding; None without pad_id."""
        if self.config.pad_id is None:
            return None
        return (src != self.config.pad_id)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)

    def target_mask(self, tgt):
        """Causal mask combined with the target padding, shape (B, 1, T, T)."""
        T = tgt.shape[1]
        mask = causal_mask(T)  # (T, T)
        if self.config.pad_id is None:
            return mask
        return mask & (tgt != self.config.pad_id)[:, None, None, :]  # -> (B, 1, T, T)

    # -- forward -------------------------------------------------------------------------------

    def encode(self, src):
        """Encoder output ("memory") of ``src`` (B, S) -> (B, S, D)."""
        return run_or_blame(self, self.forward_encoder, check_encode(self, src))

    def decode(self, tgt, memory, src_mask=None):
        """Logits (B, T, V) of the next token at each target position, given the memory."""
        tgt, memory, src_mask = check_decode(self, tgt, memory, src_mask)
        return run_or_blame(self, self.forward_decoder, tgt, memory, src_mask)

    # --8<-- [start:transformer_forward]
    def forward(self, src, tgt):
        """Logits (B, T, V) of the next target token at each position, for checked ids."""
        memory = self.forward_encoder(src)  # (B, S) -> (B, S, D)
        return self.forward_decoder(tgt, memory, self.source_mask(src))  # -> (B, T, V)

    def forward_encoder(self, src):
        """The encoder on checked ids: (B, S) -> memory (B, S, D)."""
        x = self.embed_tokens(self.src_embed, self.src_drop, src)  # (B, S) -> (B, S, D)
        return self.encoder.forward(x, self.source_mask(src))  # (B, S, D)

    def forward_decoder(self, tgt, memory, src_mask, *, kv_cache=None):
        """The decoder and the output layer on checked input: (B, T) -> logits (B, T, V); with a
        ``kv_cache`` (a pair of KVCache per layer), ``tgt`` holds only the new tokens."""
        start = 0 if kv_cache is None else kv_cache[0][0].length
        y = self.embed_tokens(self.tgt_embed, self.tgt_drop, tgt, start)  # (B, T) -> (B, T, D)
        self_mask = self.target_mask(tgt) if kv_cache is None else None  # a cache is causal
        h = self.decoder.forward(y, memory, self_mask, src_mask, kv_cache=kv_cache)  # (B, T, D)
        return self.out.forward(h)  # (B, T, D) -> (B, T, V)

    # --8<-- [end:transformer_forward]

    def source_forward(self):
        """``forward_encoder`` for generation, in evaluation mode: the blocks' ``source_step``
        on the B S rows of the source (the same memory up to rounding); the forward itself for
        a source of padding only, or a row too large to normalise (it says which)."""
        plain = self.forward_encoder
        if self.training:
            return plain
        cfg, embedding, dtype = self.config, self.src_embed, np.dtype(self.config.dtype)
        scale = dtype.type(np.sqrt(embedding.d_model) if embedding.scale else 1.0)

        def forward(src):
            B, S = src.shape
            keep = np.ones((B, S), bool) if cfg.pad_id is None else src != cfg.pad_id
            if not keep.any(axis=-1).all():
                return plain(src)
            bias = None if keep.all() else np.where(keep, 0, -np.inf).astype(dtype)[:, None, None]
            watch = np.zeros((B * S, embedding.d_model), dtype)
            steps = [block.source_step(B, S, watch) for block in self.encoder.layers]
            norm = self.encoder.norm
            with np.errstate(over="ignore", invalid="ignore"):
                x = (embedding.params["W"][src] * scale + self.pe[:S]).reshape(B * S, -1)
                for step in steps:
                    x = step(x, bias)
                if norm is not None:
                    x = norm.decode_step(B * S, watch)(x)
            if not watch.max() < np.inf:
                return plain(src)
            return x.reshape(B, S, -1)  # (B, S, D)

        return forward

    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``."""
        check_grad_logits(self, grad_logits)
        dh = self.out.backward(grad_logits)  # (B, T, V) -> (B, T, D)
        dy, dmemory = self.decoder.backward(dh)
        self.tgt_embed.backward(self.tgt_drop.backward(dy))
        dx = self.encoder.backward(dmemory)
        self.src_embed.backward(self.src_drop.backward(dx))

    def new_cache(self, max_len, memory_len):
        """One (self-attention, cross-attention) pair of KVCache per decoder layer."""
        return [(KVCache(max_len), KVCache(memory_len)) for _ in self.decoder.layers]

    @property
    def attention_weights(self):
        """Cross-attention weights of each decoder layer in the last call, (B, H, T, S) each."""
        return [layer.cross_attention_weights for layer in self.decoder.layers]


class LanguageModel(ModelBase):
    """A decoder-only (GPT-style) language model: causal self-attention blocks, so the logits
    at position t depend only on ``ids[:, :t+1]``. Page: transformer.md.

    Parameters
    ----------
    config : LanguageModelConfig
    rng : np.random.Generator or int, optional

    Attributes
    ----------
    embed : Embedding
    blocks : Stack
        Encoder blocks (self-attention and feed-forward) used with a causal mask, with a final
        LayerNorm when pre-LN.
    out : TiedOutput or Linear
    pe : ndarray of shape (max_len, D)
    params, grads : NestedParams
        Keys such as ``"blocks.0.attn.W_q"``, ``"embed.W"``, ``"out.b"``.
    """

    check_init, check_call = check_language_model_init, check_language_model_call

    def __init__(self, config: LanguageModelConfig, rng=None):
        super().__init__()
        self.config = cfg = config
        rng = np.random.default_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.blocks = stack(EncoderBlock, cfg.n_layers, cfg, rng, dtype)
        self.out = output_layer(cfg, self.embed, cfg.vocab_size, rng, dtype)
        self.drop = Dropout(cfg.dropout, rng)
        self.pe = positional_encoding(cfg.max_len, cfg.d_model, dtype=dtype)
        self.add_children(embed=self.embed, blocks=self.blocks, out=self.out, drop=self.drop)

    def __repr__(self):
        return f"LanguageModel({self.config})"

    def decoder_parts(self):
        """The token embedding, the blocks and the output layer."""
        return self.embed, self.blocks, self.out

    # --8<-- [start:language_model_forward]
    def forward(self, ids, *, kv_cache=None):
        """Logits (B, T, V) for checked ``ids`` (B, T); with a ``kv_cache`` (one KVCache per block),
        ``ids`` holds only the new tokens, at the positions after those cached."""
        start = 0 if kv_cache is None else kv_cache[0].length
        x = self.embed_tokens(self.embed, self.drop, ids, start)  # (B, T) -> (B, T, D)
        mask = causal_mask(ids.shape[1]) if kv_cache is None else None  # a cache is causal
        h = self.blocks.forward(x, mask, kv_cache=kv_cache)  # (B, T, D)
        return self.out.forward(h)  # (B, T, D) -> (B, T, V)

    # --8<-- [end:language_model_forward]

    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``."""
        check_grad_logits(self, grad_logits)
        dh = self.out.backward(grad_logits)
        dx = self.blocks.backward(dh)
        self.embed.backward(self.drop.backward(dx))

    def new_cache(self, max_len):
        """One KVCache per block, for generation of at most ``max_len`` positions."""
        return [KVCache(max_len) for _ in self.blocks.layers]

    @property
    def attention_weights(self):
        """Self-attention weights of each block in the last call, (B, H, T, T) each."""
        return [layer.attention_weights for layer in self.blocks.layers]
