"""Tests of schedule.py: the paper's learning-rate schedule (noam_lr, NoamSchedule)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_np import NoamSchedule, noam_lr

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import rounding_tol

# The relative rounding bound of one noam_lr: d^-0.5 and step^-0.5 or warmup^-1.5 (powers, FR
# each), the warm-up branch's product with step (1), the products with factor and the min (2).
NOAM_RTOL = rounding_tol(np.float64, 2 * FR + 3)

# ============================================================================================
# values
# ============================================================================================


def test_noam_schedule_warms_up_linearly_then_decays_as_inverse_sqrt():
    d, w = 512, 4000
    # two computations (doubling is exact)
    assert noam_lr(1, d, w) * 2 == pytest.approx(noam_lr(2, d, w), rel=2 * NOAM_RTOL, abs=0)
    peak = noam_lr(w, d, w)
    # d w is exact; the square root and the division round
    one_over = rounding_tol(np.float64, 2)
    assert peak == pytest.approx(1 / math.sqrt(d * w), rel=NOAM_RTOL + one_over, abs=0)
    # every exact value is at most the exact peak; each computed one within NOAM_RTOL of it
    top = peak * (1 + NOAM_RTOL) / (1 - NOAM_RTOL)
    assert max(noam_lr(s, d, w) for s in range(1, 3 * w, 97)) <= top
    assert noam_lr(4 * w, d, w) == pytest.approx(peak / 2, rel=2 * NOAM_RTOL, abs=0)


def test_noam_accepts_numpy_integers():
    # two computations (the same powers, once the NumPy integers are converted)
    expected = noam_lr(4000, 512)
    assert noam_lr(np.int64(4000), np.int64(512)) == pytest.approx(
        expected, rel=2 * NOAM_RTOL, abs=0
    )


def test_noam_schedule_is_noam_lr_at_every_step():
    sched = NoamSchedule(d_model=64, warmup_steps=100, factor=2.0)
    assert all(sched(s) == noam_lr(s, 64, 100, 2.0) for s in (1, 50, 100, 1000))


# ============================================================================================
# errors
# ============================================================================================


def test_bad_step_and_warmup_raise_clear_errors():
    with pytest.raises(ValueError, match=r"step must be a positive integer.*got 0 \(int\)"):
        noam_lr(0, 64)
    with pytest.raises(ValueError, match="warmup_steps"):
        NoamSchedule(64, warmup_steps=0)


# A wrong type is a TypeError, a wrong value a ValueError (the same message, with the type).


@pytest.mark.parametrize("step", [None, float("nan"), float("inf"), "3", 1.5, True, 2.0])
def test_noam_step_must_be_an_integer(step):
    with pytest.raises(TypeError, match=r"step must be a positive integer.*counted from 1"):
        noam_lr(step, 64)


@pytest.mark.parametrize("name", ["d_model", "warmup_steps", "factor"])
@pytest.mark.parametrize(
    ("value", "error"),
    [("64", TypeError), (None, TypeError), (True, TypeError), (float("nan"), ValueError)]
    + [(0, ValueError), (-1.0, ValueError)],
)
def test_noam_hyperparameters_must_be_positive_numbers(name, value, error):
    kwargs = {"d_model": 64, "warmup_steps": 100, "factor": 1.0, name: value}
    with pytest.raises(error, match=f"{name} must be a positive finite number, got"):
        NoamSchedule(**kwargs)
    with pytest.raises(error, match=f"{name} must be a positive finite number, got"):
        noam_lr(1, **kwargs)
