"""Speed and memory of attention against n: the benchmark's results, drawn.

The numbers are not computed here (timing at every build would be slow and noisy): they are
the committed output of ``benchmarks/bench_attention.py``,
``src/transformer_np/data/attention.json`` (package data: the results page's own block reads it
too), which anyone can regenerate on their own machine. The results page
(``docs/<lang>/benchmarks.md``) shows it. The benchmark script calls this same
``figure`` to write its own SVG.
"""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "src" / "transformer_np" / "data" / "attention.json"

TEXT = {
    "it": {
        "n": "lunghezza della sequenza n",
        "speed": "GFLOP/s (più alto è meglio)",
        "memory": "memoria extra di picco, MiB (più basso è meglio)",
        "peak": "picco del prodotto di matrici",
        "extrapolated": "estrapolato",
        "title_speed": "Velocità",
        "title_memory": "Memoria",
        "naive": "NumPy ingenua",
        "products": "solo i due prodotti (non è attention)",
        "products_exp": "i due prodotti e np.exp (non è attention)",
    },
    "en": {
        "n": "sequence length n",
        "speed": "GFLOP/s (higher is better)",
        "memory": "peak extra memory, MiB (lower is better)",
        "peak": "matrix product peak",
        "extrapolated": "extrapolated",
        "title_speed": "Speed",
        "title_memory": "Memory",
        "naive": "naive NumPy",
        "products": "only the two products (not attention)",
        "products_exp": "the two products and np.exp (not attention)",
    },
}

LABELS = {
    "naive": None,  # from TEXT, in the page's language
    "sdpa": "scaled_dot_product_attention",
    "sdpa_nw": "scaled_dot_product_attention(need_weights=False)",
    "blockwise": "blockwise_attention",
    "products": None,
    "products_exp": None,
    "torch": "PyTorch SDPA",
}
STYLES = {
    "naive": ("o", ":"),
    "sdpa": ("s", "-"),
    "sdpa_nw": ("v", "-"),
    "blockwise": ("^", "-"),
    "products": ("x", (0, (1, 1))),
    "products_exp": ("+", (0, (3, 1, 1, 1))),
    "torch": ("D", "--"),
}
COLORS = {
    "naive": "#999999",
    "sdpa": "#1f77b4",
    "sdpa_nw": "#9467bd",
    "blockwise": "#2ca02c",
    "products": "#555555",
    "products_exp": "#8c564b",
    "torch": "#d62728",
}


def figure(lang: str, results: dict | None = None) -> Figure:
    """Two panels against n: GFLOP/s (with the matmul peak) and peak extra memory (log scale).

    ``results`` is the benchmark's JSON as a dict; by default the committed results file.
    """
    t = TEXT[lang]
    if results is None:
        results = json.loads(RESULTS.read_text())
    rows = results["rows"]
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    ax_speed, ax_mem = fig.subplots(1, 2)
    handles = []
    for impl, label in LABELS.items():
        label = label or t[impl]
        mine = sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["n"])
        measured = [r for r in mine if r["measured"]]
        if not measured:
            continue
        marker, line = STYLES[impl]
        style = {"color": COLORS[impl], "marker": marker, "linestyle": line}
        ns = [r["n"] for r in measured]
        handles += ax_speed.plot(ns, [r["gflops"] for r in measured], label=label, **style)
        ax_mem.plot(ns, [r["peak_extra_bytes"] / 2**20 for r in measured], **style)
        guessed = [r for r in mine if not r["measured"]]
        if guessed:  # dotted, from the last measured point, with hollow markers
            xs = [measured[-1]["n"]] + [r["n"] for r in guessed]
            ys = [measured[-1]["peak_extra_bytes"]] + [r["peak_extra_bytes"] for r in guessed]
            handles += ax_mem.plot(
                xs,
                [y / 2**20 for y in ys],
                color=COLORS[impl],
                marker=marker,
                markerfacecolor="none",
                linestyle=":",
                label=f"{label} ({t['extrapolated']})",
            )
    # The matrix-product peak, measured in the same rounds as each n.
    peaks = results["matmul_peak"].get("per_size")
    if peaks:
        xs, ys = [p["n"] for p in peaks], [p["gflops"] for p in peaks]
    else:
        xs = sorted({r["n"] for r in rows})
        ys = [results["matmul_peak"]["gflops"]] * len(xs)
    handles += ax_speed.plot(xs, ys, color="black", linewidth=0.8, linestyle="-.", label=t["peak"])
    all_n = sorted({r["n"] for r in rows})
    for ax in (ax_speed, ax_mem):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_n, [str(n) for n in all_n])
        ax.minorticks_off()
        ax.set_xlabel(t["n"])
        ax.grid(True, alpha=0.3)
    ax_speed.set_ylim(0, max(ys) * 1.15)
    ax_speed.set_ylabel(t["speed"])
    ax_speed.set_title(t["title_speed"])
    ax_mem.set_yscale("log")
    ax_mem.set_ylabel(t["memory"])
    ax_mem.set_title(t["title_memory"])
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize="small")
    return fig
