"""Rotary position embedding (RoPE): each pair of features of a query or key turns by an angle
proportional to its position, pair i at the frequency ``theta^(-2i/Dh)``, so attention sees
relative positions. Pairs in the Hugging Face layout, feature i with i + Dh/2 ("rotate half";
llama.cpp pairs neighbours, see ``pretrained/gguf.py``). Page: modern-block.md.

Shape glossary: B batch, H heads, T positions, Dh head size (even).
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Integer

from ._checks.boundary import checked
from ._checks.functions import (
    check_apply_rope,
    check_apply_rope_backward,
    check_rope_angles,
    check_rope_frequencies,
    check_rotate_half,
)

__all__ = ["apply_rope", "apply_rope_backward", "rope_angles", "rope_frequencies", "rotate_half"]


@checked(check_rope_frequencies)
# --8<-- [start:rope_frequencies]
def rope_frequencies(d_head, base=10000.0):
    """The Dh/2 angular frequencies theta^(-2i/Dh), i = 0 .. Dh/2 - 1, in float64."""
    return base ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)  # (Dh/2,)


# --8<-- [end:rope_frequencies]


@checked(check_rope_angles)
# --8<-- [start:rope_angles]
def rope_angles(positions: Integer[np.ndarray, " T"], d_head, base=10000.0, *, dtype=np.float64):
    """cos and sin of the rotation at each position: two (T, Dh) arrays.

    Angle of pair i at position m: m * omega_i, written twice (features i and i + Dh/2 turn
    together), computed in float64 and then cast to ``dtype`` (float32 or float64).
    """
    omega = rope_frequencies(d_head, base)  # (Dh/2,)
    angles = np.asarray(positions, np.float64)[:, None] * omega  # (T, 1) * (Dh/2,) -> (T, Dh/2)
    angles = np.concatenate([angles, angles], axis=-1)  # (T, Dh): pair i is (i, i + Dh/2)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


# --8<-- [end:rope_angles]


@checked(check_rotate_half)
# --8<-- [start:rotate_half]
def rotate_half(x: Float[np.ndarray, "*B Dh"]):
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: a quarter turn of each pair."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


# --8<-- [end:rotate_half]


@checked(check_apply_rope)
# --8<-- [start:apply_rope]
def apply_rope(
    x: Float[np.ndarray, "*B T Dh"], cos: Float[np.ndarray, "..."], sin: Float[np.ndarray, "..."]
):
    """Rotate every pair of features of x (..., T, Dh) by its position's angle.

    Pair (a, b) = (x_i, x_{i+Dh/2}) becomes (a cos - b sin, b cos + a sin), a rotation by the
    angle of pair i; ``cos`` and ``sin`` (T, Dh) come from :func:`rope_angles`.
    """
    return x * cos + rotate_half(x) * sin  # (..., T, Dh)


# --8<-- [end:apply_rope]


@checked(check_apply_rope_backward)
# --8<-- [start:apply_rope_backward]
def apply_rope_backward(
    grad_output: Float[np.ndarray, "*B T Dh"],
    cos: Float[np.ndarray, "..."],
    sin: Float[np.ndarray, "..."],
):
    """dL/dx of :func:`apply_rope` from dL/dy (..., T, Dh): the rotation back, by minus the
    same angle (cos unchanged, sin negated). Page: finetuning.md."""
    return grad_output * cos - rotate_half(grad_output) * sin  # (..., T, Dh)


# --8<-- [end:apply_rope_backward]
