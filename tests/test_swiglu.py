"""swiglu.py: the gated feed-forward network.

Sections: values (the formula, SiLU's limits, three Linear maps), errors, backward (finite
differences, saturated gates, the gradients reach the three Linear layers), reference (Hugging
Face's LlamaMLP, and its gradients by PyTorch autograd).
"""

import numpy as np
import pytest
from rounding_llama import swiglu_rounded

from transformer_np import Linear, SwiGLU, silu

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import (
    abs_product,
    assert_within,
    gradcheck_layer,
    rounding_tol,
    to_torch,
    to_torch64,
)
from rounding import exact


def swiglu_tol(x, params, dtype):
    """A bound on the error of one computation of (silu(x W_gate) * x W_up) W_down in
    ``dtype``: each product x W is off by gamma(D) |x| |W|; silu(g) = g / (1 + exp(-g)) by FR
    + 3 roundings of |silu(g)| (1 + exp(-g) has no cancellation; 2 for ours, 3 for g sigmoid(g))
    and by |silu'| <= 1.1 times g's error; h = silu(g) up by both factors' errors and 1
    rounding; h W_down by gamma(F) |h| |W_down| and |dh| |W_down|."""
    x = np.asarray(x, np.float64)
    w = {name: np.asarray(v, np.float64) for name, v in params.items()}
    d, f = w["W_gate"].shape
    g, up = x @ w["W_gate"], x @ w["W_up"]
    dg = rounding_tol(dtype, d, abs_product(x, w["W_gate"]))
    dup = rounding_tol(dtype, d, abs_product(x, w["W_up"]))
    gate = g / (1 + np.exp(-g))
    dgate = rounding_tol(dtype, FR + 3, np.abs(gate)) + 1.1 * dg
    h = gate * up
    dh = dgate * np.abs(up) + np.abs(gate) * dup + rounding_tol(dtype, 1, np.abs(h))
    return rounding_tol(dtype, f, abs_product(h, w["W_down"])) + abs_product(dh, w["W_down"])


# ============================================================================================
# values
# ============================================================================================


def test_swiglu_is_gate_times_up_then_down(rng):
    ff = SwiGLU(8, 12, rng=rng)
    x = rng.standard_normal((2, 3, 8))
    p = ff.params
    g = x @ p["W_gate"]
    expected = (g / (1 + np.exp(-g)) * (x @ p["W_up"])) @ p["W_down"]
    tol = 2 * swiglu_tol(x, p, x.dtype)  # the same steps on both sides
    assert_within(ff(x), expected, tol, "SwiGLU - formula")


def test_silu_limits_and_values():
    z = np.array([-1000.0, -1.0, 0.0, 1.0, 1000.0])
    expected = np.array([0.0, -1 / (1 + np.e), 0.0, 1 / (1 + np.exp(-1)), 1000.0])
    # exp (FR; np.e is e rounded: 1) and 2 roundings, on each side
    tol = rounding_tol(z.dtype, 2 * (FR + 2) + 1, np.abs(expected))
    assert_within(silu(z), expected, tol, "silu")
    with np.errstate(all="raise"):
        silu(np.float32([-1000.0]))  # the overflow of exp is expected and silenced


def test_three_matrices_and_no_bias():
    ff = SwiGLU(6, 16, rng=0)
    assert {k: v.shape for k, v in ff.params.items()} == {
        "W_gate": (6, 16),
        "W_up": (6, 16),
        "W_down": (16, 6),
    }


def test_the_three_maps_are_linear_layers_named_as_in_the_formula():
    ff = SwiGLU(6, 16, rng=0)
    for name in ("gate", "up", "down"):
        layer = getattr(ff, name)
        assert isinstance(layer, Linear) and not layer.has_bias
        assert ff.params[f"W_{name}"] is layer.params["W"]  # the same array, no copy
    new = np.zeros((6, 16))
    ff.params["W_up"] = new  # a loader's write reaches the layer
    assert ff.up.params["W"] is new
    limit = np.sqrt(6 / (6 + 16))  # Xavier/Glorot-uniform
    assert all(np.abs(w).max() <= limit for w in (ff.gate.params["W"], ff.down.params["W"]))
    loaded = SwiGLU(6, 16, init=False)  # zeros, for a loader that sets every matrix
    assert all(not w.any() for w in loaded.params.values())


# ============================================================================================
# errors
# ============================================================================================


def test_wrong_width_is_named():
    with pytest.raises(ValueError, match="d_model = 6"):
        SwiGLU(6, 8)(np.ones((2, 5)))


def test_bad_size_is_named():
    with pytest.raises(ValueError, match="d_ff"):
        SwiGLU(6, 0)


def test_silu_checks_its_input():
    with pytest.raises(TypeError, match="z must be a floating-point array .* got dtype int64"):
        silu(np.array([1, 2]))
    with pytest.raises(TypeError, match="z must be a floating-point array .* got dtype <U3"):
        silu("1.0")
    with pytest.raises(
        ValueError, match=r"z contains NaN \(1 of 3 values, first at index \(1,\)\)"
    ):
        silu([0.5, np.nan, 1.0])


# ============================================================================================
# backward
# ============================================================================================


def test_backward_matches_finite_differences(rng):
    ff = SwiGLU(6, 10, rng=rng)
    gradcheck_layer(ff, ff.backward, ff, [2 * rng.standard_normal((2, 4, 6))], rng)


def test_backward_through_saturated_gates_is_finite(rng):
    # z = x W_gate far below 0 (exp(-z) overflows: the gate and its slope are 0) or far above
    # (the gate is z, its slope 1): no overflow warning, no NaN (exp(-1000) underflows to 0)
    ff = SwiGLU(2, 2, rng=rng)
    ff.params["W_gate"] = np.array([[1000.0, -1000.0], [0.0, 0.0]])
    x, g = np.array([[1.0, 0.5]]), np.array([[1.0, -1.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        ff(x)
        dx = ff.backward(g)
    dz = ff.down.backward(g) * ff.cache["up"] * np.array([1.0, 0.0])  # silu' = 1, then 0
    np.testing.assert_array_equal(ff.gate.grads["W"], x.T @ dz)
    assert np.isfinite(dx).all()


def test_the_gradients_are_the_linear_layers_own(rng):
    # what a wrapper of one of the Linear layers (a LoRA adapter) needs: the backward pass goes
    # through the child layers, and their grads are the block's
    ff = SwiGLU(6, 10, rng=rng)
    ff(rng.standard_normal((3, 6)))
    ff.backward(rng.standard_normal((3, 6)))
    for name in ("gate", "up", "down"):
        assert ff.grads[f"W_{name}"] is getattr(ff, name).grads["W"]


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_llama_mlp(torch, rng, dtype):
    from transformers.models.llama.modeling_llama import LlamaMLP

    from transformer_np.config import LlamaConfig

    from helpers import hf_llama_config

    cfg = LlamaConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=40)
    ref = LlamaMLP(hf_llama_config(cfg)).to(getattr(torch, np.dtype(dtype).name))
    ff = SwiGLU(16, 40, rng=rng, dtype=dtype)
    with torch.no_grad():
        ref.gate_proj.weight.copy_(to_torch(ff.params["W_gate"].T))
        ref.up_proj.weight.copy_(to_torch(ff.params["W_up"].T))
        ref.down_proj.weight.copy_(to_torch(ff.params["W_down"].T))
    x = (rng.standard_normal((2, 5, 16)) * 2).astype(dtype)
    # down(silu(gate(x)) * up(x)): the same steps (swiglu_tol allows for torch's silu too)
    tol = 2 * swiglu_tol(x, ff.params, dtype)
    assert_within(ff(x), ref(to_torch(x)).detach().numpy(), tol, "SwiGLU - LlamaMLP")


def test_gradients_match_llama_mlp_autograd(torch, rng):
    from transformers.models.llama.modeling_llama import LlamaMLP

    from transformer_np.config import LlamaConfig

    from helpers import hf_llama_config

    cfg = LlamaConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=40)
    ref = LlamaMLP(hf_llama_config(cfg)).to(torch.float64)
    ff = SwiGLU(16, 40, rng=rng)
    with torch.no_grad():
        for name in ("gate", "up", "down"):
            getattr(ref, f"{name}_proj").weight.copy_(to_torch(ff.params[f"W_{name}"].T))
    x, g = rng.standard_normal((2, 2, 5, 16)) * 2
    xt = to_torch64(x, requires_grad=True)
    (ref(xt) * to_torch(g)).sum().backward()
    ff(x)
    dx = ff.backward(g)
    dx_r, grads_r = swiglu_rounded(ff, exact(x))[1](exact(g))
    assert_within(dx, xt.grad.numpy(), dx_r.tol(np.float64, sides=2), "dx")
    for name in ("gate", "up", "down"):
        theirs = getattr(ref, f"{name}_proj").weight.grad.numpy().T
        tol = grads_r[f"W_{name}"].tol(np.float64, sides=2)
        assert_within(ff.grads[f"W_{name}"], theirs, tol, f"W_{name}")
