"""ReLU against GELU (exact and tanh approximation), and their derivatives.

The curves of docs/*/feed-forward.md: left, ReLU(x) = max(0, x), GELU(x) = x Phi(x) and its tanh
approximation on [-4, 4]; right, the derivatives, ReLU'(x) = [x > 0] and
GELU'(x) = Phi(x) + x phi(x), with Phi and phi the standard normal CDF and density.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from transformer_np import erf, gelu, relu

TEXT = {
    "it": {
        "title_f": "Le attivazioni",
        "title_d": "Le derivate",
        "relu": "ReLU",
        "gelu": r"GELU esatta, $x\,\Phi(x)$",
        "tanh": "GELU con la tanh (GPT-2)",
        "drelu": "ReLU'",
        "dgelu": r"GELU', $\Phi(x) + x\,\varphi(x)$",
    },
    "en": {
        "title_f": "The activations",
        "title_d": "The derivatives",
        "relu": "ReLU",
        "gelu": r"exact GELU, $x\,\Phi(x)$",
        "tanh": "tanh GELU (GPT-2)",
        "drelu": "ReLU'",
        "dgelu": r"GELU', $\Phi(x) + x\,\varphi(x)$",
    },
}


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    x = np.linspace(-4.0, 4.0, 801)
    cdf = 0.5 * (1.0 + erf(x / np.sqrt(2.0)))  # Phi(x)
    pdf = np.exp(-0.5 * x**2) / np.sqrt(2.0 * np.pi)  # phi(x)

    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax_f, ax_d = fig.subplots(1, 2)
    ax_f.plot(x, relu(x), label=t["relu"])
    ax_f.plot(x, gelu(x), label=t["gelu"])
    ax_f.plot(x, gelu(x, approximate=True), ls="--", label=t["tanh"])
    ax_d.plot(x, (x > 0).astype(float), label=t["drelu"])
    ax_d.plot(x, cdf + x * pdf, label=t["dgelu"])
    for ax, title in ((ax_f, t["title_f"]), (ax_d, t["title_d"])):
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.axvline(0.0, color="0.6", lw=0.8)
        ax.set_xlabel("x")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return fig
