"""all-MiniLM-L6-v2's configuration, and where each tensor of its checkpoint goes in our layers.

:class:`MiniLMConfig` holds the sizes of a BERT-style sentence encoder, read from the
``config.json`` of the model files (and ``sentence_bert_config.json`` for the truncation
length). :func:`weight_map` says, for every tensor of the checkpoint, which layer and parameter
of :class:`~transformer_np.pretrained.MiniLM` receives it and whether it is transposed (PyTorch
stores ``nn.Linear`` weights as ``(out, in)``); ``expected_shapes`` gives the shapes the loader
checks before reading them.

Glossary of shape letters: D d_model (384), F feed-forward size (1536), V vocabulary (30522),
L layers (6).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .checkpoint import INSTALL_HINT, ModelFileError, read_config

__all__ = ["MiniLMConfig", "weight_map"]


@dataclass(frozen=True)
class MiniLMConfig:
    """Hyper-parameters of a BERT-style sentence encoder, read from ``config.json``.

    The defaults are those of all-MiniLM-L6-v2.
    """

    vocab_size: int = 30522  # V: rows of the token embedding table
    d_model: int = 384  # D: width of every token vector ("hidden_size")
    n_layers: int = 6  # L: encoder blocks ("num_hidden_layers")
    n_heads: int = 12  # H: heads per attention layer; head size Dh = D / H = 32
    d_ff: int = 1536  # F: hidden width of the feed-forward network ("intermediate_size")
    max_position: int = 512  # rows of the learned position table ("max_position_embeddings")
    type_vocab_size: int = 2  # segment embeddings (sentence A / B); we always use segment 0
    eps: float = 1e-12  # LayerNorm epsilon ("layer_norm_eps"), far smaller than PyTorch's 1e-5
    max_seq_length: int = 256  # sentence-transformers truncates here (sentence_bert_config.json)

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "d_model",
            "n_layers",
            "n_heads",
            "d_ff",
            "max_position",
            "type_vocab_size",
            "max_seq_length",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"MiniLMConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"MiniLMConfig.d_model ({self.d_model}) must be divisible by "
                f"n_heads ({self.n_heads})"
            )
        if self.max_seq_length > self.max_position:
            raise ValueError(
                f"MiniLMConfig.max_seq_length ({self.max_seq_length}) cannot exceed "
                f"max_position ({self.max_position})"
            )
        if not (isinstance(self.eps, float) and 0 < self.eps < 1):
            raise ValueError(f"MiniLMConfig.eps must be a float in (0, 1), got {self.eps!r}")

    @classmethod
    def from_files(cls, model_dir: str | Path) -> MiniLMConfig:
        """Read ``config.json`` and ``sentence_bert_config.json`` (if present) in ``model_dir``."""
        model_dir = Path(model_dir)
        path = model_dir / "config.json"
        cfg = read_config(path)
        # Only what this implementation supports: absolute positions, exact GELU, BERT.
        checks = {
            "model_type": "bert",
            "hidden_act": "gelu",
            "position_embedding_type": "absolute",
        }
        for key, want in checks.items():
            got = cfg.get(key, want)
            if got != want:
                raise ModelFileError(f"model file {path}: {key} must be {want!r}, got {got!r}")
        mapping = {
            "vocab_size": "vocab_size",
            "d_model": "hidden_size",
            "n_layers": "num_hidden_layers",
            "n_heads": "num_attention_heads",
            "d_ff": "intermediate_size",
            "max_position": "max_position_embeddings",
            "type_vocab_size": "type_vocab_size",
            "eps": "layer_norm_eps",
        }
        kwargs = {}
        for field, key in mapping.items():
            if key not in cfg:
                raise ModelFileError(f"model file {path} has no {key!r}; {INSTALL_HINT}")
            kwargs[field] = cfg[key]
            if field == "eps":
                try:
                    kwargs[field] = float(cfg[key])
                except (TypeError, ValueError):
                    raise ModelFileError(
                        f"model file {path}: {key} must be a number, got {cfg[key]!r}; "
                        f"{INSTALL_HINT}"
                    ) from None
        sbert = model_dir / "sentence_bert_config.json"
        if sbert.is_file():
            kwargs["max_seq_length"] = read_config(sbert).get("max_seq_length", 256)
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise ModelFileError(f"model file {path}: {exc}; {INSTALL_HINT}") from exc


def weight_map(config: MiniLMConfig | None = None) -> dict[str, tuple[str, str, bool]]:
    """Where each tensor of the checkpoint goes in our model.

    Returns
    -------
    mapping : dict of str to (str, str, bool)
        ``checkpoint name -> (our layer, our parameter, transposed)``. PyTorch's ``nn.Linear``
        stores its weight as ``(out, in)`` and computes ``x @ W.T``; our layers compute
        ``x @ W`` with ``W`` of shape ``(in, out)``, so those weights are transposed once at
        load time. The checkpoint's ``pooler.*`` tensors (a classifier head on ``[CLS]``) and
        ``embeddings.position_ids`` (just ``0..511``) are not used by sentence embeddings.

    Examples
    --------
    >>> weight_map()["encoder.layer.0.attention.self.query.weight"]
    ('blocks[0].attn', 'W_q', True)
    """
    if config is not None and not isinstance(config, MiniLMConfig):
        raise TypeError(f"config must be a MiniLMConfig or None, got {type(config).__name__}")
    config = config or MiniLMConfig()
    mapping = {
        "embeddings.word_embeddings.weight": ("word_embeddings", "W", False),
        "embeddings.position_embeddings.weight": ("position_embeddings", "W", False),
        "embeddings.token_type_embeddings.weight": ("token_type_embeddings", "W", False),
        "embeddings.LayerNorm.weight": ("embedding_norm", "gamma", False),
        "embeddings.LayerNorm.bias": ("embedding_norm", "beta", False),
    }
    for i in range(config.n_layers):
        p = f"encoder.layer.{i}."
        blk = f"blocks[{i}]"
        for hf, ours in (("query", "q"), ("key", "k"), ("value", "v")):
            mapping[p + f"attention.self.{hf}.weight"] = (f"{blk}.attn", f"W_{ours}", True)
            mapping[p + f"attention.self.{hf}.bias"] = (f"{blk}.attn", f"b_{ours}", False)
        mapping[p + "attention.output.dense.weight"] = (f"{blk}.attn", "W_o", True)
        mapping[p + "attention.output.dense.bias"] = (f"{blk}.attn", "b_o", False)
        mapping[p + "attention.output.LayerNorm.weight"] = (f"{blk}.norm1", "gamma", False)
        mapping[p + "attention.output.LayerNorm.bias"] = (f"{blk}.norm1", "beta", False)
        mapping[p + "intermediate.dense.weight"] = (f"{blk}.ff.linear1", "W", True)
        mapping[p + "intermediate.dense.bias"] = (f"{blk}.ff.linear1", "b", False)
        mapping[p + "output.dense.weight"] = (f"{blk}.ff.linear2", "W", True)
        mapping[p + "output.dense.bias"] = (f"{blk}.ff.linear2", "b", False)
        mapping[p + "output.LayerNorm.weight"] = (f"{blk}.norm2", "gamma", False)
        mapping[p + "output.LayerNorm.bias"] = (f"{blk}.norm2", "beta", False)
    return mapping


def expected_shapes(config: MiniLMConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every checkpoint tensor we read, as stored (PyTorch layout)."""
    D, F = config.d_model, config.d_ff
    shapes = {
        "embeddings.word_embeddings.weight": (config.vocab_size, D),
        "embeddings.position_embeddings.weight": (config.max_position, D),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, D),
        "embeddings.LayerNorm.weight": (D,),
        "embeddings.LayerNorm.bias": (D,),
    }
    for name in weight_map(config):
        if name in shapes:
            continue
        if name.endswith("intermediate.dense.weight"):
            shapes[name] = (F, D)
        elif name.endswith("intermediate.dense.bias"):
            shapes[name] = (F,)
        elif name.endswith(".output.dense.weight") and ".attention." not in name:
            shapes[name] = (D, F)
        elif name.endswith(".weight") and "LayerNorm" not in name:
            shapes[name] = (D, D)
        else:
            shapes[name] = (D,)
    return shapes
