"""transformer_np: the Transformer from scratch in NumPy.

The public API, re-exported from the modules that define it:

* :mod:`~transformer_np.tokenizer` -- ByteLevelBPE (text to token ids)
* :mod:`~transformer_np.module` -- Module, the base of every layer
* :mod:`~transformer_np.functional` -- softmax, log_softmax, relu, gelu, erf, layer_norm
* :mod:`~transformer_np.masks` -- causal_mask, padding_mask
* :mod:`~transformer_np.attention` -- attention_steps, scaled_dot_product_attention
* :mod:`~transformer_np.multi_head` -- MultiHeadAttention, split_heads, merge_heads, KVCache
* :mod:`~transformer_np.positional` -- positional_encoding, positional_offset_matrix
* :mod:`~transformer_np.layers` -- Linear, LayerNorm, Dropout
* :mod:`~transformer_np.feed_forward` -- FeedForward
* :mod:`~transformer_np.embedding` -- Embedding, TiedOutput
* :mod:`~transformer_np.blocks` -- EncoderBlock, DecoderBlock
* :mod:`~transformer_np.blockwise` -- blockwise_attention (memory-efficient, online softmax)
* :mod:`~transformer_np.config` -- TransformerConfig, LanguageModelConfig
* :mod:`~transformer_np.stacks` -- Stack
* :mod:`~transformer_np.rmsnorm` -- RMSNorm
* :mod:`~transformer_np.rope` -- rope_angles, apply_rope, apply_rope_backward (rotary positions)
* :mod:`~transformer_np.swiglu` -- SwiGLU, silu
* :mod:`~transformer_np.llama` -- LlamaBlock, LlamaModel (a modern decoder-only model)
* :mod:`~transformer_np.model` -- Transformer, LanguageModel
* :mod:`~transformer_np.lora` -- LoRALinear, add_lora, lora_params, merge_lora, unmerge_lora (LoRA)
* :mod:`~transformer_np.lora_files` -- save_lora, load_lora (LoRA adapters in PEFT's files)
* :mod:`~transformer_np.losses` -- cross_entropy, CrossEntropyLoss
* :mod:`~transformer_np.optim` -- Adam
* :mod:`~transformer_np.clipping` -- clip_grad_norm
* :mod:`~transformer_np.schedule` -- noam_lr, NoamSchedule
* :mod:`~transformer_np.train` -- train_step, fit, TrainingDiverged
* :mod:`~transformer_np.checkpoints` -- save_model, load_model
* :mod:`~transformer_np.decoding` -- generate, stream, translate
* :mod:`~transformer_np.beam` -- beam_search (with the key/value cache)
* :mod:`~transformer_np.sampling` -- sample_next (greedy, temperature, top-k)
* :mod:`~transformer_np.evaluation` -- perplexity, bits_per_byte

Loaders for real pretrained weights live in :mod:`transformer_np.pretrained` (extra dependencies).
"""

from .attention import attention_backward, attention_steps, scaled_dot_product_attention
from .beam import beam_search
from .blocks import DecoderBlock, EncoderBlock
from .blockwise import blockwise_attention
from .checkpoints import load_model, save_model
from .clipping import clip_grad_norm
from .config import LanguageModelConfig, LlamaConfig, TransformerConfig
from .decoding import generate, stream, translate
from .embedding import Embedding, TiedOutput
from .evaluation import bits_per_byte, perplexity
from .feed_forward import FeedForward
from .functional import erf, gelu, layer_norm, log_softmax, relu, softmax
from .layers import Dropout, LayerNorm, Linear
from .llama import LlamaBlock, LlamaModel
from .lora import LoRALinear, add_lora, lora_params, merge_lora, unmerge_lora
from .lora_files import load_lora, save_lora
from .losses import CrossEntropyLoss, cross_entropy
from .masks import causal_mask, padding_mask
from .model import LanguageModel, Transformer
from .module import Module, NotFiniteError
from .multi_head import KVCache, MultiHeadAttention, merge_heads, split_heads
from .optim import Adam
from .positional import positional_encoding, positional_offset_matrix
from .rmsnorm import RMSNorm
from .rope import apply_rope, apply_rope_backward, rope_angles, rope_frequencies, rotate_half
from .sampling import sample_next
from .schedule import NoamSchedule, noam_lr
from .stacks import Stack
from .swiglu import SwiGLU, silu
from .tokenizer import ByteLevelBPE
from .train import TrainingDiverged, fit, train_step

__version__ = "0.1.0"

__all__ = [
    "Adam",
    "ByteLevelBPE",
    "CrossEntropyLoss",
    "DecoderBlock",
    "Dropout",
    "KVCache",
    "Module",
    "NotFiniteError",
    "TiedOutput",
    "attention_backward",
    "attention_steps",
    "log_softmax",
    "merge_heads",
    "split_heads",
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
    "beam_search",
    "perplexity",
    "bits_per_byte",
    "stream",
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
    "LlamaBlock",
    "LlamaConfig",
    "LlamaModel",
    "LoRALinear",
    "add_lora",
    "load_lora",
    "lora_params",
    "merge_lora",
    "save_lora",
    "unmerge_lora",
    "RMSNorm",
    "Stack",
    "SwiGLU",
    "apply_rope",
    "apply_rope_backward",
    "rope_angles",
    "rope_frequencies",
    "rotate_half",
    "silu",
]
