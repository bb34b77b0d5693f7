"""Attention weights of four tokens without a mask, with a causal mask and with padding.

The same queries, keys and values as the examples of the attention chapter (4 tokens, d_k = 8,
``np.random.default_rng(0)``); the weights come from ``transformer_np``. A blocked position is
shown with its weight, 0, on a light grey background.
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from transformer_np import causal_mask, padding_mask, scaled_dot_product_attention

TEXT = {
    "it": {
        "none": "senza maschera",
        "causal": "maschera causale",
        "padding": "padding (2 token veri su 4)",
        "query": "query (riga)",
        "key": "key (colonna)",
        "weight": "peso di attenzione",
    },
    "en": {
        "none": "no mask",
        "causal": "causal mask",
        "padding": "padding (2 real tokens out of 4)",
        "query": "query (row)",
        "key": "key (column)",
        "weight": "attention weight",
    },
}


def figure(lang: str) -> Figure:
    """Three 4x4 heatmaps of attention weights, each cell annotated with its value."""
    t = TEXT[lang]
    rng = np.random.default_rng(0)
    n, d_k = 4, 8
    q, k, v = rng.standard_normal((3, n, d_k))  # (3, n, d_k): queries, keys, values
    masks = {
        "none": np.ones((n, n), dtype=bool),
        "causal": causal_mask(n),
        # padding_mask: (1, 1, 1, n) -> (n, n), the same key columns blocked for every query
        "padding": np.broadcast_to(padding_mask([2], max_len=n)[0, 0], (n, n)),
    }
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.9")
    fig = Figure(figsize=(9, 3.3), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    for ax, (name, mask) in zip(axes, masks.items(), strict=True):
        _, w = scaled_dot_product_attention(q, k, v, mask=mask)  # (n, n)
        shown = np.ma.masked_array(w, mask=~mask)  # blocked cells drawn in the "bad" colour
        image = ax.imshow(shown, cmap=cmap, vmin=0.0, vmax=1.0)
        for i in range(n):
            for j in range(n):
                color = "white" if mask[i, j] and w[i, j] < 0.6 else "black"
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", color=color, fontsize=9)
        ax.set_title(t[name])
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xlabel(t["key"])
    axes[0].set_ylabel(t["query"])
    fig.colorbar(image, ax=list(axes), shrink=0.85, label=t["weight"])
    return fig
