"""feed_forward.py: the position-wise feed-forward network (two Linear layers, ReLU or GELU).

Sections: values (the formula, the params view with dotted names, dtypes), errors, backward
(against finite differences), reference (the output against torch.nn.Linear, ReLU/GELU,
Linear; gradients against two torch.nn.Linear layers, in float64 and in float32).
"""

import numpy as np
import pytest

from transformer_np import FeedForward, gelu

from helpers import (
    assert_within,
    gradcheck_layer,
    load_linear,
    to_torch,
    to_torch64,
    torch_dtype,
)
from rounding import exact, feed_forward_rounded, linear_rounded, torch_functions

# ============================================================================================
# values
# ============================================================================================


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feedforward_is_two_linears_with_activation(activation):
    rng = np.random.default_rng(3)
    ff = FeedForward(8, 32, activation=activation, rng=rng)
    x = rng.standard_normal((2, 3, 8))
    h = x @ ff.linear1.params["W"] + ff.linear1.params["b"]
    a = np.maximum(h, 0) if activation == "relu" else gelu(h)
    ref = a @ ff.linear2.params["W"] + ff.linear2.params["b"]
    y, _ = feed_forward_rounded(ff, exact(x))
    assert_within(ff(x), ref, y.tol(np.float64, sides=2), f"FeedForward({activation})")
    h_r, _ = linear_rounded(exact(x), ff.linear1.params["W"], ff.linear1.params["b"])
    assert_within(ff.cache["h"], h.reshape(6, 32), h_r.tol(np.float64, sides=2).reshape(6, 32))


def test_feedforward_params_view_has_dotted_names_and_writes_through():
    ff = FeedForward(4, 8, rng=np.random.default_rng(0))
    assert list(ff.params) == ["linear1.W", "linear1.b", "linear2.W", "linear2.b"]
    assert ff.params["linear1.W"] is ff.linear1.params["W"]  # the same array, no copy
    new = np.zeros((4, 8))
    ff.params["linear1.W"] = new
    assert ff.linear1.params["W"] is new
    ff.params["linear2.W"][...] = 0.0  # in-place writes reach the layer too
    ff.params["linear2.b"][...] = 5.0
    np.testing.assert_array_equal(ff(np.ones((1, 4))), np.full((1, 4), 5.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_feedforward_keeps_dtype(dtype):
    ff = FeedForward(4, 8, activation="gelu", rng=np.random.default_rng(0), dtype=dtype)
    assert ff(np.ones((3, 4), dtype=dtype)).dtype == dtype


# ============================================================================================
# errors
# ============================================================================================


def test_feedforward_feature_size_error():
    with pytest.raises(ValueError, match="x must have shape .* d_model = 4"):
        FeedForward(4, 8, rng=0)(np.zeros((3, 5)))


def test_feedforward_bad_activation():
    with pytest.raises(ValueError, match='activation must be "relu" or "gelu"'):
        FeedForward(4, 8, activation="tanh")


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_feed_forward_backward_matches_finite_differences(rng, activation, training):
    ff = FeedForward(5, 7, activation=activation, rng=rng).train(training)
    x = rng.standard_normal((3, 4, 5))
    gradcheck_layer(ff, ff.backward, ff, [x], rng)


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_forward_matches_torch(torch, dtype, activation):
    rng = np.random.default_rng(13)
    ff = FeedForward(16, 64, activation=activation, rng=rng, dtype=dtype)
    tdt = torch_dtype(dtype)
    act = torch.nn.ReLU() if activation == "relu" else torch.nn.GELU(approximate="none")
    ref = torch.nn.Sequential(
        torch.nn.Linear(16, 64, dtype=tdt), act, torch.nn.Linear(64, 16, dtype=tdt)
    )
    load_linear(ref[0], ff.linear1)
    load_linear(ref[2], ff.linear2)
    x = (2 * rng.standard_normal((3, 7, 16))).astype(dtype)  # hidden values on both sides of 0
    y = ff(x)
    assert y.dtype == dtype
    with torch.no_grad():
        ref_y = ref(to_torch(x)).numpy()
    ours = feed_forward_rounded(ff, exact(x))[0]
    theirs = feed_forward_rounded(ff, exact(x), torch_functions(dtype))[0]
    tol = ours.tol(dtype) + theirs.tol(dtype)
    assert_within(y, ref_y, tol, f"FeedForward({activation}, {np.dtype(dtype).name})")


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_feed_forward_grads_match_torch(torch, rng, training):
    """In training mode GELU's slope comes from the forward pass; in eval mode from ``h``."""
    x = rng.standard_normal((3, 4, 6))
    G = rng.standard_normal((3, 4, 6))
    for act in ("relu", "gelu"):
        ff = FeedForward(6, 10, activation=act, rng=rng).train(training)
        t1 = torch.nn.Linear(6, 10, dtype=torch.float64)
        t2 = torch.nn.Linear(10, 6, dtype=torch.float64)
        load_linear(t1, ff.linear1)
        load_linear(t2, ff.linear2)
        xt = to_torch64(x, True)
        ((t2(getattr(torch.nn.functional, act)(t1(xt)))) * to_torch64(G)).sum().backward()
        ff(x)
        dx, grads = feed_forward_rounded(ff, exact(x))[1](exact(G))
        tol = {"dx": dx.tol(np.float64, 2)} | {k: v.tol(np.float64, 2) for k, v in grads.items()}
        assert_within(ff.backward(G), xt.grad, tol["dx"], f"FeedForward({act}) dx")
        assert_within(
            ff.grads["linear1.W"],
            t1.weight.grad.T,
            tol["linear1.W"],
            f"FeedForward({act}) linear1.W",
        )
        assert_within(
            ff.grads["linear2.b"], t2.bias.grad, tol["linear2.b"], f"FeedForward({act}) linear2.b"
        )


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_float32_feed_forward_backward_matches_torch_float64(torch, rng, activation, training):
    """The float32 path (GELU' read off the forward pass) is as accurate as float32 allows."""
    ff = FeedForward(16, 64, activation=activation, rng=rng, dtype=np.float32).train(training)
    x = (3 * rng.standard_normal((4, 9, 16))).astype(np.float32)
    G = rng.standard_normal((4, 9, 16)).astype(np.float32)
    t1 = torch.nn.Linear(16, 64, dtype=torch.float64)
    t2 = torch.nn.Linear(64, 16, dtype=torch.float64)
    load_linear(t1, ff.linear1)
    load_linear(t2, ff.linear2)
    xt = to_torch64(x, True)
    (t2(getattr(torch.nn.functional, activation)(t1(xt))) * to_torch64(G)).sum().backward()
    ff(x)
    assert (ff.cache["slope"] is not None) == (training and activation == "gelu")
    dx = ff.backward(G)
    assert dx.dtype == np.float32 and ff.grads["linear1.W"].dtype == np.float32
    dx_r, grads_r = feed_forward_rounded(ff, exact(x))[1](exact(G))
    # against float64: only the float32 side's roundings count
    for what, mine, ref, count in (
        ("dx", dx, xt.grad, dx_r),
        ("linear1.W", ff.grads["linear1.W"], t1.weight.grad.T, grads_r["linear1.W"]),
    ):
        ref = ref.numpy()
        err = np.abs(mine - ref).max() / np.abs(ref).max()
        print(f"float32 {activation} {what}: relative max error {err:.1e}")
        assert_within(mine, ref, count.tol(np.float32), f"float32 FeedForward {what}")
