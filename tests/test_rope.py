"""rope.py: rotary position embedding.

Sections: values (a rotation keeps norms, the dot product of rotated vectors depends only on
the offset, the frequencies), errors, reference (angles and rotation against Hugging Face's
LlamaRotaryEmbedding and apply_rotary_pos_emb).
"""

import numpy as np
import pytest

from transformer_np import apply_rope, rope_angles, rope_frequencies, rotate_half
from transformer_np.config import LlamaConfig

from helpers import hf_llama_config, to_torch

# ============================================================================================
# values
# ============================================================================================


def test_frequencies_are_powers_of_the_base():
    omega = rope_frequencies(8, base=10000.0)
    np.testing.assert_allclose(omega, [1.0, 10000**-0.25, 10000**-0.5, 10000**-0.75])


def test_rotation_keeps_the_norm_of_every_pair(rng):
    x = rng.standard_normal((2, 3, 7, 16))
    cos, sin = rope_angles(np.arange(7), 16)
    y = apply_rope(x, cos, sin)
    pair_norm = lambda z: z[..., :8] ** 2 + z[..., 8:] ** 2  # noqa: E731
    np.testing.assert_allclose(pair_norm(y), pair_norm(x), rtol=1e-13)


def test_position_zero_is_the_identity(rng):
    x = rng.standard_normal((4, 1, 6))
    cos, sin = rope_angles([0], 6)
    np.testing.assert_array_equal(apply_rope(x, cos, sin), x)


def test_rotate_half_is_a_quarter_turn():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(rotate_half(x), [-3.0, -4.0, 1.0, 2.0])
    np.testing.assert_array_equal(rotate_half(rotate_half(x)), -x)


def test_scores_depend_only_on_the_offset(rng):
    q, k = rng.standard_normal((2, 32))
    cos, sin = rope_angles(np.arange(200), 32, base=100000.0)
    qr = apply_rope(np.broadcast_to(q, (200, 32)), cos, sin)  # q at every position m
    kr = apply_rope(np.broadcast_to(k, (200, 32)), cos, sin)  # k at every position n
    scores = qr @ kr.T  # (m, n)
    for offset in (0, 1, 5, 73):
        diagonal = np.diagonal(scores, offset=offset)  # every (m, m + offset)
        np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-10, atol=1e-10)
    assert not np.isclose(scores[0, 1], scores[0, 2])  # but it does change with the offset


def test_angles_in_float32():
    cos, sin = rope_angles(np.arange(3), 4, dtype=np.float32)
    assert cos.dtype == sin.dtype == np.float32 and cos.shape == (3, 4)


# ============================================================================================
# errors
# ============================================================================================


def test_odd_head_size_is_refused():
    with pytest.raises(ValueError, match="d_head must be even"):
        rope_frequencies(7)


@pytest.mark.parametrize("positions", [[-1, 0], [[0, 1]]])
def test_bad_positions_are_refused(positions):
    with pytest.raises(ValueError, match="positions must be a 1-D array of integers >= 0"):
        rope_angles(positions, 8)


def test_float_positions_are_refused():
    with pytest.raises(TypeError, match="positions"):
        rope_angles([0.5, 1.0], 8)


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


def test_angles_match_transformers_in_float32(torch):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(vocab_size=10, d_model=64, n_layers=1, n_heads=1, n_kv_heads=1, d_ff=8)
    rotary = LlamaRotaryEmbedding(hf_llama_config(cfg))
    positions = torch.arange(300)[None]
    cos_ref, sin_ref = rotary(torch.zeros(1, dtype=torch.float32), positions)
    cos, sin = rope_angles(np.arange(300), 64, base=cfg.rope_base)
    # transformers rounds the angles to float32 first: m * omega at m = 299 is ~300, where a
    # float32 step is 3e-5, so its cos and sin are off by that much from the float64 ones
    np.testing.assert_allclose(cos, cos_ref[0].double().numpy(), atol=5e-5)
    np.testing.assert_allclose(sin, sin_ref[0].double().numpy(), atol=5e-5)


def test_rotation_matches_transformers_in_float64(torch, rng):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = rng.standard_normal((2, 2, 3, 11, 16))  # (B, H, T, Dh) each
    cos, sin = rope_angles(np.arange(5, 16), 16, base=500.0)
    q_ref, k_ref = apply_rotary_pos_emb(
        to_torch(q), to_torch(k), to_torch(cos)[None], to_torch(sin)[None]
    )
    np.testing.assert_allclose(apply_rope(q, cos, sin), q_ref.numpy(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(apply_rope(k, cos, sin), k_ref.numpy(), rtol=0, atol=1e-14)
