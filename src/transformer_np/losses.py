"""Softmax cross-entropy loss with padding ignored and label smoothing, forward and backward.

The loss is computed from the logits directly (log-softmax with the max subtracted), so it never
overflows, and its gradient has the famous closed form ``softmax(z) - q``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cross_entropy", "CrossEntropyLoss", "log_softmax"]


def log_softmax(x, axis=-1):
    """Numerically stable ``log(softmax(x))``.

    Parameters
    ----------
    x : ndarray of shape (..., V)
        Logits.
    axis : int
        The axis holding the classes.

    Returns
    -------
    ndarray of shape (..., V)
        ``x - logsumexp(x)`` along ``axis``.

    Notes
    -----
    .. math:: \\log \\mathrm{softmax}(x)_i = x_i - m - \\log \\sum_j e^{x_j - m},
              \\quad m = \\max_j x_j

    Examples
    --------
    >>> import numpy as np
    >>> np.exp(log_softmax(np.array([1.0, 2.0, 3.0]))).sum().round(6)
    np.float64(1.0)
    """
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _check_inputs(logits, targets, ignore_index, label_smoothing):
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if not np.issubdtype(logits.dtype, np.floating):
        raise TypeError(f"logits must be a floating-point array, got dtype {logits.dtype}")
    if not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"targets must be an integer array of class ids, got dtype {targets.dtype}")
    if logits.ndim < 1 or logits.shape[:-1] != targets.shape:
        raise ValueError(
            "logits must have shape targets.shape + (V,), "
            f"got logits {logits.shape} and targets {targets.shape}"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    V = logits.shape[-1]
    valid = np.ones(targets.shape, dtype=bool) if ignore_index is None else targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= V))
    if bad.any():
        raise ValueError(
            f"targets must be class ids in [0, {V}) (or ignore_index={ignore_index}), "
            f"got {targets[bad].ravel()[:5].tolist()}"
        )
    if not np.isfinite(logits).all():
        raise ValueError("logits contain NaN or inf")
    return logits, targets, valid


def cross_entropy(logits, targets, *, ignore_index=None, label_smoothing=0.0):
    """Mean softmax cross-entropy and its gradient with respect to the logits.

    Parameters
    ----------
    logits : ndarray of shape (..., V)
        Unnormalised scores, one row per predicted token.
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

    Notes
    -----
    With :math:`p = \\mathrm{softmax}(z)`, target distribution
    :math:`q = (1-\\varepsilon)\\,\\mathrm{onehot}(y) + \\varepsilon / V` and
    :math:`N` non-ignored rows,

    .. math:: L = -\\frac{1}{N} \\sum_{\\text{rows}} \\sum_i q_i \\log p_i, \\qquad
              \\frac{\\partial L}{\\partial z} = \\frac{p - q}{N}.

    This matches ``torch.nn.functional.cross_entropy(..., ignore_index=..., label_smoothing=...)``
    with the default ``reduction="mean"``. When every row is ignored PyTorch returns NaN; here the
    loss is 0.0 and the gradient is zero.

    Examples
    --------
    >>> import numpy as np
    >>> logits = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    >>> loss, grad = cross_entropy(logits, np.array([0, -100]), ignore_index=-100)
    >>> round(loss, 4), grad[1].tolist()
    (0.2395, [0.0, 0.0, 0.0])
    """
    logits, targets, valid = _check_inputs(logits, targets, ignore_index, label_smoothing)
    V = logits.shape[-1]
    z = logits.reshape(-1, V)  # (..., V) -> (N_all, V)
    y = targets.reshape(-1)
    ok = valid.reshape(-1)
    n = int(ok.sum())
    if n == 0:
        return 0.0, np.zeros_like(logits)
    everything = n == y.size
    rows = slice(None) if everything else np.nonzero(ok)[0]
    yk = y[rows]  # (N,)
    logp = log_softmax(z[rows])  # (N, V)
    nll = -logp[np.arange(n), yk]  # (N,)
    if label_smoothing:
        smooth = -logp.mean(axis=-1)  # (N,)
        per_row = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    else:
        per_row = nll
    loss = float(per_row.sum() / n)

    # Backward: (softmax - q) / N on the kept rows, zero elsewhere.
    g = np.exp(logp)  # p, (N, V)
    if label_smoothing:
        g -= label_smoothing / V
    g[np.arange(n), yk] -= 1.0 - label_smoothing
    g /= n
    if everything:
        return loss, g.reshape(logits.shape)
    grad = np.zeros_like(z)
    grad[rows] = g
    return loss, grad.reshape(logits.shape)


class CrossEntropyLoss:
    """Cross-entropy as a layer: ``forward`` returns the loss, ``backward`` the logits' gradient.

    Parameters
    ----------
    ignore_index : int or None
        Target id of padding, skipped (see :func:`cross_entropy`).
    label_smoothing : float in [0, 1)
        Smoothing ``eps`` of the target distribution.

    Examples
    --------
    >>> import numpy as np
    >>> loss_fn = CrossEntropyLoss(ignore_index=0)
    >>> loss = loss_fn(np.zeros((2, 3, 5)), np.array([[1, 2, 0], [3, 0, 0]]))
    >>> round(loss, 4), loss_fn.backward().shape
    (1.6094, (2, 3, 5))
    """

    def __init__(self, ignore_index=None, label_smoothing=0.0):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self._grad = None

    def forward(self, logits, targets):
        """Loss (float) of ``logits`` (..., V) against ``targets`` (...); keeps the gradient."""
        loss, self._grad = cross_entropy(
            logits,
            targets,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
        )
        return loss

    __call__ = forward

    def backward(self, grad_output=1.0):
        """d(grad_output * loss) / d logits, shape (..., V)."""
        if self._grad is None:
            raise RuntimeError("CrossEntropyLoss.backward called before forward")
        return self._grad * grad_output if grad_output != 1.0 else self._grad
