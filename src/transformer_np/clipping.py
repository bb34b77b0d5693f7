"""Gradient clipping by global norm, on a dict ``name -> ndarray`` such as ``model.grads``: all
the gradients scaled together, their direction kept. Page: training.md.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks.boundary import checked
from ._checks.optim import check_clip_grad_norm, check_global_norm

__all__ = ["clip_grad_norm", "global_norm"]


@checked(check_global_norm)
# --8<-- [start:global_norm]
def global_norm(grads):
    """Euclidean norm of all gradients taken together, ``sqrt(sum_k ||g_k||^2)``.

    Parameters
    ----------
    grads : dict of str to ndarray
        Real numeric arrays (integer arrays are summed in float64, so they do not overflow).

    Returns
    -------
    float
        The norm; NaN or inf if a gradient holds NaN or inf, or if the sum of squares
        overflows the gradients' dtype.

    Raises
    ------
    TypeError
        If ``grads`` is not a dict of real numeric arrays.
    """
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow makes the norm inf
        for g in grads.values():
            flat = g.reshape(-1)
            if flat.dtype.kind != "f":
                flat = flat.astype(np.float64)  # an integer dot product would overflow silently
            total += float(np.dot(flat, flat))
    return math.sqrt(total)


# --8<-- [end:global_norm]


@checked(check_clip_grad_norm)
# --8<-- [start:clip_grad_norm]
def clip_grad_norm(grads, max_norm):
    """Scale all gradients in place so that their global norm is at most ``max_norm``.

    Parameters
    ----------
    grads : dict of str to ndarray
        Gradients, modified in place (so floating-point ndarrays).
    max_norm : float
        Largest allowed global norm (positive).

    Returns
    -------
    float
        The global norm *before* clipping (useful to log; NaN or inf means the step diverged,
        and then the gradients are left as they are).

    Raises
    ------
    TypeError
        If ``grads`` is not a dict of floating-point ndarrays (a list or an integer array cannot
        be scaled in place), or ``max_norm`` is not a number. Nothing is modified.
    ValueError
        If ``max_norm`` is not a positive finite number.

    Notes
    -----
    As ``torch.nn.utils.clip_grad_norm_``: the scale is ``max_norm / (norm + 1e-6)``.
    """
    norm = global_norm(grads)
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale
    return norm


# --8<-- [end:clip_grad_norm]
