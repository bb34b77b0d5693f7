"""Tolerances of the modern block's forward and backward passes, derived from the arithmetic.

The ``Rounded`` counts of rounding.py ("layers, blocks and models": the roundings along the
longest path, on the terms of the test's own data), for the parts of a LLaMA block and model:
RMSNorm, RoPE, SwiGLU, grouped-query attention with RoPE, the block and the model with tied
embeddings. Each function returns ``(y, back)`` as those of rounding.py; ``back(g)`` gives the
input's gradient and the parameters' gradients, each a Rounded whose ``tol(dtype, sides)`` bounds
a comparison of ``sides`` computations of it.

A first-order count, as in rounding.py: the error a step receives with its input is passed on
through the magnitudes of the terms (``terms`` of the input, not its value, where this module
writes the step), and the roundings of the step's own arithmetic are added to ``n``. The counts
cover both sides of a comparison with transformers (its ``rsqrt`` and ``sigmoid`` are charged
FUNCTION_ROUNDINGS like our ``sqrt`` and ``exp``).
"""

from __future__ import annotations

import numpy as np

from transformer_np import rope_angles

from helpers import FUNCTION_ROUNDINGS
from rounding import (
    Rounded,
    add_rounded,
    attention_rounded,
    embedding_rounded,
    linear_rounded,
    pre_ln_block_rounded,
)

FR = FUNCTION_ROUNDINGS


def rope_roundings(max_position):
    """The roundings of RoPE on q or k when each side computes its own angles: omega =
    base**(-2i/Dh) (a power, two divisions) times the position m is an angle of up to m radians
    with a relative error of FR + 3 roundings, so an absolute one of m times that (omega <= 1);
    then its cos and sin (FR) and x cos + rot(x) sin (3). With the same tables on both sides:
    :data:`SHARED_TABLES`."""
    return (FR + 3) * max(max_position, 1) + FR + 3


SHARED_TABLES = 3  # x cos + rot(x) sin: two products and a sum, the tables identical


def _swap_halves(a):
    """|pair partner| of each feature: (a1, a2) -> (a2, a1) on the last axis."""
    half = a.shape[-1] // 2
    return np.concatenate([a[..., half:], a[..., :half]], axis=-1)


def rms_norm_rounded(x, gamma, eps):
    """RMSNorm of a Rounded ``x`` (..., D). Returns ``(y, back)``; ``back(g)`` gives
    ``(dx, {"gamma": ...})``.

    Forward: x^2, the mean (D + 1), + eps, sqrt (or rsqrt, FR) and 1 / r, x r, gamma x_hat:
    D + FR + 6. The mean of squares does not cancel: x's error reaches r relatively as
    mean(|x| dx) / (ms + eps). Backward: g gamma, g_hat x_hat, its mean (D + 1), x_hat times it,
    the difference, times r, and for transformers' autograd a few more steps: D + 10; gamma's
    gradient, a sum of N products."""
    gamma = np.asarray(gamma, np.float64)
    X = x.value
    D = X.shape[-1]
    ms = (X * X).mean(-1, keepdims=True)
    r = 1 / np.sqrt(ms + eps)
    xh = X * r
    spread = (np.abs(X) * x.terms).mean(-1, keepdims=True) / (ms + eps)  # r's relative error
    x_hat = Rounded(xh, x.n + D + FR + 6, r * x.terms + np.abs(xh) * spread)
    y = Rounded(gamma * xh, x_hat.n + 1, np.abs(gamma) * x_hat.terms)

    def back(g):
        gh = g.value * gamma
        along = (gh * xh).mean(-1, keepdims=True)
        gh_terms = g.terms * np.abs(gamma)
        terms = r * (gh_terms + x_hat.terms * (gh_terms * x_hat.terms).mean(-1, keepdims=True))
        dx = Rounded(r * (gh - xh * along), g.n + x_hat.n + D + 10, terms)
        G2, X2 = g.value.reshape(-1, D), xh.reshape(-1, D)
        T2, XT2 = g.terms.reshape(-1, D), x_hat.terms.reshape(-1, D)
        d_gamma = Rounded((G2 * X2).sum(0), g.n + x_hat.n + G2.shape[0], (T2 * XT2).sum(0))
        return dx, {"gamma": d_gamma}

    return y, back


def rope_rounded(x, cos, sin, roundings):
    """RoPE on a Rounded ``x`` (..., T, Dh) with float64 tables (T, Dh), ``roundings`` those
    of the rotation (:func:`rope_roundings` or :data:`SHARED_TABLES`). Returns ``(y, back)``;
    ``back(g)`` gives dx, the rotation back (the same count: the transpose has the same
    entries)."""
    cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    ac, as_ = np.abs(cos), np.abs(sin)

    def rotate(a, sign):
        half = a.shape[-1] // 2
        rot = np.concatenate([-a[..., half:], a[..., :half]], axis=-1)
        return a * cos + sign * rot * sin

    def turned(t, sign):
        terms = ac * t.terms + as_ * _swap_halves(t.terms)
        return Rounded(rotate(t.value, sign), t.n + roundings, terms)

    return turned(x, 1.0), lambda g: turned(g, -1.0)


def _heads(t, H):
    B, T, D = t.value.shape
    return t.map(lambda a: a.reshape(B, T, H, D // H).transpose(0, 2, 1, 3))


def _merged(t):
    B, H, T, Dh = t.value.shape
    return t.map(lambda a: a.transpose(0, 2, 1, 3).reshape(B, T, H * Dh))


def _total(parts):
    """The sum of the input gradients of several Linear maps that read the same input (as
    rounding.mha_rounded counts it)."""
    n = max(d.g_n for d in parts) + sum(d.d_out for d in parts) + len(parts) - 1
    return Rounded(sum(d.value for d in parts), n, sum(d.terms for d in parts))


def gqa_rounded(attn, x, mask=None, rope=SHARED_TABLES):
    """Grouped-query self-attention without biases on a Rounded ``x`` (B, T, D), RoPE at
    positions 0 .. T - 1 when ``attn.rope_base`` is set (``rope``: its roundings). Returns
    ``(out, back)``; ``back(g)`` gives ``(dx, grads)`` under the layer's names.

    The attention is rounding.attention_rounded on the keys and values repeated G times (the
    definition); in the backward pass each key/value head sums the gradients of its G query
    heads, on rows of T positions each: G T more roundings, on the sum of the G heads' terms."""
    p = attn.params
    H, Hkv, Dh = attn.n_heads, attn.n_kv_heads, attn.d_head
    G, T = H // Hkv, x.value.shape[1]
    q, back_q = linear_rounded(x, p["W_q"])
    k, back_k = linear_rounded(x, p["W_k"])
    v, back_v = linear_rounded(x, p["W_v"])
    qh, kh, vh = _heads(q, H), _heads(k, Hkv), _heads(v, Hkv)
    if attn.rope_base is not None:
        cos, sin = rope_angles(np.arange(T), Dh, attn.rope_base)
        qh, back_rq = rope_rounded(qh, cos, sin, rope)
        kh, back_rk = rope_rounded(kh, cos, sin, rope)

    def repeated(t):
        return t.map(lambda a: np.repeat(a, G, axis=1))  # (B, Hkv, S, Dh) -> (B, H, S, Dh)

    ctx, back_att = attention_rounded(qh, repeated(kh), repeated(vh), mask)
    out, back_o = linear_rounded(_merged(ctx), p["W_o"])

    def group_sum(t):
        B, _, S, _ = t.value.shape
        total = lambda a: a.reshape(B, Hkv, G, S, Dh).sum(2)  # noqa: E731
        return Rounded(total(t.value), t.n + G * T, total(t.terms))

    def back(g):
        d_ctx, g_o = back_o(g)
        dq, dk, dv = back_att(_heads(d_ctx, H))
        dk, dv = group_sum(dk), group_sum(dv)
        if attn.rope_base is not None:
            dq, dk = back_rq(dq), back_rk(dk)
        grads = {"W_o": g_o["W"]}
        dxs = []
        for which, back_p, d in zip("qkv", (back_q, back_k, back_v), (dq, dk, dv), strict=True):
            dx, g_p = back_p(_merged(d))
            grads[f"W_{which}"] = g_p["W"]
            dxs.append(dx)
        return _total(dxs), grads

    return out, back


def swiglu_rounded(ff, x):
    """SwiGLU on a Rounded ``x``: gate and up (Linear), SiLU, the product, down. Returns
    ``(y, back)``; ``back(g)`` gives ``(dx, grads)``.

    SiLU z / (1 + exp(-z)) or z sigmoid(z): FR + 3 roundings of |silu(z)|, and z's error times
    |silu'| <= 1.1. Backward: sigmoid (FR + 2), silu' = s + silu (1 - s) (4), the products by
    dh and up (2), and the error of silu' from z's, |silu''| <= 0.5 times it."""
    p = ff.params
    z, back_gate = linear_rounded(x, p["W_gate"])
    u, back_up = linear_rounded(x, p["W_up"])
    Z, U = z.value, u.value
    s = 1 / (1 + np.exp(-Z))
    A = Z * s
    a = Rounded(A, z.n + FR + 3, np.abs(A) + 1.1 * z.terms)
    h = Rounded(A * U, max(a.n, u.n) + 1, a.terms * np.abs(U) + np.abs(A) * u.terms)
    y, back_down = linear_rounded(h, p["W_down"])

    def back(g):
        dh, g_down = back_down(g)
        slope = s + A * (1 - s)
        slope_terms = s + np.abs(A) * (1 - s)
        dz_terms = (dh.terms * np.abs(U) + np.abs(dh.value) * u.terms) * slope_terms
        dz_terms += np.abs(dh.value * U) * 0.5 * z.terms
        dz = Rounded(dh.value * U * slope, dh.n + max(u.n, z.n) + FR + 8, dz_terms)
        du = Rounded(
            dh.value * A, dh.n + a.n + 1, dh.terms * np.abs(A) + np.abs(dh.value) * a.terms
        )
        dx_gate, g_gate = back_gate(dz)
        dx_up, g_up = back_up(du)
        grads = {"W_gate": g_gate["W"], "W_up": g_up["W"], "W_down": g_down["W"]}
        return add_rounded(dx_gate, dx_up), grads

    return y, back


def llama_block_rounded(block, x, mask=None, rope=SHARED_TABLES):
    """LlamaBlock on a Rounded ``x``: the pre-LN block (h = x + attn(norm1(x)),
    y = h + ff(norm2(h))) with RMSNorm, grouped-query attention and SwiGLU. Returns
    ``(y, back)``; ``back(g)`` gives ``(dx, grads)`` under the block's names."""
    return pre_ln_block_rounded(
        x,
        norm1=lambda t: rms_norm_rounded(t, block.norm1.params["gamma"], block.norm1.eps),
        attn=lambda t: gqa_rounded(block.attn, t, mask, rope),
        norm2=lambda t: rms_norm_rounded(t, block.norm2.params["gamma"], block.norm2.eps),
        ff=lambda t: swiglu_rounded(block.ff, t),
    )


def llama_model_rounded(model, ids, rope=SHARED_TABLES):
    """LlamaModel on ``ids`` (B, T): the lookup, the blocks with a causal mask, the final
    RMSNorm, the tied output h E^T. Returns ``(logits, back)``; ``back(g)`` gives every gradient
    under the model's names, the table's the sum of its two shares."""
    T = ids.shape[1]
    causal = np.tril(np.ones((T, T), bool))
    x, back_e = embedding_rounded(model.embed, ids)
    backs = []
    for block in model.blocks.layers:
        x, back_block = llama_block_rounded(block, x, causal, rope)
        backs.append(back_block)
    norm = model.blocks.norm
    h, back_norm = rms_norm_rounded(x, norm.params["gamma"], norm.eps)
    E = np.asarray(model.params["embed.W"], np.float64)
    logits, back_out = linear_rounded(h, E.T)
    logits.own = model.embed.d_model + 1  # its own sum, for cross_entropy_rounded

    def back(g):
        dh, g_out = back_out(g)
        g, g_norm = back_norm(dh)
        grads = {"blocks.norm.gamma": g_norm["gamma"]}
        for i in reversed(range(len(backs))):
            g, g_block = backs[i](g)
            grads.update({f"blocks.{i}.{k}": v for k, v in g_block.items()})
        grads["embed.W"] = add_rounded(back_e(g)["W"], g_out["W"].map(np.transpose))
        return grads

    return logits, back
