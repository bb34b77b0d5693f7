"""Softmax cross-entropy loss with padding ignored and label smoothing, forward and backward.

The loss is computed from the logits directly (the log-softmax of
:mod:`transformer_np.functional`, with the maximum subtracted), so it never overflows, and its
gradient has the famous closed form ``softmax(z) - q``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._validation import first_index, shape_str
from .functional import log_softmax, log_softmax_forward

# log_softmax is defined in transformer_np.functional and imported from here too.
__all__ = ["cross_entropy", "CrossEntropyLoss", "log_softmax"]


def _check_ignore_index(ignore_index):
    if ignore_index is not None and (
        isinstance(ignore_index, bool | np.bool_) or not isinstance(ignore_index, numbers.Integral)
    ):
        raise TypeError(
            "ignore_index must be an int (the target id of the rows to skip) or None, "
            f"got {ignore_index!r} ({type(ignore_index).__name__})"
        )
    return None if ignore_index is None else int(ignore_index)


def _check_label_smoothing(label_smoothing):
    if isinstance(label_smoothing, bool | np.bool_) or not isinstance(
        label_smoothing, numbers.Real
    ):
        raise TypeError(
            "label_smoothing must be a real number in [0, 1), "
            f"got {label_smoothing!r} ({type(label_smoothing).__name__})"
        )
    eps = float(label_smoothing)
    if not 0.0 <= eps < 1.0:  # also rejects NaN
        raise ValueError(f"label_smoothing must be in [0, 1), got {eps}")
    return eps


def _check_inputs(logits, targets, ignore_index, label_smoothing):
    ignore_index = _check_ignore_index(ignore_index)
    label_smoothing = _check_label_smoothing(label_smoothing)
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
    V = logits.shape[-1]
    if V == 0:
        raise ValueError(
            f"logits has an empty class axis: shape {shape_str(logits.shape)}; "
            "expected at least one class score per row (V >= 1)"
        )
    valid = np.ones(targets.shape, dtype=bool) if ignore_index is None else targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= V))
    if bad.any():
        raise ValueError(
            f"targets must be class ids in [0, {V}) (or ignore_index={ignore_index}), "
            f"got {targets[bad].ravel()[:5].tolist()}"
        )
    _check_logit_values(logits, targets, valid, label_smoothing)
    return logits, targets, valid, label_smoothing


def _check_logit_values(logits, targets, valid, label_smoothing):
    """Reject NaN and +inf; allow -inf (a masked class) where the loss stays finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(logits, axis=None)
    if np.isfinite(total):  # fast path: no NaN and no inf anywhere
        return
    nan, posinf = np.isnan(logits), np.isposinf(logits)
    if nan.any() or posinf.any():
        bad = nan | posinf
        raise ValueError(
            f"logits contain NaN or inf ({int(nan.sum())} NaN and {int(posinf.sum())} +inf "
            f"of {logits.size} values, first at index {first_index(bad)}); expected finite "
            "values (-inf is allowed: it masks a class)"
        )
    neginf = np.isneginf(logits) & valid[..., None]  # -inf on the rows that count
    if not neginf.any():
        return
    # A masked class has probability 0, log-probability -inf: the loss is infinite if the
    # target distribution puts any mass on it.
    at_target = np.take_along_axis(logits, np.where(valid, targets, 0)[..., None], axis=-1)
    hit = valid & np.isneginf(at_target[..., 0])
    if hit.any():
        raise ValueError(
            f"logits are -inf at the target class on {int(hit.sum())} row(s) (first at row "
            f"index {first_index(hit)}): a masked class cannot be the target, the loss would "
            "be infinite; mask only classes that are never the target, or set those targets "
            "to ignore_index"
        )
    if label_smoothing:
        raise ValueError(
            f"label_smoothing = {label_smoothing} puts probability label_smoothing / V on every "
            f"class, but logits has -inf (masked classes) on {int(neginf.sum())} value(s) of "
            f"rows that count (first at index {first_index(neginf)}): the loss would be "
            "infinite; use label_smoothing=0 with masked logits"
        )


def cross_entropy(logits, targets, *, ignore_index=None, label_smoothing=0.0):
    """Mean softmax cross-entropy and its gradient with respect to the logits.

    Parameters
    ----------
    logits : float ndarray of shape (..., V)
        Unnormalised scores, one row per predicted token. NaN and ``+inf`` are rejected.
        ``-inf`` masks a class (probability 0, gradient 0) and is allowed where the loss stays
        finite: never at the target class of a counted row, and only with
        ``label_smoothing=0`` (smoothing puts mass on every class); otherwise a ValueError
        says where.
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
    logits, targets, valid, label_smoothing = _check_inputs(
        logits, targets, ignore_index, label_smoothing
    )
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
    logp = log_softmax_forward(z[rows])  # (N, V), logits checked above
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
        self.ignore_index = _check_ignore_index(ignore_index)
        self.label_smoothing = _check_label_smoothing(label_smoothing)
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
        """d(grad_output * loss) / d logits, shape (..., V).

        ``grad_output`` is the gradient of the final objective with respect to the (scalar)
        loss: a finite real number, 1.0 when the loss is the objective itself.
        """
        if isinstance(grad_output, bool | np.bool_) or not isinstance(grad_output, numbers.Real):
            raise TypeError(
                "grad_output must be a finite real number (the gradient with respect to the "
                f"scalar loss), got {grad_output!r} ({type(grad_output).__name__})"
            )
        g = float(grad_output)
        if not np.isfinite(g):
            raise ValueError(f"grad_output must be a finite real number, got {g}")
        if self._grad is None:
            raise RuntimeError("CrossEntropyLoss.backward called before forward")
        return self._grad * g if g != 1.0 else self._grad
