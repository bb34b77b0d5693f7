"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5).

Page: positional-encoding.md.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked
from ._checks.functions import check_positional_encoding, check_positional_offset_matrix

__all__ = ["positional_encoding", "positional_offset_matrix"]


# --8<-- [start:frequencies]
def _frequencies(d_model: int, base: float) -> np.ndarray:
    """omega_i = base^(-2i / d_model) for i = 0 .. d_model/2 - 1, in float64."""
    return np.power(base, -np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (D/2,)


# --8<-- [end:frequencies]


@checked(check_positional_encoding)
# --8<-- [start:positional_encoding]
def positional_encoding(max_len, d_model, *, base=10000.0, dtype=np.float64):
    r"""The sinusoidal positional-encoding table.

    Parameters
    ----------
    max_len : int
        Number of positions (rows), > 0.
    d_model : int
        Model width (columns), > 0 and even (an odd width is a ValueError): the columns come in
        (sin, cos) pairs.
    base : float, default 10000.0
        The base of the geometric progression of wavelengths (keyword only).
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the table; the angles are always computed in float64.

    Returns
    -------
    ndarray of shape (max_len, d_model)
        ``PE[pos, 2i] = sin(pos * omega_i)`` and ``PE[pos, 2i+1] = cos(pos * omega_i)``, with
        ``omega_i = base^(-2i / d_model)``.
    """
    omega = _frequencies(d_model, base)  # (D/2,)
    angles = np.arange(max_len, dtype=np.float64)[:, None] * omega  # (max_len, D/2)
    pe = np.empty((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)  # even columns: sine
    pe[:, 1::2] = np.cos(angles)  # odd columns: cosine
    return pe.astype(dtype, copy=False)


# --8<-- [end:positional_encoding]


@checked(check_positional_offset_matrix)
# --8<-- [start:positional_offset_matrix]
def positional_offset_matrix(k, d_model, *, base=10000.0, dtype=np.float64):
    r"""The fixed linear map that shifts a positional encoding by ``k`` positions.

    Parameters
    ----------
    k : int or float
        The offset (may be negative).
    d_model : int
        Model width, > 0 and even.
    base : float, default 10000.0
        As in :func:`positional_encoding`.
    dtype : {np.float64, np.float32}, default np.float64

    Returns
    -------
    ndarray of shape (d_model, d_model)
        Block-diagonal ``R_k``, one 2x2 rotation by ``k * omega_i`` per pair of columns:
        ``PE[pos + k] == R_k @ PE[pos]`` for every ``pos``.
    """
    theta = k * _frequencies(d_model, base)  # (D/2,): the angle of each pair
    c, s = np.cos(theta), np.sin(theta)
    r = np.zeros((d_model, d_model), dtype=np.float64)
    i = np.arange(0, d_model, 2)  # the first column of each pair
    r[i, i] = c
    r[i, i + 1] = s
    r[i + 1, i] = -s
    r[i + 1, i + 1] = c
    return r.astype(dtype, copy=False)


# --8<-- [end:positional_offset_matrix]
