"""RoPE: a pair of components of a query turns by position x omega_i, and scores see distances.

The query and key of the example of docs/*/modern-block.md ("La distanza, non la posizione"):
D_h = 8, base 10000, ``np.random.default_rng(0)``. Left and middle: the pair i = 0 (features 0
and 4, omega_0 = 1) and the pair i = 1 (features 1 and 5, omega_1 = 0.1) of the query, rotated
by ``apply_rope`` with the angles of ``rope_angles`` at positions 0 to 5: the angle grows with
the position, ten times faster for the first pair. Right: the scores q_m . k_n of the rotated
query and key for positions 0 to 7, equal along each diagonal (the same distance n - m).
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from transformer_np import apply_rope, rope_angles, rope_frequencies

D_H, BASE = 8, 10000.0
POSITIONS = np.arange(6)  # the positions drawn on the circles
T = 8  # the positions of the score matrix

TEXT = {
    "it": {
        "pair": "coppia $i = {}$ (feature {} e {}), $\\omega_{} = {:g}$",
        "pos": "$m = {}$",
        "sweep": "da $m = 0$ a $m = {}$: ${} \\times {:g} = {:g}$ rad",
        "scores": "$q_m \\cdot k_n$: uguale lungo ogni diagonale\n(riquadrata: $n - m = 3$)",
        "query_pos": "posizione $m$ della query",
        "key_pos": "posizione $n$ della key",
        "score": "punteggio",
    },
    "en": {
        "pair": "pair $i = {}$ (features {} and {}), $\\omega_{} = {:g}$",
        "pos": "$m = {}$",
        "sweep": "from $m = 0$ to $m = {}$: ${} \\times {:g} = {:g}$ rad",
        "scores": "$q_m \\cdot k_n$: equal along each diagonal\n(framed: $n - m = 3$)",
        "query_pos": "query position $m$",
        "key_pos": "key position $n$",
        "score": "score",
    },
}


def rotated(x, positions):
    """x (Dh,) rotated by RoPE at each position: (T, Dh)."""
    cos, sin = rope_angles(positions, D_H, BASE)  # (T, Dh) each
    return apply_rope(np.broadcast_to(x, (len(positions), D_H)), cos, sin)


def draw_pair(ax, t, q_rot, i, omega, colors):
    half = D_H // 2
    a, b = q_rot[:, i], q_rot[:, i + half]  # the pair (x_i, x_{i + Dh/2}) at each position
    radius = np.hypot(a[0], b[0])
    assert np.allclose(np.hypot(a, b), radius)  # a rotation: the length does not change
    circle = np.linspace(0, 2 * np.pi, 200)
    ax.plot(radius * np.cos(circle), radius * np.sin(circle), color="0.8", linewidth=1)
    ax.axhline(0, color="0.85", linewidth=0.8)
    ax.axvline(0, color="0.85", linewidth=0.8)
    for m, color in zip(POSITIONS, colors, strict=True):
        ax.annotate(
            "",
            (a[m], b[m]),
            (0, 0),
            arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": 1.8},
        )
        if omega < 0.3 and m not in (POSITIONS[0], POSITIONS[-1]):
            continue  # the arrows of a slow pair are too close for a label each
        ax.text(
            1.22 * a[m],
            1.22 * b[m],
            t["pos"].format(m),
            color=color,
            fontsize=9,
            ha="center",
            va="center",
        )
    # the angle swept from the first position to the last: (m_last - m_first) * omega_i
    start, end = np.arctan2(b[0], a[0]), np.arctan2(b[-1], a[-1])
    sweep = (POSITIONS[-1] - POSITIONS[0]) * omega
    assert np.isclose(np.mod(end - start - sweep + np.pi, 2 * np.pi), np.pi)
    arc = start + np.linspace(0, sweep, 100)
    ax.plot(0.45 * radius * np.cos(arc), 0.45 * radius * np.sin(arc), color="0.3", linewidth=1)
    ax.set_title(t["pair"].format(i, i, i + half, i, omega), fontsize=10)
    lim = 1.4 * radius
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    swept = t["sweep"].format(POSITIONS[-1], POSITIONS[-1], omega, sweep)
    ax.set_xlabel(f"$x_{i}$\n{swept}")
    ax.set_ylabel(f"$x_{i + half}$")


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, D_H))  # the page's query and key
    omega = rope_frequencies(D_H, BASE)  # (Dh/2,) = 1, 0.1, 0.01, 0.001
    q_rot = rotated(q, POSITIONS)  # (6, Dh): q at positions 0 .. 5
    scores = rotated(q, np.arange(T)) @ rotated(k, np.arange(T)).T  # (T, T): q_m . k_n
    for offset in range(-T + 1, T):  # each diagonal holds one value: it depends on n - m only
        diagonal = np.diagonal(scores, offset=offset)
        assert np.allclose(diagonal, diagonal[0])

    fig = Figure(figsize=(12, 4.2), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 1.25])
    colors = [matplotlib.colormaps["plasma"](x) for x in np.linspace(0, 0.8, len(POSITIONS))]
    for ax, i in zip(axes[:2], (0, 1), strict=True):
        draw_pair(ax, t, q_rot, i, omega[i], colors)

    ax = axes[2]
    image = ax.imshow(scores, cmap="viridis")
    middle = (scores.min() + scores.max()) / 2
    for m in range(T):
        for n in range(T):
            color = "white" if scores[m, n] < middle else "black"
            ax.text(n, m, f"{scores[m, n]:.1f}", ha="center", va="center", fontsize=8, color=color)
            if n - m == 3:  # the distance the page prints: -3.8228 at every position
                ax.add_patch(
                    Rectangle((n - 0.5, m - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.8)
                )
    ax.set_xticks(range(T))
    ax.set_yticks(range(T))
    ax.set_xlabel(t["key_pos"])
    ax.set_ylabel(t["query_pos"])
    ax.set_title(t["scores"], fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8, label=t["score"])
    return fig
