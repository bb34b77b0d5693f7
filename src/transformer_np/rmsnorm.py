r"""RMS normalisation: LayerNorm without the mean and without the shift.

.. math:: \mathrm{RMSNorm}(x) = \gamma \odot \frac{x}{\sqrt{\tfrac{1}{D}\sum_j x_j^2 + \epsilon}}

Zhang and Sennrich (2019); LLaMA, Mistral, Gemma and SmolLM use it. Page: modern-block.md.
"""

from __future__ import annotations

import numpy as np

from ._checks.layers import check_rms_norm_call, check_rms_norm_init
from .module import Module

__all__ = ["RMSNorm"]


class RMSNorm(Module):
    r"""Root-mean-square normalisation over the last axis, with a learned gain.

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

    Notes
    -----
    Inference only (no ``backward``): the modern models of this package are loaded with
    trained weights, not trained here.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import RMSNorm
    >>> y = RMSNorm(4)(np.array([[1.0, -1.0, 1.0, -1.0], [2.0, 2.0, 2.0, 2.0]]))
    >>> y.round(4).tolist()
    [[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, 1.0, 1.0]]
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
        return self.params["gamma"].astype(x.dtype, copy=False) * (x * rstd)  # (..., D)

    # --8<-- [end:rmsnorm]
