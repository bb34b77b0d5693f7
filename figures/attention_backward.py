"""The backward of one attention head, as a graph: the forward on top, its mirror image below.

Forward, left to right: S = Q K^T / sqrt(d_k) (+ M), A = softmax(S) row by row, O = A V.
Backward, right to left, each gradient under the array it belongs to: G = dL/dO gives dL/dA and
dL/dV, dL/dA gives dL/dS (the softmax Jacobian, row by row), dL/dS gives dL/dQ and dL/dK. The
shapes are not typed by hand: ``figure`` runs ``attention_steps`` and ``attention_backward`` on a
head with n_q = 3, n_k = 5, d_k = 4, d_v = 2 (four different sizes) and names each axis of each
array by its size, so the letters under the boxes are the shapes the package produced.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from transformer_np import attention_backward, attention_steps

TEXT = {
    "it": {
        "forward": "forward",
        "backward": "backward",
        "scores": "$QK^\\top/\\sqrt{d_k} + M$",
        "softmax": "softmax,\nriga per riga",
        "jacobian": "jacobiana della softmax, riga per riga\n(0 dove la maschera blocca)",
        "title": "Una testa: il forward (in alto) e il backward (in basso), "
        "ogni gradiente sotto il suo array e della sua forma",
    },
    "en": {
        "forward": "forward",
        "backward": "backward",
        "scores": "$QK^\\top/\\sqrt{d_k} + M$",
        "softmax": "softmax,\nrow by row",
        "jacobian": "softmax Jacobian, row by row\n(0 where the mask blocks)",
        "title": "One head: the forward (top) and the backward (bottom), "
        "each gradient under its array and of its shape",
    },
}

FORWARD, BACKWARD = "#2b6cb0", "#c05621"
FILL = {FORWARD: "#dbeafe", BACKWARD: "#fde2cc"}

# Where each array sits: the backward row is the forward row mirrored about y = 3.
POSITION = {
    "Q": (1, 5.2),
    "K": (1, 3.8),
    "S": (4.2, 4.5),
    "A": (7.4, 4.5),
    "V": (7.4, 6.0),
    "O": (10.6, 4.5),
}


def shapes() -> dict[str, tuple[str, ...]]:
    """The shape of every forward array and of its gradient, as axis names, from a real run."""
    n_q, n_k, d_k, d_v = 3, 5, 4, 2
    names = {n_q: "n_q", n_k: "n_k", d_k: "d_k", d_v: "d_v"}
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((n_q, d_k)), rng.standard_normal((n_k, d_k))
    v = rng.standard_normal((n_k, d_v))
    scores = q @ k.T / np.sqrt(d_k)
    out, weights = attention_steps(q, k, v)
    grad_out = rng.standard_normal(out.shape)  # G = dL/dO
    dq, dk, dv = attention_backward(grad_out, q, k, v, weights)
    arrays = {"Q": q, "K": k, "V": v, "S": scores, "A": weights, "O": out}
    grads = {"Q": dq, "K": dk, "V": dv, "O": grad_out}
    for key, grad in grads.items():  # every gradient has the shape of its array
        assert grad.shape == arrays[key].shape, key
    return {key: tuple(names[n] for n in a.shape) for key, a in arrays.items()}


def _box(ax, xy, text, shape, color):
    x, y = xy
    ax.add_patch(
        FancyBboxPatch(
            (x - 0.85, y - 0.42),
            1.7,
            0.84,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=FILL[color],
            edgecolor=color,
            linewidth=1.2,
        )
    )
    ax.text(x, y + 0.14, text, ha="center", va="center", fontsize=11)
    ax.text(
        x,
        y - 0.2,
        "$(" + ", ".join(shape) + ")$",
        ha="center",
        va="center",
        fontsize=8.5,
        color="0.3",
    )


def _curve(ax, start, end, color, bend=0.0):
    """An arrow from ``start`` to ``end``, straight or bent (``bend``: matplotlib's arc3 rad)."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=13,
            color=color,
            linewidth=1.4,
            connectionstyle=f"arc3,rad={bend}",
        )
    )


def _arrow(ax, start, end, color, label=None, label_xy=None, **label_kw):
    (x0, y0), (x1, y1) = start, end
    dx = 0.9 if x1 > x0 else -0.9 if x1 < x0 else 0
    dy = 0.45 if y1 > y0 and dx == 0 else -0.45 if y1 < y0 and dx == 0 else 0
    _curve(ax, (x0 + dx, y0 + dy), (x1 - dx, y1 - dy), color)
    if label:
        lx, ly = label_xy if label_xy else ((x0 + x1) / 2, (y0 + y1) / 2 + 0.3)
        ax.text(lx, ly, label, ha="center", va="center", fontsize=9, color=color, **label_kw)


def figure(lang: str) -> Figure:
    """The graph of one head's attention, forward on top and backward below."""
    t = TEXT[lang]
    shape = shapes()
    fig = Figure(figsize=(10, 5.6), layout="constrained")
    ax = fig.subplots()
    ax.set_xlim(-0.3, 11.8)
    ax.set_ylim(-0.7, 6.7)
    ax.set_axis_off()
    down = {key: (x, 6 - y) for key, (x, y) in POSITION.items()}  # the mirror image

    for key, xy in POSITION.items():
        _box(ax, xy, f"${key}$", shape[key], FORWARD)
    for key, xy in down.items():
        text = "$G = \\partial L/\\partial O$" if key == "O" else f"$\\partial L/\\partial {key}$"
        _box(ax, xy, text, shape[key], BACKWARD)

    p, d = POSITION, down
    _arrow(ax, p["Q"], p["S"], FORWARD)
    _arrow(ax, p["K"], p["S"], FORWARD)
    ax.text(2.6, 5.35, t["scores"], ha="center", fontsize=9, color=FORWARD)
    _arrow(ax, p["S"], p["A"], FORWARD, t["softmax"], (5.8, 5.0))
    _arrow(ax, p["A"], p["O"], FORWARD, "$O = AV$", (9.0, 5.25))
    _curve(ax, (8.25, 6.0), (10.6, 4.95), FORWARD, bend=-0.25)

    _arrow(ax, d["O"], d["A"], BACKWARD, "$G\\,V^\\top$", (9.0, 1.85))
    _curve(ax, (10.6, 1.05), (8.25, 0.0), BACKWARD, bend=-0.25)
    ax.text(10.2, 0.1, "$A^\\top G$", ha="center", fontsize=9, color=BACKWARD)
    _arrow(ax, d["A"], d["S"], BACKWARD, t["jacobian"], (5.8, 2.3))
    _arrow(ax, d["S"], d["Q"], BACKWARD)
    _arrow(ax, d["S"], d["K"], BACKWARD)
    ax.text(
        2.6,
        0.2,
        "$(\\partial L/\\partial S)\\,K/\\sqrt{d_k}$",
        ha="center",
        fontsize=9,
        color=BACKWARD,
    )
    ax.text(
        2.6,
        2.3,
        "$(\\partial L/\\partial S)^\\top Q/\\sqrt{d_k}$",
        ha="center",
        fontsize=9,
        color=BACKWARD,
    )

    ax.text(-0.2, 6.45, t["forward"], fontsize=11, color=FORWARD, fontweight="bold")
    ax.text(-0.2, -0.55, t["backward"], fontsize=11, color=BACKWARD, fontweight="bold")
    ax.axhline(3.0, color="0.8", linewidth=0.8, linestyle="--")
    ax.set_title(t["title"], fontsize=10)
    return fig
