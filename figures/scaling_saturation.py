"""Why divide by sqrt(d_k): variance of q.k, largest softmax weight and softmax gradient vs d_k.

Queries and keys have i.i.d. standard normal components (the assumption of the variance
argument). For each d_k: the sample variance of q.k with and without the 1/sqrt(d_k) scale; then,
for one query against n = 16 keys, the median of the largest softmax weight and the median
Frobenius norm of the softmax Jacobian diag(p) - p p^T. The softmax is ``transformer_np``'s.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np import softmax

N_KEYS = 16  # keys per query (the length of the softmax row)
N_PAIRS = 3000  # (q, k) pairs per d_k for the variance
N_QUERIES = 400  # queries per d_k for the softmax statistics

TEXT = {
    "it": {
        "d_k": "$d_k$",
        "variance": "varianza del punteggio",
        "max_weight": "peso più grande (mediana)",
        "jacobian": "$\\|\\mathrm{diag}(p) - pp^\\top\\|_F$ (mediana)",
        "raw": "$q \\cdot k$, senza scala",
        "scaled": "$q \\cdot k / \\sqrt{d_k}$",
        "uniform": "pesi uniformi, $1/16$",
        "title_variance": "La varianza cresce come $d_k$",
        "title_max": "La softmax satura",
        "title_jacobian": "Il gradiente sparisce",
    },
    "en": {
        "d_k": "$d_k$",
        "variance": "variance of the score",
        "max_weight": "largest weight (median)",
        "jacobian": "$\\|\\mathrm{diag}(p) - pp^\\top\\|_F$ (median)",
        "raw": "$q \\cdot k$, unscaled",
        "scaled": "$q \\cdot k / \\sqrt{d_k}$",
        "uniform": "uniform weights, $1/16$",
        "title_variance": "The variance grows like $d_k$",
        "title_max": "The softmax saturates",
        "title_jacobian": "The gradient vanishes",
    },
}


def measure(d_ks, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Variance of the scores and median softmax statistics, unscaled and scaled, per d_k."""
    rows = {
        k: [] for k in ("var_raw", "var_scaled", "max_raw", "max_scaled", "jac_raw", "jac_scaled")
    }
    for d_k in d_ks:
        q = rng.standard_normal((N_PAIRS, d_k))
        k = rng.standard_normal((N_PAIRS, d_k))
        dots = np.einsum("nd,nd->n", q, k)  # (N_PAIRS, d_k) x2 -> (N_PAIRS,)
        rows["var_raw"].append(dots.var())
        rows["var_scaled"].append((dots / np.sqrt(d_k)).var())

        q = rng.standard_normal((N_QUERIES, 1, d_k))
        k = rng.standard_normal((N_QUERIES, N_KEYS, d_k))
        scores = (q @ k.swapaxes(-1, -2))[:, 0]  # (N_QUERIES, 1, N_KEYS) -> (N_QUERIES, N_KEYS)
        for name, s in (("raw", scores), ("scaled", scores / np.sqrt(d_k))):
            p = softmax(s, axis=-1)  # (N_QUERIES, N_KEYS)
            jac = p[:, :, None] * np.eye(N_KEYS) - p[:, :, None] * p[:, None, :]  # (Q, n, n)
            rows[f"max_{name}"].append(np.median(p.max(axis=-1)))
            rows[f"jac_{name}"].append(np.median(np.linalg.norm(jac, axis=(1, 2))))
    return {k: np.array(v) for k, v in rows.items()}


def figure(lang: str) -> Figure:
    """Three panels against d_k (log scale): variance, largest weight, Jacobian norm."""
    t = TEXT[lang]
    d_ks = 2 ** np.arange(1, 11)  # 2 ... 1024
    m = measure(d_ks, np.random.default_rng(0))
    raw = {"color": "#d62728", "marker": "o", "label": t["raw"]}
    scaled = {"color": "#1f77b4", "marker": "s", "label": t["scaled"]}

    fig = Figure(figsize=(9.5, 3.4), layout="constrained")
    ax_var, ax_max, ax_jac = fig.subplots(1, 3)
    ax_var.plot(d_ks, m["var_raw"], **raw)
    ax_var.plot(d_ks, m["var_scaled"], **scaled)
    ax_var.set_yscale("log", base=2)
    ax_var.set_ylabel(t["variance"])
    ax_var.set_title(t["title_variance"])

    ax_max.plot(d_ks, m["max_raw"], **raw)
    ax_max.plot(d_ks, m["max_scaled"], **scaled)
    ax_max.axhline(1 / N_KEYS, color="gray", linestyle=":", label=t["uniform"])
    ax_max.set_ylim(0, 1.05)
    ax_max.set_ylabel(t["max_weight"])
    ax_max.set_title(t["title_max"])

    ax_jac.plot(d_ks, m["jac_raw"], **raw)
    ax_jac.plot(d_ks, m["jac_scaled"], **scaled)
    ax_jac.set_ylim(0, None)
    ax_jac.set_ylabel(t["jacobian"])
    ax_jac.set_title(t["title_jacobian"])

    for ax in (ax_var, ax_max, ax_jac):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(t["d_k"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return fig
