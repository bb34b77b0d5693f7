"""Transformer blocks assembled from the package's layers."""

from __future__ import annotations

import numpy as np

from ._validation import (
    as_float_array,
    check_bool,
    check_finite,
    check_ndim,
    check_rng,
    shape_str,
)
from .attention import MultiHeadAttention
from .layers import FeedForward, LayerNorm, NestedParams, _backward_cache

__all__ = ["EncoderBlock"]


class EncoderBlock:
    r"""One encoder layer: self-attention and a feed-forward network, each with a residual
    connection and layer normalisation.

    Parameters
    ----------
    d_model : int
        Model width D.
    n_heads : int
        Number of attention heads; must divide ``d_model``.
    d_ff : int
        Hidden width of the feed-forward network.
    norm_first : bool, default False
        False: post-LN, as in the paper, ``LayerNorm(x + Sublayer(x))``. True: pre-LN,
        ``x + Sublayer(LayerNorm(x))`` (GPT-2 and most recent models; trains more easily
        when deep, and leaves the output un-normalised).
    activation : {"relu", "gelu"}, default "relu"
        Activation of the feed-forward network (``"gelu"`` is the exact GELU).
    eps : float, default 1e-5
        Epsilon of both layer norms (BERT uses 1e-12).
    rng : np.random.Generator or int, optional
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters.

    Attributes
    ----------
    attn : MultiHeadAttention
    norm1 : LayerNorm
        After the attention residual (post-LN) or before the attention (pre-LN).
    ff : FeedForward
    norm2 : LayerNorm
        After the feed-forward residual (post-LN) or before the feed-forward (pre-LN).
    params : NestedParams
        Live view with keys such as ``attn.W_q``, ``norm1.gamma``, ``ff.linear1.W``.
    attention_weights : ndarray of shape (B, H, T, T) or (H, T, T), or None
        The attention weights of the last call.

    Notes
    -----
    Post-LN (``norm_first=False``):

    .. math:: h = \mathrm{LayerNorm}_1(x + \mathrm{MultiHead}(x)), \qquad
              y = \mathrm{LayerNorm}_2(h + \mathrm{FFN}(h))

    Pre-LN (``norm_first=True``):

    .. math:: h = x + \mathrm{MultiHead}(\mathrm{LayerNorm}_1(x)), \qquad
              y = h + \mathrm{FFN}(\mathrm{LayerNorm}_2(h))

    Dropout is left out (this is the inference-time computation, and what
    ``torch.nn.TransformerEncoderLayer`` computes with ``dropout=0``). Each sub-layer keeps
    its own forward cache (``attn._cache``, ``norm1._cache``, ...).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import EncoderBlock, padding_mask
    >>> rng = np.random.default_rng(0)
    >>> block = EncoderBlock(d_model=16, n_heads=4, d_ff=64, rng=rng)
    >>> x = rng.standard_normal((2, 5, 16))
    >>> y = block(x, mask=padding_mask([5, 3]))
    >>> y.shape, block.attention_weights.shape
    ((2, 5, 16), (2, 4, 5, 5))
    """

    def __init__(
        self,
        d_model,
        n_heads,
        d_ff,
        *,
        norm_first=False,
        activation="relu",
        eps=1e-5,
        rng=None,
        dtype=np.float64,
    ):
        check_bool(norm_first, "norm_first")
        rng = check_rng(rng)
        self.attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, rng=rng, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps, dtype=dtype)
        self.d_model, self.n_heads, self.d_ff = self.attn.d_model, self.attn.n_heads, self.ff.d_ff
        self.norm_first = bool(norm_first)
        children = {"attn": self.attn, "norm1": self.norm1, "ff": self.ff, "norm2": self.norm2}
        self.params = NestedParams(children)
        self.grads = NestedParams(children, "grads")  # filled by backward()
        self.attention_weights = None

    def __repr__(self):
        return (
            f"EncoderBlock(d_model={self.d_model}, n_heads={self.n_heads}, d_ff={self.d_ff}, "
            f"norm_first={self.norm_first}, activation={self.ff.activation!r}, "
            f"eps={self.norm1.eps:g})"
        )

    def __call__(self, x, mask=None, *, bias=None):
        """Run the block on ``x``.

        Parameters
        ----------
        x : ndarray of shape (B, T, D) or (T, D)
        mask : array_like of bool, optional
            True = may attend; broadcastable to (B, H, T, T) (e.g. ``padding_mask(lengths)``
            of shape (B, 1, 1, T), or ``causal_mask(T)``).
        bias : ndarray of float, optional
            Additive attention bias, same broadcasting as ``mask`` (keyword only).

        Returns
        -------
        ndarray of the same shape and dtype as ``x``
        """
        x = as_float_array(x, "x")
        check_ndim(x, "x", (2, 3), "(T, d_model) or (B, T, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have last dimension d_model = {self.d_model}, "
                f"got shape {shape_str(x.shape)}"
            )
        check_finite(x, "x")
        if self.norm_first:
            a, w = self.attn(self.norm1(x), mask=mask, bias=bias)
            h = x + a  # residual around attention
            y = h + self.ff(self.norm2(h))  # residual around the feed-forward network
        else:
            a, w = self.attn(x, mask=mask, bias=bias)
            h = self.norm1(x + a)
            y = self.norm2(h + self.ff(h))
        self.attention_weights = w
        return y

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of the shape of the last output
            dL/dy.

        Returns
        -------
        ndarray of the shape of ``x``
            dL/dx. ``self.grads`` (a live view like ``params``) holds every sub-layer's gradient.

        Notes
        -----
        A residual connection :math:`y = x + F(x)` passes the gradient through unchanged and
        adds the branch's: :math:`\partial L/\partial x = g + J_F^\top g`. Post-LN goes back
        through :math:`\mathrm{LN}_2`, the feed-forward residual, :math:`\mathrm{LN}_1`, the
        attention residual; pre-LN through the two residuals, each branch starting with its
        layer norm.
        """
        _backward_cache(self.attn, type(self).__name__)  # a clear error before any forward pass
        g = grad_output
        if self.norm_first:
            dh = g + self.norm2.backward(self.ff.backward(g))  # y = h + ff(norm2(h))
            return dh + self.norm1.backward(self.attn.backward(dh))  # h = x + attn(norm1(x))
        dz2 = self.norm2.backward(g)  # y = norm2(z2), z2 = h + ff(h)
        dh = dz2 + self.ff.backward(dz2)
        dz1 = self.norm1.backward(dh)  # h = norm1(z1), z1 = x + attn(x)
        return dz1 + self.attn.backward(dz1)

    def zero_grad(self):
        """Set every sub-layer's gradients to zero."""
        for layer in (self.attn, self.norm1, self.ff, self.norm2):
            layer.zero_grad()
