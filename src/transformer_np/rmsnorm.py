r"""RMS normalisation: LayerNorm without the mean and without the shift.

.. math:: \mathrm{RMSNorm}(x) = \gamma \odot \frac{x}{\sqrt{\tfrac{1}{D}\sum_j x_j^2 + \epsilon}}

Zhang and Sennrich (2019); LLaMA, Mistral, Gemma and SmolLM use it. Page: modern-block.md.
"""

from __future__ import annotations

import numpy as np

from ._checks.general import as_grad
from ._checks.layers import check_rms_norm_call, check_rms_norm_init
from .module import Module

__all__ = ["RMSNorm"]


class RMSNorm(Module):
    """RMS normalisation over the last axis, with a learned gain. Page: modern-block.md.

    Parameters
    ----------
    d_model : int
        Number of features D (> 0).
    eps : float, default 1e-5
        Added to the mean square (SmolLM2 and LLaMA use 1e-5 or 1e-6).
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameter (keyword only).

    Attributes
    ----------
    params : dict
        ``gamma`` (D,), initialised to ones.
    """

    check_init, check_call = check_rms_norm_init, check_rms_norm_call

    def __init__(self, d_model, eps=1e-5, *, dtype=np.float64):
        super().__init__()
        self.d_model, self.eps = int(d_model), float(eps)
        self.params["gamma"] = np.ones(self.d_model, dtype)

    def __repr__(self):
        return f"RMSNorm(d_model={self.d_model}, eps={self.eps:g})"

    def expected_shapes(self):
        return {"gamma": (self.d_model,)}

    # --8<-- [start:rmsnorm]
    def forward(self, x):
        """``gamma * x / rms(x)`` on a checked ``x`` (..., D)."""
        mean_square = np.mean(x * x, axis=-1, keepdims=True)  # (..., D) -> (..., 1)
        rstd = 1.0 / np.sqrt(mean_square + self.eps)  # 1 / rms, (..., 1)
        x_hat = x * rstd  # (..., D), root mean square 1
        self.cache = {"x_hat": x_hat, "rstd": rstd}
        return self.params["gamma"].astype(x.dtype, copy=False) * x_hat  # (..., D)

    # --8<-- [end:rmsnorm]

    # --8<-- [start:rmsnorm_backward]
    def backward(self, grad_output):
        """dL/dy (..., D) -> dL/dx (..., D); ``self.grads`` gets ``gamma`` (D,), unless frozen.
        Page: finetuning.md (LayerNorm's formula without the mean)."""
        c = self.saved()
        x_hat, rstd = c["x_hat"], c["rstd"]  # (..., D), (..., 1)
        g = as_grad(grad_output, x_hat.shape, x_hat.dtype)
        gamma, self.grads = self.params["gamma"], {}
        if self.trainable:  # 1. the gain: dL/dgamma sums g x_hat over every position
            g2, xh2 = g.reshape(-1, self.d_model), x_hat.reshape(-1, self.d_model)  # (N, D)
            self.grads["gamma"] = np.einsum("nd,nd->d", g2, xh2).astype(gamma.dtype, copy=False)
        # 2. the normalisation: g_hat less its component along x_hat, times 1 / rms
        g_hat = g * gamma.astype(g.dtype, copy=False)  # dL/dx_hat, (..., D)
        along = np.mean(g_hat * x_hat, axis=-1, keepdims=True)  # (..., D) -> (..., 1)
        return rstd * (g_hat - x_hat * along)  # (..., D)

    # --8<-- [end:rmsnorm_backward]
