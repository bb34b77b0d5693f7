"""Post-LN against pre-LN through a stack of 24 encoder blocks, at initialisation.

The same stacks and input as the measurement in docs/*/layer-norm.md: d_model = 64, 4 heads,
d_ff = 256, input of shape (2, 16, 64). Left: the standard deviation of the activations after
each block. Right: how much each block changes its input, ||x_{l+1} - x_l|| / ||x_l||.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np import EncoderBlock

D_MODEL, N_HEADS, D_FF, DEPTH = 64, 4, 256, 24

TEXT = {
    "it": {
        "block": "blocco l",
        "std": "deviazione standard dopo il blocco",
        "change": r"$\|x_{l+1} - x_l\| \,/\, \|x_l\|$",
        "title_std": "Scala delle attivazioni",
        "title_change": "Quanto cambia ogni blocco",
        "post": "post-LN (norm_first=False)",
        "pre": "pre-LN (norm_first=True)",
    },
    "en": {
        "block": "block l",
        "std": "standard deviation after the block",
        "change": r"$\|x_{l+1} - x_l\| \,/\, \|x_l\|$",
        "title_std": "Scale of the activations",
        "title_change": "How much each block changes",
        "post": "post-LN (norm_first=False)",
        "pre": "pre-LN (norm_first=True)",
    },
}


def measure(norm_first: bool) -> np.ndarray:
    """(DEPTH, 2): per block, the std of its output and its relative change of the input."""
    x = np.random.default_rng(1).standard_normal((2, 16, D_MODEL))  # (B, T, D)
    rng = np.random.default_rng(0)
    blocks = [
        EncoderBlock(D_MODEL, N_HEADS, D_FF, norm_first=norm_first, rng=rng) for _ in range(DEPTH)
    ]
    rows = []
    for block in blocks:
        y = block(x)
        rows.append((y.std(), np.linalg.norm(y - x) / np.linalg.norm(x)))
        x = y
    return np.array(rows)


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    layers = np.arange(1, DEPTH + 1)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax_std, ax_change = fig.subplots(1, 2)
    for norm_first, key, marker in ((False, "post", "o"), (True, "pre", "s")):
        stats = measure(norm_first)
        ax_std.plot(layers, stats[:, 0], marker=marker, ms=4, label=t[key])
        ax_change.plot(layers, stats[:, 1], marker=marker, ms=4, label=t[key])
    ax_std.set_ylim(bottom=0)
    ax_change.set_ylim(bottom=0)
    for ax, ylabel, title in (
        (ax_std, t["std"], t["title_std"]),
        (ax_change, t["change"], t["title_change"]),
    ):
        ax.set_xlabel(t["block"])
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return fig
