"""Cosine similarity of all-MiniLM-L6-v2 sentence embeddings, English and Italian, as a heatmap.

Two topics (a guitar, the stock market), each said twice in English and twice in Italian. The
embeddings come from our NumPy model (``transformer_np.pretrained.load_minilm``); the chapter
docs/<lang>/minilm.md explains what the picture shows.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np.pretrained import load_minilm

SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing an instrument.",
    "The stock market fell sharply today.",
    "Shares dropped a lot this morning.",
    "Un uomo suona la chitarra.",
    "Qualcuno suona uno strumento.",
    "La borsa è crollata oggi.",
    "Le azioni sono scese molto stamattina.",
]

TEXT = {
    "it": {
        "title": "Somiglianza del coseno tra embedding di frase (all-MiniLM-L6-v2)",
        "bar": "coseno",
    },
    "en": {
        "title": "Cosine similarity of the sentence embeddings (all-MiniLM-L6-v2)",
        "bar": "cosine",
    },
}


def similarity() -> np.ndarray:
    """The (8, 8) matrix of cosine similarities (the embeddings have unit norm)."""
    e = load_minilm(np.float32).encode(SENTENCES)  # (8, 384)
    return e @ e.T  # (8, 384) @ (384, 8) -> (8, 8)


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    sim = similarity()
    n = len(SENTENCES)
    fig = Figure(figsize=(9, 6.5), layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(sim, cmap="viridis", vmin=-0.2, vmax=1.0)
    ax.set_xticks(range(n), [str(i) for i in range(n)])
    ax.set_yticks(range(n), [f"{s}  {i}" for i, s in enumerate(SENTENCES)])
    for i in range(n):
        for j in range(n):
            color = "black" if sim[i, j] > 0.6 else "white"
            ax.text(j, i, f"{sim[i, j]:.2f}", ha="center", va="center", fontsize=8, color=color)
    # Separate the English block (0-3) from the Italian one (4-7).
    ax.axhline(3.5, color="white", linewidth=2)
    ax.axvline(3.5, color="white", linewidth=2)
    ax.set_title(t["title"], fontsize=10, loc="right")
    fig.colorbar(im, ax=ax, label=t["bar"], shrink=0.8)
    return fig
