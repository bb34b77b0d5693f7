"""The configurations of the models, as frozen dataclasses.

Each field carries a comment with its meaning and the paper's value; a configuration is
checked when it is made (the checks name the field, the value and what was expected).
Checkpoints store a configuration as JSON (:meth:`JsonConfig.to_json`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ._checks.config import (
    check_json_text,
    check_language_model_config,
    check_llama_config,
    check_transformer_config,
)

__all__ = ["LanguageModelConfig", "LlamaConfig", "TransformerConfig"]


class JsonConfig:
    """Saving a configuration as JSON and reading it back (what checkpoints store)."""

    def to_json(self) -> str:
        """The configuration as a JSON string (what checkpoints store)."""
        return json.dumps({"type": type(self).__name__, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        """Rebuild a configuration from :meth:`to_json`'s output."""
        data = check_json_text(cls, text)
        return cls(**data)


@dataclass(frozen=True)
class TransformerConfig(JsonConfig):
    """Hyper-parameters of the encoder-decoder :class:`Transformer`. Page: transformer.md."""

    src_vocab_size: int  # tokens the encoder reads, pad_id included
    tgt_vocab_size: int  # tokens the decoder reads and predicts
    d_model: int = 64  # model width D; the paper's base model has 512
    n_heads: int = 4  # must divide d_model; head size d_model / n_heads
    d_ff: int = 0  # hidden width of the feed-forward network; 0 means 4 * d_model (the paper)
    n_encoder_layers: int = 2  # the paper stacks 6
    n_decoder_layers: int = 2  # the paper stacks 6
    max_len: int = 128  # rows of the positional table: the longest sequence accepted
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN (trains more easily)
    activation: str = "relu"  # feed-forward activation: "relu" (the paper) or "gelu"
    dropout: float = 0.0  # residual and embedding dropout (the paper: 0.1); 0 = off
    tie_embeddings: bool = False  # output projection = transposed decoder embedding (sec. 3.4)
    pad_id: int | None = 0  # id of padding in src and tgt, masked as a key; None: no padding
    eps: float = 1e-5  # layer-norm epsilon
    dtype: str = "float32"  # "float32" (fast) or "float64" (gradient checks)

    def __post_init__(self):
        check_transformer_config(self)
        if self.d_ff == 0:  # the default: 4 d_model, as in the paper
            object.__setattr__(self, "d_ff", 4 * self.d_model)


@dataclass(frozen=True)
class LanguageModelConfig(JsonConfig):
    """Hyper-parameters of the decoder-only :class:`LanguageModel`. Page: transformer.md."""

    vocab_size: int  # number of token ids V
    d_model: int = 64  # model width D
    n_heads: int = 4  # must divide d_model
    d_ff: int = 0  # feed-forward hidden width; 0 means 4 * d_model
    n_layers: int = 2  # number of (causal self-attention + feed-forward) blocks
    max_len: int = 128  # longest context: rows of the positional table
    norm_first: bool = True  # pre-LN (GPT-2) by default: it trains without warm-up tricks
    activation: str = "gelu"  # "gelu" (GPT-2) or "relu"
    dropout: float = 0.0  # residual and embedding dropout; 0 = off
    tie_embeddings: bool = True  # output projection = transposed embedding (GPT-2 and the paper)
    eps: float = 1e-5  # layer-norm epsilon
    dtype: str = "float32"  # "float32" or "float64"

    def __post_init__(self):
        check_language_model_config(self)
        if self.d_ff == 0:  # the default: 4 d_model
            object.__setattr__(self, "d_ff", 4 * self.d_model)


@dataclass(frozen=True)
class LlamaConfig(JsonConfig):
    """Hyper-parameters of the modern decoder-only :class:`~transformer_np.llama.LlamaModel`; the
    defaults are SmolLM2-135M's. Page: modern-block.md."""

    vocab_size: int = 49152  # V: token ids (byte-level BPE)
    d_model: int = 576  # D: width of the residual stream
    n_layers: int = 30  # decoder blocks
    n_heads: int = 9  # query heads H; head size Dh = D / H = 64 (even: RoPE rotates pairs)
    n_kv_heads: int = 3  # key/value heads, each shared by H / n_kv_heads query heads
    d_ff: int = 1536  # SwiGLU hidden width (three D x d_ff matrices)
    max_len: int = 8192  # the context length the model was trained for
    rope_base: float = 100000.0  # theta of the rotary frequencies theta^(-2i/Dh)
    eps: float = 1e-5  # RMSNorm epsilon
    dtype: str = "float32"  # "float32" or "float64"
    eos_id: int | None = None  # the end token beam search stops at unless told another (None:
    # none); load_smollm2 sets SmolLM2's <|im_end|> = 2, from its file

    def __post_init__(self):
        check_llama_config(self)
