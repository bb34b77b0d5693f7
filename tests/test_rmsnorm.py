"""rmsnorm.py: RMS normalisation.

Sections: values (root-mean-square 1 before the gain, invariance to scaling, dtypes), errors,
backward (finite differences; no gradient along the input, the direction the normalisation
ignores), reference (Hugging Face's LlamaRMSNorm in float64 and float32, and its gradients by
PyTorch autograd).
"""

import numpy as np
import pytest
from rounding_llama import rms_norm_rounded

from transformer_np import RMSNorm

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import (
    assert_within,
    gradcheck_layer,
    hf_llama_in_input_dtype,
    rounding_tol,
    to_torch,
    to_torch64,
)
from rounding import exact


def rstd_rtol(d, dtype, rsqrt_roundings=2):
    """The relative rounding bound of 1 / sqrt(mean(x^2) + eps) over rows of d features in
    ``dtype``: the mean of squares has no cancellation (the square, a sum of d, the division:
    d + 2 roundings, relative), + eps 1 more, the square root halves them and adds 1, the
    reciprocal 1 (``rsqrt_roundings``: sqrt and reciprocal; FR for a rsqrt function)."""
    return rounding_tol(dtype, (d + 3) / 2 + rsqrt_roundings)


# ============================================================================================
# values
# ============================================================================================


def test_output_has_unit_root_mean_square(rng):
    x = rng.standard_normal((3, 5, 16)) * 7 + 2
    y = RMSNorm(16, eps=1e-12)(x)
    ms = (x**2).mean(axis=-1)
    exact = np.sqrt(ms / (ms + 1e-12))  # 1 - eps / (2 ms): 1 up to 1e-14
    # y = gamma (x r) (r's error, 2 roundings), its root mean square (half of d + 2, then 1),
    # and the reference's (half of d + 3, 2)
    rtol = rstd_rtol(16, y.dtype) + rounding_tol(y.dtype, 2 + (16 + 2) / 2 + 1)
    rtol += rounding_tol(np.float64, (16 + 3) / 2 + 2)
    assert_within(np.sqrt((y**2).mean(axis=-1)), exact, rtol * exact, "root mean square")


def test_scaling_the_input_changes_nothing_but_the_mean_is_kept(rng):
    norm = RMSNorm(8, eps=1e-12)
    norm.params["gamma"] = rng.standard_normal(8)
    x = rng.standard_normal((4, 8)) + 3.0
    # exactly, norm(5 x) = norm(x) sqrt((ms + eps) / (ms + eps / 25)), 1 + 5e-14 here; each
    # side: r (rstd_rtol) and 2 roundings of y; 5 x rounds once; the factor 6 in float64
    ms = (x**2).mean(axis=-1, keepdims=True)
    ref = norm(x) * np.sqrt((ms + 1e-12) / (ms + 1e-12 / 25))
    rtol = 2 * (rstd_rtol(8, x.dtype) + rounding_tol(x.dtype, 2)) + rounding_tol(x.dtype, 1)
    rtol += rounding_tol(np.float64, 6)
    assert_within(norm(5.0 * x), ref, rtol * np.abs(ref), "norm(5 x) - norm(x)")
    # rows of 2: exactly gamma 2 / sqrt(4 + eps); y's roundings (r's, 2) and both sums of 8
    g = np.abs(norm.params["gamma"])
    tol = rounding_tol(x.dtype, 2, g.sum()) + rstd_rtol(8, x.dtype) * g.sum()
    tol += rounding_tol(x.dtype, 8, g.sum()) + rounding_tol(np.float64, 8 + 3, g.sum())
    expected = norm.params["gamma"].sum() * 2 / np.sqrt(4 + 1e-12)
    assert abs(norm(np.ones((1, 8)) * 2).sum() - expected) <= tol
    assert np.abs((RMSNorm(8)(x)).mean(axis=-1)).min() > 0.5  # not centred, unlike LayerNorm


def test_float32_in_float32_out(rng):
    norm = RMSNorm(8, dtype=np.float32)
    assert norm(rng.standard_normal((2, 8)).astype(np.float32)).dtype == np.float32


# ============================================================================================
# errors
# ============================================================================================


def test_wrong_width_is_named():
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., d_model\) with d_model = 8"):
        RMSNorm(8)(np.ones((2, 7)))


def test_overflow_in_float32_is_an_error_not_zeros():
    # 1e20 squared overflows float32: the mean square is inf and the row would come out as 0
    x = np.array([[1e20, 1.0, -1.0, 2.0]], np.float32)
    with pytest.raises(ValueError, match="x is too large to normalise in float32"):
        RMSNorm(4, dtype=np.float32)(x)
    assert np.all(RMSNorm(4)(x.astype(np.float64)) != 0)  # the same row in float64 is fine


def test_nan_input_is_refused():
    with pytest.raises(ValueError, match="x contains NaN"):
        RMSNorm(2)(np.array([[1.0, np.nan]]))


@pytest.mark.parametrize("eps", [0.0, -1e-5])
def test_eps_must_be_positive(eps):
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(4, eps)


# ============================================================================================
# backward
# ============================================================================================


def test_backward_matches_finite_differences(rng):
    norm = RMSNorm(8)
    norm.params["gamma"] = rng.standard_normal(8)
    gradcheck_layer(norm, norm.backward, norm, [rng.standard_normal((2, 5, 8)) + 0.5], rng)


def test_gradient_has_no_component_along_the_input(rng):
    # norm(c x) = norm(x) for c > 0 when eps = 0: along x the loss does not change, so
    # dL/dx . x = 0. With eps it is exactly (g_hat . x_hat) eps / (ms + eps), for each row.
    norm = RMSNorm(16, eps=1e-6)
    norm.params["gamma"] = rng.standard_normal(16)
    x, g = rng.standard_normal((2, 3, 5, 16))
    norm(x)
    dx = norm.backward(g)
    ms = (x * x).mean(-1)
    x_hat = x / np.sqrt(ms + 1e-6)[..., None]
    expected = ((g * norm.params["gamma"]) * x_hat).sum(-1) * 1e-6 / (ms + 1e-6)
    # dx's bound (rounding_llama) times |x|, the 16 products and their sum, on each row
    dx_r, _ = rms_norm_rounded(exact(x), norm.params["gamma"], 1e-6)[1](exact(g))
    tol = (dx_r.tol(np.float64) * np.abs(x)).sum(-1)
    tol += rounding_tol(np.float64, 16 + 1, (np.abs(dx) * np.abs(x)).sum(-1))
    assert_within((dx * x).sum(-1), expected, tol, "dL/dx . x")


def test_backward_wants_the_gradient_of_the_last_output(rng):
    norm = RMSNorm(4)
    norm(rng.standard_normal((2, 4)))
    with pytest.raises(ValueError, match=r"grad_output must have the shape of the last output"):
        norm.backward(np.ones((2, 3)))


def test_a_frozen_norm_passes_the_gradient_on_and_keeps_none(rng):
    norm = RMSNorm(4)
    x, g = rng.standard_normal((2, 3, 4))
    norm(x)
    dx = norm.backward(g)
    norm.freeze()
    norm(x)
    np.testing.assert_array_equal(norm.backward(g), dx)
    assert norm.grads == {}


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_llama_rmsnorm(torch, rng, dtype, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf_llama_in_input_dtype(monkeypatch)  # it would compute a float64 input in float32

    norm = RMSNorm(32, eps=1e-5, dtype=dtype)
    norm.params["gamma"] = rng.standard_normal(32).astype(dtype)
    ref = LlamaRMSNorm(32, eps=1e-5).to(getattr(torch, np.dtype(dtype).name))
    with torch.no_grad():
        ref.weight.copy_(to_torch(norm.params["gamma"]))
    x = (rng.standard_normal((2, 9, 32)) * 3).astype(dtype)
    expected = ref(to_torch(x)).detach().numpy()
    # y = gamma (x r): r's error (ours 1 / sqrt, torch's rsqrt: FR) and 2 roundings, each side
    rtol = rstd_rtol(32, dtype) + rstd_rtol(32, dtype, rsqrt_roundings=FR)
    rtol += rounding_tol(dtype, 4)
    assert_within(norm(x), expected, rtol * np.abs(expected), "RMSNorm - LlamaRMSNorm")


def test_gradients_match_llama_rmsnorm_autograd(torch, rng, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf_llama_in_input_dtype(monkeypatch)
    norm = RMSNorm(32, eps=1e-5)
    norm.params["gamma"] = rng.standard_normal(32)
    ref = LlamaRMSNorm(32, eps=1e-5).to(torch.float64)
    with torch.no_grad():
        ref.weight.copy_(to_torch(norm.params["gamma"]))
    x, g = rng.standard_normal((2, 2, 9, 32)) * 3
    xt = to_torch64(x, requires_grad=True)
    (ref(xt) * to_torch(g)).sum().backward()
    norm(x)
    dx = norm.backward(g)
    dx_r, grads_r = rms_norm_rounded(exact(x), norm.params["gamma"], 1e-5)[1](exact(g))
    assert_within(dx, xt.grad.numpy(), dx_r.tol(np.float64, sides=2), "dx")
    tol = grads_r["gamma"].tol(np.float64, sides=2)
    assert_within(norm.grads["gamma"], ref.weight.grad.numpy(), tol, "gamma")
