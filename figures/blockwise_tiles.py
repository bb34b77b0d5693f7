"""The tiles of blockwise (flash) attention: the n x n scores cut into query tiles x key tiles.

Left: the score matrix of n = 12 tokens in tiles of b = 4, causal, as in the example of
``attend_query_tile`` on docs/*/efficient-attention.md. Each query tile visits its key tiles
from left to right (the numbers 1, 2, 3 of the last query tile, with arrows); the tiles
entirely above the diagonal are never computed, and in the tile on the diagonal the pairs with
key j > query i are -inf. Only one b x b tile of scores is in memory at a time. Right: the
running maximum m and sum l of the four rows of the last query tile after each key tile, from
the online softmax of the page on random queries and keys (seed 12, d_k = 8); the cells where m
rises are marked, since there the old sum is rescaled by exp(m_old - m_new). The output a / l
of these rows is checked against ``blockwise_attention`` and ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from transformer_np import blockwise_attention, causal_mask, scaled_dot_product_attention

N, TILE, D_K = 12, 4, 8

TEXT = {
    "it": {
        "left": "punteggi $n \\times n$ ($n = 12$), tasselli $4 \\times 4$, causale",
        "query": "query $i$ (tasselli di righe)",
        "key": "key $j$ (tasselli di colonne)",
        "skipped": "mai\ncalcolato",
        "order": (
            "1, 2, 3: ordine di visita del tassello di query 8–11\n"
            "in grigio: key $j >$ query $i$, punteggio $-\\infty$"
        ),
        "right": "$m$ e $\\ell$ delle righe 8–11 dopo ogni tassello di key",
        "after": "dopo il tassello {}\n(key {}–{})",
        "row": "riga {}",
        "rise": "in giallo: $m$ sale, la somma vecchia si moltiplica per $e^{m_{r-1} - m_r}$",
        "memory": (
            "in memoria: un tassello di $b \\times b = 16$ punteggi alla volta, e $m$, $\\ell$ "
            "(e $a$) per riga: $O(n)$ numeri, mai la matrice $n \\times n$"
        ),
    },
    "en": {
        "left": "scores $n \\times n$ ($n = 12$), $4 \\times 4$ tiles, causal",
        "query": "query $i$ (tiles of rows)",
        "key": "key $j$ (tiles of columns)",
        "skipped": "never\ncomputed",
        "order": (
            "1, 2, 3: order of visit of query tile 8–11\n"
            "grey: key $j >$ query $i$, score $-\\infty$"
        ),
        "right": "$m$ and $\\ell$ of rows 8–11 after each key tile",
        "after": "after tile {}\n(keys {}–{})",
        "row": "row {}",
        "rise": "yellow: $m$ rises, the old sum is multiplied by $e^{m_{r-1} - m_r}$",
        "memory": (
            "in memory: one tile of $b \\times b = 16$ scores at a time, and $m$, $\\ell$ "
            "(and $a$) per row: $O(n)$ numbers, never the $n \\times n$ matrix"
        ),
    },
}

QUERY_TILE = 2  # the query tile whose visit is drawn: rows 8-11
COLORS = {"tile": "#bfe1f2", "current": "#fbd7a4", "masked": "#e0e0e0", "rise": "#f2efb0"}


def running_states(q, k, v, qs, qe):
    """m, l (steps, bq) after each key tile, and the output a / l, for the causal rows qs:qe."""
    q_tile = q[qs:qe] / np.sqrt(q.shape[-1])
    m = np.full(qe - qs, -np.inf)
    ell = np.zeros(qe - qs)
    a = np.zeros((qe - qs, v.shape[-1]))
    ms, ls = [], []
    for ks in range(0, min(qe, len(k)), TILE):  # causal: no key tile right of column qe - 1
        s = q_tile @ k[ks : ks + TILE].T  # (bq, bk): the only scores in memory
        s[np.arange(ks, ks + TILE) > np.arange(qs, qe)[:, None]] = -np.inf  # key j > query i
        m_new = np.maximum(m, s.max(axis=1))
        p = np.exp(s - m_new[:, None])
        rescale = np.exp(m - m_new)
        ell = rescale * ell + p.sum(axis=1)
        a = rescale[:, None] * a + p @ v[ks : ks + TILE]
        m = m_new
        ms.append(m)
        ls.append(ell)
    return np.array(ms), np.array(ls), a / ell[:, None]


def draw_grid(ax, t):
    tiles = N // TILE
    for r in range(tiles):
        for c in range(tiles):
            x, y = c * TILE, r * TILE
            if c > r:  # entirely above the diagonal: skipped with causal=True
                ax.add_patch(
                    Rectangle(
                        (x, y),
                        TILE,
                        TILE,
                        facecolor="white",
                        hatch="///",
                        edgecolor="0.75",
                        linewidth=0,
                    )
                )
                ax.text(
                    x + TILE / 2,
                    y + TILE / 2,
                    t["skipped"],
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="0.35",
                )
                continue
            color = COLORS["current"] if r == QUERY_TILE else COLORS["tile"]
            ax.add_patch(Rectangle((x, y), TILE, TILE, facecolor=color, linewidth=0))
            if c == r:  # on the diagonal: the pairs with key j > query i are -inf
                for i in range(TILE):
                    for j in range(i + 1, TILE):
                        ax.add_patch(
                            Rectangle((x + j, y + i), 1, 1, facecolor=COLORS["masked"], linewidth=0)
                        )
            ax.text(
                x + TILE / 2,
                y + TILE / 2,
                str(c + 1),
                ha="center",
                va="center",
                fontsize=16 if r == QUERY_TILE else 11,
                fontweight="bold" if r == QUERY_TILE else "normal",
                color="black" if r == QUERY_TILE else "0.4",
            )
    for pos in range(N + 1):  # cell lines, and thick lines between tiles
        width = 1.6 if pos % TILE == 0 else 0.3
        ax.hlines(pos, 0, N, color="0.3", linewidth=width)
        ax.vlines(pos, 0, N, color="0.3", linewidth=width)
    y = QUERY_TILE * TILE + TILE / 2 + 1.2  # arrows from each key tile to the next
    for c in range(QUERY_TILE):
        ax.add_patch(
            FancyArrowPatch(
                (c * TILE + 2.8, y),
                ((c + 1) * TILE + 1.2, y),
                arrowstyle="-|>",
                mutation_scale=14,
                linewidth=1.5,
            )
        )
    ax.text(N / 2, N + 0.5, t["order"], ha="center", va="top", fontsize=9)
    ax.set_xlim(0, N)
    ax.set_ylim(N + 2.4, 0)
    ax.set_aspect("equal")
    ticks = np.arange(N)
    ax.set_xticks(ticks + 0.5, ticks, fontsize=8)
    ax.set_yticks(ticks + 0.5, ticks, fontsize=8)
    ax.tick_params(length=0)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel(t["key"])
    ax.set_ylabel(t["query"])
    ax.set_title(t["left"], fontsize=11)


def draw_states(ax, t, ms, ls):
    steps, rows = ms.shape
    qs = QUERY_TILE * TILE
    for step in range(steps):
        for r in range(rows):
            rose = step > 0 and ms[step, r] > ms[step - 1, r]
            x, y = 2 * step, r
            for col, value in enumerate((ms[step, r], ls[step, r])):
                color = COLORS["rise"] if rose else "white"
                ax.add_patch(
                    Rectangle((x + col, y), 1, 1, facecolor=color, edgecolor="0.4", linewidth=0.8)
                )
                ax.text(
                    x + col + 0.5, y + 0.5, f"{value:.2f}", ha="center", va="center", fontsize=10
                )
        ks = step * TILE
        ax.text(
            2 * step + 1,
            -0.75,
            t["after"].format(step + 1, ks, ks + TILE - 1),
            ha="center",
            va="bottom",
            fontsize=9,
        )
        ax.text(2 * step + 0.5, -0.1, "$m$", ha="center", va="bottom", fontsize=10)
        ax.text(2 * step + 1.5, -0.1, "$\\ell$", ha="center", va="bottom", fontsize=10)
    for r in range(rows):
        ax.text(-0.15, r + 0.5, t["row"].format(qs + r), ha="right", va="center", fontsize=9)
    ax.text(steps, rows + 0.5, t["rise"], ha="center", va="top", fontsize=9)
    ax.set_xlim(-1.3, 2 * steps + 0.1)
    ax.set_ylim(rows + 1.5, -2.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(t["right"], fontsize=11)


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    rng = np.random.default_rng(12)  # a seed where m rises in some rows and not in others
    q, k, v = rng.standard_normal((3, N, D_K))  # (3, n, d_k): queries, keys, values
    qs, qe = QUERY_TILE * TILE, (QUERY_TILE + 1) * TILE
    ms, ls, out = running_states(q, k, v, qs, qe)
    # The states drawn are those of the package's computation: the same output, tile by tile ...
    flash = blockwise_attention(q, k, v, tile_size=TILE, causal=True)
    assert np.allclose(out, flash[qs:qe], atol=1e-12)
    # ... and m, l after the last tile are the maximum and the sum of exp(s - m) of whole rows.
    ref, w = scaled_dot_product_attention(q, k, v, causal_mask(N))
    assert np.allclose(out, ref[qs:qe], atol=1e-12)
    s = np.where(causal_mask(N), q @ k.T / np.sqrt(D_K), -np.inf)[qs:qe]
    assert np.allclose(ms[-1], s.max(axis=1))
    assert np.allclose(ls[-1], np.exp(s - ms[-1][:, None]).sum(axis=1))

    fig = Figure(figsize=(11, 5.2), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.15])
    draw_grid(left, t)
    draw_states(right, t, ms, ls)
    fig.supxlabel(t["memory"], fontsize=10)
    return fig
