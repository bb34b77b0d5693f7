"""LoRA adapters in PEFT's files: :func:`save_lora` and :func:`load_lora`. Page: finetuning.md.

An adapter is two files of a folder, as PEFT's ``save_pretrained`` writes them:
``adapter_model.safetensors`` (each adapted map's ``lora_A.weight`` (r, d_in) and
``lora_B.weight`` (d_out, r), under transformers' names) and ``adapter_config.json`` (r, alpha,
the target maps). PEFT reads what :func:`save_lora` writes, on transformers'
``LlamaForCausalLM``, and :func:`load_lora` reads what PEFT writes. The adapters themselves
are in :mod:`transformer_np.lora`.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from ._checks.boundary import checked
from ._checks.general import check_finite, check_integer, check_positive
from ._checks.layers import check_probability
from ._checks.lora import check_load_lora, check_save_lora
from ._peft import ADAPTER_CONFIG, ADAPTER_WEIGHTS, PREFIX, lora_layers, peft_path
from .checkpoints import write_atomically
from .layers import Linear
from .lora import adapt, names_one

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "load_lora", "save_lora"]


# --8<-- [start:peft_config]
def peft_config(model, layers, base_model):
    """The ``adapter_config.json`` of PEFT's LoRA for ``layers`` ({path: LoRALinear})."""
    first = next(iter(layers.values()))
    paths = [peft_path(p) for p in layers]
    short = sorted({p.rsplit(".", 1)[1] for p in paths})
    every = [peft_path(p) for p, m in model.named_modules() if peft_path(p)]
    # the short names if they select exactly these maps, else the whole names
    exact = sorted(paths) == sorted(p for p in every if p.rsplit(".", 1)[1] in short)
    alpha = int(first.alpha) if first.alpha.is_integer() else first.alpha
    return {
        "alpha_pattern": {},
        "base_model_name_or_path": base_model,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layers_pattern": None,
        "layers_to_transform": None,
        "lora_alpha": alpha,
        "lora_dropout": first.dropout.p,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": first.r,
        "rank_pattern": {},
        "revision": None,
        "target_modules": short if exact else sorted(paths),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }


# --8<-- [end:peft_config]


@checked(check_save_lora)
# --8<-- [start:save_lora]
def save_lora(folder, model, *, base_model=None, overwrite=False):
    """Save the adapters alone, in the two files of PEFT's ``save_pretrained``.

    ``PeftModel.from_pretrained(hf_model, folder)`` reads them, and so does :func:`load_lora`.

    Parameters
    ----------
    folder : str or path-like
        The folder of the two files; created if missing (its parent must exist).
    model : LlamaModel
        With adapters (:func:`add_lora`), merged or not; one r, alpha and dropout for all.
    base_model : str, optional
        The base model's name recorded as ``base_model_name_or_path``
        (``"HuggingFaceTB/SmolLM2-135M-Instruct"``).
    overwrite : bool, default False
        Whether the two files may replace files in ``folder``; each is written in one step, and
        nothing else in ``folder`` is touched.

    Raises
    ------
    TypeError, ValueError
        If ``model`` is not a LlamaModel with adapters of one r, alpha and dropout, an adapter
        holds NaN or inf, or ``base_model`` is not a str.
    FileExistsError
        If one of the files exists and ``overwrite`` is False (checked before writing anything).
    FileNotFoundError, NotADirectoryError
        If the parent of ``folder`` does not exist, or ``folder`` is a file.
    """
    from safetensors.numpy import save

    layers = lora_layers(model)
    tensors = {}
    for path, layer in layers.items():
        key = PREFIX + peft_path(path)
        # ours x @ W, PyTorch's x @ weight.T: weight = W.T
        tensors[f"{key}.lora_A.weight"] = np.ascontiguousarray(layer.lora_A.params["W"].T)
        tensors[f"{key}.lora_B.weight"] = np.ascontiguousarray(layer.lora_B.params["W"].T)
    config = json.dumps(peft_config(model, layers, base_model), indent=2, sort_keys=True)
    os.makedirs(folder, exist_ok=True)
    weights, config = save(tensors, {"format": "pt"}), (config + "\n").encode()
    write_atomically(
        os.path.join(folder, ADAPTER_WEIGHTS), lambda f: f.write(weights), overwrite, "adapter"
    )
    write_atomically(
        os.path.join(folder, ADAPTER_CONFIG), lambda f: f.write(config), overwrite, "adapter"
    )


# --8<-- [end:save_lora]


@checked(check_load_lora)
def load_lora(folder, model):
    """Put on ``model`` the adapters of ``folder``, written by :func:`save_lora` or by PEFT.

    Parameters
    ----------
    folder : str or path-like
        A folder with ``adapter_config.json`` and ``adapter_model.safetensors`` (PEFT's
        ``save_pretrained`` of a LoRA adapter on a LLaMA model).
    model : LlamaModel
        The base model, without adapters; changed in place.

    Returns
    -------
    LlamaModel
        ``model``, frozen, with a :class:`LoRALinear` holding the file's matrices (in the model's
        dtype) on every map the file adapts. Everything is checked first: on an error the model
        is unchanged.

    Raises
    ------
    FileNotFoundError, NotADirectoryError
        If ``folder`` or one of its two files is missing.
    ValueError
        If a file is not what PEFT writes, the adapter is not a plain LoRA (DoRA, rsLoRA,
        per-module ranks, biases...) or does not fit the model (a name, a shape, NaN or inf).
        The message names the file.
    """
    r, alpha, dropout, weights = read_peft_adapter(folder, model)  # {path: (A, B)}, checked
    found = {p: m for p, m in model.named_modules() if p in weights}
    adapt(model, found, r, alpha, dropout, rng=0)
    for path, layer in lora_layers(model).items():
        A, B = weights[path]  # PyTorch's (r, d_in) and (d_out, r)
        layer.lora_A.params["W"][...] = A.T
        layer.lora_B.params["W"][...] = B.T
    return model


# -- reading PEFT's files: every name, shape and value checked against the model first --


# what the configuration must say for the adapter to be a plain LoRA: key -> the plain value
PLAIN = {
    "use_dora": False,
    "use_rslora": False,
    "fan_in_fan_out": False,
    "lora_bias": False,
    "bias": "none",
    "rank_pattern": {},
    "alpha_pattern": {},
    "modules_to_save": None,
}


def read_config(path):
    """r, alpha, dropout and target_modules of a plain LoRA ``adapter_config.json``."""
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path!r} is not an adapter configuration: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path!r} must hold a JSON object, got a {type(config).__name__}")
    if config.get("peft_type") != "LORA":
        raise ValueError(
            f"{path!r}: peft_type is {config.get('peft_type')!r}: only LoRA adapters ('LORA') "
            "are read"
        )
    for key, plain in PLAIN.items():
        value = config.get(key, plain)
        if value != plain and not (value is None and plain in ({}, False)):
            raise ValueError(
                f"{path!r}: {key} = {value!r}: only plain LoRA adapters are read ({key} = "
                f"{plain!r})"
            )
    try:
        r = check_integer(config.get("r"), f"{path!r}: r", 1, "an integer >= 1")
        alpha = check_positive(config.get("lora_alpha"), f"{path!r}: lora_alpha")
        dropout = check_probability(config.get("lora_dropout", 0.0), f"{path!r}: lora_dropout")
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    return r, alpha, dropout, config.get("target_modules")


def check_target_modules(path, targets, names, model):
    """A ValueError if ``targets``, the ``target_modules`` of the configuration at ``path``, name
    none of the maps ``names`` (transformers' names) of ``model``: an adapter for another model."""
    if isinstance(targets, str):  # PEFT: a regular expression matching a whole name
        targets = [targets]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return  # no names to compare: the tensors' names are checked one by one
    if not any(names_one(t, n) for t in targets for n in names):
        kinds = sorted({n.rsplit(".", 1)[1] for n in names})
        raise ValueError(
            f"{path!r}: target_modules {targets!r} names no map of this "
            f"{type(model).__name__} (its maps: {', '.join(kinds)}): the adapter was made for "
            "another model"
        )


def read_tensors(path):
    """The arrays of a safetensors file, or a ValueError naming it."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise ValueError(
            f"{path!r} is not a safetensors file of arrays NumPy can read ({exc})"
        ) from None


def read_peft_adapter(folder, model):
    """r, alpha, dropout and ``{our path: (A (r, d_in), B (d_out, r))}`` of the adapter in
    ``folder``, every name, shape and value checked against ``model``, in its dtype."""
    config_path = os.path.join(folder, ADAPTER_CONFIG)
    r, alpha, dropout, targets = read_config(config_path)
    linears = {p: m for p, m in model.named_modules() if type(m) is Linear}
    ours = {peft_path(p): p for p in linears if peft_path(p)}  # transformers' -> ours
    check_target_modules(config_path, targets, ours, model)
    path = os.path.join(folder, ADAPTER_WEIGHTS)
    tensors = read_tensors(path)
    pairs = {}
    for key, value in tensors.items():
        m = re.fullmatch(re.escape(PREFIX) + r"(.+)\.lora_([AB])\.weight", key)
        if m is None or m[1] not in ours:
            raise ValueError(
                f"{path!r}: the tensor {key!r} is not a LoRA matrix of a map of this "
                f"LlamaModel ({model.config.n_layers} layers), named as PEFT names them "
                f"('{PREFIX}model.layers.0.self_attn.q_proj.lora_A.weight')"
            )
        pairs.setdefault(ours[m[1]], {})[m[2]] = value
    if not pairs:
        raise ValueError(f"{path!r} holds no LoRA matrices")
    weights = {}
    for p in linears:  # in the model's order
        if p not in pairs:
            continue
        if set(pairs[p]) != {"A", "B"}:
            raise ValueError(f"{path!r}: {peft_path(p)} has lora_A or lora_B, not both")
        lin, (A, B) = linears[p], (pairs[p]["A"], pairs[p]["B"])
        if A.shape != (r, lin.d_in) or B.shape != (lin.d_out, r):
            raise ValueError(
                f"{path!r}: {peft_path(p)} has lora_A {A.shape} and lora_B {B.shape}; this "
                f"model with r = {r} needs {(r, lin.d_in)} and {(lin.d_out, r)}"
            )
        dtype = lin.params["W"].dtype
        for name, w in (("lora_A", A), ("lora_B", B)):
            if w.dtype.kind != "f":
                raise ValueError(f"{path!r}: {peft_path(p)}.{name} has dtype {w.dtype}")
            with np.errstate(over="ignore"):  # (too large for float32: inf, reported)
                check_finite(w.astype(dtype), f"{path!r}: {peft_path(p)}.{name} (in {dtype})")
        weights[p] = (A.astype(dtype), B.astype(dtype))
    return r, alpha, dropout, weights
