"""A stack of blocks: the encoder, the decoder, and the body of every decoder-only model.

Pages: transformer.md (forward), backprop.md (backward).
"""

from __future__ import annotations

from .module import Module

__all__ = ["Stack"]


class Stack(Module):
    """Blocks applied in order, then an optional final normalisation.

    Parameters
    ----------
    layers : list of Module
        The blocks (EncoderBlock, DecoderBlock, or the LLaMA block).
    norm : Module, optional
        The final normalisation (LayerNorm, RMSNorm), for pre-LN blocks.

    Attributes
    ----------
    layers : list of Module
    norm : Module or None
    params, grads : NestedParams
        Keys ``"0.attn.W_q"``, ..., ``"norm.gamma"``.
    """

    # --8<-- [start:stack_init]
    def __init__(self, layers, norm=None):
        super().__init__()
        self.layers = list(layers)
        self.norm = norm
        self.add_children(**{str(i): layer for i, layer in enumerate(self.layers)})
        if norm is not None:
            self.add_children(norm=norm)
        # --8<-- [end:stack_init]

    def __repr__(self):
        norm = "" if self.norm is None else f", norm={type(self.norm).__name__}"
        return f"Stack({len(self.layers)} x {type(self.layers[0]).__name__}{norm})"

    # --8<-- [start:stack_forward]
    def forward(self, x, *context, kv_cache=None, **kwargs):
        """x (B, T, D) -> (B, T, D); ``context`` (a decoder's memory and masks) goes to every
        block, and ``kv_cache`` holds one cache per block while generating."""
        for i, layer in enumerate(self.layers):
            cache = None if kv_cache is None else kv_cache[i]
            x = layer.forward(x, *context, kv_cache=cache, **kwargs)
        return x if self.norm is None else self.norm.forward(x)
        # --8<-- [end:stack_forward]

    # --8<-- [start:stack_backward]
    def backward(self, grad_output):
        """dL/dy -> dL/dx; for decoder blocks ``(dL/dx, dL/dmemory)``, the memory's gradient
        summed over the blocks (every block reads the same encoder output)."""
        g = grad_output if self.norm is None else self.norm.backward(grad_output)
        dmemory = None
        for layer in reversed(self.layers):
            g = layer.backward(g)
            if isinstance(g, tuple):  # a decoder block: (dx, dmemory)
                g, dm = g
                dmemory = dm if dmemory is None else dmemory + dm
        return g if dmemory is None else (g, dmemory)
        # --8<-- [end:stack_backward]
