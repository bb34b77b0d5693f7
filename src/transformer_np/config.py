"""The configurations of the two models, as frozen dataclasses that check their fields.

Each field carries a comment with its meaning and the paper's value; ``__post_init__`` checks
every field with a message that names it, the value and what was expected. Checkpoints store
a configuration as JSON (:meth:`JsonConfig.to_json`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

import numpy as np

__all__ = ["LanguageModelConfig", "LlamaConfig", "TransformerConfig"]


def check_field(cls_name, name, value, kind, lo=None, hi=None, hi_open=False):
    """Raise a TypeError or ValueError unless ``value`` is of ``kind`` and in [lo, hi]."""
    if kind is int:
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        what = "an integer"
    elif kind is bool:
        ok = isinstance(value, bool | np.bool_)
        what = "True or False"
    else:
        ok = isinstance(value, int | float | np.floating | np.integer) and not isinstance(
            value, bool
        )
        what = "a number"
    if not ok:
        raise TypeError(f"{cls_name}.{name} must be {what}, got {value!r}")
    if kind is float and not np.isfinite(value):
        raise ValueError(f"{cls_name}.{name} must be a finite number, got {value}")
    if lo is not None and value < lo:
        raise ValueError(f"{cls_name}.{name} must be >= {lo}, got {value}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        bound = f"< {hi}" if hi_open else f"<= {hi}"
        raise ValueError(f"{cls_name}.{name} must be {bound}, got {value}")


def check_common_fields(cfg):
    """The fields both model configurations share; fills in ``d_ff = 4 d_model`` for 0."""
    name = type(cfg).__name__
    check_field(name, "d_model", cfg.d_model, int, 2)
    if cfg.d_ff == 0:  # the default: 4 d_model
        object.__setattr__(cfg, "d_ff", 4 * cfg.d_model)
    check_field(name, "n_heads", cfg.n_heads, int, 1)
    if cfg.d_model % cfg.n_heads:
        raise ValueError(
            f"{name}.d_model must be divisible by n_heads, got d_model = {cfg.d_model} and "
            f"n_heads = {cfg.n_heads}"
        )
    if cfg.d_model % 2:
        raise ValueError(
            f"{name}.d_model must be even (sinusoidal positions come in sin/cos pairs), "
            f"got {cfg.d_model}"
        )
    check_field(name, "d_ff", cfg.d_ff, int, 1)
    check_field(name, "max_len", cfg.max_len, int, 1)
    check_field(name, "norm_first", cfg.norm_first, bool)
    if cfg.activation not in ("relu", "gelu"):
        raise ValueError(f'{name}.activation must be "relu" or "gelu", got {cfg.activation!r}')
    check_field(name, "dropout", cfg.dropout, float, 0.0, 1.0, hi_open=True)
    check_field(name, "tie_embeddings", cfg.tie_embeddings, bool)
    check_field(name, "eps", cfg.eps, float)
    if not cfg.eps > 0:
        raise ValueError(f"{name}.eps must be > 0, got {cfg.eps}")
    if cfg.dtype not in ("float32", "float64"):
        raise ValueError(f'{name}.dtype must be "float32" or "float64", got {cfg.dtype!r}')


class JsonConfig:
    """Saving a configuration as JSON and reading it back (what checkpoints store)."""

    def to_json(self) -> str:
        """The configuration as a JSON string (what checkpoints store)."""
        return json.dumps({"type": type(self).__name__, **asdict(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        """Rebuild a configuration from :meth:`to_json`'s output."""
        if not isinstance(text, str | bytes):
            raise TypeError(f"text must be a JSON string, got {type(text).__name__}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"text is not valid JSON for a {cls.__name__}: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"text must describe a JSON object (the fields of a {cls.__name__}), "
                f"got a JSON {type(data).__name__}"
            )
        kind = data.pop("type", cls.__name__)
        if kind != cls.__name__:
            raise ValueError(f"this JSON describes a {kind}, not a {cls.__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields in JSON: {unknown}")
        return cls(**data)


@dataclass(frozen=True)
class TransformerConfig(JsonConfig):
    """Hyper-parameters of the encoder-decoder :class:`Transformer`.

    Examples
    --------
    >>> cfg = TransformerConfig(src_vocab_size=13, tgt_vocab_size=13, d_model=32, n_heads=4)
    >>> cfg.d_ff, cfg.norm_first
    (128, False)
    """

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
        name = type(self).__name__
        check_field(name, "src_vocab_size", self.src_vocab_size, int, 1)
        check_field(name, "tgt_vocab_size", self.tgt_vocab_size, int, 1)
        check_field(name, "n_encoder_layers", self.n_encoder_layers, int, 1)
        check_field(name, "n_decoder_layers", self.n_decoder_layers, int, 1)
        check_common_fields(self)
        if self.pad_id is not None:
            check_field(name, "pad_id", self.pad_id, int, 0)
            if self.pad_id >= min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(
                    f"{name}.pad_id must be a valid id of both vocabularies "
                    f"(< {min(self.src_vocab_size, self.tgt_vocab_size)}), got {self.pad_id}"
                )


@dataclass(frozen=True)
class LanguageModelConfig(JsonConfig):
    """Hyper-parameters of the decoder-only :class:`LanguageModel`.

    Examples
    --------
    >>> cfg = LanguageModelConfig(vocab_size=50, n_layers=3)
    >>> cfg.d_ff, cfg.norm_first
    (256, True)
    """

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
        name = type(self).__name__
        check_field(name, "vocab_size", self.vocab_size, int, 1)
        check_field(name, "n_layers", self.n_layers, int, 1)
        check_common_fields(self)


@dataclass(frozen=True)
class LlamaConfig(JsonConfig):
    """Hyper-parameters of the modern decoder-only :class:`~transformer_np.llama.LlamaModel`.

    The defaults are those of SmolLM2-135M (read from its GGUF file by
    :func:`transformer_np.pretrained.load_smollm2`).

    Examples
    --------
    >>> cfg = LlamaConfig(vocab_size=100, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    >>> cfg.d_model // cfg.n_heads, cfg.n_heads // cfg.n_kv_heads
    (8, 2)
    """

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

    def __post_init__(self):
        name = type(self).__name__
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            check_field(name, field, getattr(self, field), int, 1)
        check_field(name, "max_len", self.max_len, int, 1)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"{name}.d_model must split into n_heads heads of even size, got d_model = "
                f"{self.d_model} and n_heads = {self.n_heads}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"{name}.n_kv_heads must divide n_heads, got n_heads = {self.n_heads} and "
                f"n_kv_heads = {self.n_kv_heads}"
            )
        check_field(name, "rope_base", self.rope_base, float)
        check_field(name, "eps", self.eps, float)
        for field in ("rope_base", "eps"):
            if not getattr(self, field) > 0:
                raise ValueError(f"{name}.{field} must be > 0, got {getattr(self, field)}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f'{name}.dtype must be "float32" or "float64", got {self.dtype!r}')
