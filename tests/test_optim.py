"""Adam, the warm-up schedule and gradient clipping against PyTorch."""

import math

import numpy as np
import pytest
import torch

from transformer_np.optim import Adam, NoamSchedule, clip_grad_norm, global_norm, noam_lr


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch_over_several_steps(weight_decay):
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(3, 4)), "b": rng.normal(size=(4,))}
    tparams = [
        torch.tensor(params["w"].copy(), requires_grad=True),
        torch.tensor(params["b"].copy(), requires_grad=True),
    ]
    cls = torch.optim.AdamW if weight_decay else torch.optim.Adam
    topt = cls(tparams, lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    opt = Adam(params, lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    for _ in range(5):
        grads = {"w": rng.normal(size=(3, 4)), "b": rng.normal(size=(4,))}
        tparams[0].grad = torch.tensor(grads["w"])
        tparams[1].grad = torch.tensor(grads["b"])
        topt.step()
        opt.step(grads)
    np.testing.assert_allclose(params["w"], tparams[0].detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(params["b"], tparams[1].detach().numpy(), atol=1e-12)


def test_adam_updates_arrays_in_place_so_layers_see_new_values():
    w = np.ones(3)
    opt = Adam({"w": w}, lr=0.1)
    opt.step({"w": np.ones(3)})
    assert np.allclose(w, 0.9)


def test_adam_with_noam_schedule_uses_the_step_count():
    sched = NoamSchedule(d_model=16, warmup_steps=10, factor=2.0)
    opt = Adam({"w": np.zeros(2)}, lr=sched)
    assert opt.current_lr() == pytest.approx(sched(1))
    opt.step({"w": np.ones(2)})
    assert opt.current_lr() == pytest.approx(sched(2))


def test_noam_schedule_warms_up_linearly_then_decays_as_inverse_sqrt():
    d, w = 512, 4000
    assert noam_lr(1, d, w) * 2 == pytest.approx(noam_lr(2, d, w))
    peak = noam_lr(w, d, w)
    assert peak == pytest.approx(1 / math.sqrt(d * w))
    assert max(noam_lr(s, d, w) for s in range(1, 3 * w, 97)) <= peak * (1 + 1e-12)
    assert noam_lr(4 * w, d, w) == pytest.approx(peak / 2)


def test_noam_schedule_matches_torch_lambda_lr():
    d, w = 64, 50
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sch = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5)
    )
    for step in range(1, 200):
        assert opt.param_groups[0]["lr"] == pytest.approx(noam_lr(step, d, w), rel=1e-12)
        opt.step()
        sch.step()


def test_clip_grad_norm_matches_torch():
    rng = np.random.default_rng(1)
    grads = {"a": rng.normal(size=(5, 3)) * 10, "b": rng.normal(size=(7,)) * 10}
    tp = [
        torch.nn.Parameter(torch.zeros(5, 3, dtype=torch.float64)),
        torch.nn.Parameter(torch.zeros(7, dtype=torch.float64)),
    ]
    tp[0].grad = torch.tensor(grads["a"])
    tp[1].grad = torch.tensor(grads["b"])
    tnorm = torch.nn.utils.clip_grad_norm_(tp, 1.5)
    norm = clip_grad_norm(grads, 1.5)
    assert norm == pytest.approx(tnorm.item(), rel=1e-12)
    np.testing.assert_allclose(grads["a"], tp[0].grad.numpy(), rtol=1e-12)
    assert global_norm(grads) == pytest.approx(1.5, rel=1e-6)


def test_clip_leaves_small_gradients_alone():
    g = {"a": np.array([0.1, 0.2])}
    clip_grad_norm(g, 1.0)
    assert g["a"].tolist() == [0.1, 0.2]


@pytest.mark.parametrize("lr", [0.0, -1e-3, float("nan"), "fast"])
def test_non_positive_learning_rate_is_rejected(lr):
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        Adam({"w": np.zeros(2)}, lr=lr)


def test_schedule_returning_non_positive_lr_is_rejected_at_step():
    opt = Adam({"w": np.zeros(2)}, lr=lambda step: 0.0)
    with pytest.raises(ValueError, match="lr must be a positive"):
        opt.step({"w": np.ones(2)})


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="step must be >= 1"):
        noam_lr(0, 64)
    with pytest.raises(ValueError, match="warmup_steps"):
        NoamSchedule(64, warmup_steps=0)
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm({"a": np.ones(2)}, 0)
    with pytest.raises(ValueError, match="missing"):
        Adam({"w": np.zeros(2)}).step({"v": np.zeros(2)})
    with pytest.raises(TypeError, match="floating-point"):
        Adam({"w": np.zeros(2, dtype=int)})
