"""PE[pos] . PE[pos'] depends only on the distance pos' - pos.

Left: the matrix PE PE^T (100 positions, d_model = 64), constant along every diagonal.
Right: PE[pos] . PE[pos + k] against k for a few starting positions, on top of
sum_i cos(k omega_i): the curves coincide.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np import positional_encoding

MAX_LEN, D_MODEL = 100, 64
STARTS = (30, 50, 70)  # start + k stays inside the table for every k in [-30, 30)

TEXT = {
    "it": {
        "position": "posizione",
        "gram": r"$PE_{pos} \cdot PE_{pos'}$",
        "offset": "distanza k",
        "dot": r"$PE_{pos} \cdot PE_{pos+k}$",
        "formula": r"$\sum_i \cos(k\,\omega_i)$",
        "from": "pos = {}",
        "curve": "In funzione della distanza",
    },
    "en": {
        "position": "position",
        "gram": r"$PE_{pos} \cdot PE_{pos'}$",
        "offset": "distance k",
        "dot": r"$PE_{pos} \cdot PE_{pos+k}$",
        "formula": r"$\sum_i \cos(k\,\omega_i)$",
        "from": "pos = {}",
        "curve": "As a function of the distance",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    pe = positional_encoding(MAX_LEN, D_MODEL)  # (100, 64)
    gram = pe @ pe.T  # (100, 100)
    omega = 1.0 / 10000 ** (np.arange(0, D_MODEL, 2) / D_MODEL)  # (32,)
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax_map, ax_curve = fig.subplots(1, 2, width_ratios=(1, 1.1))
    image = ax_map.imshow(gram, cmap="viridis")
    ax_map.set_xlabel(t["position"] + " pos'")
    ax_map.set_ylabel(t["position"] + " pos")
    ax_map.set_title(t["gram"])
    fig.colorbar(image, ax=ax_map)
    ks = np.arange(-30, 30)
    ax_curve.plot(
        ks,
        np.cos(np.outer(ks, omega)).sum(axis=1),
        color="black",
        lw=3,
        alpha=0.3,
        label=t["formula"],
    )
    for start, marker, size in zip(STARTS, "os.", (7, 4, 3), strict=True):
        ax_curve.plot(
            ks,
            gram[start, start + ks],
            marker=marker,
            ms=size,
            mfc="none" if marker != "." else None,
            lw=0,
            label=t["from"].format(start),
        )
    ax_curve.set_xlabel(t["offset"])
    ax_curve.set_ylabel(t["dot"])
    ax_curve.set_title(t["curve"])
    ax_curve.grid(True, alpha=0.3)
    ax_curve.legend(fontsize="small")
    return fig
