"""rmsnorm.py: RMS normalisation.

Sections: values (root-mean-square 1 before the gain, invariance to scaling, dtypes), errors,
reference (Hugging Face's LlamaRMSNorm in float64 and float32).
"""

import numpy as np
import pytest

from transformer_np import RMSNorm

from helpers import hf_llama_in_input_dtype, to_torch

# ============================================================================================
# values
# ============================================================================================


def test_output_has_unit_root_mean_square(rng):
    x = rng.standard_normal((3, 5, 16)) * 7 + 2
    y = RMSNorm(16, eps=1e-12)(x)
    np.testing.assert_allclose(np.sqrt((y**2).mean(axis=-1)), 1.0, rtol=1e-12)


def test_scaling_the_input_changes_nothing_but_the_mean_is_kept(rng):
    norm = RMSNorm(8, eps=1e-12)
    norm.params["gamma"] = rng.standard_normal(8)
    x = rng.standard_normal((4, 8)) + 3.0
    np.testing.assert_allclose(norm(5.0 * x), norm(x), rtol=1e-12)
    assert abs(norm(np.ones((1, 8)) * 2).sum() - norm.params["gamma"].sum()) < 1e-9
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


def test_nan_input_is_refused():
    with pytest.raises(ValueError, match="x contains NaN"):
        RMSNorm(2)(np.array([[1.0, np.nan]]))


@pytest.mark.parametrize("eps", [0.0, -1e-5])
def test_eps_must_be_positive(eps):
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(4, eps)


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
def test_matches_llama_rmsnorm(torch, rng, dtype, tol, monkeypatch):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf_llama_in_input_dtype(monkeypatch)  # it would compute a float64 input in float32

    norm = RMSNorm(32, eps=1e-5, dtype=dtype)
    norm.params["gamma"] = rng.standard_normal(32).astype(dtype)
    ref = LlamaRMSNorm(32, eps=1e-5).to(getattr(torch, np.dtype(dtype).name))
    with torch.no_grad():
        ref.weight.copy_(to_torch(norm.params["gamma"]))
    x = (rng.standard_normal((2, 9, 32)) * 3).astype(dtype)
    expected = ref(to_torch(x)).detach().numpy()
    np.testing.assert_allclose(norm(x), expected, rtol=0, atol=tol)
