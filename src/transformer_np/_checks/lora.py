"""The validators of :mod:`transformer_np.lora` (the adapter layer, add_lora and the functions
of an adapted model) and of :mod:`transformer_np.lora_files` (the folder of PEFT's files).

A wrong file is a ValueError that names the file and what in it does not fit; a path that is
not there is a FileNotFoundError; nothing a user owns is overwritten without ``overwrite=True``.
"""

from __future__ import annotations

import os

from .._peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS, lora_layers
from .files import as_path_text, check_writable_folder
from .general import (
    check_bool,
    check_finite,
    check_positive,
    check_positive_int,
    check_rng,
    is_a,
    type_name,
)
from .layers import check_probability, features_call

# -- the layer ------------------------------------------------------------------------------------


def check_lora_init(base, r, alpha, dropout, rng):
    if type(base).__name__ != "Linear":  # exactly a Linear (not an adapted one)
        raise TypeError(f"base must be a Linear (the map to adapt), got {type_name(base)}")
    check_positive_int(r, "r")
    check_positive(alpha, "alpha")
    check_probability(dropout, "dropout")
    check_rng(rng)


def check_lora_call(layer, x):
    return features_call(layer, x, layer.d_in, "d_in")


# -- the functions of a model -----------------------------------------------------------------


def check_model(model):
    """``model`` is a layer with sub-layers (what adapters can be put in)."""
    if not is_a(model, "Module") or not model.children():
        raise TypeError(
            "model must be a model or a layer with sub-layers (a transformer_np Module such as "
            f"LlamaModel), got {type_name(model)}"
        )


def adapted_layers(model, function):
    """``{path: LoRALinear}`` of ``model``, or a ValueError if it has none."""
    check_model(model)
    layers = lora_layers(model)
    if not layers:
        raise ValueError(
            f"{function}: the {type(model).__name__} has no LoRA adapters: add them with "
            "add_lora(model) (or load_lora(folder, model))"
        )
    return layers


def check_targets(targets):
    """``targets`` as a tuple of non-empty str (one name is one target)."""
    if isinstance(targets, str):
        targets = (targets,)
    if not isinstance(targets, list | tuple) or not targets:
        raise TypeError(
            f"targets must be a name or a non-empty list of names (str), got {targets!r}"
        )
    for t in targets:
        if not isinstance(t, str):
            raise TypeError(f"targets must hold names (str), got {t!r} ({type_name(t)})")
        if not t:
            raise ValueError("targets must hold non-empty names, got ''")
    return tuple(targets)


def check_add_lora(model, r, alpha, targets, dropout, rng):
    check_model(model)
    adapted = lora_layers(model)
    if adapted:
        raise ValueError(
            f"the {type(model).__name__} already has LoRA adapters (on {', '.join(adapted)}): "
            "add them once, to the base model"
        )
    return {
        "model": model,
        "r": check_positive_int(r, "r"),
        "alpha": check_positive(alpha, "alpha"),
        "targets": check_targets(targets),
        "dropout": check_probability(dropout, "dropout"),
        "rng": check_rng(rng),
    }


def check_finite_adapters(layers):
    for path, layer in layers.items():
        for name in ("lora_A", "lora_B"):
            check_finite(layer.params[name], f"the adapter {name} of {path or 'the layer'}")


def check_lora_params(model):
    adapted_layers(model, "lora_params")
    return {"model": model}


def check_merge_lora(model):
    layers = adapted_layers(model, "merge_lora")
    merged = [p for p, m in layers.items() if m.merged]
    if merged:
        raise ValueError(
            f"merge_lora: the adapters are merged already ({merged[0] or 'the layer'}): "
            "unmerge_lora(model) takes them out"
        )
    check_finite_adapters(layers)  # a NaN would spread into W
    return {"model": model}


def check_unmerge_lora(model):
    layers = adapted_layers(model, "unmerge_lora")
    if not all(m.merged for m in layers.values()):
        raise ValueError("unmerge_lora: the adapters are not merged (merge_lora(model) first)")
    return {"model": model}


# -- the files of PEFT --------------------------------------------------------------------------


def check_llama(model, function):
    if not is_a(model, "LlamaModel"):
        raise TypeError(
            f"{function}: model must be a LlamaModel (PEFT's layout names the maps of "
            f"transformers' LlamaForCausalLM), got {type_name(model)}"
        )


def check_save_lora(folder, model, base_model, overwrite):
    check_llama(model, "save_lora")
    layers = adapted_layers(model, "save_lora")
    kinds = {(m.r, m.alpha, m.dropout.p) for m in layers.values()}
    if len(kinds) > 1:
        raise ValueError(
            "save_lora: the adapters must share one r, alpha and dropout (PEFT's "
            f"adapter_config.json holds one of each), got (r, alpha, dropout) {sorted(kinds)}"
        )
    check_finite_adapters(layers)
    if base_model is not None and not isinstance(base_model, str):
        raise TypeError(f"base_model must be a str or None, got {type_name(base_model)}")
    overwrite = check_bool(overwrite, "overwrite")
    text = as_path_text(folder, "folder")
    if os.path.lexists(text) and not os.path.isdir(text):
        raise NotADirectoryError(f"cannot save to {text!r}: it is a file, not a folder")
    # an existing folder is filled, a new one is made by save_lora in its parent
    full = os.path.abspath(text)
    into = full if os.path.isdir(full) else os.path.dirname(full)
    check_writable_folder(into, text, "folder")
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
        target = os.path.join(text, name)
        if os.path.isdir(target):
            raise IsADirectoryError(f"cannot save to {target!r}: it is a directory")
        if os.path.lexists(target) and not overwrite:
            raise FileExistsError(
                f"{target!r} already exists: pass overwrite=True to replace it (or choose "
                "another folder)"
            )
    return {"folder": text, "model": model, "base_model": base_model, "overwrite": overwrite}


def check_load_lora(folder, model):
    check_llama(model, "load_lora")
    adapted = lora_layers(model)
    if adapted:
        raise ValueError(
            f"load_lora: the model already has LoRA adapters (on {', '.join(adapted)}): load "
            "an adapter into the base model"
        )
    text = as_path_text(folder, "folder")
    if not os.path.exists(text):
        raise FileNotFoundError(f"no adapter folder {text!r}")
    if not os.path.isdir(text):
        raise NotADirectoryError(
            f"{text!r} is a file: give the folder that holds {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}"
        )
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not os.path.isfile(os.path.join(text, name)):
            raise FileNotFoundError(
                f"the folder {text!r} has no {name}: an adapter folder holds "
                f"{ADAPTER_CONFIG} and {ADAPTER_WEIGHTS} (PEFT's save_pretrained)"
            )
    return {"folder": text, "model": model}
