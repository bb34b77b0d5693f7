r"""The SwiGLU feed-forward network: a gated linear unit with the SiLU (swish) gate.

.. math:: \mathrm{SwiGLU}(x) = \big(\mathrm{SiLU}(x W_{gate}) \odot x W_{up}\big) W_{down},
          \qquad \mathrm{SiLU}(z) = z\,\sigma(z) = \frac{z}{1 + e^{-z}}

The 2017 network has two matrices (D -> d_ff -> D) and one activation. SwiGLU (Shazeer 2020,
"GLU Variants Improve Transformer") has three: one hidden vector is passed through SiLU and
multiplies, feature by feature, a second one (the gate opens or closes each feature). Three
matrices of D x d_ff cost what two would with a width 1.5 times larger, so models keep the
parameter count of ``d_ff = 4 D`` with ``d_ff`` near 8/3 D (LLaMA: 11008 for D = 4096;
SmolLM2-135M: 1536 for D = 576). There are no biases.
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import check_dtype, check_positive_int, check_rng, compute_dtype
from .layers import check_features
from .module import Module

__all__ = ["SwiGLU", "silu"]


def silu(z):
    """SiLU (swish): z * sigmoid(z) = z / (1 + exp(-z)); exp overflowing to inf gives -0."""
    with np.errstate(over="ignore"):  # z << 0: exp(-z) = inf and z / inf = -0, the limit
        return z / (1.0 + np.exp(-z))


class SwiGLU(Module):
    r"""Gated feed-forward network with three matrices and no biases.

    Parameters
    ----------
    d_model : int
        Input and output features D (> 0).
    d_ff : int
        Hidden features F (> 0).
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
    init : bool, default True
        False leaves the matrices at zero (for a loader that sets every one).

    Attributes
    ----------
    params : dict
        ``W_gate`` (D, F), ``W_up`` (D, F), ``W_down`` (F, D), applied as ``x @ W``;
        Xavier/Glorot-uniform at initialisation.

    Notes
    -----
    Inference only (no ``backward``).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import SwiGLU
    >>> ff = SwiGLU(8, 24, rng=0)
    >>> ff(np.ones((2, 3, 8))).shape
    (2, 3, 8)
    """

    def __init__(self, d_model, d_ff, *, rng=None, dtype=np.float64, init=True):
        super().__init__()
        self.d_model = check_positive_int(d_model, "d_model")
        self.d_ff = check_positive_int(d_ff, "d_ff")
        dtype, rng = check_dtype(dtype), check_rng(rng)
        limit = math.sqrt(6.0 / (d_model + d_ff))
        for name, shape in self.expected_shapes().items():
            if not init:  # a loader will overwrite them: zeros, no random draw
                self.params[name] = np.zeros(shape, dtype)
                continue
            self.params[name] = rng.uniform(-limit, limit, shape).astype(dtype)

    def __repr__(self):
        return f"SwiGLU(d_model={self.d_model}, d_ff={self.d_ff})"

    def expected_shapes(self):
        D, F = self.d_model, self.d_ff
        return {"W_gate": (D, F), "W_up": (D, F), "W_down": (F, D)}

    def checked_call(self, x):
        """Apply the network to ``x`` of shape (..., D); returns the same shape."""
        x = check_features(x, "x", self.d_model, "d_model")
        y = self.run_or_blame(self.forward, x.astype(compute_dtype(x.dtype), copy=False))
        return y.astype(x.dtype, copy=False)

    # --8<-- [start:swiglu]
    def forward(self, x):
        """``(silu(x W_gate) * x W_up) W_down`` on a checked ``x`` (..., D)."""
        p = {name: w.astype(x.dtype, copy=False) for name, w in self.params.items()}
        gate = silu(x @ p["W_gate"])  # (..., D) @ (D, F) -> (..., F), each feature's gate
        up = x @ p["W_up"]  # (..., D) @ (D, F) -> (..., F), the values it lets through
        return (gate * up) @ p["W_down"]  # (..., F) @ (F, D) -> (..., D)

    # --8<-- [end:swiglu]
