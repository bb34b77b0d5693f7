"""Training curves of the shipped reversal model: the loss per step, the validation exact match
that stopped the training, and the test score measured once at the end.

The data come from the checkpoint made by ``python -m transformer_np.examples.reverse --save``
(see src/transformer_np/examples/data/README.md); nothing is trained here.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np.examples.reverse import VAL_TARGET, load_trained

STOP_AT = 100 * VAL_TARGET  # the early-stopping threshold, in percent

TEXT = {
    "it": {
        "step": "passo",
        "loss": "loss (cross-entropy, label smoothing 0.1)",
        "acc": "exact match (%)",
        "title_loss": "Loss di addestramento",
        "title_acc": "Accuratezza (decodifica greedy)",
        "smooth": "media mobile su 50 passi",
        "val": "validazione ({n} sequenze), ogni 100 passi",
        "stop": "soglia di arresto sulla validazione ({p:g}%)",
        "test": "test ({n} sequenze), una volta alla fine: {p:.1f}%",
    },
    "en": {
        "step": "step",
        "loss": "loss (cross-entropy, label smoothing 0.1)",
        "acc": "exact match (%)",
        "title_loss": "Training loss",
        "title_acc": "Accuracy (greedy decoding)",
        "smooth": "moving average over 50 steps",
        "val": "validation ({n} sequences), every 100 steps",
        "stop": "early-stopping threshold on validation ({p:g}%)",
        "test": "test ({n} sequences), once at the end: {p:.1f}%",
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
    val = 100 * extra["exact_match_val"]
    test = 100 * float(extra["exact_match_test"])
    ax_acc.plot(extra["eval_step"], val, "o-", ms=4, label=t["val"].format(n=int(extra["n_val"])))
    ax_acc.axhline(STOP_AT, color="gray", ls="--", lw=1, label=t["stop"].format(p=STOP_AT))
    ax_acc.plot(
        [len(loss)],
        [test],
        "*",
        ms=13,
        color="C3",
        label=t["test"].format(n=int(extra["n_test"]), p=test),
    )
    ax_acc.set_ylim(0, 102)
    ax_acc.set_ylabel(t["acc"])
    ax_acc.set_title(t["title_acc"])
    ax_acc.legend(fontsize="small", loc="lower right")
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel(t["step"])
        ax.grid(True, alpha=0.3)
    return fig
