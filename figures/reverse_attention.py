"""Cross-attention of the trained reversal model on one sequence: the anti-diagonal.

Teacher-forced forward on the source 3 1 4 1 5 9 2 6 5 3 and its reversal; one heatmap per
decoder block (the weights averaged over the 4 heads). Row t (the t-th output digit) looks at
source position 9 - t: the anti-diagonal.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from transformer_np.examples.reverse import encode_pairs, load_trained

DIGITS = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3)

TEXT = {
    "it": {
        "src": "sorgente (token letti dall'encoder)",
        "out": "uscita (token predetti)",
        "layer": "decoder, blocco {} (media delle 4 teste)",
    },
    "en": {
        "src": "source (tokens read by the encoder)",
        "out": "output (predicted tokens)",
        "layer": "decoder, block {} (mean of the 4 heads)",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    model, _ = load_trained()
    src, tgt_in, _ = encode_pairs([DIGITS], len(DIGITS))
    model(src, tgt_in)
    src_labels = [str(d) for d in DIGITS]
    out_labels = [str(d) for d in DIGITS[::-1]] + ["EOS"]
    layers = model.attention_weights  # per decoder block (B, H, T, S)
    fig = Figure(figsize=(10, 4.4), layout="constrained")
    axes = fig.subplots(1, len(layers))
    for i, (ax, w) in enumerate(zip(axes, layers, strict=True)):
        im = ax.imshow(w[0].mean(axis=0), cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(src_labels)), src_labels)
        ax.set_yticks(range(len(out_labels)), out_labels)
        ax.set_xlabel(t["src"])
        ax.set_ylabel(t["out"])
        ax.set_title(t["layer"].format(i + 1))
    fig.colorbar(im, ax=axes, shrink=0.8)
    return fig
