r"""The models: the encoder-decoder ``Transformer`` and the decoder-only ``LanguageModel``,
each with a backward pass.

Shape glossary: B batch, S source positions, T target positions, D = d_model, H heads,
V vocabulary size.

A model is a :class:`~transformer_np.module.Module` whose ``params`` and ``grads`` are live
flat views with dotted names (``"encoder.0.attn.W_q"``), ready for
:class:`~transformer_np.optim.Adam`. Calling a model checks the token ids once; the blocks
(:mod:`transformer_np.blocks`) and layers below it run without checks.
"""

from __future__ import annotations

import numpy as np

from ._validation import (
    as_typed_array,
    check_broadcastable,
    check_finite,
    check_ids,
    check_memory,
    check_rng,
    shape_str,
)
from .attention import as_bool_mask
from .config import LanguageModelConfig, TransformerConfig
from .embedding import Embedding, TiedOutput
from .layers import Dropout, Linear
from .masks import causal_mask
from .module import Module, as_grad, running
from .positional import positional_encoding
from .stacks import Decoder, Encoder

__all__ = ["LanguageModel", "Transformer"]


# --------------------------------------------------------------------------------------------
# what both models share
# --------------------------------------------------------------------------------------------


def block_kwargs(cfg, rng, dtype):
    """The keyword arguments every block of a model built from ``cfg`` gets."""
    return {
        "norm_first": cfg.norm_first,
        "activation": cfg.activation,
        "eps": cfg.eps,
        "dropout": cfg.dropout,
        "rng": rng,
        "dtype": dtype,
    }


def check_grad_logits(model, grad_logits):
    """A model's ``backward`` input: after a forward pass, a finite float array.

    The output layer checks the shape; this adds what a layer does not check (every layer
    passes its gradient on, so a NaN here would silently become NaN in every gradient).
    """
    out = model.out
    if out.cache is None:
        raise RuntimeError(
            f"{type(model).__name__}.backward was called before a forward pass (no cache)"
        )
    vocab = out.embedding.vocab_size if isinstance(out, TiedOutput) else out.d_out
    g = np.asarray(grad_logits)
    g = as_grad(g, out.cache["shape"][:-1] + (vocab,), g.dtype, "grad_logits")
    check_finite(g, "grad_logits")


def output_layer(cfg, embedding, vocab_size, rng, dtype):
    """The projection to the vocabulary: the embedding's own matrix when tied."""
    if cfg.tie_embeddings:
        return TiedOutput(embedding)
    return Linear(cfg.d_model, vocab_size, rng=rng, dtype=dtype)


class ModelBase(Module):
    """Loading parameters, and the embedding of tokens with their positions."""

    def parameters(self):
        """Live dict-like view ``name -> ndarray`` of every parameter (updated in place)."""
        return self.params

    # --8<-- [start:embed_tokens]
    def embed_tokens(self, embedding, drop, ids, start=0):
        """sqrt(D) E[ids] + PE[start : start + T], then dropout: (B, T) -> (B, T, D)."""
        T = ids.shape[1]
        x = embedding(ids)  # (B, T) -> (B, T, D), scaled by sqrt(D)
        x = x + self.pe[start : start + T]  # add the positions, (T, D) broadcast over B
        return drop(x)

    # --8<-- [end:embed_tokens]

    def load_parameters(self, params):
        """Copy arrays (same names and shapes as :meth:`parameters`) into the model.

        Every array is checked (names, shapes, real numbers, all finite) before any is copied:
        on an error the model is left as it was.
        """
        mine = self.params
        if not hasattr(params, "keys"):
            raise TypeError(
                f"params must be a mapping of names to arrays, got {type(params).__name__}"
            )
        missing = sorted(set(mine) - set(params))
        extra = sorted(set(params) - set(mine))
        if missing or extra:
            raise ValueError(f"parameter names do not match: missing {missing}, unexpected {extra}")
        checked = {}
        for k in mine:
            value = as_typed_array(params[k], f"parameter {k!r}", "fiu", "an array of real numbers")
            if mine[k].shape != value.shape:
                raise ValueError(
                    f"parameter {k!r} must have shape {mine[k].shape}, got {value.shape}"
                )
            if not np.isfinite(value).all():
                raise ValueError(f"parameter {k!r} contains NaN or inf")
            checked[k] = value
        for k, value in checked.items():
            mine[k][...] = value


# --------------------------------------------------------------------------------------------
# the models
# --------------------------------------------------------------------------------------------


class Transformer(ModelBase):
    r"""The encoder-decoder Transformer of "Attention Is All You Need", with backpropagation.

    Parameters
    ----------
    config : TransformerConfig
    rng : np.random.Generator or int, optional
        Initial weights and dropout masks.

    Attributes
    ----------
    src_embed, tgt_embed : Embedding
    encoder : Encoder
    decoder : Decoder
    out : Linear or TiedOutput
        Projection to the target vocabulary.
    pe : ndarray of shape (max_len, D)
        The sinusoidal positional table (fixed, not a parameter).
    params, grads : NestedParams
        Keys such as ``"encoder.0.attn.W_q"``, ``"decoder.1.cross_attn.W_k"``, ``"out.W"``.

    Notes
    -----
    .. math::
        m &= \mathrm{Encoder}(\sqrt{D}\, E_{src}[x] + PE) \\
        \mathrm{logits} &= \mathrm{Decoder}(\sqrt{D}\, E_{tgt}[y_{<t}] + PE,\ m)\, W_{out} + b

    Masks: the source padding is a blocked key for the encoder and for the cross-attention;
    the decoder's self-attention is causal and also blocks target padding.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import Transformer, TransformerConfig
    >>> cfg = TransformerConfig(src_vocab_size=11, tgt_vocab_size=12, d_model=16, n_heads=2)
    >>> model = Transformer(cfg, rng=0)
    >>> src = np.array([[3, 4, 5, 0], [6, 7, 8, 9]])  # 0 is padding
    >>> tgt_in = np.array([[1, 5, 4, 3], [1, 9, 8, 7]])
    >>> logits = model(src, tgt_in)
    >>> logits.shape
    (2, 4, 12)
    >>> model.backward(np.ones_like(logits))
    >>> model.gradients()["encoder.0.attn.W_q"].shape
    (16, 16)
    """

    def __init__(self, config: TransformerConfig, rng=None):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = cfg = config
        rng = check_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.src_embed = Embedding(cfg.src_vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        kw = block_kwargs(cfg, rng, dtype)
        size = (cfg.d_model, cfg.n_heads, cfg.d_ff)
        self.encoder = Encoder(cfg.n_encoder_layers, *size, final_norm=cfg.norm_first, **kw)
        self.decoder = Decoder(cfg.n_decoder_layers, *size, final_norm=cfg.norm_first, **kw)
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
        cfg = self.config
        src = check_ids(src, "src", cfg.src_vocab_size, cfg.max_len)
        with running():
            return self.run_or_blame(self.forward_encoder, src)

    def decode(self, tgt, memory, src_mask=None):
        """Logits (B, T, V) of the next token at each target position, given the memory."""
        cfg = self.config
        tgt = check_ids(tgt, "tgt", cfg.tgt_vocab_size, cfg.max_len)
        memory = check_memory(memory, tgt.shape[0], cfg.d_model)
        if src_mask is not None:
            B, T, S = tgt.shape[0], tgt.shape[1], memory.shape[1]
            src_mask = as_bool_mask(src_mask)
            scores = (B, cfg.n_heads, T, S)
            check_broadcastable(src_mask.shape, scores, "src_mask", "the scores (B, H, T, S) =")
        with running():
            return self.run_or_blame(self.forward_decoder, tgt, memory, src_mask)

    def checked_call(self, src, tgt):
        """Teacher-forced forward pass.

        Parameters
        ----------
        src : ndarray of int, shape (B, S)
            Source token ids (padding = ``config.pad_id``).
        tgt : ndarray of int, shape (B, T)
            Decoder input: the target shifted right (it starts with a BOS token).

        Returns
        -------
        ndarray of shape (B, T, V)
            Logits of the next target token at each position.
        """
        cfg = self.config
        src = check_ids(src, "src", cfg.src_vocab_size, cfg.max_len)
        tgt = check_ids(tgt, "tgt", cfg.tgt_vocab_size, cfg.max_len)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src and tgt must have the same batch size, got src {shape_str(src.shape)} "
                f"and tgt {shape_str(tgt.shape)}"
            )
        return self.run_or_blame(self.forward, src, tgt)

    # --8<-- [start:transformer_forward]
    def forward(self, src, tgt):
        """Logits (B, T, V) of the next target token at each position, for checked ids."""
        memory = self.forward_encoder(src)  # (B, S) -> (B, S, D)
        return self.forward_decoder(tgt, memory, self.source_mask(src))  # -> (B, T, V)

    def forward_encoder(self, src):
        """The encoder on checked ids: (B, S) -> memory (B, S, D)."""
        x = self.embed_tokens(self.src_embed, self.src_drop, src)  # (B, S) -> (B, S, D)
        return self.encoder(x, self.source_mask(src))  # (B, S, D)

    def forward_decoder(self, tgt, memory, src_mask, *, kv_cache=None):
        """The decoder and the output layer on checked input: (B, T) -> logits (B, T, V).

        With a ``kv_cache`` (one pair of KVCache per decoder layer), ``tgt`` holds only the
        new tokens, at the positions after those already cached.
        """
        start = 0 if kv_cache is None else kv_cache[0][0].length
        y = self.embed_tokens(self.tgt_embed, self.tgt_drop, tgt, start)  # (B, T) -> (B, T, D)
        self_mask = self.target_mask(tgt) if kv_cache is None else None  # a cache is causal
        h = self.decoder(y, memory, self_mask, src_mask, kv_cache=kv_cache)  # (B, T, D)
        return self.out(h)  # (B, T, D) -> (B, T, V)

    # --8<-- [end:transformer_forward]

    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``."""
        check_grad_logits(self, grad_logits)
        dh = self.out.backward(grad_logits)  # (B, T, V) -> (B, T, D)
        dy, dmemory = self.decoder.backward(dh)
        self.tgt_embed.backward(self.tgt_drop.backward(dy))
        if isinstance(self.out, TiedOutput):
            self.tgt_embed.grads["W"] += self.out.dW
        dx = self.encoder.backward(dmemory)
        self.src_embed.backward(self.src_drop.backward(dx))

    @property
    def attention_weights(self):
        """Cross-attention weights of each decoder layer in the last call, (B, H, T, S) each."""
        return [layer.cross_attention_weights for layer in self.decoder.layers]


class LanguageModel(ModelBase):
    r"""A decoder-only (GPT-style) language model: causal self-attention blocks.

    Parameters
    ----------
    config : LanguageModelConfig
    rng : np.random.Generator or int, optional

    Attributes
    ----------
    embed : Embedding
    blocks : Encoder
        The stack of causal blocks: encoder blocks (self-attention and feed-forward, nothing
        to cross-attend to) used with a causal mask, with a final LayerNorm when pre-LN.
    out : TiedOutput or Linear
    pe : ndarray of shape (max_len, D)
    params, grads : NestedParams
        Keys such as ``"blocks.0.attn.W_q"``, ``"embed.W"``, ``"out.b"``.

    Notes
    -----
    .. math:: \mathrm{logits} = \mathrm{Blocks}(\sqrt{D}\,E[x] + PE;\ M_{\text{causal}})\,E^\top + b

    (with tied embeddings). The logits at position ``t`` depend only on ``x[:t+1]``.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import LanguageModel, LanguageModelConfig
    >>> model = LanguageModel(LanguageModelConfig(vocab_size=20, d_model=16, n_heads=2), rng=0)
    >>> logits = model(np.array([[1, 2, 3, 4, 5]]))
    >>> logits.shape
    (1, 5, 20)
    """

    def __init__(self, config: LanguageModelConfig, rng=None):
        super().__init__()
        if not isinstance(config, LanguageModelConfig):
            raise TypeError(f"config must be a LanguageModelConfig, got {type(config).__name__}")
        self.config = cfg = config
        rng = check_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, rng=rng, dtype=dtype)
        self.blocks = Encoder(
            cfg.n_layers,
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            final_norm=cfg.norm_first,
            **block_kwargs(cfg, rng, dtype),
        )
        self.out = output_layer(cfg, self.embed, cfg.vocab_size, rng, dtype)
        self.drop = Dropout(cfg.dropout, rng)
        self.pe = positional_encoding(cfg.max_len, cfg.d_model, dtype=dtype)
        self.add_children(embed=self.embed, blocks=self.blocks, out=self.out, drop=self.drop)

    def __repr__(self):
        return f"LanguageModel({self.config})"

    def checked_call(self, ids):
        """Logits (B, T, V) of the next token at every position of ``ids`` (B, T)."""
        cfg = self.config
        ids = check_ids(ids, "ids", cfg.vocab_size, cfg.max_len)
        return self.run_or_blame(self.forward, ids)

    # --8<-- [start:language_model_forward]
    def forward(self, ids, *, kv_cache=None):
        """Logits (B, T, V) for checked ``ids`` (B, T).

        With a ``kv_cache`` (one KVCache per block), ``ids`` holds only the new tokens, at
        the positions after those already cached: each step computes T new positions only.
        """
        start = 0 if kv_cache is None else kv_cache[0].length
        x = self.embed_tokens(self.embed, self.drop, ids, start)  # (B, T) -> (B, T, D)
        mask = causal_mask(ids.shape[1]) if kv_cache is None else None  # a cache is causal
        h = self.blocks(x, mask, kv_cache=kv_cache)  # (B, T, D)
        return self.out(h)  # (B, T, D) -> (B, T, V)

    # --8<-- [end:language_model_forward]

    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``."""
        check_grad_logits(self, grad_logits)
        dh = self.out.backward(grad_logits)
        dx = self.blocks.backward(dh)
        self.embed.backward(self.drop.backward(dx))
        if isinstance(self.out, TiedOutput):
            self.embed.grads["W"] += self.out.dW

    @property
    def attention_weights(self):
        """Self-attention weights of each block in the last call, (B, H, T, T) each."""
        return [layer.attention_weights for layer in self.blocks.layers]
