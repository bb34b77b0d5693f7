"""The validators of the configurations (run by their ``__post_init__``) and of their JSON."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np


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


def check_dtype_name(name, dtype):
    if dtype not in ("float32", "float64"):
        raise ValueError(f'{name}.dtype must be "float32" or "float64", got {dtype!r}')


def check_common_fields(cfg):
    """The fields both model configurations share (``d_ff = 0`` means 4 d_model)."""
    name = type(cfg).__name__
    check_field(name, "d_model", cfg.d_model, int, 2)
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
    check_field(name, "d_ff", cfg.d_ff, int, 0)
    check_field(name, "max_len", cfg.max_len, int, 1)
    check_field(name, "norm_first", cfg.norm_first, bool)
    if cfg.activation not in ("relu", "gelu"):
        raise ValueError(f'{name}.activation must be "relu" or "gelu", got {cfg.activation!r}')
    check_field(name, "dropout", cfg.dropout, float, 0.0, 1.0, hi_open=True)
    check_field(name, "tie_embeddings", cfg.tie_embeddings, bool)
    check_field(name, "eps", cfg.eps, float)
    if not cfg.eps > 0:
        raise ValueError(f"{name}.eps must be > 0, got {cfg.eps}")
    check_dtype_name(name, cfg.dtype)


def check_transformer_config(cfg):
    name = type(cfg).__name__
    check_field(name, "src_vocab_size", cfg.src_vocab_size, int, 1)
    check_field(name, "tgt_vocab_size", cfg.tgt_vocab_size, int, 1)
    check_field(name, "n_encoder_layers", cfg.n_encoder_layers, int, 1)
    check_field(name, "n_decoder_layers", cfg.n_decoder_layers, int, 1)
    check_common_fields(cfg)
    if cfg.pad_id is not None:
        check_field(name, "pad_id", cfg.pad_id, int, 0)
        if cfg.pad_id >= min(cfg.src_vocab_size, cfg.tgt_vocab_size):
            raise ValueError(
                f"{name}.pad_id must be a valid id of both vocabularies "
                f"(< {min(cfg.src_vocab_size, cfg.tgt_vocab_size)}), got {cfg.pad_id}"
            )


def check_language_model_config(cfg):
    name = type(cfg).__name__
    check_field(name, "vocab_size", cfg.vocab_size, int, 1)
    check_field(name, "n_layers", cfg.n_layers, int, 1)
    check_common_fields(cfg)


def check_llama_config(cfg):
    name = type(cfg).__name__
    for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
        check_field(name, field, getattr(cfg, field), int, 1)
    check_field(name, "max_len", cfg.max_len, int, 1)
    if cfg.d_model % cfg.n_heads or (cfg.d_model // cfg.n_heads) % 2:
        raise ValueError(
            f"{name}.d_model must split into n_heads heads of even size, got d_model = "
            f"{cfg.d_model} and n_heads = {cfg.n_heads}"
        )
    if cfg.n_heads % cfg.n_kv_heads:
        raise ValueError(
            f"{name}.n_kv_heads must divide n_heads, got n_heads = {cfg.n_heads} and "
            f"n_kv_heads = {cfg.n_kv_heads}"
        )
    check_field(name, "rope_base", cfg.rope_base, float)
    check_field(name, "eps", cfg.eps, float)
    for field in ("rope_base", "eps"):
        if not getattr(cfg, field) > 0:
            raise ValueError(f"{name}.{field} must be > 0, got {getattr(cfg, field)}")
    check_dtype_name(name, cfg.dtype)
    if cfg.eos_id is not None:
        check_field(name, "eos_id", cfg.eos_id, int, 0)
        if cfg.eos_id >= cfg.vocab_size:
            raise ValueError(
                f"{name}.eos_id must be a token id below vocab_size = {cfg.vocab_size} "
                f"(or None), got {cfg.eos_id}"
            )


def check_json_text(cls, text) -> dict:
    """The fields that ``text`` (JSON, str or UTF-8 bytes) gives a ``cls``, else a clear error."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"text must be UTF-8 JSON for a {cls.__name__}; byte {exc.start} is not UTF-8"
            ) from None
    if not isinstance(text, str):
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
    return data
