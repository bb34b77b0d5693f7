"""Grouped-query attention with SmolLM2-135M's heads, against multi-head attention.

The numbers come from the package's ``LlamaConfig`` (its defaults describe SmolLM2-135M): H = 9
query heads, Hkv = 3 key/value heads, groups of G = H / Hkv = 3, L = 30 blocks, D_h = 64. Left:
multi-head attention, each query head with its own key/value head. Right: grouped-query
attention, query head h reading key/value head h // G. Under each, the bytes the KV cache keeps
per token in float32, 2 L Hkv D_h 4, checked on a real ``KVCache`` filled by the attention layer
with one token (times the L blocks).
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from transformer_np import KVCache, LlamaConfig, MultiHeadAttention

TEXT = {
    "it": {
        "mha": "multi-head: $H = {}$ teste di key e value",
        "gqa": "grouped-query: $H_{{kv}} = {}$ teste di key e value, gruppi di $G = {}$",
        "query": "teste di query",
        "kv": "teste di key e value\n(nella cache)",
        "cache": (
            "cache per token: $2 \\cdot {} \\cdot {} \\cdot {} \\cdot 4$ byte"
            " = {:,} byte ({:g} KiB)"
        ),
    },
    "en": {
        "mha": "multi-head: $H = {}$ key/value heads",
        "gqa": "grouped-query: $H_{{kv}} = {}$ key/value heads, groups of $G = {}$",
        "query": "query heads",
        "kv": "key/value heads\n(in the cache)",
        "cache": (
            "cache per token: $2 \\cdot {} \\cdot {} \\cdot {} \\cdot 4$ bytes"
            " = {:,} bytes ({:g} KiB)"
        ),
    },
}

GROUP_COLORS = matplotlib.colormaps["Pastel1"].colors  # 9 colors: one per key/value head


def cache_bytes_per_token(cfg: LlamaConfig, n_kv_heads: int) -> int:
    """Bytes of keys and values one token leaves in the caches of the L blocks, in float32."""
    Dh = cfg.d_model // cfg.n_heads
    expected = 2 * cfg.n_layers * n_kv_heads * Dh * 4
    attn = MultiHeadAttention(
        cfg.d_model,
        cfg.n_heads,
        n_kv_heads=n_kv_heads,
        rope_base=cfg.rope_base,
        bias=False,
        rng=0,
        dtype=np.float32,
    )
    cache = KVCache(1)
    x = np.zeros((1, 1, cfg.d_model), dtype=np.float32)  # one token
    attn(x, kv_cache=cache)
    keys, values = cache.stored()  # (1, Hkv, 1, Dh) each
    assert cfg.n_layers * (keys.nbytes + values.nbytes) == expected
    return expected


def box(ax, x, y, text, color, width=0.8, height=0.6):
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=color,
            edgecolor="0.3",
            linewidth=1,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def draw(ax, t, cfg, n_kv_heads, title):
    H = cfg.n_heads
    G = H // n_kv_heads
    Dh = cfg.d_model // H
    y_q, y_kv = 2.0, 0.0
    kv_x = [(g * G + (G - 1) / 2) for g in range(n_kv_heads)]  # each KV head under its group
    for g, x in enumerate(kv_x):
        box(
            ax,
            x,
            y_kv,
            f"K/V {g}",
            GROUP_COLORS[g % len(GROUP_COLORS)],
            width=min(0.8 * G + 0.2 * (G - 1), 2.6),
        )
    for h in range(H):
        g = h // G  # the key/value head that query head h reads
        color = GROUP_COLORS[g % len(GROUP_COLORS)]
        box(ax, h, y_q, f"Q {h}", color)
        ax.add_patch(
            FancyArrowPatch(
                (h, y_q - 0.32),
                (kv_x[g], y_kv + 0.32),
                arrowstyle="-|>",
                mutation_scale=10,
                linewidth=1,
                color="0.35",
                shrinkA=0,
                shrinkB=0,
            )
        )
    ax.text(-0.7, y_q, t["query"], ha="right", va="center", fontsize=9)
    ax.text(-0.7, y_kv, t["kv"], ha="right", va="center", fontsize=9)
    per_token = cache_bytes_per_token(cfg, n_kv_heads)
    ax.text(
        (H - 1) / 2,
        -0.85,
        t["cache"].format(cfg.n_layers, n_kv_heads, Dh, per_token, per_token / 1024),
        ha="center",
        va="top",
        fontsize=10,
    )
    ax.set_title(title, fontsize=11)
    ax.set_xlim(-3.4, H - 0.3)
    ax.set_ylim(-1.4, 2.5)
    ax.axis("off")


def figure(lang: str) -> Figure:
    t = TEXT[lang]
    cfg = LlamaConfig()  # SmolLM2-135M: 9 query heads, 3 key/value heads
    H, Hkv = cfg.n_heads, cfg.n_kv_heads
    fig = Figure(figsize=(11, 5.6), layout="constrained")
    top, bottom = fig.subplots(2, 1)
    draw(top, t, cfg, H, t["mha"].format(H))
    draw(bottom, t, cfg, Hkv, t["gqa"].format(Hkv, H // Hkv))
    return fig
