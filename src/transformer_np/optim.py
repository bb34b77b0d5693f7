"""Adam, the optimiser of the paper, on the dicts ``model.params`` and ``model.grads``; the
parameter arrays are updated in place. Page: training.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ._checks.optim import (
    check_adam_init,
    check_adam_state,
    check_adam_step,
    check_current_lr,
    lr_at_step,
)

__all__ = ["Adam"]


class Adam:
    """Adam (Kingma & Ba, 2015) on a dict of parameter arrays, updated in place.

    Parameters
    ----------
    params : dict of str to ndarray
        The arrays to optimise (floating point). They are modified in place; the optimiser
        keeps references to these arrays, as ``torch.optim`` does.
    lr : float or callable
        Learning rate (a positive finite number), or a schedule ``step -> lr`` (e.g.
        :class:`~transformer_np.schedule.NoamSchedule`), step from 1, whose values are checked
        when they are used.
    betas : tuple of float
        Decay rates of the first and second moment, a pair of numbers in ``[0, 1)``; the paper
        uses ``(0.9, 0.98)``.
    eps : float
        Added to the root of the second moment (positive, finite); the paper uses ``1e-9``.
    weight_decay : float
        Decoupled weight decay (AdamW style), finite and >= 0, 0 by default.

    Raises
    ------
    TypeError
        If ``params`` is not a non-empty dict of floating-point ndarrays, ``betas`` is not a
        pair, or ``lr``, a beta, ``eps`` or ``weight_decay`` is not a number (a string such as
        ``"0.1"`` included).
    ValueError
        If ``lr``, ``betas``, ``eps`` or ``weight_decay`` is out of range, NaN or infinite.

    Notes
    -----
    The update of ``torch.optim.Adam`` (of ``AdamW`` when ``weight_decay > 0``), with the moments
    of all the parameters in one flat vector.
    """

    # --8<-- [start:adam_init]
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0):
        check_adam_init(params, lr, betas, eps, weight_decay)
        self.params = params
        self.lr = lr
        self.betas = (float(betas[0]), float(betas[1]))
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.t = 0  # steps taken
        # The arrays themselves, looked up once (they are updated in place): assigning a new
        # array to params[name] later is not seen by this optimiser.
        self.names = list(params)
        self.arrays = [params[k] for k in self.names]
        self.dtype = np.result_type(*(p.dtype for p in self.arrays))
        # Both moments of every parameter in one flat vector; parameter i is [off[i]:off[i+1]].
        self.offsets = np.cumsum([0] + [p.size for p in self.arrays]).tolist()
        self.m = np.zeros(self.offsets[-1], dtype=self.dtype)
        self.v = np.zeros(self.offsets[-1], dtype=self.dtype)
        self.scratch = np.empty_like(self.m)  # the step's scratch space
        # --8<-- [end:adam_init]

    def current_lr(self, step=None):
        """The learning rate used at ``step`` (an integer >= 1; default the next step, ``t + 1``).

        Raises
        ------
        TypeError, ValueError
            If ``step`` is not an integer >= 1, or the schedule returns something other than a
            positive finite number.
        """
        return lr_at_step(self.lr, check_current_lr(self, step))

    # --8<-- [start:adam_step]
    def step(self, grads: Mapping[str, np.ndarray], lr: float | Callable | None = None):
        """Apply one update with ``grads`` (same keys and shapes as ``params``).

        Parameters
        ----------
        grads : dict of str to ndarray
            One real numeric array per parameter, of exactly its shape.
        lr : float or callable, optional
            Learning rate of this step only, or a schedule evaluated at this step; default the
            optimiser's own ``lr``.

        Raises
        ------
        TypeError, ValueError
            If ``grads`` has other keys, shapes or a non-numeric dtype, or ``lr`` is not a
            positive finite number.
        FloatingPointError
            If a gradient holds NaN or inf (the message names it).

        On any error nothing changes: the checks all run before the step count, the moments
        or the parameters are touched.
        """
        g, lr = check_adam_step(self, grads, lr)  # g: all the gradients in one flat vector
        self.t += 1
        b1, b2 = self.betas
        m, v, update = self.m, self.v, self.scratch  # flat vectors, written in place
        # 1. The moments: m_t = b1 m_{t-1} + (1 - b1) g_t, v_t = b2 v_{t-1} + (1 - b2) g_t^2.
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * np.square(g, out=g)
        # 2. The step lr m_hat / (sqrt(v_hat) + eps), with the bias corrections
        #    m_hat = m_t / (1 - b1^t) and v_hat = v_t / (1 - b2^t).
        np.multiply(v, 1 / (1 - b2**self.t), out=update)  # v_hat
        np.sqrt(update, out=update)
        update += self.eps
        np.divide(m, update, out=update)
        update *= lr / (1 - b1**self.t)
        # 3. The parameters, each from its slice of the flat vector.
        for p, start, stop in zip(self.arrays, self.offsets, self.offsets[1:], strict=False):
            if self.weight_decay:
                p *= 1 - lr * self.weight_decay  # decoupled weight decay (AdamW)
            p -= update[start:stop].reshape(p.shape)
        # --8<-- [end:adam_step]

    def state_dict(self):
        """Moments and step count as plain arrays (for saving with ``np.savez``).

        Returns
        -------
        dict
            ``m`` and ``v``, flat copies of the first and second moments (one value per scalar
            parameter), and ``t``, the number of steps taken, as a 0-d array.
        """
        return {"m": self.m.copy(), "v": self.v.copy(), "t": np.array(self.t)}

    def load_state_dict(self, state):
        """Restore what :meth:`state_dict` returned.

        Parameters
        ----------
        state : dict
            Exactly the keys ``m``, ``v`` (flat real arrays with one value per scalar parameter,
            all finite, ``v >= 0``) and ``t`` (an integer >= 0).

        Raises
        ------
        TypeError, ValueError
            If ``state`` is not such a dict. Everything is checked before anything is copied:
            on an error the optimiser is left as it was.
        """
        m, v, t = check_adam_state(self, state)
        self.m[...] = m
        self.v[...] = v
        self.t = t
