"""clipping.py: the global norm of the gradients and clipping by it (clip_grad_norm).

Sections: values, errors (bad input: a TypeError for a wrong type, a ValueError for a wrong
value, and no gradient scaled before every one is checked), reference (against PyTorch).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np.clipping import clip_grad_norm, global_norm

from helpers import assert_within, rounding_tol

# ============================================================================================
# values
# ============================================================================================


def test_clip_leaves_small_gradients_alone():
    g = {"a": np.array([0.1, 0.2])}
    clip_grad_norm(g, 1.0)
    assert g["a"].tolist() == [0.1, 0.2]


def test_global_norm_of_integer_gradients_does_not_overflow():
    assert global_norm({"a": np.array([30, 40])}) == 50.0
    assert global_norm({"a": np.array([2**40, 0], dtype=np.int64)}) == 2.0**40


# ============================================================================================
# errors
# ============================================================================================


@pytest.mark.parametrize(
    ("max_norm", "error"),
    [(0, ValueError), (float("nan"), ValueError), ("1", TypeError), (None, TypeError)],
)
def test_bad_max_norm_is_rejected(max_norm, error):
    with pytest.raises(error, match=r"max_norm must be a positive finite number, got"):
        clip_grad_norm({"a": np.ones(2)}, max_norm)


@pytest.mark.parametrize(
    ("grads", "error", "message"),
    [
        ({"a": np.array([30, 40])}, TypeError, r"grads\['a'\] must be a floating-point ndarray"),
        ({"a": [3.0, 4.0]}, TypeError, r"grads\['a'\] must be a floating-point ndarray.*list"),
        ([np.ones(2)], TypeError, "grads must be a dict"),
    ],
)
def test_clip_grad_norm_bad_gradients(grads, error, message):
    with pytest.raises(error, match=message):
        clip_grad_norm(grads, 1.0)


def test_clip_grad_norm_checks_every_gradient_before_scaling_any():
    big = np.array([30.0, 40.0])
    with pytest.raises(TypeError, match=r"grads\['b'\]"):
        clip_grad_norm({"a": big, "b": np.array([1, 2])}, 1.0)
    assert big.tolist() == [30.0, 40.0]


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    grads = {"a": rng.normal(size=(5, 3)) * 10, "b": rng.normal(size=(7,)) * 10}
    tp = [
        torch.nn.Parameter(torch.zeros(5, 3, dtype=torch.float64)),
        torch.nn.Parameter(torch.zeros(7, dtype=torch.float64)),
    ]
    tp[0].grad = torch.tensor(grads["a"])
    tp[1].grad = torch.tensor(grads["b"])
    tnorm = torch.nn.utils.clip_grad_norm_(tp, 1.5)
    norm = clip_grad_norm(grads, 1.5)
    # The norm of N = 22 numbers: their squares (1), a sum of N and of the per-array sums (N + 1),
    # the square root (half of that, and 1); torch takes each array's norm first (a square root
    # and its square more: 2). The scale max_norm / (norm + 1e-6): the norm's error, 2 roundings;
    # the product with it, 1.
    n = sum(g.size for g in grads.values())
    ours_rtol = rounding_tol(np.float64, (n + 2) / 2 + 1)
    norm_rtol = ours_rtol + rounding_tol(np.float64, (n + 2) / 2 + 3)
    assert norm == pytest.approx(tnorm.item(), rel=norm_rtol, abs=0)
    scaled_rtol = norm_rtol + rounding_tol(np.float64, 2 * 3)
    ref = tp[0].grad.numpy()
    assert_within(grads["a"], ref, scaled_rtol * np.abs(ref), "clipped gradient - torch")
    # exactly max_norm norm / (norm + 1e-6); the scaled gradients' norm is off by the norm's
    # error twice (the norm in the scale, and this norm's own) and 3 roundings (the scale's 2,
    # the products' 1), the reference by 3
    clipped = 1.5 * norm / (norm + 1e-6)
    rtol = 2 * ours_rtol + rounding_tol(np.float64, 3 + 3)
    assert global_norm(grads) == pytest.approx(clipped, rel=rtol, abs=0)
