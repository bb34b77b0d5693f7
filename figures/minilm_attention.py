"""Attention weights of four heads of all-MiniLM-L6-v2 on an Italian sentence, as heatmaps.

The weights come from our NumPy model (``MiniLM.attentions``). The heads were chosen because
they show three clear, common patterns (previous token, next token, ``[CLS]``) and one head of
the last layer; layers and heads are numbered from 0, as in the code.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np.pretrained import load_minilm

SENTENCE = "Il gatto che ho visto ieri dormiva sul divano."
HEADS = [(0, 2), (1, 8), (1, 6), (5, 0)]  # (layer, head)

TEXT = {
    "it": {
        "panel": "strato {l}, testa {h}",
        "query": "token che guarda (query)",
        "key": "token guardato (key)",
    },
    "en": {
        "panel": "layer {l}, head {h}",
        "query": "attending token (query)",
        "key": "attended token (key)",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    weights, tokens = load_minilm(np.float32).attentions(SENTENCE)  # (L, H, T, T), T tokens
    n = len(tokens)
    fig = Figure(figsize=(11, 10.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for ax, (layer, head) in zip(axes.flat, HEADS, strict=True):
        im = ax.imshow(weights[layer, head], cmap="magma", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(n), tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(n), tokens, fontsize=8)
        ax.set_title(t["panel"].format(l=layer, h=head))
        ax.set_xlabel(t["key"], fontsize=9)
        ax.set_ylabel(t["query"], fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6)
    return fig
