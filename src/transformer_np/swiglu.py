"""The SwiGLU feed-forward network of LLaMA and SmolLM2: ``(silu(x W_gate) * x W_up) W_down``,
three Linear maps without biases (Shazeer 2020). Page: modern-block.md.
"""

from __future__ import annotations

import numpy as np

from ._checks.boundary import checked
from ._checks.functions import check_silu
from ._checks.general import as_grad
from ._checks.layers import check_swiglu_call, check_swiglu_init
from .layers import Linear
from .module import NamedMaps

__all__ = ["SwiGLU", "silu"]


@checked(check_silu)
def silu(z):
    """SiLU (swish): ``z * sigmoid(z) = z / (1 + exp(-z))``, element-wise, in ``z``'s dtype.

    Parameters
    ----------
    z : ndarray of shape (...)
        Finite floating-point values.

    Returns
    -------
    ndarray of the same shape and dtype as ``z``
        -0 for ``z << 0`` (the exponential overflows to inf), the limit.
    """
    with np.errstate(over="ignore"):  # z << 0: exp(-z) = inf and z / inf = -0, the limit
        return z / (1.0 + np.exp(-z))


class SwiGLU(NamedMaps):
    """Gated feed-forward network: three Linear maps without biases. Page: modern-block.md.

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
    gate, up : Linear
        D -> F, without bias.
    down : Linear
        F -> D, without bias.
    params : NestedParams
        Their matrices with the formula's names, ``W_gate`` (D, F), ``W_up`` (D, F), ``W_down``
        (F, D), Xavier/Glorot-uniform at initialisation.
    """

    check_init, check_call = check_swiglu_init, check_swiglu_call

    def __init__(self, d_model, d_ff, *, rng=None, dtype=np.float64, init=True):
        super().__init__()
        self.d_model, self.d_ff = int(d_model), int(d_ff)
        kw = {"bias": False, "rng": np.random.default_rng(rng), "dtype": dtype}
        kw["init"] = "xavier" if init else "zeros"  # zeros: a loader will set every matrix
        self.gate = Linear(self.d_model, self.d_ff, **kw)  # D -> F
        self.up = Linear(self.d_model, self.d_ff, **kw)  # D -> F
        self.down = Linear(self.d_ff, self.d_model, **kw)  # F -> D
        self.add_children(gate=self.gate, up=self.up, down=self.down)

    def __repr__(self):
        return f"SwiGLU(d_model={self.d_model}, d_ff={self.d_ff})"

    # --8<-- [start:swiglu]
    def forward(self, x):
        """``(silu(x W_gate) * x W_up) W_down`` on a checked ``x`` (..., D)."""
        z = self.gate.forward(x)  # (..., D) -> (..., F)
        gate = silu(z)  # (..., F), each feature's gate
        up = self.up.forward(x)  # (..., D) -> (..., F), the values it lets through
        self.cache = {"z": z, "up": up}
        return self.down.forward(gate * up)  # (..., F) -> (..., D)

    # --8<-- [end:swiglu]

    # --8<-- [start:swiglu_backward]
    def backward(self, grad_output):
        """dL/dy (..., D) -> dL/dx (..., D); the three Linear layers fill their ``grads``.
        Page: finetuning.md (SiLU's derivative)."""
        c = self.saved()
        z, up = c["z"], c["up"]  # (..., F) each
        g = as_grad(grad_output, z.shape[:-1] + (self.d_model,), z.dtype)
        # 3. down: (..., D) -> (..., F), dL/d(gate * up)
        dh = self.down.backward(g)
        # 2. the product gate * up, and the gate's SiLU
        with np.errstate(over="ignore"):  # z << 0: exp(-z) = inf, sigmoid 0, the limit
            sigmoid = 1.0 / (1.0 + np.exp(-z))  # (..., F)
        gate = z * sigmoid  # silu(z)
        dz = dh * up * (sigmoid + gate * (1.0 - sigmoid))  # dL/dz, (..., F)
        # 1. gate and up both read x: their paths add up, (..., F) -> (..., D)
        return self.gate.backward(dz) + self.up.backward(dh * gate)

    # --8<-- [end:swiglu_backward]
