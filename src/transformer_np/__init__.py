"""transformer_np: the Transformer from scratch in NumPy.

The public API, re-exported from the modules that define it:

* :mod:`~transformer_np.functional` -- softmax, relu, gelu, erf, causal_mask, padding_mask,
  layer_norm
* :mod:`~transformer_np.attention` -- scaled_dot_product_attention, MultiHeadAttention
* :mod:`~transformer_np.positional` -- positional_encoding, positional_offset_matrix
* :mod:`~transformer_np.layers` -- Linear, LayerNorm, FeedForward, Embedding
* :mod:`~transformer_np.blocks` -- EncoderBlock
* :mod:`~transformer_np.blockwise` -- blockwise_attention (memory-efficient, online softmax)
* :mod:`~transformer_np.model` -- Transformer, LanguageModel and their configs, DecoderBlock
* :mod:`~transformer_np.losses` -- cross_entropy, CrossEntropyLoss
* :mod:`~transformer_np.optim` -- Adam, NoamSchedule, noam_lr, clip_grad_norm
* :mod:`~transformer_np.train` -- train_step, fit, save_model, load_model
* :mod:`~transformer_np.decoding` -- generate, translate, sample_next

Loaders for real pretrained weights live in :mod:`transformer_np.pretrained` (extra dependencies).
"""

from .attention import MultiHeadAttention, scaled_dot_product_attention
from .blocks import EncoderBlock
from .blockwise import blockwise_attention
from .decoding import generate, sample_next, translate
from .functional import causal_mask, erf, gelu, layer_norm, padding_mask, relu, softmax
from .layers import Embedding, FeedForward, LayerNorm, Linear
from .losses import CrossEntropyLoss, cross_entropy
from .model import (
    DecoderBlock,
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)
from .optim import Adam, NoamSchedule, clip_grad_norm, noam_lr
from .positional import positional_encoding, positional_offset_matrix
from .train import TrainingDiverged, fit, load_model, save_model, train_step

__version__ = "0.1.0"

__all__ = [
    "Adam",
    "CrossEntropyLoss",
    "DecoderBlock",
    "LanguageModel",
    "LanguageModelConfig",
    "NoamSchedule",
    "TrainingDiverged",
    "Transformer",
    "TransformerConfig",
    "clip_grad_norm",
    "cross_entropy",
    "fit",
    "generate",
    "load_model",
    "noam_lr",
    "sample_next",
    "save_model",
    "train_step",
    "translate",
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
