"""Softmax cross-entropy loss with padding ignored and label smoothing, forward and backward.

Pages: backprop.md (the loss and its gradient), training.md (the loss of a training step).
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Integer

from ._checks.boundary import checked
from ._checks.losses import (
    check_cross_entropy,
    check_cross_entropy_loss_init,
    check_loss_backward,
    check_loss_is_finite,
)
from .functional import log_softmax

__all__ = ["cross_entropy", "CrossEntropyLoss"]


@checked(check_cross_entropy)
# --8<-- [start:cross_entropy]
def cross_entropy(
    logits: Float[np.ndarray, "*B V"],
    targets: Integer[np.ndarray, "*B"],
    *,
    ignore_index=None,
    label_smoothing=0.0,
):
    """Mean softmax cross-entropy and its gradient with respect to the logits.

    Parameters
    ----------
    logits : float ndarray of shape (..., V)
        Unnormalised scores, one row per predicted token. NaN and ``+inf`` are rejected.
        ``-inf`` masks a class (probability 0, gradient 0) and is allowed where the loss stays
        finite: never at the target class of a counted row, and only with
        ``label_smoothing=0`` (smoothing puts mass on every class).
    targets : ndarray of int, shape (...)
        The correct class of every row, in ``[0, V)``; rows equal to ``ignore_index`` are skipped.
    ignore_index : int or None
        Target value that marks padding: those rows add nothing to the loss, nor to the count of
        the mean, and get a zero gradient.
    label_smoothing : float in [0, 1)
        ``eps``: the target distribution is ``(1 - eps)`` on the correct class plus ``eps / V``
        spread over all classes (the paper uses 0.1).

    Returns
    -------
    loss : float
        Mean over the non-ignored rows (0.0 if every row is ignored).
    grad_logits : ndarray of shape (..., V)
        d loss / d logits, same dtype as ``logits``.

    Raises
    ------
    TypeError
        If ``logits`` is not a float array, ``targets`` not an integer array, ``ignore_index``
        not an int or None, or ``label_smoothing`` not a number.
    ValueError
        If the shapes do not match, a target is not a class id, or ``label_smoothing`` is not
        in ``[0, 1)``.
    NotFiniteError
        (a ValueError) If the loss would not be finite: NaN or ``+inf`` logits, ``-inf`` where
        the target distribution has mass, or logits too far apart for their dtype. The message
        says where.

    Notes
    -----
    The same as ``torch.nn.functional.cross_entropy(..., ignore_index=..., label_smoothing=...)``
    with ``reduction="mean"``, except when every row is ignored: PyTorch returns NaN, here the
    loss is 0.0 and the gradient zero.
    """
    V = logits.shape[-1]
    z = logits.reshape(-1, V)  # (..., V) -> (N_all, V)
    y = targets.reshape(-1)  # (N_all,)
    kept = np.ones(y.shape, bool) if ignore_index is None else y != ignore_index
    n = int(kept.sum())
    if n == 0:
        return 0.0, np.zeros_like(logits)
    rows = slice(None) if n == y.size else np.flatnonzero(kept)  # no copy without padding
    yk = y[rows]  # (N,)
    # 1. The loss: -(1 - eps) log p_y - eps mean_i log p_i, averaged over the kept rows.
    logp = log_softmax(z[rows], -1)  # (N, V)
    per_row = -logp[np.arange(n), yk]  # (N,)
    if label_smoothing:
        per_row = (1.0 - label_smoothing) * per_row - label_smoothing * logp.mean(axis=-1)
    loss = check_loss_is_finite(float(per_row.sum() / n), logits)
    # 2. The gradient: (p - q) / N on the kept rows, zero on the ignored ones.
    g = np.exp(logp)  # p, (N, V)
    if label_smoothing:
        g -= label_smoothing / V
    g[np.arange(n), yk] -= 1.0 - label_smoothing
    g /= n
    if n == y.size:
        return loss, g.reshape(logits.shape)
    grad = np.zeros_like(z)
    grad[rows] = g
    return loss, grad.reshape(logits.shape)


# --8<-- [end:cross_entropy]


# --8<-- [start:cross_entropy_loss]
class CrossEntropyLoss:
    """Cross-entropy as a layer: ``forward`` returns the loss, ``backward`` the logits' gradient.

    Parameters
    ----------
    ignore_index : int or None
        Target id of padding, skipped (see :func:`cross_entropy`).
    label_smoothing : float in [0, 1)
        Smoothing ``eps`` of the target distribution.
    """

    def __init__(self, ignore_index=None, label_smoothing=0.0):
        check_cross_entropy_loss_init(ignore_index, label_smoothing)
        self.ignore_index = None if ignore_index is None else int(ignore_index)
        self.label_smoothing = float(label_smoothing)
        self.grad = None

    def forward(self, logits: Float[np.ndarray, "*B V"], targets: Integer[np.ndarray, "*B"]):
        """Loss (float) of ``logits`` (..., V) against ``targets`` (...); keeps the gradient."""
        loss, self.grad = cross_entropy(
            logits,
            targets,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
        )
        return loss

    __call__ = forward

    def backward(self, grad_output=1.0):
        """d(grad_output * loss) / d logits, shape (..., V).

        ``grad_output`` is the gradient of the final objective with respect to the (scalar)
        loss: a finite real number, 1.0 when the loss is the objective itself.
        """
        g = check_loss_backward(self, grad_output)
        return self.grad * g if g != 1.0 else self.grad


# --8<-- [end:cross_entropy_loss]
