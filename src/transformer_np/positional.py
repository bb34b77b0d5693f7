"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5)."""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked
from ._checks.functions import check_positional_encoding, check_positional_offset_matrix

__all__ = ["positional_encoding", "positional_offset_matrix"]


def _frequencies(d_model: int, base: float) -> np.ndarray:
    """omega_i = base^(-2i / d_model) for i = 0 .. d_model/2 - 1, in float64."""
    return np.power(base, -np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (D/2,)


@checked(check_positional_encoding)
def positional_encoding(max_len, d_model, *, base=10000.0, dtype=np.float64):
    r"""The sinusoidal positional-encoding table.

    Parameters
    ----------
    max_len : int
        Number of positions (rows), > 0.
    d_model : int
        Model width (columns), > 0 and even: the columns come in (sin, cos) pairs. An odd
        ``d_model`` is rejected with a ValueError rather than padded with a lone sine column
        that would break the rotation property below.
    base : float, default 10000.0
        The base of the geometric progression of wavelengths (keyword only).
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the table; the angles are always computed in float64.

    Returns
    -------
    ndarray of shape (max_len, d_model)
        ``PE[pos, 2i] = sin(pos * omega_i)`` and ``PE[pos, 2i+1] = cos(pos * omega_i)``;
        every value is in [-1, 1].

    Notes
    -----
    .. math:: PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right),
              \qquad
              PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)

    For every offset ``k``, ``PE[pos + k] = R_k @ PE[pos]`` with a fixed block-diagonal matrix
    ``R_k`` of 2x2 rotations (:func:`positional_offset_matrix`): a relative position is a
    linear map of the encoding.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import positional_encoding
    >>> pe = positional_encoding(50, 8)
    >>> pe.shape
    (50, 8)
    >>> np.round(pe[1, :4], 4)
    array([0.8415, 0.5403, 0.0998, 0.995 ])
    """
    omega = _frequencies(d_model, base)  # (D/2,)
    angles = np.arange(max_len, dtype=np.float64)[:, None] * omega  # (max_len, D/2)
    pe = np.empty((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)  # even columns: sine
    pe[:, 1::2] = np.cos(angles)  # odd columns: cosine
    return pe.astype(dtype, copy=False)


@checked(check_positional_offset_matrix)
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
        Block-diagonal ``R_k`` with one 2x2 rotation per frequency, such that
        ``PE[pos + k] == R_k @ PE[pos]`` for every ``pos`` (for a whole table,
        ``PE[k:] == PE[:-k] @ R_k.T``). It depends on ``k`` but not on ``pos``.

    Notes
    -----
    From the angle-addition formulas, with :math:`\theta = k\,\omega_i`:

    .. math:: \begin{pmatrix} \sin(\omega_i (pos+k)) \\ \cos(\omega_i (pos+k)) \end{pmatrix}
              = \begin{pmatrix} \cos\theta & \sin\theta \\ -\sin\theta & \cos\theta
              \end{pmatrix}
              \begin{pmatrix} \sin(\omega_i\, pos) \\ \cos(\omega_i\, pos) \end{pmatrix}

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import positional_encoding, positional_offset_matrix
    >>> pe = positional_encoding(20, 8)
    >>> R = positional_offset_matrix(3, 8)
    >>> bool(np.allclose(R @ pe[5], pe[8]))
    True
    """
    theta = k * _frequencies(d_model, base)  # (D/2,)
    c, s = np.cos(theta), np.sin(theta)
    r = np.zeros((d_model, d_model), dtype=np.float64)
    i = np.arange(0, d_model, 2)
    r[i, i] = c
    r[i, i + 1] = s
    r[i + 1, i] = -s
    r[i + 1, i + 1] = c
    return r.astype(dtype, copy=False)
