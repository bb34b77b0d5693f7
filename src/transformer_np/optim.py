"""Optimisation: Adam, the warm-up schedule of the paper ("Noam"), clipping by global norm.

Parameters and gradients are plain dicts ``name -> ndarray`` with the same keys (what
``model.parameters()`` and ``model.gradients()`` return). Adam updates the parameter arrays in
place, so every layer that holds them sees the new values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["Adam", "NoamSchedule", "noam_lr", "clip_grad_norm", "global_norm"]


def _check_positive(name, value):
    try:
        ok = float(value) > 0 and math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def noam_lr(step, d_model, warmup_steps=4000, factor=1.0):
    """Learning rate of the original Transformer at a given step.

    Parameters
    ----------
    step : int
        Optimiser step, counted from 1.
    d_model : int
        Model width; larger models get smaller rates.
    warmup_steps : int
        Length of the linear warm-up (4000 in the paper).
    factor : float
        Overall multiplier (1.0 in the paper; small models like larger values).

    Returns
    -------
    float

    Notes
    -----
    .. math:: \\mathit{lrate} = \\mathit{factor} \\cdot d_{\\text{model}}^{-0.5} \\cdot
              \\min(\\mathit{step}^{-0.5},\\ \\mathit{step} \\cdot \\mathit{warmup}^{-1.5})

    It grows linearly for ``warmup_steps`` steps, peaks at
    ``factor / sqrt(d_model * warmup_steps)``, then decays like ``1 / sqrt(step)``.

    Examples
    --------
    >>> round(noam_lr(4000, d_model=512), 6)
    0.000699
    """
    if int(step) < 1:
        raise ValueError(f"step must be >= 1 (steps are counted from 1), got {step}")
    _check_positive("d_model", d_model)
    _check_positive("warmup_steps", warmup_steps)
    _check_positive("factor", factor)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


class NoamSchedule:
    """The paper's warm-up schedule as a callable ``step -> lr`` (see :func:`noam_lr`).

    Examples
    --------
    >>> sched = NoamSchedule(d_model=64, warmup_steps=100, factor=1.0)
    >>> sched(1) < sched(100) > sched(1000)
    True
    """

    def __init__(self, d_model, warmup_steps=4000, factor=1.0):
        _check_positive("d_model", d_model)
        _check_positive("warmup_steps", warmup_steps)
        _check_positive("factor", factor)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = factor

    def __call__(self, step):
        return noam_lr(step, self.d_model, self.warmup_steps, self.factor)

    def __repr__(self):
        return (
            f"NoamSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, "
            f"factor={self.factor})"
        )


def global_norm(grads):
    """Euclidean norm of all gradients taken together, ``sqrt(sum_k ||g_k||^2)``."""
    total = 0.0
    for g in grads.values():
        flat = g.reshape(-1)
        total += float(np.dot(flat, flat))
    return math.sqrt(total)


def clip_grad_norm(grads, max_norm):
    """Scale all gradients in place so that their global norm is at most ``max_norm``.

    Parameters
    ----------
    grads : dict of str to ndarray
        Gradients, modified in place.
    max_norm : float
        Largest allowed global norm (positive).

    Returns
    -------
    float
        The global norm *before* clipping (useful to log; NaN or inf means the step diverged).

    Notes
    -----
    .. math:: g \\leftarrow g \\cdot \\min\\left(1, \\frac{c}{\\lVert g \\rVert_2 + 10^{-6}}\\right)

    as ``torch.nn.utils.clip_grad_norm_``. The direction of the update is kept.

    Examples
    --------
    >>> import numpy as np
    >>> g = {"w": np.array([3.0, 4.0])}
    >>> clip_grad_norm(g, 1.0), g["w"].round(3).tolist()
    (5.0, [0.6, 0.8])
    """
    _check_positive("max_norm", max_norm)
    norm = global_norm(grads)
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale
    return norm


class Adam:
    """Adam (Kingma & Ba, 2015) on a dict of parameter arrays, updated in place.

    Parameters
    ----------
    params : dict of str to ndarray
        The arrays to optimise (floating point). They are modified in place; the optimiser
        keeps references to these arrays, as ``torch.optim`` does.
    lr : float or callable
        Learning rate, or a schedule ``step -> lr`` (e.g. :class:`NoamSchedule`), step from 1.
    betas : tuple of float
        Decay rates of the first and second moment; the paper uses ``(0.9, 0.98)``.
    eps : float
        Added to the root of the second moment; the paper uses ``1e-9``.
    weight_decay : float
        Decoupled weight decay (AdamW style), 0 by default.

    Notes
    -----
    With gradient :math:`g_t` at step :math:`t`:

    .. math::
        m_t = \\beta_1 m_{t-1} + (1-\\beta_1) g_t, \\quad
        v_t = \\beta_2 v_{t-1} + (1-\\beta_2) g_t^2, \\\\
        \\theta_t = \\theta_{t-1} - \\alpha_t \\frac{m_t / (1-\\beta_1^t)}
                    {\\sqrt{v_t / (1-\\beta_2^t)} + \\epsilon}

    the update of ``torch.optim.Adam`` (and of ``AdamW`` when ``weight_decay > 0``). The moments of
    all parameters live in one flat vector, so a step costs a handful of NumPy calls whatever the
    number of arrays.

    Examples
    --------
    >>> import numpy as np
    >>> w = {"x": np.array([1.0, -2.0])}
    >>> opt = Adam(w, lr=0.1)
    >>> opt.step({"x": np.array([0.5, -0.5])})
    >>> w["x"].round(3).tolist()
    [0.9, -1.9]
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0):
        if not isinstance(params, Mapping) or not params:
            raise TypeError(f"params must be a non-empty dict name -> ndarray, got {type(params)}")
        for name, p in params.items():
            if not isinstance(p, np.ndarray) or not np.issubdtype(p.dtype, np.floating):
                raise TypeError(f"parameter {name!r} must be a floating-point ndarray")
        if not callable(lr):
            _check_positive("lr", lr)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        _check_positive("eps", eps)
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        self.params = params
        self.lr = lr
        self.betas = (float(b1), float(b2))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.t = 0
        self._names = list(params)
        # The arrays themselves, looked up once (they are updated in place): assigning a new
        # array to params[name] later is not seen by this optimiser.
        self._arrays = [params[k] for k in self._names]
        dtypes = {p.dtype for p in params.values()}
        self.dtype = np.result_type(*dtypes)
        sizes = [params[k].size for k in self._names]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        n = int(self._offsets[-1])
        self.m = np.zeros(n, dtype=self.dtype)
        self.v = np.zeros(n, dtype=self.dtype)
        self._tmp = np.empty(n, dtype=self.dtype)

    def current_lr(self, step=None):
        """The learning rate used at ``step`` (default: the next step)."""
        step = self.t + 1 if step is None else step
        lr = self.lr(step) if callable(self.lr) else self.lr
        _check_positive("lr", lr)
        return float(lr)

    def step(self, grads: Mapping[str, np.ndarray], lr: float | Callable | None = None):
        """Apply one update with ``grads`` (same keys and shapes as ``params``)."""
        if set(grads) != set(self._names):
            missing = sorted(set(self._names) - set(grads))
            extra = sorted(set(grads) - set(self._names))
            raise ValueError(
                f"grads must have the keys of params; missing {missing}, extra {extra}"
            )
        lr = self.current_lr() if lr is None else lr
        _check_positive("lr", lr)
        self.t += 1
        b1, b2 = self.betas
        g = np.concatenate(
            [np.asarray(grads[k], dtype=self.dtype).reshape(-1) for k in self._names]
        )
        if g.size != self.m.size:
            raise ValueError("grads must have the same shapes as params")
        m, v, tmp = self.m, self.v, self._tmp
        m *= b1
        m += (1.0 - b1) * g
        np.multiply(g, g, out=g)
        v *= b2
        v += (1.0 - b2) * g
        # update = lr / bc1 * m / (sqrt(v / bc2) + eps), written as few passes as possible
        bc1 = 1.0 - b1**self.t
        bc2 = 1.0 - b2**self.t
        np.sqrt(v, out=tmp)
        tmp *= 1.0 / math.sqrt(bc2)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= lr / bc1
        off = self._offsets
        for i, p in enumerate(self._arrays):
            if self.weight_decay:
                p *= 1.0 - lr * self.weight_decay
            p -= tmp[off[i] : off[i + 1]].reshape(p.shape)

    def state_dict(self):
        """Moments and step count as plain arrays (for saving with ``np.savez``)."""
        return {"m": self.m.copy(), "v": self.v.copy(), "t": np.array(self.t)}

    def load_state_dict(self, state):
        """Restore what :meth:`state_dict` returned."""
        if state["m"].shape != self.m.shape or state["v"].shape != self.v.shape:
            raise ValueError("optimizer state does not match the parameters")
        self.m[...] = state["m"]
        self.v[...] = state["v"]
        self.t = int(state["t"])
