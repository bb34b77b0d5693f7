"""The Transformer blocks: the encoder block and the decoder block, each written once.

Every model of the package is a stack of these: the encoder-decoder ``Transformer`` stacks
both, the decoder-only ``LanguageModel`` (GPT) stacks encoder blocks with a causal mask, and
MiniLM (BERT) stacks encoder blocks. Generation calls the same blocks with a key/value cache.

Shape glossary: B batch, T positions of the block's input, S positions of the encoder output
(the "memory"), D = d_model, H heads.
"""

from __future__ import annotations

import numpy as np

from ._validation import (
    check_block_input,
    check_bool,
    check_memory,
    check_rng,
    compute_dtype,
)
from .feed_forward import FeedForward
from .layers import Dropout, LayerNorm, check_probability
from .module import Module
from .multi_head import MultiHeadAttention

__all__ = ["DecoderBlock", "EncoderBlock"]


class EncoderBlock(Module):
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
    dropout : float, default 0.0
        Dropout on the output of each sublayer, before the residual sum (the paper: 0.1);
        only in training mode (:meth:`~transformer_np.module.Module.train`).
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

    In training mode each sublayer's output passes through dropout before the residual sum;
    in evaluation mode (the default) the block computes exactly the formulas above, what
    ``torch.nn.TransformerEncoderLayer`` computes in ``eval()``. Each sub-layer keeps its own
    forward cache (``attn.cache``, ``norm1.cache``, ...). A decoder-only model (GPT) is a
    stack of these blocks with a causal mask: its block has no encoder to attend to.

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
        dropout=0.0,
        rng=None,
        dtype=np.float64,
    ):
        super().__init__()
        check_bool(norm_first, "norm_first")
        check_probability(dropout, f"{type(self).__name__}.dropout")
        rng = check_rng(rng)
        self.attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, rng=rng, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps, dtype=dtype)
        self.drop1, self.drop2 = Dropout(dropout, rng), Dropout(dropout, rng)
        self.d_model, self.n_heads, self.d_ff = self.attn.d_model, self.attn.n_heads, self.ff.d_ff
        self.norm_first = bool(norm_first)
        self.dropout = float(dropout)
        self.add_children(attn=self.attn, norm1=self.norm1, ff=self.ff, norm2=self.norm2)
        self.add_children(drop1=self.drop1, drop2=self.drop2)  # no parameters: train()/eval()
        self.attention_weights = None

    def __repr__(self):
        return (
            f"EncoderBlock(d_model={self.d_model}, n_heads={self.n_heads}, d_ff={self.d_ff}, "
            f"norm_first={self.norm_first}, activation={self.ff.activation!r}, "
            f"eps={self.norm1.eps:g}, dropout={self.dropout:g})"
        )

    def checked_call(self, x, mask=None, *, bias=None, kv_cache=None):
        """Run the block on ``x``.

        Parameters
        ----------
        x : ndarray of shape (B, T, D) or (T, D)
        mask : array_like of bool, optional
            True = may attend; broadcastable to (B, H, T, T) (e.g. ``padding_mask(lengths)``
            of shape (B, 1, 1, T), or ``causal_mask(T)``).
        bias : ndarray of float, optional
            Additive attention bias, same broadcasting as ``mask`` (keyword only).
        kv_cache : KVCache, optional
            The self-attention's keys and values while generating (see
            :meth:`~transformer_np.MultiHeadAttention.forward`).

        Returns
        -------
        ndarray of the same shape and dtype as ``x``
        """
        x = check_block_input(x, self.d_model)
        x3, _, mask, bias, squeeze = self.attn.check_inputs(x, None, mask, bias, kv_cache)
        x3 = x3.astype(compute_dtype(x3.dtype), copy=False)
        y = self.run_or_blame(self.forward, x3, mask=mask, bias=bias, kv_cache=kv_cache)
        self.cache = {"squeeze": squeeze}
        if squeeze:
            y, self.attention_weights = y[0], self.attention_weights[0]
        return y.astype(x.dtype, copy=False)

    # --8<-- [start:encoder_block]
    def forward(self, x, mask=None, *, bias=None, kv_cache=None):
        """The block on checked input ``x`` (B, T, D) -> (B, T, D)."""
        if self.norm_first:  # pre-LN: x + Sublayer(LayerNorm(x))
            a, w = self.attn(self.norm1(x), mask=mask, bias=bias, kv_cache=kv_cache)
            h = x + self.drop1(a)  # residual around the attention
            y = h + self.drop2(self.ff(self.norm2(h)))  # residual around the feed-forward
        else:  # post-LN, as in the paper: LayerNorm(x + Sublayer(x))
            a, w = self.attn(x, mask=mask, bias=bias, kv_cache=kv_cache)
            h = self.norm1(x + self.drop1(a))
            y = self.norm2(h + self.drop2(self.ff(h)))
        self.attention_weights = w  # (B, H, T, T)
        self.cache = {"squeeze": False}
        return y

    # --8<-- [end:encoder_block]

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
        squeeze = self.saved()["squeeze"]
        g = grad_output[None] if squeeze else grad_output
        drop1, drop2 = self.drop1.backward, self.drop2.backward
        if self.norm_first:
            dh = g + self.norm2.backward(self.ff.backward(drop2(g)))  # y = h + ff(norm2(h))
            dx = dh + self.norm1.backward(self.attn.backward(drop1(dh)))  # h = x + attn(norm1(x))
        else:
            dz2 = self.norm2.backward(g)  # y = norm2(z2), z2 = h + ff(h)
            dh = dz2 + self.ff.backward(drop2(dz2))
            dz1 = self.norm1.backward(dh)  # h = norm1(z1), z1 = x + attn(x)
            dx = dz1 + self.attn.backward(drop1(dz1))
        return dx[0] if squeeze else dx


class DecoderBlock(Module):
    r"""One decoder layer: masked self-attention, cross-attention to the encoder output, and a
    feed-forward network; each with a residual connection, layer norm and optional dropout.

    Parameters
    ----------
    d_model, n_heads, d_ff : int
        Width, heads (dividing ``d_model``) and feed-forward hidden width.
    norm_first : bool, default False
        False: post-LN (the paper); True: pre-LN.
    activation : {"relu", "gelu"}, default "relu"
    eps : float, default 1e-5
    dropout : float, default 0.0
        Dropout on the output of each of the three sublayers, before the residual sum (the
        paper: 0.1); only in training mode.
    rng : np.random.Generator or int, optional
    dtype : {np.float32, np.float64}, default np.float64

    Attributes
    ----------
    self_attn, cross_attn : MultiHeadAttention
    norm1, norm2, norm3 : LayerNorm
    ff : FeedForward
    params, grads : NestedParams
        Live views with keys such as ``self_attn.W_q``, ``cross_attn.b_o``, ``norm3.gamma``.
    self_attention_weights : ndarray of shape (B, H, T, T)
    cross_attention_weights : ndarray of shape (B, H, T, S)

    Notes
    -----
    Post-LN:

    .. math::
        a &= \mathrm{LN}_1(x + \mathrm{MHA}(x, x; M_{\text{causal}})) \\
        c &= \mathrm{LN}_2(a + \mathrm{MHA}(a, m; M_{\text{src}})) \\
        y &= \mathrm{LN}_3(c + \mathrm{FFN}(c))

    where :math:`m` is the encoder output (the "memory"). Pre-LN moves each layer norm to the
    input of its branch: :math:`a = x + \mathrm{MHA}(\mathrm{LN}_1(x), \ldots)`, and so on; the
    memory is not normalised again (the encoder's final norm did it).

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import DecoderBlock, causal_mask
    >>> rng = np.random.default_rng(0)
    >>> block = DecoderBlock(16, 4, 64, rng=rng)
    >>> x, memory = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 7, 16))
    >>> y = block(x, memory, self_mask=causal_mask(5))
    >>> y.shape, block.cross_attention_weights.shape
    ((2, 5, 16), (2, 4, 5, 7))
    >>> dx, dmemory = block.backward(np.ones_like(y))
    >>> dx.shape, dmemory.shape
    ((2, 5, 16), (2, 7, 16))
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
        dropout=0.0,
        rng=None,
        dtype=np.float64,
    ):
        super().__init__()
        check_bool(norm_first, "norm_first")
        check_probability(dropout, f"{type(self).__name__}.dropout")
        rng = check_rng(rng)
        self.self_attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps, dtype=dtype)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, rng=rng, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, rng=rng, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps, dtype=dtype)
        self.drop1, self.drop2, self.drop3 = (Dropout(dropout, rng) for _ in range(3))
        self.d_model, self.n_heads, self.d_ff = d_model, n_heads, d_ff
        self.norm_first = bool(norm_first)
        self.dropout = float(dropout)
        self.add_children(
            self_attn=self.self_attn,
            norm1=self.norm1,
            cross_attn=self.cross_attn,
            norm2=self.norm2,
            ff=self.ff,
            norm3=self.norm3,
        )
        self.add_children(drop1=self.drop1, drop2=self.drop2, drop3=self.drop3)
        self.self_attention_weights = None
        self.cross_attention_weights = None

    def __repr__(self):
        return (
            f"DecoderBlock(d_model={self.d_model}, n_heads={self.n_heads}, d_ff={self.d_ff}, "
            f"norm_first={self.norm_first})"
        )

    def checked_call(self, x, memory, self_mask=None, memory_mask=None, *, kv_cache=None):
        """Run the block.

        Parameters
        ----------
        x : ndarray of shape (B, T, D)
            Target-side input.
        memory : ndarray of shape (B, S, D)
            Encoder output.
        self_mask : array_like of bool, broadcastable to (B, H, T, T), optional
            Usually ``causal_mask(T)`` combined with the target padding.
        memory_mask : array_like of bool, broadcastable to (B, H, T, S), optional
            Usually the source padding mask of shape (B, 1, 1, S).
        kv_cache : tuple of two KVCache, optional
            The self-attention's and the cross-attention's keys and values while generating.

        Returns
        -------
        ndarray of shape (B, T, D)
        """
        x = check_block_input(x, self.d_model, ndims=(3,))
        memory = check_memory(memory, x.shape[0], self.d_model)
        self_cache, cross_cache = (None, None) if kv_cache is None else kv_cache
        _, _, self_mask, _, _ = self.self_attn.check_inputs(x, None, self_mask, None, self_cache)
        _, _, memory_mask, _, _ = self.cross_attn.check_inputs(
            x, memory, memory_mask, None, cross_cache
        )
        dt = compute_dtype(np.result_type(x, memory))
        x, memory = x.astype(dt, copy=False), memory.astype(dt, copy=False)
        y = self.run_or_blame(self.forward, x, memory, self_mask, memory_mask, kv_cache=kv_cache)
        return y.astype(x.dtype, copy=False)

    # --8<-- [start:decoder_block]
    def forward(self, x, memory, self_mask=None, memory_mask=None, *, kv_cache=None):
        """The block on checked input: x (B, T, D), memory (B, S, D) -> (B, T, D)."""
        self_cache, cross_cache = (None, None) if kv_cache is None else kv_cache
        if self.norm_first:  # pre-LN: x + Sublayer(LayerNorm(x)); the memory is not normalised
            a, w_self = self.self_attn(self.norm1(x), mask=self_mask, kv_cache=self_cache)
            h = x + self.drop1(a)  # 1. masked self-attention
            c, w_cross = self.cross_attn(self.norm2(h), memory, memory_mask, kv_cache=cross_cache)
            h2 = h + self.drop2(c)  # 2. cross-attention: queries from h, keys/values from memory
            y = h2 + self.drop3(self.ff(self.norm3(h2)))  # 3. feed-forward
        else:  # post-LN, as in the paper: LayerNorm(x + Sublayer(x))
            a, w_self = self.self_attn(x, mask=self_mask, kv_cache=self_cache)
            h = self.norm1(x + self.drop1(a))  # 1. masked self-attention
            c, w_cross = self.cross_attn(h, memory, memory_mask, kv_cache=cross_cache)
            h2 = self.norm2(h + self.drop2(c))  # 2. cross-attention
            y = self.norm3(h2 + self.drop3(self.ff(h2)))  # 3. feed-forward
        self.self_attention_weights = w_self  # (B, H, T, T)
        self.cross_attention_weights = w_cross  # (B, H, T, S)
        self.cache = {}
        return y

    # --8<-- [end:decoder_block]

    def backward(self, grad_output):
        """Backward pass of the last call.

        Returns
        -------
        dx : ndarray of shape (B, T, D)
        dmemory : ndarray of shape (B, S, D)
        """
        self.saved()  # a clear error before any forward pass
        g = grad_output
        drop1, drop2, drop3 = self.drop1.backward, self.drop2.backward, self.drop3.backward
        if self.norm_first:
            dh2 = g + self.norm3.backward(self.ff.backward(drop3(g)))
            dq, dmem = self.cross_attn.backward(drop2(dh2))
            dh = dh2 + self.norm2.backward(dq)
            dx = dh + self.norm1.backward(self.self_attn.backward(drop1(dh)))
            return dx, dmem
        dz3 = self.norm3.backward(g)
        dh2 = dz3 + self.ff.backward(drop3(dz3))
        dz2 = self.norm2.backward(dh2)
        dq, dmem = self.cross_attn.backward(drop2(dz2))
        dh = dz2 + dq
        dz1 = self.norm1.backward(dh)
        dx = dz1 + self.self_attn.backward(drop1(dz1))
        return dx, dmem
