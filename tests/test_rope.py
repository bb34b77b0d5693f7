"""rope.py: rotary position embedding.

Sections: values (a rotation keeps norms, the dot product of rotated vectors depends only on
the offset, the frequencies), backward (the rotation back, finite differences), errors,
reference (angles and rotation against Hugging Face's LlamaRotaryEmbedding and
apply_rotary_pos_emb, and the rotation's gradient by PyTorch autograd).
"""

import numpy as np
import pytest

from transformer_np import (
    apply_rope,
    apply_rope_backward,
    rope_angles,
    rope_frequencies,
    rotate_half,
)
from transformer_np.config import LlamaConfig

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import (
    abs_product,
    assert_within,
    gradcheck_layer,
    hf_llama_config,
    rounding_tol,
    to_torch,
    to_torch64,
    unit_roundoff,
)

U64 = unit_roundoff(np.float64)


def rotation_error(v, positions, omega):
    """A bound on the error of apply_rope(v) at ``positions`` (float64), per entry of v (T, Dh):
    the angle p omega_i rounds (u |p omega_i|, which cos and sin pass on times at most 1), cos
    and sin round (FR each), the two products and the sum (2); pair i = (v_i, v_{i + Dh/2})
    gets (|v_i| + |v_{i + Dh/2}|) times that on both of its entries. The error of omega itself
    is left out: it is common to every position (the callers compare offsets)."""
    half = v.shape[-1] // 2
    pair = np.abs(v[..., :half]) + np.abs(v[..., half:])
    angle = U64 * np.abs(np.asarray(positions, np.float64)[:, None] * omega[None, :])
    per_pair = pair * (angle + rounding_tol(np.float64, FR + 2))
    return np.concatenate([per_pair, per_pair], axis=-1)


# ============================================================================================
# values
# ============================================================================================


def test_frequencies_are_powers_of_the_base():
    omega = rope_frequencies(8, base=10000.0)
    expected = np.array([1.0, 10000**-0.25, 10000**-0.5, 10000**-0.75])
    # two powers (FR each); the exponent -2i / 8 rounds once: a relative u |e ln(base)|
    exponent = np.arange(0, 8, 2) / 8
    rtol = rounding_tol(np.float64, 2 * FR) + rounding_tol(np.float64, 1, exponent * np.log(1e4))
    assert_within(omega, expected, rtol * expected, "frequencies")


def test_rotation_keeps_the_norm_of_every_pair(rng):
    x = rng.standard_normal((2, 3, 7, 16))
    cos, sin = rope_angles(np.arange(7), 16)
    y = apply_rope(x, cos, sin)
    pair_norm = lambda z: z[..., :8] ** 2 + z[..., 8:] ** 2  # noqa: E731
    # Rounded angles are still rotations: only cos and sin (FR each) and the 2 roundings of each
    # rotated entry count, E <= gamma(FR + 2) (|a| + |b|); the norm (a + E)^2 + (b + E)^2 is off
    # by 2 (|a| + |b|) E <= 4 gamma(FR + 2) N; each side's squares and sum: 2 more
    rtol = rounding_tol(x.dtype, 4 * (FR + 2) + 2 * 2)
    assert_within(pair_norm(y), pair_norm(x), rtol * pair_norm(x), "pair norms")


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
    # each score: its rotated vectors' errors times the other's entries, and its sum of 32
    omega = rope_frequencies(32, base=100000.0)
    eq, ek = rotation_error(qr, np.arange(200), omega), rotation_error(kr, np.arange(200), omega)
    err = (
        abs_product(eq, kr.T)
        + abs_product(qr, ek.T)
        + rounding_tol(np.float64, 32, abs_product(qr, kr.T))
    )
    for offset in (0, 1, 5, 73):
        diagonal = np.diagonal(scores, offset=offset)  # every (m, m + offset)
        tol = np.diagonal(err, offset=offset)
        assert_within(
            diagonal, np.full_like(diagonal, diagonal[0]), tol + tol[0], f"offset {offset}"
        )
    assert not np.isclose(scores[0, 1], scores[0, 2])  # but it does change with the offset


def test_angles_in_float32():
    cos, sin = rope_angles(np.arange(3), 4, dtype=np.float32)
    assert cos.dtype == sin.dtype == np.float32 and cos.shape == (3, 4)


# ============================================================================================
# backward
# ============================================================================================


def test_backward_is_the_rotation_by_minus_the_angle(rng):
    g = rng.standard_normal((2, 3, 7, 16))
    cos, sin = rope_angles(np.arange(7), 16)
    # exactly: g cos - rot(g) sin and g cos + rot(g) (-sin) round the same numbers
    np.testing.assert_array_equal(apply_rope_backward(g, cos, sin), apply_rope(g, cos, -sin))


def test_backward_undoes_the_rotation(rng):
    x = rng.standard_normal((2, 3, 7, 16))
    cos, sin = rope_angles(np.arange(7), 16)
    # the transpose of a rotation is its inverse: back(rotate(x)) = x (cos^2 + sin^2) = x, up
    # to the rounding of both turns (2 roundings of their two terms each, and cos and sin: FR)
    # and of cos^2 + sin^2 = 1 (FR each)
    pair = np.abs(x) + np.abs(rotate_half(x))
    tol = rounding_tol(np.float64, 2 * (FR + 2) + 2 * FR, pair)
    assert_within(apply_rope_backward(apply_rope(x, cos, sin), cos, sin), x, tol, "back(rot x)")


def test_backward_matches_finite_differences(rng):
    class NoParameters:  # apply_rope has none
        params, grads = {}, {}

    x = rng.standard_normal((2, 2, 5, 8))
    cos, sin = rope_angles(np.arange(3, 8), 8, base=100.0)
    gradcheck_layer(
        lambda x: apply_rope(x, cos, sin),
        lambda g: apply_rope_backward(g, cos, sin),
        NoParameters(),
        [x],
        rng,
    )


# ============================================================================================
# errors
# ============================================================================================


def test_odd_head_size_is_refused():
    with pytest.raises(ValueError, match="d_head must be even"):
        rope_frequencies(7)


def test_bad_positions_are_refused():
    with pytest.raises(ValueError, match="positions must be a 1-D array of integers >= 0"):
        rope_angles([-1, 0], 8)
    with pytest.raises(
        ValueError,
        match=r"^rope_angles: positions must be an integer array of shape \(T,\), "
        r"got int64 of shape \(1, 2\)$",
    ):
        rope_angles([[0, 1]], 8)


def test_float_positions_are_refused():
    with pytest.raises(TypeError, match=r"positions must be an integer array .*got float64"):
        rope_angles([0.5, 1.0], 8)


@pytest.mark.parametrize("dtype", [np.int64, np.float16, "complex128"])
def test_angles_are_refused_in_a_dtype_that_is_not_float32_or_float64(dtype):
    # an integer dtype would truncate cos and sin to -1, 0 and 1, in silence
    with pytest.raises(TypeError, match="dtype must be np.float32 or np.float64, got"):
        rope_angles(np.arange(3), 8, dtype=dtype)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (np.arange(4), TypeError, r"x must be a float array .*got int64 of shape \(4,\)$"),
        (
            np.array(1.0),
            ValueError,
            r"x must be a float array of shape \(\*B, Dh\) .*got float64 of shape \(\)$",
        ),
        (np.ones((2, 5)), ValueError, r"x must have an even, non-zero last axis Dh .*\(2, 5\)"),
    ],
    ids=["int", "0-d", "odd"],
)
def test_rotate_half_needs_floats_in_pairs(x, error, match):
    with pytest.raises(error, match=match):
        rotate_half(x)


def test_apply_rope_needs_cos_and_sin_of_the_positions_and_head_size_of_x(rng):
    x = rng.standard_normal((2, 5, 8))  # (B, T, Dh)
    cos, sin = rope_angles(np.arange(5), 8)  # (5, 8)
    with pytest.raises(ValueError, match=r"cos of shape \(4, 8\) does not broadcast to x"):
        apply_rope(x, cos[:4], sin[:4])  # 4 positions for 5
    with pytest.raises(ValueError, match=r"cos and sin must have the same shape .*\(5, 4\)"):
        apply_rope(x, cos, sin[:, :4])
    with pytest.raises(
        ValueError, match=r"x must be a float array of shape \(\*B, T, Dh\) .*of shape \(8,\)$"
    ):
        apply_rope(x[0, 0], cos, sin)
    with pytest.raises(ValueError, match=r"x must have an even, non-zero last axis Dh"):
        apply_rope(x[..., :7], cos[:, :7], sin[:, :7])


def test_apply_rope_backward_names_its_gradient(rng):
    g = rng.standard_normal((2, 5, 8))
    cos, sin = rope_angles(np.arange(5), 8)
    with pytest.raises(ValueError, match=r"cos of shape \(4, 8\) does not broadcast to grad_out"):
        apply_rope_backward(g, cos[:4], sin[:4])
    with pytest.raises(ValueError, match=r"grad_output contains NaN"):
        apply_rope_backward(np.full((5, 8), np.nan), cos, sin)


def test_apply_rope_declares_float_tables_of_any_shape_that_broadcasts(rng):
    x = rng.standard_normal((2, 5, 8))
    cos, sin = rope_angles(np.arange(5), 8)
    with pytest.raises(
        TypeError,
        match=r"^apply_rope: cos must be a float array of shape \(\.\.\.\) that fits "
        r"x \(2, 5, 8\), got int64 of shape \(5, 8\)$",
    ):
        apply_rope(x, cos.astype(np.int64), sin)
    # a table that broadcasts to x, as before: one angle for every position, or a list
    np.testing.assert_array_equal(
        apply_rope(x, cos[:1], sin[:1]), x * cos[0] + rotate_half(x) * sin[0]
    )
    np.testing.assert_array_equal(
        apply_rope(x.tolist(), cos.tolist(), sin), apply_rope(x, cos, sin)
    )


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
    # float32 step is 3e-5, so its cos and sin are off by that much from the float64 ones. Its
    # angle: its float32 frequencies (their difference from ours, exactly) times m, rounded
    # (u32 |m omega|); then cos and sin in float32 (FR); ours, in float64, FR and the angle's 1.
    omega = rope_frequencies(64, base=cfg.rope_base)
    omega32 = rotary.inv_freq.double().numpy()
    m = np.arange(300.0)[:, None]
    d_angle = m * np.abs(omega32 - omega) + rounding_tol(np.float32, 1, m * omega32)
    d_angle = np.concatenate([d_angle, d_angle], axis=-1)
    angle = np.concatenate([m * omega, m * omega], axis=-1)

    def angle_tol(value, slope):
        # |f(a + d) - f(a)| <= d (|f'(a)| + d) for f = cos, sin (f' = -sin, cos)
        tol = d_angle * (np.abs(slope) + d_angle) + rounding_tol(np.float32, FR, np.abs(value))
        return tol + rounding_tol(np.float64, FR + 1, np.abs(value) + np.abs(angle))

    assert_within(cos, cos_ref[0].double().numpy(), angle_tol(cos, sin), "cos - transformers")
    assert_within(sin, sin_ref[0].double().numpy(), angle_tol(sin, cos), "sin - transformers")


def test_rotation_matches_transformers_in_float64(torch, rng):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = rng.standard_normal((2, 2, 3, 11, 16))  # (B, H, T, Dh) each
    cos, sin = rope_angles(np.arange(5, 16), 16, base=500.0)
    q_ref, k_ref = apply_rotary_pos_emb(
        to_torch(q), to_torch(k), to_torch(cos)[None], to_torch(sin)[None]
    )

    # the same x cos + rotate_half(x) sin: 2 roundings of |x cos| + |rotate_half(x) sin| each
    def rope_tol(x):
        return 2 * rounding_tol(x.dtype, 2, np.abs(x * cos) + np.abs(rotate_half(x) * sin))

    assert_within(apply_rope(q, cos, sin), q_ref.numpy(), rope_tol(q), "queries - transformers")
    assert_within(apply_rope(k, cos, sin), k_ref.numpy(), rope_tol(k), "keys - transformers")


def test_rotation_gradient_matches_transformers_autograd(torch, rng):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k, gq, gk = rng.standard_normal((4, 2, 3, 11, 16))  # (B, H, T, Dh) each
    cos, sin = rope_angles(np.arange(5, 16), 16, base=500.0)
    qt, kt = to_torch64(q, requires_grad=True), to_torch64(k, requires_grad=True)
    q_ref, k_ref = apply_rotary_pos_emb(qt, kt, to_torch(cos)[None], to_torch(sin)[None])
    ((q_ref * to_torch(gq)).sum() + (k_ref * to_torch(gk)).sum()).backward()

    # the same two products and a sum on each side (autograd's: g cos, and the transpose of
    # rotate_half applied to g sin): 2 roundings of |g cos| + |rotate_half(g) sin| each
    def back_tol(g):
        return 2 * rounding_tol(g.dtype, 2, np.abs(g * cos) + np.abs(rotate_half(g) * sin))

    dq, dk = apply_rope_backward(gq, cos, sin), apply_rope_backward(gk, cos, sin)
    assert_within(dq, qt.grad.numpy(), back_tol(gq), "dq - autograd")
    assert_within(dk, kt.grad.numpy(), back_tol(gk), "dk - autograd")
