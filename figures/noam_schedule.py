"""The learning-rate schedule of the paper (warm-up, then 1/sqrt(step)) for a few settings."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np.schedule import noam_lr

TEXT = {
    "it": {
        "step": "passo",
        "lr": "learning rate",
        "title": "Schedule con warm-up (Vaswani et al., 2017)",
    },
    "en": {
        "step": "step",
        "lr": "learning rate",
        "title": "Warm-up schedule (Vaswani et al., 2017)",
    },
}

SETTINGS = ((512, 4000), (512, 8000), (256, 4000))


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    steps = np.arange(1, 20001)
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.subplots()
    for d_model, warmup in SETTINGS:
        lr = [noam_lr(int(s), d_model, warmup) for s in steps]
        ax.plot(steps, lr, label=f"d_model = {d_model}, warmup = {warmup}")
        ax.plot([warmup], [noam_lr(warmup, d_model, warmup)], "k.", ms=6)
    ax.set_xlabel(t["step"])
    ax.set_ylabel(t["lr"])
    ax.set_title(t["title"])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig
