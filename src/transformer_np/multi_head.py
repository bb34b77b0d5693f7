"""Multi-head attention: H heads side by side, each attending in its own subspace.

Shape glossary: B batch, H heads, T query positions, S key positions, D = d_model,
Dh = d_model / H the size of one head.

:class:`MultiHeadAttention` projects the input into queries, keys and values, splits them into
heads (:func:`split_heads`), runs the steps of attention in every head at once, and merges the
heads back (:func:`merge_heads`) before the output projection. While generating, a
:class:`KVCache` keeps the keys and values of the positions already seen.
"""

from __future__ import annotations

import math

import numpy as np

from ._validation import (
    as_float_array,
    check_bool,
    check_broadcastable,
    check_dtype,
    check_finite,
    check_ndim,
    check_positive_int,
    check_rng,
    compute_dtype,
    shape_str,
)
from .attention import as_bool_mask, attention_backward, check_bias, scaled_dot_product_attention
from .module import Module, as_grad

__all__ = ["KVCache", "MultiHeadAttention", "merge_heads", "project", "split_heads"]


# --8<-- [start:heads]
def split_heads(x, n_heads):
    """(B, T, D) -> (B, H, T, Dh): head h gets the features h*Dh .. (h+1)*Dh - 1."""
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, H, T, Dh) -> (B, T, D): the heads side by side again (the inverse of split_heads)."""
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)


# --8<-- [end:heads]


class KVCache:
    """The keys and values of one attention layer, kept between the steps of generation.

    Self-attention appends the keys and values of each new position; cross-attention fills
    the cache once with the encoder output's and reads it at every step.

    Parameters
    ----------
    max_len : int
        The most positions the cache will hold (the buffers are allocated once, on the first
        :meth:`append`).

    Attributes
    ----------
    length : int
        Positions stored so far (0 before the first step; set it to 0 to start again).
    """

    def __init__(self, max_len):
        self.max_len = check_positive_int(max_len, "max_len")
        self.length = 0
        self._keys = self._values = None

    def __repr__(self):
        return f"KVCache(length={self.length}, max_len={self.max_len})"

    def append(self, k, v):
        """Store k, v (B, H, n, Dh) after the stored positions; return all: (B, H, length, Dh)."""
        B, H, n, Dh = k.shape
        t0 = self.length
        if t0 + n > self.max_len:
            raise ValueError(
                f"the KVCache holds at most max_len = {self.max_len} positions, got "
                f"{t0} stored + {n} new"
            )
        if self._keys is None or self._keys.shape[:2] != (B, H) or self._keys.dtype != k.dtype:
            self._keys = np.empty((B, H, self.max_len, Dh), k.dtype)
            self._values = np.empty((B, H, self.max_len, Dh), v.dtype)
        self._keys[:, :, t0 : t0 + n] = k
        self._values[:, :, t0 : t0 + n] = v
        self.length = t0 + n
        return self.stored()

    def stored(self):
        """The stored keys and values, (B, H, length, Dh) each (views, no copy)."""
        return self._keys[:, :, : self.length], self._values[:, :, : self.length]


def project(x, W, b=None):
    """``x @ W + b`` on 2-D ``x`` (N, D_in): one matrix product over all tokens."""
    y = x @ W  # (N, D_in) @ (D_in, D_out) -> (N, D_out)
    if b is not None:
        y += b
    return y


class MultiHeadAttention(Module):
    r"""Multi-head attention with its own parameters, created once.

    Parameters
    ----------
    d_model : int
        Model width D (> 0).
    n_heads : int
        Number of heads H (> 0); must divide ``d_model``. Each head has size Dh = D / H.
    rng : np.random.Generator or int, optional
        Source of randomness for the initial weights.
    bias : bool, default True
        Whether the four projections have biases ``b_q, b_k, b_v, b_o``.
    dtype : {np.float64, np.float32}, default np.float64
        dtype of the parameters.

    Attributes
    ----------
    params : dict of str to ndarray
        ``W_q, W_k, W_v, W_o`` of shape (D, D), applied as ``x @ W``; with ``bias=True`` also
        ``b_q, b_k, b_v, b_o`` of shape (D,). The columns ``h*Dh:(h+1)*Dh`` of ``W_q`` (and
        ``W_k``, ``W_v``) are head ``h``'s projection; the rows ``h*Dh:(h+1)*Dh`` of ``W_o``
        read head ``h``'s output. Weights are Xavier/Glorot-uniform, biases zero.
    d_model, n_heads, d_head : int

    Notes
    -----
    .. math:: \mathrm{MultiHead}(X_q, X_{kv}) = \mathrm{Concat}(\mathrm{head}_1, \dots,
              \mathrm{head}_H)\, W^O + b^O, \quad
              \mathrm{head}_h = \mathrm{Attention}(X_q W^Q_h + b^Q_h,\;
              X_{kv} W^K_h + b^K_h,\; X_{kv} W^V_h + b^V_h)

    All heads are computed together: one (B*T, D) @ (D, D) product per projection, a
    reshape to (B, H, T, Dh) (:func:`split_heads`), and batched attention over the (B, H)
    axes; there is no Python loop over heads. The computation runs in the input's dtype
    (float16 in float32).

    After each call ``self.cache`` holds what a backward pass needs (see :meth:`forward`).
    While generating text, a :class:`KVCache` passed as ``kv_cache`` keeps the keys and values
    of the positions already seen, so that each step projects only the new ones.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np import MultiHeadAttention
    >>> rng = np.random.default_rng(0)
    >>> mha = MultiHeadAttention(d_model=16, n_heads=4, rng=rng)
    >>> x = rng.standard_normal((2, 5, 16))  # batch 2, 5 tokens
    >>> out, w = mha(x)
    >>> out.shape, w.shape
    ((2, 5, 16), (2, 4, 5, 5))
    """

    def __init__(self, d_model, n_heads, *, rng=None, bias=True, dtype=np.float64):
        super().__init__()
        d_model = check_positive_int(d_model, "d_model")
        n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model = {d_model} and "
                f"n_heads = {n_heads} (d_model / n_heads = {d_model / n_heads:g})"
            )
        check_bool(bias, "bias")
        dtype = check_dtype(dtype)
        rng = check_rng(rng)
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.has_bias = bool(bias)
        # Xavier/Glorot uniform for a (D, D) map: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
        limit = math.sqrt(6.0 / (2 * d_model))
        for name in ("W_q", "W_k", "W_v", "W_o"):
            self.params[name] = rng.uniform(-limit, limit, (d_model, d_model)).astype(dtype)
        if bias:
            for name in ("b_q", "b_k", "b_v", "b_o"):
                self.params[name] = np.zeros(d_model, dtype)

    def __repr__(self):
        return (
            f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}, "
            f"bias={self.has_bias})"
        )

    def expected_shapes(self):
        """The shape every parameter must have."""
        d = self.d_model
        shapes = {"W_q": (d, d), "W_k": (d, d), "W_v": (d, d), "W_o": (d, d)}
        if self.has_bias:
            shapes.update({"b_q": (d,), "b_k": (d,), "b_v": (d,), "b_o": (d,)})
        return shapes

    def checked_call(self, x_q, x_kv=None, mask=None, *, bias=None, kv_cache=None):
        """Attend from ``x_q`` to ``x_kv`` (to ``x_q`` itself when ``x_kv`` is None).

        Parameters
        ----------
        x_q : ndarray of shape (B, T, D) or (T, D)
            The sequence that asks (queries).
        x_kv : ndarray of shape (B, S, D) or (S, D), optional
            The sequence that answers (keys and values); same rank and batch size as ``x_q``.
            None means self-attention (``x_kv = x_q``).
        mask : array_like of bool, optional
            True = may attend. Broadcastable to (B, H, T, S) for 3-D input, (H, T, S) for 2-D
            input: ``causal_mask(T)`` of shape (T, T), or ``padding_mask(lengths)`` of shape
            (B, 1, 1, S).
        bias : ndarray of float, optional
            Additive bias with the same broadcasting as ``mask`` (keyword only).
        kv_cache : KVCache, optional
            For generation (see :meth:`forward`); 3-D input only.

        Returns
        -------
        output : ndarray of shape (B, T, D) or (T, D)
        weights : ndarray of shape (B, H, T, S) or (H, T, S), or None with a ``kv_cache``
        """
        x_q, x_kv, mask, bias, squeeze = self.check_inputs(x_q, x_kv, mask, bias, kv_cache)
        out_dtype = np.result_type(x_q, x_kv) if x_kv is not None else x_q.dtype
        dt = compute_dtype(out_dtype)
        x_q = x_q.astype(dt, copy=False)
        x_kv = None if x_kv is None else x_kv.astype(dt, copy=False)
        out, weights = self.run_or_blame(
            self.forward, x_q, x_kv, mask, bias=bias, kv_cache=kv_cache
        )
        self.cache["squeeze"] = squeeze
        if squeeze:
            out, weights = out[0], weights[0]  # (1, T, D) -> (T, D), (1, H, T, S) -> (H, T, S)
        weights = None if weights is None else weights.astype(out_dtype, copy=False)
        return out.astype(out_dtype, copy=False), weights

    # --8<-- [start:mha_forward]
    def forward(self, x_q, x_kv=None, mask=None, *, bias=None, kv_cache=None):
        """Multi-head attention on checked input: x_q (B, T, D), x_kv (B, S, D) or None.

        With a ``kv_cache`` (generation, no backward pass): in self-attention the new keys
        and values are appended to the cache and the T new queries attend to every cached
        position and, causally, to each other; in cross-attention the cache is filled with
        the projections of ``x_kv`` on the first call and reused after it.
        """
        B, T, D = x_q.shape
        H = self.n_heads
        p = {name: w.astype(x_q.dtype, copy=False) for name, w in self.params.items()}
        self_attention = x_kv is None  # the sequence answers itself
        x_kv = x_q if self_attention else x_kv
        S = x_kv.shape[1]
        # 1. projections: one matrix product over all tokens of the batch for each
        xq2 = x_q.reshape(B * T, D)  # (B, T, D) -> (B*T, D)
        xkv2 = xq2 if self_attention else x_kv.reshape(B * S, D)  # (B, S, D) -> (B*S, D)
        q = project(xq2, p["W_q"], p.get("b_q"))  # (B*T, D) @ (D, D) -> (B*T, D)
        # 2. split the heads: (B*T, D) -> (B, T, D) -> (B, H, T, Dh)
        q = split_heads(q.reshape(B, T, D), H)  # (B, H, T, Dh)
        if kv_cache is not None and not self_attention and kv_cache.length:
            k, v = kv_cache.stored()  # cross-attention: the encoder's, projected once
        else:
            k = split_heads(project(xkv2, p["W_k"], p.get("b_k")).reshape(B, S, D), H)
            v = split_heads(project(xkv2, p["W_v"], p.get("b_v")).reshape(B, S, D), H)
            if kv_cache is not None:  # (B, H, S, Dh) -> (B, H, stored + S, Dh)
                if self_attention and T > 1:  # causal: new query i sees the stored keys and
                    t0 = kv_cache.length  # the new ones up to its own position t0 + i
                    mask = np.arange(t0 + T)[None, :] <= t0 + np.arange(T)[:, None]  # (T, t0+T)
                k, v = kv_cache.append(k, v)
        # 3. attention in every head at once
        need_weights = kv_cache is None  # only a backward pass needs them
        ctx, weights = scaled_dot_product_attention(
            q, k, v, mask, bias=bias, need_weights=need_weights
        )
        # 4. concatenate the heads and project: (B, H, T, Dh) -> (B, T, D) -> (B*T, D)
        context = merge_heads(ctx).reshape(B * T, D)
        out = project(context, p["W_o"], p.get("b_o"))  # (B*T, D) @ (D, D) -> (B*T, D)
        # for backward(): the inputs, the heads, the weights, the concatenated heads
        self.cache = {"x_q": xq2, "x_kv": xkv2, "q": q, "k": k, "v": v, "weights": weights}
        self.cache.update(context=context, shape=(B, T, S), squeeze=False)
        self.cache.update(self_attention=self_attention, dtype=x_q.dtype)
        return out.reshape(B, T, D), weights  # (B, T, D), (B, H, T, S)

    # --8<-- [end:mha_forward]

    def check_inputs(self, x_q, x_kv, mask, bias, kv_cache):
        """The arguments of a call checked, and 2-D input given a batch axis of 1."""
        x_q = self._check_sequence(x_q, "x_q")
        if x_kv is not None:
            x_kv = self._check_sequence(x_kv, "x_kv")
            if x_kv.ndim != x_q.ndim:
                raise ValueError(
                    f"x_q and x_kv must have the same rank, got x_q {shape_str(x_q.shape)} "
                    f"and x_kv {shape_str(x_kv.shape)}"
                )
            if x_q.ndim == 3 and x_kv.shape[0] != x_q.shape[0]:
                raise ValueError(
                    f"x_q and x_kv must have the same batch size, got x_q "
                    f"{shape_str(x_q.shape)} and x_kv {shape_str(x_kv.shape)}"
                )
        squeeze = x_q.ndim == 2
        if kv_cache is not None:
            if not isinstance(kv_cache, KVCache):
                raise TypeError(f"kv_cache must be a KVCache, got {type(kv_cache).__name__}")
            if squeeze:
                raise ValueError("a kv_cache needs 3-D input (B, T, D)")
        T = x_q.shape[-2]
        S = T if x_kv is None else x_kv.shape[-2]
        B = x_q.shape[0]
        scores_shape = (self.n_heads, T, S) if squeeze else (B, self.n_heads, T, S)
        desc = "the attention scores " + ("(H, T, S) =" if squeeze else "(B, H, T, S) =")
        if mask is not None:
            mask = as_bool_mask(mask)
            check_broadcastable(mask.shape, scores_shape, "mask", desc)
        if bias is not None:
            bias = check_bias(bias, scores_shape, desc)
        if squeeze:
            x_q = x_q[None]  # (T, D) -> (1, T, D)
            x_kv = None if x_kv is None else x_kv[None]
        return x_q, x_kv, mask, bias, squeeze

    def _check_sequence(self, x, name):
        x = as_float_array(x, name)
        check_ndim(x, name, (2, 3), "(T, d_model) or (B, T, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} must have last dimension d_model = {self.d_model}, "
                f"got shape {shape_str(x.shape)}"
            )
        if x.shape[-2] == 0:
            raise ValueError(f"{name} must hold at least one position, got {shape_str(x.shape)}")
        check_finite(x, name)
        return x

    def backward(self, grad_output):
        r"""Backward pass of the last call.

        Parameters
        ----------
        grad_output : ndarray of shape (B, T, D) or (T, D)
            dL/d(output) (the gradient of the first returned array; the weights are treated as
            a by-product, not an output to differentiate).

        Returns
        -------
        ndarray of shape (B, T, D), or a tuple of two
            Self-attention: dL/dx, the three paths (query, key, value) summed. Cross-attention
            (``x_kv`` given): ``(dL/dx_q, dL/dx_kv)`` with shapes (B, T, D) and (B, S, D).
            ``self.grads`` gets every key of ``params``.

        Notes
        -----
        Per head, with :math:`S = Q K^\top / \sqrt{d_k}`, :math:`A = \mathrm{softmax}(S)` (rows)
        and :math:`O = A V`; :math:`G = \partial L / \partial O`:

        .. math::
            \frac{\partial L}{\partial V} = A^\top G, \qquad
            \frac{\partial L}{\partial A} = G V^\top, \\
            \frac{\partial L}{\partial S_{ij}} = A_{ij}\left(\frac{\partial L}{\partial A_{ij}}
                - \sum_k A_{ik} \frac{\partial L}{\partial A_{ik}}\right), \\
            \frac{\partial L}{\partial Q} = \frac{1}{\sqrt{d_k}}
                \frac{\partial L}{\partial S} K, \qquad
            \frac{\partial L}{\partial K} = \frac{1}{\sqrt{d_k}}
                \left(\frac{\partial L}{\partial S}\right)^\top Q

        The third line is the softmax Jacobian :math:`\partial A_{ij} / \partial S_{il} =
        A_{ij} (\delta_{jl} - A_{il})` applied row by row, never built as a matrix. A blocked
        key has :math:`A_{ij} = 0`, so its score gets gradient exactly 0 (a mask is a constant).
        The projections are Linear maps: :math:`\partial L / \partial W^Q = X_q^\top
        (\partial L / \partial Q)` and so on, with the heads merged back to (B*T, D).
        """
        c = self.saved()
        B, T, S = c["shape"]
        H, D = self.n_heads, self.d_model
        dt = c["dtype"]
        g2 = as_grad(grad_output, (T, D) if c["squeeze"] else (B, T, D), dt)
        g2 = g2.reshape(B * T, D)  # (B, T, D) -> (B*T, D)
        p = {name: w.astype(dt, copy=False) for name, w in self.params.items()}
        grads = {}
        # 4. output projection: out = context @ W_o + b_o
        grads["W_o"] = c["context"].T @ g2  # (D, B*T) @ (B*T, D) -> (D, D)
        if self.has_bias:
            grads["b_o"] = g2.sum(axis=0)
        dctx = g2 @ p["W_o"].T  # (B*T, D) @ (D, D) -> (B*T, D)
        dctx = split_heads(dctx.reshape(B, T, D), H)  # (B*T, D) -> (B, H, T, Dh)
        # 3. attention in every head: ctx = softmax(q k^T / sqrt(Dh) + bias, mask) v
        dq, dk, dv = attention_backward(dctx, c["q"], c["k"], c["v"], c["weights"])
        # 2. merge the heads back
        dq = merge_heads(dq).reshape(B * T, D)  # (B, H, T, Dh) -> (B*T, D)
        dk = merge_heads(dk).reshape(B * S, D)  # (B, H, S, Dh) -> (B*S, D)
        dv = merge_heads(dv).reshape(B * S, D)  # (B, H, S, Dh) -> (B*S, D)
        # 1. input projections
        xq2, xkv2 = c["x_q"], c["x_kv"]  # (B*T, D), (B*S, D)
        grads["W_q"] = xq2.T @ dq  # (D, B*T) @ (B*T, D) -> (D, D)
        grads["W_k"] = xkv2.T @ dk  # (D, B*S) @ (B*S, D) -> (D, D)
        grads["W_v"] = xkv2.T @ dv
        if self.has_bias:
            grads["b_q"] = dq.sum(axis=0)
            grads["b_k"] = dk.sum(axis=0)
            grads["b_v"] = dv.sum(axis=0)
        self.grads = {
            name: grads[name].astype(self.params[name].dtype, copy=False) for name in self.params
        }
        dxq = dq @ p["W_q"].T  # (B*T, D) @ (D, D) -> (B*T, D)
        dxkv = dk @ p["W_k"].T  # (B*S, D)
        dxkv += dv @ p["W_v"].T
        q_shape = (T, D) if c["squeeze"] else (B, T, D)
        if c["self_attention"]:
            dxq += dxkv  # x is query, key and value at once: the three paths add up
            return dxq.reshape(q_shape)
        kv_shape = (S, D) if c["squeeze"] else (B, S, D)
        return dxq.reshape(q_shape), dxkv.reshape(kv_shape)
