"""The LoRA fine-tuning of SmolLM2: training loss per step, held-out loss, learning rate.

The data come from the log of the run
``python -m transformer_np.examples.finetune --save DIR --eval-every 10`` (``training_log.json``),
shipped with the package as ``examples/data/tutor_log.json``; nothing is trained here.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
from matplotlib.figure import Figure

from transformer_np.examples.finetune import TARGETS

LOG = ("transformer_np.examples", "data/tutor_log.json")  # (package, path inside it)

TEXT = {
    "it": {
        "step": "passo",
        "loss": "cross-entropy (nat per token della risposta)",
        "train": "addestramento (8 coppie per passo)",
        "smooth": "addestramento, media mobile su 5 passi",
        "heldout": "validazione (domande riscritte)",
        "lr": "learning rate",
        "title": "SmolLM2-135M-Instruct con LoRA (rango {rank}, {maps})",
        "all": "tutte le 7 mappe di ogni blocco",
    },
    "en": {
        "step": "step",
        "loss": "cross-entropy (nats per answer token)",
        "train": "training (8 pairs per step)",
        "smooth": "training, moving average over 5 steps",
        "heldout": "validation (reworded questions)",
        "lr": "learning rate",
        "title": "SmolLM2-135M-Instruct with LoRA (rank {rank}, {maps})",
        "all": "all 7 maps of every block",
    },
}


def load_log(where=LOG):
    package, path = where
    return json.loads((resources.files(package) / path).read_text(encoding="utf-8"))


def figure(lang: str, log=None) -> Figure:
    t = TEXT[lang]
    log = load_log() if log is None else log
    steps = np.asarray(log["train"]["step"])
    loss = np.asarray(log["train"]["loss"])
    fig = Figure(figsize=(7, 3.8), layout="constrained")
    ax = fig.subplots()
    ax.plot(steps, loss, color="C0", alpha=0.35, lw=1, label=t["train"])
    if len(loss) >= 5:
        smooth = np.convolve(loss, np.ones(5) / 5, mode="valid")
        ax.plot(steps[4:], smooth, color="C0", label=t["smooth"])
    held = log["heldout"]
    ax.plot([h["step"] for h in held], [h["loss"] for h in held], "o-", color="C1", ms=5,
            label=t["heldout"])  # fmt: skip
    ax.set_xlabel(t["step"])
    ax.set_ylabel(t["loss"])
    options = log["options"]  # the run's own rank and maps, not ones written here
    maps = options["targets"]
    maps = t["all"] if sorted(maps) == sorted(TARGETS) else ", ".join(maps)
    ax.set_title(t["title"].format(rank=options["rank"], maps=maps))
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    lr = ax.twinx()  # the schedule, on its own axis
    lr.plot(steps, log["train"]["lr"], color="gray", ls="--", lw=1, label=t["lr"])
    lr.set_ylabel(t["lr"], color="gray")
    lr.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = lr.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize="small", loc="lower left")
    return fig
