"""swiglu.py: the gated feed-forward network.

Sections: values (the formula, SiLU's limits), errors, reference (Hugging Face's LlamaMLP).
"""

import numpy as np
import pytest

from transformer_np import SwiGLU, silu

from helpers import to_torch

# ============================================================================================
# values
# ============================================================================================


def test_swiglu_is_gate_times_up_then_down(rng):
    ff = SwiGLU(8, 12, rng=rng)
    x = rng.standard_normal((2, 3, 8))
    p = ff.params
    g = x @ p["W_gate"]
    expected = (g / (1 + np.exp(-g)) * (x @ p["W_up"])) @ p["W_down"]
    np.testing.assert_allclose(ff(x), expected, rtol=1e-13, atol=1e-15)


def test_silu_limits_and_values():
    z = np.array([-1000.0, -1.0, 0.0, 1.0, 1000.0])
    np.testing.assert_allclose(silu(z), [0.0, -1 / (1 + np.e), 0.0, 1 / (1 + np.exp(-1)), 1000.0])
    with np.errstate(all="raise"):
        silu(np.float32([-1000.0]))  # the overflow of exp is expected and silenced


def test_three_matrices_and_no_bias():
    ff = SwiGLU(6, 16, rng=0)
    assert {k: v.shape for k, v in ff.params.items()} == {
        "W_gate": (6, 16),
        "W_up": (6, 16),
        "W_down": (16, 6),
    }


# ============================================================================================
# errors
# ============================================================================================


def test_wrong_width_is_named():
    with pytest.raises(ValueError, match="d_model = 6"):
        SwiGLU(6, 8)(np.ones((2, 5)))


def test_bad_size_is_named():
    with pytest.raises(ValueError, match="d_ff"):
        SwiGLU(6, 0)


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, 5e-6)])
def test_matches_llama_mlp(torch, rng, dtype, tol):
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
    np.testing.assert_allclose(ff(x), ref(to_torch(x)).detach().numpy(), rtol=0, atol=tol)
