"""NumPy on a few rows at a time: the helpers of the layers' one-token steps (``decode_step``).

While generating with a key/value cache, every step runs the model on one new position per
sequence: products of a (B, n) block of rows by a weight, where the time goes into the number
of NumPy calls rather than into the arithmetic. These helpers make the fewest calls: ``np.dot``
on 2-D arrays (less overhead than ``@``), constant vectors repeated to (B, n) (NumPy combines
arrays of one shape faster than it broadcasts a vector), small new arrays rather than writes
into buffers. The layers that use them are tested equal to their ``forward``.
"""

from __future__ import annotations

import functools

import numpy as np

from .gelu import TAIL32_D, TAIL32_MAX, TAIL32_N, gelu_range64

__all__ = ["affine", "centring", "constant", "gelu_rows", "repeated"]

dot = np.dot


@functools.lru_cache(maxsize=64)
def constant(shape, value, dtype):
    """A read-only array of ``shape`` filled with ``value``, made once and shared."""
    a = np.full(shape, value, dtype)
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=16)
def centring(D, dtype):
    """The read-only (D, D) matrix I - 1/D: ``x @ centring(D)`` is x minus its mean."""
    a = (np.eye(D) - 1 / D).astype(dtype)
    a.flags.writeable = False
    return a


def repeated(v, B, dtype):
    """The vector v (n,) repeated as B rows: (B, n) (a view when B = 1)."""
    v = np.asarray(v).astype(dtype, copy=False)
    return v.reshape(1, -1) if B == 1 else np.tile(v, (B, 1))


def affine(W, b, B):
    """``x @ W + b`` on (B, d_in) rows (``x @ W`` when b is None), the weights read now."""
    if b is None:
        return lambda x: dot(x, W)
    bias = repeated(b, B, W.dtype)
    return lambda x: dot(x, W) + bias


def gelu_rows(x):
    """The exact GELU of a few rows: float32 with :func:`gelu32`'s steps, float64 by ranges."""
    if x.dtype == np.float32:
        return gelu32(x)
    a = np.empty_like(x)
    gelu_range64(x.reshape(-1), a.reshape(-1))
    return a


def gelu32(x):
    """The exact GELU of a small float32 array, :func:`~.gelu.gelu_range32`'s steps in the
    same order (so the same result), each a new array: on a few hundred numbers, a new small
    array costs less than writing into a buffer."""
    n, d = TAIL32_N, TAIL32_D
    a = np.abs(x)
    ac = np.minimum(a, TAIL32_MAX)
    e = np.exp(a * a * np.float32(-0.5))  # exp(-a^2 / 2)
    num = (((ac * n[4] + n[3]) * ac + n[2]) * ac + n[1]) * ac + n[0]
    den = ((((ac + d[4]) * ac + d[3]) * ac + d[2]) * ac + d[1]) * ac + d[0]
    return np.maximum(x, np.float32(0)) - num / den * e * a  # max(x, 0) - |x| Q(|x|)
