"""optim.py: Adam (the schedule: test_schedule.py; gradient clipping: test_clipping.py; whether
the optimiser holds the model's own arrays: test_train.py).

Sections: values, errors (bad input: a TypeError for a wrong type, a ValueError for a wrong value,
or FloatingPointError for a non-finite gradient, and never a half-updated optimiser), reference
(against PyTorch).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np.optim import Adam
from transformer_np.schedule import NoamSchedule, noam_lr

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import assert_within, rounding_tol


def adam_tol(param, grads, *, lr, betas, eps, weight_decay=0.0, dtype=np.float64):
    """A bound on the error of one computation of Adam's steps on ``param`` with the gradients
    ``grads`` (a list, one per step), ours or PyTorch's (which mixes m by lerp and v by
    addcmul, and divides by sqrt(bc2) where we multiply by its reciprocal), per entry.

    Per step: m = b1 m + (1 - b1) g, 3 roundings of |m| + |g| and 1 of the result, and the
    previous error times b1; v the same with g^2 (4); bc = 1 - b^t: the power (FR of b^t, which
    1 - b^t can magnify) and 1 rounding; the denominator sqrt(v / bc2) + eps: half v's and bc2's
    relative errors and 4 roundings, then 1; the update lr / bc1 m / denominator: m's error and
    the relative errors of the denominator, of bc1 and 3 roundings; the parameter: the previous
    error (times 1 - lr wd), the update's, the decay's 3 roundings and the subtraction's 1.
    """
    (b1, b2), u1 = betas, rounding_tol(dtype, 1)
    p, m, v = np.asarray(param, np.float64).copy(), 0.0, 0.0
    dp = dm = dv = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, np.float64)
        m_new, v_new = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        dm = b1 * dm + rounding_tol(dtype, 3, np.abs(m) + np.abs(g)) + u1 * np.abs(m_new)
        dv = b2 * dv + rounding_tol(dtype, 4, v + g * g) + u1 * v_new
        m, v = m_new, v_new
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        rel_bc1 = rounding_tol(dtype, FR, b1**t) / bc1 + u1
        rel_bc2 = rounding_tol(dtype, FR, b2**t) / bc2 + u1
        root = np.sqrt(v / bc2)
        denom = root + eps
        d_denom = root * (0.5 * dv / v + 0.5 * rel_bc2 + rounding_tol(dtype, 4)) + u1 * denom
        update = lr / bc1 * m / denom
        d_update = lr / bc1 * dm / denom
        d_update += np.abs(update) * (d_denom / denom + rel_bc1 + rounding_tol(dtype, 3))
        decay = 1 - lr * weight_decay
        dp = dp * decay + d_update
        if weight_decay:
            dp += rounding_tol(dtype, 3, np.abs(p))
        p = p * decay - update
        dp += u1 * np.abs(p)
    return dp


def opt_state(opt):
    return opt.m.copy(), opt.v.copy(), opt.t


def assert_opt_unchanged(opt, state):
    m, v, t = state
    np.testing.assert_array_equal(opt.m, m)
    np.testing.assert_array_equal(opt.v, v)
    assert opt.t == t


def stepped_optimizer():
    """Adam on two parameters (4 scalars), after one step."""
    params = {"a": np.array([1.0, 2.0]), "b": np.array([[3.0], [4.0]])}
    opt = Adam(params, lr=0.1)
    opt.step({"a": np.array([0.5, -0.5]), "b": np.array([[1.0], [2.0]])})
    return opt


def two_params():
    """Two parameters of zeros and Adam on them, after one step."""
    params = {"a": np.zeros(2), "b": np.zeros(4)}
    opt = Adam(params, lr=0.1)
    opt.step({"a": np.ones(2), "b": np.ones(4)})
    return params, opt


# ============================================================================================
# values
# ============================================================================================


def test_adam_updates_arrays_in_place_so_layers_see_new_values():
    w = np.ones(3)
    opt = Adam({"w": w}, lr=0.1)
    opt.step({"w": np.ones(3)})
    # m / bc1 = sqrt(v / bc2) = 1 exactly (1 - 0.9 and 1 - 0.98 are exact): 1 - lr / (1 + eps)
    tol = adam_tol(np.ones(3), [np.ones(3)], lr=0.1, betas=(0.9, 0.98), eps=1e-9)
    assert_within(w, np.full(3, 1 - 0.1 / (1 + 1e-9)), tol + rounding_tol(w.dtype, 3), "w")


def test_adam_with_noam_schedule_uses_the_step_count():
    sched = NoamSchedule(d_model=16, warmup_steps=10, factor=2.0)
    opt = Adam({"w": np.zeros(2)}, lr=sched)
    assert opt.current_lr() == sched(1)  # the schedule itself, at the next step
    opt.step({"w": np.ones(2)})
    assert opt.current_lr() == sched(2)


def test_step_accepts_integer_gradients_and_a_schedule_for_lr():
    w = {"x": np.array([1.0, -2.0])}
    opt = Adam(w, lr=0.1)
    opt.step({"x": np.array([1, -1])}, lr=lambda step: 0.1 * step)
    assert w["x"].round(3).tolist() == [0.9, -1.9]


# ============================================================================================
# errors
# ============================================================================================

# -------------------------------------------------------------------- Adam hyperparameters


# A wrong type (a string, None, a bool) is a TypeError, a wrong value a ValueError; the message
# is the same, and shows the value and its type.
NOT_NUMBERS = [("fast", TypeError), ("0.1", TypeError), (None, TypeError), (True, TypeError)]


@pytest.mark.parametrize(
    ("lr", "error"),
    [(0.0, ValueError), (-1e-3, ValueError), (float("nan"), ValueError), (float("inf"), ValueError)]
    + NOT_NUMBERS,
)
def test_bad_lr_at_construction(lr, error):
    with pytest.raises(error, match=r"lr must be a positive finite number \(or a schedule"):
        Adam({"w": np.ones(2)}, lr=lr)


@pytest.mark.parametrize(
    ("wd", "error"),
    [(float("nan"), ValueError), (float("inf"), ValueError), (-0.1, ValueError)] + NOT_NUMBERS,
)
def test_bad_weight_decay_is_refused_at_construction(wd, error):
    with pytest.raises(error, match="weight_decay must be a finite number >= 0.*got"):
        Adam({"w": np.ones(2)}, weight_decay=wd)


@pytest.mark.parametrize(
    ("betas", "error", "message"),
    [
        ((0.9,), ValueError, r"betas must be a pair \(beta1, beta2\).*\(0\.9,\)"),
        (0.9, TypeError, r"betas must be a pair \(beta1, beta2\).*float"),
        ("ab", TypeError, "betas must be a pair"),
        ((0.9, 0.98, 0.5), ValueError, "betas must be a pair"),
        ((0.9, float("nan")), ValueError, r"betas\[1\] must be a number in \[0, 1\), got nan"),
        ((1.0, 0.9), ValueError, r"betas\[0\] must be a number in \[0, 1\), got 1\.0"),
        (("0.9", 0.98), TypeError, r"betas\[0\] must be a number in \[0, 1\).*str"),
        ((0.9, None), TypeError, r"betas\[1\] must be a number.*NoneType"),
    ],
)
def test_bad_betas(betas, error, message):
    with pytest.raises(error, match=message):
        Adam({"w": np.ones(2)}, betas=betas)


@pytest.mark.parametrize(
    ("eps", "error"),
    [(0.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError)] + NOT_NUMBERS,
)
def test_bad_eps(eps, error):
    with pytest.raises(error, match="eps must be a positive finite number"):
        Adam({"w": np.ones(2)}, eps=eps)


@pytest.mark.parametrize(("step", "error"), [(0, ValueError), (1.5, TypeError), ("2", TypeError)])
def test_current_lr_at_a_bad_step(step, error):
    opt = Adam({"w": np.ones(2)}, lr=NoamSchedule(d_model=16, warmup_steps=10))
    with pytest.raises(error, match=r"step must be a positive integer \(optimiser steps are"):
        opt.current_lr(step)


# ------------------------------------------------------------------------------- Adam.step


def test_schedule_returning_non_positive_lr_is_rejected_at_step():
    opt = Adam({"w": np.zeros(2)}, lr=lambda step: 0.0)
    with pytest.raises(ValueError, match="lr must be a positive"):
        opt.step({"w": np.ones(2)})


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_gradient_is_refused_and_nothing_changes(bad):
    params, opt = two_params()
    before = {k: v.copy() for k, v in params.items()}
    state = opt_state(opt)
    g = np.ones(4)
    g[2] = bad
    with pytest.raises(FloatingPointError, match=r"grads\['b'\] contains (NaN|inf).*\(2,\)"):
        opt.step({"a": np.ones(2), "b": g})
    assert_opt_unchanged(opt, state)
    for k, v in params.items():
        np.testing.assert_array_equal(v, before[k])


def test_gradient_that_overflows_the_parameter_dtype_is_refused():
    params = {"w": np.zeros(2, dtype=np.float32)}
    opt = Adam(params, lr=0.1)
    with pytest.raises(FloatingPointError, match=r"grads\['w'\] overflows float32"):
        opt.step({"w": np.array([1e300, 1.0])})
    assert opt.t == 0 and not opt.m.any() and not params["w"].any()


@pytest.mark.parametrize(
    ("grads", "error", "message"),
    [
        (
            {"a": np.arange(4.0), "b": np.arange(2.0)},
            ValueError,
            r"grads\['a'\] must have the shape of params\['a'\], \(2,\), got \(4,\)",
        ),
        ({"a": np.ones(2), "b": np.ones(5)}, ValueError, r"grads\['b'\] must have the shape"),
        ({"a": np.ones((2, 1)), "b": np.ones(4)}, ValueError, r"got \(2, 1\)"),
        (
            {"a": np.array(["x", "y"]), "b": np.ones(4)},
            TypeError,
            r"grads\['a'\] must be an array of real numbers",
        ),
        ({"a": np.ones(2, bool), "b": np.ones(4)}, TypeError, r"grads\['a'\].*dtype bool"),
        ({"a": np.ones(2)}, ValueError, r"missing \['b'\]"),
        ([np.ones(2), np.ones(4)], TypeError, "grads must be a dict"),
    ],
)
def test_bad_gradients_are_refused_before_any_change(grads, error, message):
    params, opt = two_params()
    before = {k: v.copy() for k, v in params.items()}
    state = opt_state(opt)
    with pytest.raises(error, match=message):
        opt.step(grads)
    assert_opt_unchanged(opt, state)
    for k, v in params.items():
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.parametrize(
    ("lr", "error"),
    [("0.1", TypeError), (0.0, ValueError), (float("nan"), ValueError)]
    + [(lambda step: -1.0, ValueError), (lambda step: "0.1", TypeError)],
)
def test_bad_lr_argument_of_step_changes_nothing(lr, error):
    params, opt = two_params()
    before = {k: v.copy() for k, v in params.items()}
    state = opt_state(opt)
    with pytest.raises(error, match="lr must be a positive finite number"):
        opt.step({"a": np.ones(2), "b": np.ones(4)}, lr=lr)
    assert_opt_unchanged(opt, state)
    for k, v in params.items():
        np.testing.assert_array_equal(v, before[k])


# ------------------------------------------------------------------ Adam.load_state_dict


def test_load_state_dict_without_t_changes_nothing():
    opt = stepped_optimizer()
    state = opt_state(opt)
    with pytest.raises(ValueError, match=r"state must have exactly the keys.*missing \['t'\]"):
        opt.load_state_dict({"m": np.ones(4), "v": np.ones(4)})
    assert_opt_unchanged(opt, state)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"m": np.ones(2)}, ValueError, r"state\['m'\] must have shape \(4,\).*got \(2,\)"),
        ({"v": np.ones((2, 2))}, ValueError, r"state\['v'\] must have shape \(4,\)"),
        ({"m": np.array([1.0, np.nan, 0, 0])}, ValueError, r"state\['m'\] contains NaN"),
        ({"v": np.array([1.0, np.inf, 0, 0])}, ValueError, r"state\['v'\] contains inf"),
        ({"v": -np.ones(4)}, ValueError, r"state\['v'\] must be >= 0"),
        ({"m": np.array(["a"] * 4)}, TypeError, r"state\['m'\] must be an array of real numbers"),
        ({"t": -1}, ValueError, r"state\['t'\] must be an integer >= 0.*-1"),
        ({"t": 1.5}, TypeError, r"state\['t'\] must be an integer >= 0.*float"),
        ({"t": np.array(True)}, TypeError, r"state\['t'\] must be an integer >= 0.*bool"),
        ({"extra": np.ones(1)}, ValueError, r"unexpected \['extra'\]"),
    ],
)
def test_load_state_dict_checks_everything_before_copying(change, error, message):
    opt = stepped_optimizer()
    state = opt_state(opt)
    bad = {"m": np.full(4, 7.0), "v": np.full(4, 7.0), "t": np.array(9)} | change
    with pytest.raises(error, match=message):
        opt.load_state_dict(bad)
    assert_opt_unchanged(opt, state)


def test_load_state_dict_rejects_a_non_dict_and_still_round_trips():
    opt = stepped_optimizer()
    with pytest.raises(TypeError, match="state must be a dict with keys 'm', 'v' and 't'"):
        opt.load_state_dict([1, 2, 3])
    other = Adam({"a": np.zeros(2), "b": np.zeros((2, 1))})
    other.load_state_dict(opt.state_dict())
    np.testing.assert_array_equal(other.m, opt.m)
    assert other.t == opt.t == 1


# ------------------------------------------------------------------------ Adam, other input


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="missing"):
        Adam({"w": np.zeros(2)}).step({"v": np.zeros(2)})
    with pytest.raises(TypeError, match="floating-point"):
        Adam({"w": np.zeros(2, dtype=int)})


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch_over_several_steps(weight_decay):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(3, 4)), "b": rng.normal(size=(4,))}
    start = {k: v.copy() for k, v in params.items()}
    tparams = [
        torch.tensor(params["w"].copy(), requires_grad=True),
        torch.tensor(params["b"].copy(), requires_grad=True),
    ]
    cls = torch.optim.AdamW if weight_decay else torch.optim.Adam
    topt = cls(tparams, lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    opt = Adam(params, lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    history = []
    for _ in range(5):
        grads = {"w": rng.normal(size=(3, 4)), "b": rng.normal(size=(4,))}
        history.append({k: v.copy() for k, v in grads.items()})
        tparams[0].grad = torch.tensor(grads["w"])
        tparams[1].grad = torch.tensor(grads["b"])
        topt.step()
        opt.step(grads)
    for name, theirs in (("w", tparams[0]), ("b", tparams[1])):
        hyper = {"lr": 0.01, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": weight_decay}
        tol = 2 * adam_tol(start[name], [g[name] for g in history], **hyper)
        assert_within(params[name], theirs.detach().numpy(), tol, f"{name} - torch")


def test_noam_schedule_matches_torch_lambda_lr():
    torch = pytest.importorskip("torch")
    d, w = 64, 50
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sch = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5)
    )
    # each side: d^-0.5, step^-0.5 and w^-1.5 (FR each; min takes one of the last two, and
    # the warm-up branch a product more) and the products (2); base_lr 1.0 is exact
    rtol = 2 * rounding_tol(np.float64, 2 * FR + 1 + 2)
    for step in range(1, 200):
        assert opt.param_groups[0]["lr"] == pytest.approx(noam_lr(step, d, w), rel=rtol, abs=0)
        opt.step()
        sch.step()
