"""Stacks of blocks: the encoder (N encoder blocks) and the decoder (N decoder blocks).

With pre-LN (``norm_first``) each stack ends with one more LayerNorm: pre-LN blocks leave
their output un-normalised.
"""

from __future__ import annotations

from .blocks import DecoderBlock, EncoderBlock
from .layers import LayerNorm
from .module import Module

__all__ = ["Decoder", "Encoder"]


class Encoder(Module):
    """A stack of :class:`~transformer_np.EncoderBlock` (plus a final LayerNorm when pre-LN).

    Parameters
    ----------
    n_layers, d_model, n_heads, d_ff : int
    final_norm : bool
        Add a LayerNorm after the last layer (needed with pre-LN, whose layers leave their
        output un-normalised).
    block : type, default EncoderBlock
        The class of the layers (:class:`~transformer_np.llama.LlamaBlock` for a modern
        decoder-only model: the same block with other sublayers).
    norm : type, default LayerNorm
        The class of the final normalisation (:class:`~transformer_np.RMSNorm` for LLaMA).
    **kwargs
        ``norm_first``, ``activation``, ``eps``, ``dropout``, ``rng``, ``dtype`` for every layer
        (or the keyword arguments of ``block``).

    Attributes
    ----------
    layers : list of EncoderBlock
    norm : LayerNorm or None
    params, grads : NestedParams
        Keys ``"0.attn.W_q"``, ..., ``"norm.gamma"``.
    """

    def __init__(
        self, n_layers, d_model, n_heads, d_ff, *, final_norm, block=EncoderBlock,
        norm=LayerNorm, **kwargs
    ):  # fmt: skip
        super().__init__()
        self.layers = [block(d_model, n_heads, d_ff, **kwargs) for _ in range(n_layers)]
        self.add_children(**{str(i): layer for i, layer in enumerate(self.layers)})
        self.norm = norm(d_model, kwargs["eps"], dtype=kwargs["dtype"]) if final_norm else None
        if self.norm is not None:
            self.add_children(norm=self.norm)

    def forward(self, x, mask=None, *, kv_cache=None):
        """(B, S, D) -> (B, S, D); ``mask`` broadcastable to (B, H, S, S).

        ``kv_cache``: one :class:`~transformer_np.KVCache` per layer, while generating.
        """
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, kv_cache=None if kv_cache is None else kv_cache[i])
        return x if self.norm is None else self.norm(x)

    def backward(self, grad_output):
        g = grad_output if self.norm is None else self.norm.backward(grad_output)
        for layer in reversed(self.layers):
            g = layer.backward(g)
        return g


class Decoder(Module):
    """A stack of :class:`~transformer_np.DecoderBlock` (plus a final LayerNorm when pre-LN).

    Same parameters as :class:`Encoder`. ``backward`` returns ``(dx, dmemory)``, the memory
    gradient summed over the layers (every layer reads the same encoder output).
    """

    def __init__(self, n_layers, d_model, n_heads, d_ff, *, final_norm, **kwargs):
        super().__init__()
        self.layers = [DecoderBlock(d_model, n_heads, d_ff, **kwargs) for _ in range(n_layers)]
        self.add_children(**{str(i): layer for i, layer in enumerate(self.layers)})
        self.norm = LayerNorm(d_model, kwargs["eps"], dtype=kwargs["dtype"]) if final_norm else None
        if self.norm is not None:
            self.add_children(norm=self.norm)

    def forward(self, x, memory, self_mask=None, memory_mask=None, *, kv_cache=None):
        """(B, T, D), memory (B, S, D) -> (B, T, D).

        ``kv_cache``: one pair of :class:`~transformer_np.KVCache` (self-attention,
        cross-attention) per layer, while generating.
        """
        for i, layer in enumerate(self.layers):
            cache = None if kv_cache is None else kv_cache[i]
            x = layer(x, memory, self_mask, memory_mask, kv_cache=cache)
        return x if self.norm is None else self.norm(x)

    def backward(self, grad_output):
        g = grad_output if self.norm is None else self.norm.backward(grad_output)
        dmemory = None
        for layer in reversed(self.layers):
            g, dm = layer.backward(g)
            dmemory = dm if dmemory is None else dmemory + dm
        return g, dmemory
