"""A modern decoder-only language model (LLaMA, SmolLM2): the pre-LN block of GPT-2 with
RMSNorm, grouped-query attention with RoPE and no biases, and SwiGLU. Page: modern-block.md
(the block), finetuning.md (the backward).

Shape glossary: B batch, T positions, D = d_model, V vocabulary.
"""

from __future__ import annotations

import numpy as np

from ._checks.general import as_grad
from ._checks.models import check_llama_block_init, check_llama_call, check_llama_init
from .blocks import EncoderBlock
from .config import LlamaConfig
from .embedding import Embedding
from .masks import causal_mask
from .module import Module
from .multi_head import KVCache, MultiHeadAttention
from .rmsnorm import RMSNorm
from .stacks import Stack
from .swiglu import SwiGLU

__all__ = ["LlamaBlock", "LlamaModel"]


class LlamaBlock(EncoderBlock):
    """The pre-norm block of LLaMA: RMSNorm, grouped-query attention with RoPE, SwiGLU.

    An :class:`~transformer_np.EncoderBlock` with ``norm_first=True`` built with these parts: its
    ``forward`` and ``backward`` are the encoder block's. Page: modern-block.md.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
    n_kv_heads : int
        Key/value heads of the attention (dividing ``n_heads``).
    rope_base : float, default 10000.0
    eps : float, default 1e-5
        Epsilon of both RMSNorms.
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
    init : bool, default True
        False leaves the matrices at zero (for a loader that sets every one).

    Attributes
    ----------
    attn : MultiHeadAttention
        With ``n_kv_heads`` key/value heads, RoPE and no biases.
    norm1, norm2 : RMSNorm
    ff : SwiGLU
    """

    check_init = check_llama_block_init

    def __init__(self, d_model, n_heads, d_ff, *, n_kv_heads, rope_base=10000.0, eps=1e-5,
                 rng=None, dtype=np.float64, init=True):  # fmt: skip
        rng = np.random.default_rng(rng)
        attn = MultiHeadAttention(
            d_model, n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base, bias=False, rng=rng,
            dtype=dtype, init=init,
        )  # fmt: skip
        ff = SwiGLU(d_model, d_ff, rng=rng, dtype=dtype, init=init)
        super().__init__(
            d_model, n_heads, d_ff, norm_first=True, eps=eps, rng=rng, dtype=dtype, attn=attn,
            ff=ff, norm=RMSNorm,
        )  # fmt: skip

    def __repr__(self):
        a = self.attn
        return (
            f"LlamaBlock(d_model={self.d_model}, n_heads={self.n_heads}, "
            f"n_kv_heads={a.n_kv_heads}, d_ff={self.d_ff}, rope_base={a.rope_base:g}, "
            f"eps={self.norm1.eps:g})"
        )


class LlamaModel(Module):
    """A decoder-only language model with LLaMA blocks and tied embeddings; no positions are
    added to the embeddings (RoPE turns the queries and keys). Page: modern-block.md.

    Parameters
    ----------
    config : LlamaConfig
    rng : np.random.Generator or int, optional
        Source of the random initial weights.
    init : bool, default True
        False builds zero matrices and unit gains without drawing random numbers, for a loader
        that sets every weight (about 5 s saved for SmolLM2-135M).

    Attributes
    ----------
    embed : Embedding
        The token table E (V, D), not scaled by sqrt(D); also the output layer.
    blocks : Stack
        ``config.n_layers`` :class:`LlamaBlock`, then a final RMSNorm (``blocks.norm``).
    params, grads : NestedParams
        Keys ``embed.W``, ``blocks.0.attn.W_q``, ..., ``blocks.norm.gamma``; ``grads`` after
        :meth:`backward`.
    """

    check_init, check_call = check_llama_init, check_llama_call
    # what max_len is, and what to do about a longer sequence (for the error message)
    context_limit = (
        "the context the model was trained for",
        "shorten the prompt (keep its last max_len tokens)",
    )

    def __init__(self, config: LlamaConfig, rng=None, *, init=True):
        super().__init__()
        self.config = cfg = config
        rng = np.random.default_rng(rng)
        dtype = np.dtype(cfg.dtype)
        self.embed = Embedding(
            cfg.vocab_size, cfg.d_model, scale=False, rng=rng, dtype=dtype, init=init
        )
        layers = [
            LlamaBlock(
                cfg.d_model,
                cfg.n_heads,
                cfg.d_ff,
                n_kv_heads=cfg.n_kv_heads,
                rope_base=cfg.rope_base,
                eps=cfg.eps,
                rng=rng,
                dtype=dtype,
                init=init,
            )  # fmt: skip
            for _ in range(cfg.n_layers)
        ]
        self.blocks = Stack(layers, RMSNorm(cfg.d_model, cfg.eps, dtype=dtype))
        self.add_children(embed=self.embed, blocks=self.blocks)

    def __repr__(self):
        return f"LlamaModel({self.config})"

    def new_cache(self, max_len):
        """One KVCache per block, for generation of at most ``max_len`` positions."""
        return [KVCache(max_len) for _ in self.blocks.layers]

    # --8<-- [start:llama_forward]
    def forward(self, ids, *, kv_cache=None):
        """Logits (B, T, V) for ``ids`` (B, T); with a ``kv_cache``, the new ids only."""
        x = self.embed.forward(ids)  # (B, T) -> (B, T, D): no positional table
        mask = causal_mask(ids.shape[1]) if kv_cache is None else None  # a cache is causal
        h = self.blocks.forward(x, mask, kv_cache=kv_cache)  # (B, T, D), after the final RMSNorm
        self.cache = {"h": h}  # the output layer's input, for backward
        return self.embed.attend(h)  # (B, T, D) @ (D, V): tied, the embedding's own matrix

    # --8<-- [end:llama_forward]

    # --8<-- [start:llama_backward]
    def backward(self, grad_logits):
        """Backpropagate ``dL/dlogits`` (B, T, V) through the last call; fills ``grads``.
        ``grads["embed.W"]`` sums the lookup's and the output layer's shares (none if frozen)."""
        h = self.saved()["h"]  # (B, T, D)
        V, D = self.embed.vocab_size, self.embed.d_model
        g = as_grad(grad_logits, h.shape[:-1] + (V,), h.dtype, "grad_logits")
        g2, E = g.reshape(-1, V), self.embed.params["W"]  # (N, V), (V, D)
        # 3. the output layer, logits = h E^T: its share of dL/dE, and dL/dh
        if self.embed.trainable:
            dE = g2.T @ h.reshape(-1, D)  # (V, N) @ (N, D) -> (V, D)
            self.embed.set_grad_share("output", dE.astype(E.dtype, copy=False))
        dh = (g2 @ E.astype(g.dtype, copy=False)).reshape(h.shape)  # (N, V) @ (V, D)
        # 2. the blocks and the final RMSNorm
        dx = self.blocks.backward(dh)  # (B, T, D)
        if self.embed.trainable:  # 1. the lookup: its share of dL/dE, added to the output's
            self.embed.backward(dx)

    # --8<-- [end:llama_backward]
