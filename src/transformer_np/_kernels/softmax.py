"""The in-place softmax kernel behind attention.

:func:`transformer_np.functional.softmax` is the plain formula: it checks its input and returns a
new array. Attention cannot afford a new ``(..., n, n)`` array per step, so it calls
:func:`softmax_inplace`, which overwrites its scores with the weights and has two switches that
skip work when the caller knows it is not needed. ``tests/test_kernels_gelu.py`` checks that it
equals :func:`~transformer_np.functional.softmax` for every combination of the switches.
"""

from __future__ import annotations

import numpy as np

__all__ = ["softmax_inplace"]


def softmax_inplace(
    s: np.ndarray,
    axis: int = -1,
    row_max: np.ndarray | None = None,
    *,
    shift: bool = True,
    normalise: bool = True,
) -> np.ndarray:
    """Softmax of ``s`` along ``axis``, written into ``s`` itself (no input checks).

    The kernel behind attention: 1. maximum of each slice, 2. subtract it, 3. exponentiate,
    4. divide by the slice sum; all in place on ``s``. A slice that is entirely ``-inf``
    becomes all zeros.

    Parameters
    ----------
    s : ndarray of shape (...)
        Float array without NaN or ``+inf``; overwritten with the softmax (or, with
        ``normalise=False``, with the exponentials).
    axis : int, default -1
        The axis along which the softmax sums to 1.
    row_max : ndarray of shape (...) with 1 along ``axis``, optional
        ``np.max(s, axis=axis, keepdims=True)`` already computed by the caller; it is
        overwritten. Ignored when ``shift=False``.
    shift : bool, default True
        ``False`` skips steps 1-2, for a caller that knows that ``exp(s)`` cannot overflow (the
        softmax is the same whatever is subtracted from a slice).
    normalise : bool, default True
        ``False`` skips step 4: ``s`` ends with the exponentials, and the caller divides
        something else by the sums.

    Returns
    -------
    ndarray of shape (...) with 1 along ``axis``
        The sums of the slices (``keepdims``), with 1 in place of 0 for an all ``-inf`` slice.
    """
    if shift:
        # 1. The maximum of each slice; an all -inf slice has max -inf: use 0 there instead, so
        # that exp(-inf - 0) = 0 and the slice ends as zeros instead of NaN.
        m = np.max(s, axis=axis, keepdims=True) if row_max is None else row_max
        np.copyto(m, 0, where=np.isneginf(m))
        # 2. Subtract it: every exponent is then <= 0.
        s -= m
    # 3. Exponentiate.
    np.exp(s, out=s)
    if axis in (-1, s.ndim - 1):  # a product with a vector of ones: BLAS sums rows faster
        total = np.matmul(s, np.ones(s.shape[-1], s.dtype))[..., None]
    else:
        total = np.sum(s, axis=axis, keepdims=True)
    # A slice sums to 0 only if it was all -inf (with the maximum subtracted, the maximum
    # contributes exp(0) = 1): divided by 1, it stays 0.
    total[total == 0] = 1
    # 4. Divide by the sums.
    if normalise:
        s /= total
    return total
