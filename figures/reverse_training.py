"""Training curves of the shipped reversal model: the loss per step and the held-out exact match.

The data come from the checkpoint made by ``python -m transformer_np.examples.reverse --save``
(see src/transformer_np/examples/data/README.md); nothing is trained here.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np.examples.reverse import load_trained

TEXT = {
    "it": {
        "step": "passo",
        "loss": "loss (cross-entropy, label smoothing 0.1)",
        "acc": "exact match sulle sequenze tenute da parte",
        "title_loss": "Loss di addestramento",
        "title_acc": "Accuratezza (decodifica greedy)",
        "smooth": "media mobile su 50 passi",
    },
    "en": {
        "step": "step",
        "loss": "loss (cross-entropy, label smoothing 0.1)",
        "acc": "exact match on held-out sequences",
        "title_loss": "Training loss",
        "title_acc": "Accuracy (greedy decoding)",
        "smooth": "moving average over 50 steps",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    _, extra = load_trained()
    loss = extra["loss"]
    steps = np.arange(1, len(loss) + 1)
    smooth = np.convolve(loss, np.ones(50) / 50, mode="valid")
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    ax_loss.plot(steps, loss, lw=0.6, alpha=0.4)
    ax_loss.plot(steps[49:], smooth, lw=1.5, label=t["smooth"])
    ax_loss.set_ylabel(t["loss"])
    ax_loss.set_title(t["title_loss"])
    ax_loss.legend(fontsize="small")
    ax_acc.plot(extra["eval_step"], 100 * extra["eval_exact_match"], "o-", ms=4)
    ax_acc.axhline(99, color="gray", ls="--", lw=1)
    ax_acc.set_ylim(0, 101)
    ax_acc.set_ylabel(t["acc"] + " (%)")
    ax_acc.set_title(t["title_acc"])
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel(t["step"])
        ax.grid(True, alpha=0.3)
    return fig
