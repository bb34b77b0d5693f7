"""transformer_np: the Transformer from scratch in NumPy.

The public API, re-exported from the modules that define it:

* :mod:`~transformer_np.functional` -- softmax, relu, gelu, erf, causal_mask, padding_mask,
  layer_norm
* :mod:`~transformer_np.attention` -- scaled_dot_product_attention, MultiHeadAttention
* :mod:`~transformer_np.positional` -- positional_encoding, positional_offset_matrix
* :mod:`~transformer_np.layers` -- Linear, LayerNorm, FeedForward, Embedding
* :mod:`~transformer_np.blocks` -- EncoderBlock
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .blocks import EncoderBlock
from .blockwise import blockwise_attention
from .functional import causal_mask, erf, gelu, layer_norm, padding_mask, relu, softmax
from .layers import Embedding, FeedForward, LayerNorm, Linear
from .positional import positional_encoding, positional_offset_matrix

__version__ = "0.1.0"

__all__ = [
    "Embedding",
    "EncoderBlock",
    "FeedForward",
    "LayerNorm",
    "Linear",
    "MultiHeadAttention",
    "blockwise_attention",
    "causal_mask",
    "erf",
    "gelu",
    "layer_norm",
    "padding_mask",
    "positional_encoding",
    "positional_offset_matrix",
    "relu",
    "scaled_dot_product_attention",
    "softmax",
]
