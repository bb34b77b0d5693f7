"""The softmax kernel equals the plain code: softmax_inplace and functional.softmax.

:func:`transformer_np._kernels.softmax.softmax_inplace` overwrites its scores with the weights;
for every combination of its switches it must give :func:`transformer_np.functional.softmax`
and the sums of the slices, within the rounding of both computations.
"""

import itertools

import numpy as np
import pytest

from transformer_np import functional
from transformer_np._kernels.softmax import softmax_inplace

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import assert_within, rounding_tol


def _scores(dtype, axis):
    """Scores of shape (3, 4, 6) with -inf entries and one slice all -inf along ``axis``."""
    x = np.random.default_rng(5).standard_normal((3, 4, 6)) * 3
    x[0, 1, 2] = x[2, 3, 0] = x[1, 0, 5] = -np.inf
    blocked = [slice(None) if d == axis % x.ndim else 1 for d in range(x.ndim)]
    x[tuple(blocked)] = -np.inf
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize(
    ("shift", "normalise", "give_max"), list(itertools.product([True, False], repeat=3))
)
def test_softmax_inplace_equals_softmax_for_every_switch(dtype, axis, shift, normalise, give_max):
    x = _scores(dtype, axis)
    s = x.copy()
    row_max = np.max(s, axis=axis, keepdims=True) if give_max else None
    total = softmax_inplace(s, axis, row_max, shift=shift, normalise=normalise)
    # Each exponential: FR roundings, plus u |x - max| from the shift's rounding when there is
    # one (made relative by exp); a sum of n of them adds n; each weight, an exponential over
    # the sum, is off by both and the division. Per slice: the largest |x - max|.
    n = x.shape[axis]
    x64 = x.astype(np.float64)
    top = np.max(x64, axis=axis, keepdims=True)
    top = np.where(np.isneginf(top), 0.0, top)  # the all -inf slice
    spread = np.max(top - np.where(np.isneginf(x64), top, x64), axis=axis, keepdims=True)
    sum_rtol = rounding_tol(dtype, FR + n) + rounding_tol(dtype, 1, spread if shift else 0.0)
    weights_rtol = 2 * rounding_tol(dtype, 2 * FR + n + 1) + 2 * rounding_tol(dtype, 2, spread)

    # the sums of the slices: of exp(x - max) with the max subtracted, of exp(x) without; 1 for
    # the all -inf slice
    x64 = x.astype(np.float64)
    m = np.max(x64, axis=axis, keepdims=True) if shift else np.zeros(())
    m = np.where(np.isneginf(m), 0.0, m)
    expected_total = np.sum(np.exp(x64 - m), axis=axis, keepdims=True)
    expected_total[expected_total == 0] = 1
    assert total.dtype == dtype and total.shape == expected_total.shape
    # the float64 sum has the same steps, in float64
    sum_rtol = sum_rtol + rounding_tol(np.float64, FR + n) + rounding_tol(np.float64, 1, spread)
    assert_within(total, expected_total, sum_rtol * expected_total, "sums")

    # the weights: in s, or s / total when the kernel left the division to the caller
    weights = s if normalise else s / total
    assert s.dtype == dtype
    reference = functional.softmax(x, axis=axis)
    assert_within(weights, reference, weights_rtol * reference, "softmax_inplace - softmax")
    blocked = np.all(np.isneginf(x), axis=axis, keepdims=True)
    assert np.all(np.where(np.broadcast_to(blocked, x.shape), weights, 0) == 0)
    assert np.all(weights[np.isneginf(x)] == 0)
