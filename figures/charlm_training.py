"""Training of the shipped character model: training loss per step and validation loss.

The data come from the checkpoint made by ``python -m transformer_np.examples.charlm --save``
(see src/transformer_np/examples/data/README.md); nothing is trained here.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np.examples.charlm import load_trained

TEXT = {
    "it": {
        "step": "passo",
        "loss": "cross-entropy (nat per carattere)",
        "train": "addestramento (media mobile su 50 passi)",
        "val": "validazione (ultimo 10% del testo)",
        "title": "Modello a caratteri su Pinocchio",
        "uniform": "modello uniforme, log V",
    },
    "en": {
        "step": "step",
        "loss": "cross-entropy (nats per character)",
        "train": "training (moving average over 50 steps)",
        "val": "validation (last 10% of the text)",
        "title": "Character model on Pinocchio",
        "uniform": "uniform model, log V",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    model, extra = load_trained()
    loss = extra["loss"]
    steps = np.arange(1, len(loss) + 1)
    smooth = np.convolve(loss, np.ones(50) / 50, mode="valid")
    fig = Figure(figsize=(7, 3.8), layout="constrained")
    ax = fig.subplots()
    ax.plot(steps[49:], smooth, label=t["train"])
    ax.plot(extra["eval_step"], extra["val_loss"], "o-", ms=4, label=t["val"])
    ax.axhline(np.log(model.config.vocab_size), color="gray", ls="--", lw=1, label=t["uniform"])
    ax.set_xlabel(t["step"])
    ax.set_ylabel(t["loss"])
    ax.set_title(t["title"])
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig
