"""Optimisation: Adam (the warm-up schedule is in schedule.py, clipping in clipping.py).

Parameters and gradients are plain dicts ``name -> ndarray`` with the same keys (what
``model.parameters()`` and ``model.gradients()`` return). Adam updates the parameter arrays in
place, so every layer that holds them sees the new values.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping

import numpy as np

from ._validation import (
    as_typed_array,
    check_finite,
    check_positive_number,
    check_step,
    grad_arrays,
    real_scalar,
    shape_str,
    type_name,
)
from .schedule import NoamSchedule, noam_lr  # re-exported: transformer_np.optim.noam_lr

__all__ = ["Adam", "NoamSchedule", "noam_lr"]


class Adam:
    """Adam (Kingma & Ba, 2015) on a dict of parameter arrays, updated in place.

    Parameters
    ----------
    params : dict of str to ndarray
        The arrays to optimise (floating point). They are modified in place; the optimiser
        keeps references to these arrays, as ``torch.optim`` does.
    lr : float or callable
        Learning rate (a positive finite number), or a schedule ``step -> lr`` (e.g.
        :class:`NoamSchedule`), step from 1, whose values are checked when they are used.
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
        If ``params`` is not a non-empty dict of floating-point ndarrays, or ``betas`` is not a
        pair.
    ValueError
        If ``lr``, ``betas``, ``eps`` or ``weight_decay`` is out of range, NaN, infinite or not
        a number (a string such as ``"0.1"`` included).

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
            check_positive_number("lr", lr, " (or a schedule step -> lr)")
        b1, b2 = self._check_betas(betas)
        eps = check_positive_number("eps", eps)
        wd = real_scalar(weight_decay)
        if wd is None or not math.isfinite(wd) or wd < 0:
            raise ValueError(
                "weight_decay must be a finite number >= 0 (0 turns it off), "
                f"got {weight_decay!r} ({type_name(weight_decay)})"
            )
        self.params = params
        self.lr = lr
        self.betas = (b1, b2)
        self.eps = eps
        self.weight_decay = wd
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
        self._update = np.empty(n, dtype=self.dtype)  # scratch space of step()

    @staticmethod
    def _check_betas(betas):
        if (
            isinstance(betas, str)
            or not hasattr(betas, "__len__")
            or not hasattr(betas, "__getitem__")
        ):
            raise TypeError(
                f"betas must be a pair (beta1, beta2) of numbers in [0, 1), "
                f"got {betas!r} ({type_name(betas)})"
            )
        if len(betas) != 2:
            raise ValueError(
                f"betas must be a pair (beta1, beta2) of numbers in [0, 1), "
                f"got {betas!r} (of length {len(betas)})"
            )
        out = []
        for i, b in enumerate(betas):
            number = real_scalar(b)
            if number is None or not 0.0 <= number < 1.0:  # NaN fails the comparison too
                raise ValueError(
                    f"betas[{i}] must be a number in [0, 1), got {b!r} ({type_name(b)})"
                )
            out.append(number)
        return tuple(out)

    def current_lr(self, step=None):
        """The learning rate used at ``step``.

        Parameters
        ----------
        step : int, optional
            An optimiser step, counted from 1; default the next step (``self.t + 1``).

        Returns
        -------
        float

        Raises
        ------
        ValueError
            If ``step`` is not an integer >= 1, or the schedule returns something other than a
            positive finite number.
        """
        step = self.t + 1 if step is None else check_step(step)
        if not callable(self.lr):
            return check_positive_number("lr", self.lr)
        lr = self.lr(step)
        return check_positive_number(
            "lr", lr, f" (returned by the schedule {self.lr!r} at step {step})"
        )

    def check_holds(self, params) -> None:
        """Raise ValueError unless ``params`` are the very arrays this optimiser updates.

        The arrays are compared by identity, not by value: an optimiser built on another model,
        or on copies of the arrays, would train arrays that nobody reads.

        Parameters
        ----------
        params : dict of str to ndarray
            The parameters that should be trained, usually ``model.parameters()``.

        Raises
        ------
        ValueError
            If ``params`` is not a dict, has other names than the optimiser's, or holds an array
            that is not the one the optimiser updates (the message says which).

        Examples
        --------
        >>> import numpy as np
        >>> w = {"x": np.zeros(2)}
        >>> Adam(w).check_holds(w)  # the same arrays: nothing to say
        >>> Adam(w).check_holds({"x": w["x"].copy()})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: optimizer was not built on this model's parameters: 1 of 1 arrays (first 'x')...
        """
        if not isinstance(params, Mapping):
            problem = f"the parameters must be a dict name -> ndarray, got {type_name(params)}"
        elif set(params) != set(self._names):
            missing = sorted(set(params) - set(self._names))
            extra = sorted(set(self._names) - set(params))
            problem = (
                f"the optimiser holds other parameter names (the model's {missing[:3]} are "
                f"missing, {extra[:3]} are not the model's)"
            )
        else:
            pairs = zip(self._names, self._arrays, strict=True)
            foreign = [name for name, array in pairs if params[name] is not array]
            if not foreign:
                return
            problem = (
                f"{len(foreign)} of {len(self._names)} arrays (first {foreign[0]!r}) are not the "
                "model's own arrays, so the update would not reach the model"
            )
        raise ValueError(
            f"optimizer was not built on this model's parameters: {problem}; "
            "build it with Adam(model.parameters()) of the model you train"
        )

    def _check_grads(self, grads) -> np.ndarray:
        """Check ``grads`` and return them as one flat vector of ``self.dtype`` (a new array).

        Keys, exact shapes, real numeric dtypes and finiteness are all checked here, before
        the optimiser or any parameter is touched.
        """
        if not isinstance(grads, Mapping):
            raise TypeError(
                f"grads must be a dict name -> ndarray with the keys of params, "
                f"got {type_name(grads)}"
            )
        if set(grads) != set(self._names):
            missing = sorted(set(self._names) - set(grads))
            extra = sorted(set(grads) - set(self._names))
            raise ValueError(
                f"grads must have the keys of params; missing {missing}, extra {extra}"
            )
        arrays = grad_arrays(grads)
        for k, p in zip(self._names, self._arrays, strict=True):
            if arrays[k].shape != p.shape:
                raise ValueError(
                    f"grads[{k!r}] must have the shape of params[{k!r}], {shape_str(p.shape)}, "
                    f"got {shape_str(arrays[k].shape)}"
                )
        with np.errstate(over="ignore", invalid="ignore"):  # reported just below
            g = np.concatenate([arrays[k].reshape(-1) for k in self._names], dtype=self.dtype)
            total = np.add.reduce(g)
        if not math.isfinite(total):
            bad = np.flatnonzero(~np.isfinite(g))
            if bad.size:
                i = int(np.searchsorted(self._offsets, bad[0], side="right")) - 1
                k = self._names[i]
                try:
                    check_finite(arrays[k], f"grads[{k!r}]")
                    reason = (
                        f"grads[{k!r}] overflows {self.dtype} (values beyond its range); "
                        "expected finite values"
                    )
                except ValueError as exc:
                    reason = str(exc)
                raise FloatingPointError(
                    f"{reason}: the step is refused and neither the parameters nor the "
                    "optimiser state were changed"
                )
        return g

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
        g = self._check_grads(grads)
        if lr is None:
            lr = self.current_lr()
        elif callable(lr):
            lr = check_positive_number(
                "lr", lr(self.t + 1), f" (returned by the schedule {lr!r} at step {self.t + 1})"
            )
        else:
            lr = check_positive_number("lr", lr, " (or a schedule step -> lr)")
        self.t += 1
        b1, b2 = self.betas
        m, v, tmp = self.m, self.v, self._update
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
        if not isinstance(state, Mapping):
            raise TypeError(
                f"state must be a dict with keys 'm', 'v' and 't' (what state_dict() returns), "
                f"got {type_name(state)}"
            )
        missing = sorted({"m", "v", "t"} - set(state))
        extra = sorted(set(state) - {"m", "v", "t"}, key=str)
        if missing or extra:
            raise ValueError(
                f"state must have exactly the keys ['m', 't', 'v'] of state_dict(); "
                f"missing {missing}, unexpected {extra}"
            )
        n = self.m.size
        new = {}
        for key in ("m", "v"):
            what = f"state[{key!r}]"
            value = state[key]
            arr = as_typed_array(value, what, "fiu", "an array of real numbers")
            if arr.shape != (n,):
                raise ValueError(
                    f"{what} must have shape ({n},) (one value per scalar parameter, "
                    f"{len(self._names)} parameters), got {shape_str(arr.shape)}: the state "
                    "belongs to an optimiser of other parameters"
                )
            with np.errstate(over="ignore"):
                arr = arr.astype(self.dtype)  # a copy: nothing is shared with the caller
            check_finite(arr, what)
            new[key] = arr
        if (new["v"] < 0).any():
            raise ValueError("state['v'] must be >= 0 (it is a mean of squared gradients)")
        t = state["t"]
        if isinstance(t, np.ndarray) and t.ndim == 0:
            t = t[()]
        if isinstance(t, bool | np.bool_) or not isinstance(t, numbers.Integral) or t < 0:
            raise ValueError(
                f"state['t'] must be an integer >= 0 (the number of steps taken), "
                f"got {state['t']!r} ({type_name(state['t'])})"
            )
        self.m[...] = new["m"]
        self.v[...] = new["v"]
        self.t = int(t)
