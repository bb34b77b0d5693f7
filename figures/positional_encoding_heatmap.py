"""The sinusoidal positional-encoding table as a heatmap, and a few of its columns as curves.

Same table as docs/*/positional-encoding.md: 100 positions, d_model = 64.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np import positional_encoding

MAX_LEN, D_MODEL = 100, 64
COLUMNS = (4, 10, 20, 40)  # sines, from fast (wavelength ~11 positions) to slow (~2000)

TEXT = {
    "it": {
        "position": "posizione pos",
        "dimension": "dimensione (colonna)",
        "value": "valore",
        "table": "$PE$: {} posizioni, $d_{{model}}$ = {}",
        "columns": "Alcune colonne",
        "column": "colonna {}",
    },
    "en": {
        "position": "position pos",
        "dimension": "dimension (column)",
        "value": "value",
        "table": "$PE$: {} positions, $d_{{model}}$ = {}",
        "columns": "A few columns",
        "column": "column {}",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    pe = positional_encoding(MAX_LEN, D_MODEL)  # (100, 64)
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax_map, ax_cols = fig.subplots(1, 2, width_ratios=(1.1, 1))
    image = ax_map.imshow(pe, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax_map.set_xlabel(t["dimension"])
    ax_map.set_ylabel(t["position"])
    ax_map.set_title(t["table"].format(MAX_LEN, D_MODEL))
    fig.colorbar(image, ax=ax_map, label=r"$PE_{pos,\,i}$")  # next to the right panel's "value"
    positions = np.arange(MAX_LEN)
    for col in COLUMNS:
        ax_cols.plot(positions, pe[:, col], label=t["column"].format(col))
    ax_cols.set_xlabel(t["position"])
    ax_cols.set_ylabel(t["value"])
    ax_cols.set_title(t["columns"])
    ax_cols.set_ylim(-1.1, 1.1)
    ax_cols.grid(True, alpha=0.3)
    ax_cols.legend(fontsize="small", loc="lower left")
    return fig
