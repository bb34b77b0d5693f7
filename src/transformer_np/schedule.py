"""The learning-rate schedule of the paper ("Noam"): a linear warm-up, then 1 / sqrt(step).

Page: training.md.
"""

from __future__ import annotations

from ._checks.boundary import checked
from ._checks.optim import check_noam_lr, check_noam_schedule

__all__ = ["NoamSchedule", "noam_lr"]


@checked(check_noam_lr)
# --8<-- [start:noam_lr]
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

    Raises
    ------
    TypeError
        If ``step`` is not an integer (a float, a bool or a string is refused: the schedule is
        evaluated at the optimiser's step count), or ``d_model``, ``warmup_steps`` or ``factor``
        is not a number.
    ValueError
        If ``step`` is < 1, or ``d_model``, ``warmup_steps`` or ``factor`` is not a positive
        finite number.
    """
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


# --8<-- [end:noam_lr]


class NoamSchedule:
    """The paper's warm-up schedule as a callable ``step -> lr`` (see :func:`noam_lr`).

    Parameters
    ----------
    d_model : int
        Model width; larger models get smaller rates.
    warmup_steps : int
        Length of the linear warm-up (4000 in the paper).
    factor : float
        Overall multiplier (1.0 in the paper; small models like larger values).

    Raises
    ------
    TypeError, ValueError
        If ``d_model``, ``warmup_steps`` or ``factor`` is not a positive finite number (checked
        here, not at the first step).
    """

    def __init__(self, d_model, warmup_steps=4000, factor=1.0):
        check_noam_schedule(d_model, warmup_steps, factor)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = factor

    # --8<-- [start:noam_schedule_call]
    def __call__(self, step):
        """The learning rate at ``step`` (from 1): :func:`noam_lr` with this schedule's values."""
        return noam_lr(step, self.d_model, self.warmup_steps, self.factor)
        # --8<-- [end:noam_schedule_call]

    def __repr__(self):
        return (
            f"NoamSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, "
            f"factor={self.factor})"
        )
