"""Self-attention of the shipped character model on a phrase of the book, one head per panel.

The checkpoint is made by ``python -m transformer_np.examples.charlm --save`` (see
src/transformer_np/examples/data/README.md). The causal mask leaves the upper triangle empty.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from transformer_np.examples.charlm import CharVocab, load_text, load_trained

PHRASE = "C'era una volta un pezzo di legno"

TEXT = {
    "it": {"title": "blocco {}, testa {}", "query": "carattere che guarda", "key": "guardato"},
    "en": {"title": "block {}, head {}", "query": "attending character", "key": "attended"},
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    model, _ = load_trained()
    vocab = CharVocab(load_text())
    model(vocab.encode(PHRASE)[None, :])
    layer = len(model.attention_weights)
    weights = model.attention_weights[-1][0]  # (H, T, T) of the last block
    labels = [c if c != " " else "␣" for c in PHRASE]
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    axes = fig.subplots(1, weights.shape[0])
    for h, ax in enumerate(axes):
        ax.imshow(weights[h], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(t["title"].format(layer, h + 1), fontsize="small")
        ax.set_xticks(range(len(labels)), labels, fontsize=5)
        ax.set_yticks(range(len(labels)), labels, fontsize=5)
        ax.set_xlabel(t["key"], fontsize="small")
    axes[0].set_ylabel(t["query"], fontsize="small")
    return fig
