"""Attention weights of each head of a multi-head attention layer, one heatmap per head.

The same layer and input as the last example of docs/*/multi-head.md: d_model = 64, 4 heads,
8 random tokens, the layer's initial (untrained) weights from seed 0.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np import MultiHeadAttention

TEXT = {
    "it": {
        "head": "Testa {}",
        "query": "token che chiede (query)",
        "key": "token guardato (key)",
        "weight": "peso di attenzione",
    },
    "en": {
        "head": "Head {}",
        "query": "attending token (query)",
        "key": "attended token (key)",
        "weight": "attention weight",
    },
}


def head_weights() -> np.ndarray:
    """The (4, 8, 8) attention weights shown on the page."""
    rng = np.random.default_rng(0)
    mha = MultiHeadAttention(d_model=64, n_heads=4, rng=rng)
    x = rng.standard_normal((8, 64))  # 8 tokens
    _, weights = mha(x)  # (H, T, T) = (4, 8, 8)
    return weights


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    weights = head_weights()
    n_heads, n = weights.shape[:2]
    fig = Figure(figsize=(11, 3.4), layout="constrained")
    axes = fig.subplots(1, n_heads, sharey=True)
    for h, ax in enumerate(axes):
        image = ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=weights.max())
        ax.set_title(t["head"].format(h))
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xlabel(t["key"])
    axes[0].set_ylabel(t["query"])
    fig.colorbar(image, ax=axes, shrink=0.8, label=t["weight"])
    return fig
