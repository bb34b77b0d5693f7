"""PEFT's names: the files of a saved adapter, the maps of transformers' LLaMA, ``lora_A``.

What :mod:`transformer_np.lora` writes and reads, and what its validators check, so that an
adapter saved here loads with ``PeftModel.from_pretrained`` and the reverse.
"""

from __future__ import annotations

import re

#: The adapter's weights, named as PEFT's ``save_pretrained`` names the file.
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: The adapter's configuration (r, alpha, the target maps), named as PEFT names it.
ADAPTER_CONFIG = "adapter_config.json"
PREFIX = "base_model.model."  # what PEFT puts before the names of transformers' model


# the maps of a LlamaModel block, our path -> transformers' (LlamaDecoderLayer)
PEFT_NAMES = {
    "attn.q": "self_attn.q_proj",
    "attn.k": "self_attn.k_proj",
    "attn.v": "self_attn.v_proj",
    "attn.o": "self_attn.o_proj",
    "ff.gate": "mlp.gate_proj",
    "ff.up": "mlp.up_proj",
    "ff.down": "mlp.down_proj",
}


def peft_path(path):
    """transformers' name of the map at our ``path`` of a LlamaModel, or None:
    ``"blocks.3.attn.q"`` -> ``"model.layers.3.self_attn.q_proj"``."""
    m = re.fullmatch(r"blocks\.(\d+)\.(\w+\.\w+)", path)
    if m is None or m[2] not in PEFT_NAMES:
        return None
    return f"model.layers.{m[1]}.{PEFT_NAMES[m[2]]}"


def lora_layers(model):
    """``{path: layer}`` of the layers of ``model`` that carry an adapter (a sub-layer named
    ``lora_A``, as PEFT names it: a :class:`~transformer_np.lora.LoRALinear`), in the model's
    order."""
    return {p: m for p, m in model.named_modules() if "lora_A" in m.children()}
