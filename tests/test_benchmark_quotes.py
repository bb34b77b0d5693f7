"""The figures the pages quote from the saved benchmark results are those of the saved results.

``make bench`` rewrites ``src/transformer_np/data/*.json`` and the results page's tables; a
sentence that quotes one of those figures ("0.94 times the speed of sentence-transformers"), on
the results page (``benchmarks.md``) or in a chapter, must then be updated too. Each quote is
read from the page's own text (not the tables it includes) and compared with the JSON, rounded
as the page writes it.

The results page holds the measurements, so its quotes must all be there. A chapter quotes one
figure and links to the results page; a figure that a chapter may still quote but no longer has
to (``required=False``) is checked only where the chapter quotes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "src" / "transformer_np" / "data"
# The float32 weights of SmolLM2-135M, in bytes: 4 x its parameters (the SmolLM2 chapter).
SMOLLM2_WEIGHTS = 4 * 134_515_008


def _load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def _sizes(name: str) -> dict:
    res = _load(name)
    return {s["label"]: s for s in res["sizes"]} | {"_": res}


def _median(entry: dict, side: str) -> float:
    return entry[side]["median_s"]


def _figures() -> dict[str, float]:
    minilm, minilm1 = _sizes("minilm"), _sizes("minilm_1thread")
    dec, smol = _sizes("decoding"), _sizes("smollm2_bench")
    attention = _load("attention")
    row = {(r["impl"], r["n"]): r for r in attention["rows"]}
    small = (512, 1024, 2048, 4096)
    steps = {
        name: _load(name)["sizes"][0]
        for name in (
            "train_step_lm",
            "train_step_lm_1thread",
            "train_step_seq2seq",
            "train_step_seq2seq_1thread",
        )
    }
    train_x = [s["x_reference"] for s in steps.values()]
    summary = attention["sizes"]  # ours = sdpa_nw, the reference, the ceiling
    smol_step = smol["one decoding step (1 token)"]
    rss = smol["_"]["peak_rss_mb"]
    dec200, dec500 = dec["generate 200 tokens"], dec["generate 500 tokens"]
    return {
        # attention: the results page's table, and the versions of the chapter
        "attention x min": min(s["x_reference"] for s in summary),
        "attention x max": max(s["x_reference"] for s in summary),
        "attention 512 over ceiling": summary[0]["ours_over_ceiling"],
        "naive gain 512": row["naive", 512]["median_s"] / row["sdpa", 512]["median_s"],
        "naive gain 4096": row["naive", 4096]["median_s"] / row["sdpa", 4096]["median_s"],
        "sdpa x min": min(row["sdpa", n]["vs_torch"] for n in small),
        "sdpa x max": max(row["sdpa", n]["vs_torch"] for n in small),
        "sdpa_nw x min": min(row["sdpa_nw", n]["vs_torch"] for n in small),
        "sdpa_nw x max": max(row["sdpa_nw", n]["vs_torch"] for n in small),
        "sdpa_nw x 2048": row["sdpa_nw", 2048]["vs_torch"],
        "ceiling x min": min(row["products_exp", n]["vs_torch"] for n in small[1:]),
        "ceiling x max": max(row["products_exp", n]["vs_torch"] for n in small[1:]),
        "ceiling x 16384": row["products_exp", 16384]["vs_torch"],
        "sdpa_nw over ceiling 2048": row["sdpa_nw", 2048]["median_s"]
        / row["products_exp", 2048]["median_s"],
        "weights MiB 2048": row["sdpa", 2048]["peak_extra_bytes"] / 2**20,
        "no weights MiB 2048": row["sdpa_nw", 2048]["peak_extra_bytes"] / 2**20,
        "no weights gain min": min(row["sdpa_nw", n]["vs_sdpa"] for n in small),
        "no weights gain max": max(row["sdpa_nw", n]["vs_sdpa"] for n in small),
        "no weights gain 16384": row["sdpa_nw", 16384]["vs_sdpa"],
        "blockwise memory %": 100
        * row["blockwise", 16384]["peak_extra_bytes"]
        / row["sdpa", 16384]["peak_extra_bytes"],
        "blockwise gain": row["blockwise", 16384]["vs_sdpa"],
        # training
        "train x min": min(train_x),
        "train x max": max(train_x),
        "ceiling lm ms": 1e3 * _median(steps["train_step_lm"], "ceiling"),
        "ceiling lm 1 thread ms": 1e3 * _median(steps["train_step_lm_1thread"], "ceiling"),
        # MiniLM
        "minilm 2 threads": minilm["encode 32 sentences"]["x_reference"],
        "minilm 1 thread": minilm1["encode 32 sentences"]["x_reference"],
        "minilm over ceiling": minilm["encode 32 sentences"]["ours_over_ceiling"],
        "minilm 1 thread over ceiling": minilm1["encode 32 sentences"]["ours_over_ceiling"],
        # generation with the cache
        "decoding x 200": dec200["x_reference"],
        "decoding x 500": dec500["x_reference"],
        "decoding over ceiling": dec200["ours_over_ceiling"],
        "cache 200": dec200["cache_speedup"],
        "cache 500": dec500["cache_speedup"],
        # SmolLM2
        "smollm2 decoding": smol_step["x_reference"],
        "smollm2 load": smol["load (weights + tokenizer)"]["x_reference"],
        "smollm2 prefill": smol["prefill (90 tokens, 1 new)"]["x_reference"],
        "smollm2 GB/s ceiling": SMOLLM2_WEIGHTS / _median(smol_step, "ceiling") / 1e9,
        "smollm2 GB/s ours": SMOLLM2_WEIGHTS / _median(smol_step, "ours") / 1e9,
        "smollm2 GB/s transformers": SMOLLM2_WEIGHTS / _median(smol_step, "reference") / 1e9,
        "smollm2 rss ours": rss["ours"],
        "smollm2 rss ours MB": rss["ours"] * 2**20 / 1e6,
        "smollm2 rss transformers": rss["reference"],
        "smollm2 rss ceiling": rss["ceiling"],
    }


class Quote(NamedTuple):
    figure: str
    pattern: str  # a regular expression with one group: the number as the page writes it
    digits: int
    required: bool = True  # False: checked only where the page quotes it


N = r"(\d+(?:\.\d+)?)"
QUOTES = {
    "it/benchmarks.md": [
        Quote("attention x min", rf"Il divario da PyTorch \(da {N} a", 2),
        Quote("attention x max", rf"Il divario da PyTorch \(da \S+ a\s+{N} volte", 2),
        Quote("attention 512 over ceiling", rf"il rapporto con il tetto sale a {N}", 2),
        Quote("naive gain 512", rf"da {N} volte la velocità della versione ingenua", 1),
        Quote("naive gain 4096", rf"fino a {N} volte a \$n = 4096\$", 1),
        Quote("sdpa x min", rf"con i pesi va da {N} a", 2),
        Quote("sdpa x max", rf"con i pesi va da \S+ a\s+{N} volte", 2),
        Quote("sdpa_nw x min", rf"con il solo output da {N} a", 2),
        Quote("sdpa_nw x max", rf"con il solo output da \S+ a {N} \(per", 2),
        Quote("ceiling x min", rf"Va\s+da {N} a", 2),
        Quote("ceiling x max", rf"Va\s+da \S+ a {N} volte la velocità di PyTorch", 2),
        Quote("ceiling x 16384", rf"e a {N} volte a\s+\$n = 16384\$", 2),
        Quote("sdpa_nw over ceiling 2048", rf"ci mette {N} volte il tempo del tetto", 2),
        Quote("weights MiB 2048", rf"la memoria extra scende da {N} MiB", 0),
        Quote("no weights MiB 2048", rf"la memoria extra scende da \d+ MiB a {N} MiB", 0),
        Quote("no weights gain min", rf"E la chiamata è più veloce: da {N} a", 2),
        Quote("no weights gain max", rf"più veloce: da \S+ a {N} volte", 2),
        Quote("no weights gain 16384", rf"4096, {N} volte a", 2),
        Quote("blockwise memory %", rf"usa lo {N}% della memoria extra", 1),
        Quote("blockwise gain", rf"ed è anche {N} volte più veloce", 2),
        Quote("train x min", rf"va quasi alla velocità di PyTorch: da {N} a", 2),
        Quote("train x max", rf"va quasi alla velocità di PyTorch: da \S+ a {N} volte", 2),
        Quote("ceiling lm 1 thread ms", rf"sul modello di linguaggio passa da {N} a", 1),
        Quote("ceiling lm ms", rf"sul modello di linguaggio passa da \S+ a {N} ms", 1),
        Quote("minilm 2 threads", rf"il nostro modello va a {N} volte la velocità di sentence", 2),
        Quote("minilm 1 thread", rf"con un thread a {N}", 2),
        Quote("minilm over ceiling", rf"il nostro tempo è {N} volte\s+quello del tetto", 2),
        Quote("minilm 1 thread over ceiling", rf"con due thread, {N} con uno", 2),
        Quote("decoding x 200", rf"il nostro codice va a {N} e", 2),
        Quote("decoding x 500", rf"codice va a \S+ e {N} volte la velocità di\s+PyTorch", 2),
        Quote("decoding over ceiling", rf"sopra il tetto, noi circa {N} volte", 0),
        Quote("cache 200", rf"la cache è {N} volte più\s+veloce a 200 token", 1),
        Quote("cache 500", rf"{N} volte a 500", 1),
        Quote("smollm2 decoding", rf"decodifica a {N} volte", 2),
        Quote("smollm2 GB/s ceiling", rf"Il tetto legge i pesi a {N} GB/s", 0),
        Quote("smollm2 GB/s ours", rf"GB/s, noi a\s+{N}, transformers", 0),
        Quote("smollm2 GB/s transformers", rf"transformers a {N}\.\s", 1),
        Quote("smollm2 prefill", rf"Il prefill\*\* va a {N} volte", 2),
        Quote("smollm2 load", rf"Il caricamento\*\* è {N} volte", 2),
        Quote("smollm2 rss ours", rf"Il nostro processo arriva a {N} MiB", 1),
        Quote("smollm2 rss ours MB", rf"arriva a \S+ MiB \({N} MB\)", 1),
        Quote("smollm2 rss transformers", rf"contro i {N} MiB di\s+transformers", 1),
        Quote("smollm2 rss ceiling", rf"pochi buffer, arriva a {N} MiB", 1),
    ],
    "en/benchmarks.md": [
        Quote("attention x min", rf"The gap to PyTorch \(from {N} to", 2),
        Quote("attention x max", rf"The gap to PyTorch \(from \S+ to {N} times", 2),
        Quote("attention 512 over ceiling", rf"the ratio to the ceiling rises to {N}", 2),
        Quote("naive gain 512", rf"from {N} times the speed of the naive version", 1),
        Quote("naive gain 4096", rf"to\s+{N} times at \$n = 4096\$", 1),
        Quote("sdpa x min", rf"with the weights it runs at {N} to", 2),
        Quote("sdpa x max", rf"with the weights it runs at \S+ to {N}\s+times", 2),
        Quote("sdpa_nw x min", rf"with the output only at {N} to", 2),
        Quote("sdpa_nw x max", rf"with the output only at \S+ to {N} \(for", 2),
        Quote("ceiling x min", rf"It runs at\s+{N} to", 2),
        Quote("ceiling x max", rf"It runs at\s+\S+ to {N} times the speed of PyTorch", 2),
        Quote("ceiling x 16384", rf"and at {N} times at\s+\$n = 16384\$", 2),
        Quote("sdpa_nw over ceiling 2048", rf"takes {N} times the ceiling's time", 2),
        Quote("weights MiB 2048", rf"the extra memory goes from {N} MiB", 0),
        Quote("no weights MiB 2048", rf"the extra memory goes from \d+ MiB to {N} MiB", 0),
        Quote("no weights gain min", rf"And the call is faster: {N} to", 2),
        Quote("no weights gain max", rf"the call is faster: \S+ to {N} times", 2),
        Quote("no weights gain 16384", rf"4096,\s+{N} times at", 2),
        Quote("blockwise memory %", rf"uses {N}% of the extra memory", 1),
        Quote("blockwise gain", rf"and is {N} times faster too", 2),
        Quote("train x min", rf"runs almost at PyTorch's speed: from {N} to", 2),
        Quote("train x max", rf"runs almost at PyTorch's speed: from \S+ to {N} times", 2),
        Quote("ceiling lm 1 thread ms", rf"on the language model it goes from {N} to", 1),
        Quote("ceiling lm ms", rf"on the language model it goes from \S+ to {N} ms", 1),
        Quote("minilm 2 threads", rf"our model runs at {N} times the speed of sentence", 2),
        Quote("minilm 1 thread", rf"one thread at {N}", 2),
        Quote("minilm over ceiling", rf"our time is {N} times the ceiling's", 2),
        Quote("minilm 1 thread over ceiling", rf"two threads, {N} with one", 2),
        Quote("decoding x 200", rf"our code runs at {N} and", 2),
        Quote("decoding x 500", rf"our code runs at \S+ and {N} times the speed of PyTorch", 2),
        Quote("decoding over ceiling", rf"above the ceiling, we about {N} times", 0),
        Quote("cache 200", rf"the cache is {N} times faster at 200 tokens", 1),
        Quote("cache 500", rf"{N} times at 500", 1),
        Quote("smollm2 decoding", rf"decodes at {N} times", 2),
        Quote("smollm2 GB/s ceiling", rf"The ceiling reads the weights at {N} GB/s", 0),
        Quote("smollm2 GB/s ours", rf"GB/s, we\s+at {N}, transformers", 0),
        Quote("smollm2 GB/s transformers", rf"transformers at {N}\.\s", 1),
        Quote("smollm2 prefill", rf"The prefill\*\* runs at {N} times", 2),
        Quote("smollm2 load", rf"Loading\*\* is {N} times", 2),
        Quote("smollm2 rss ours", rf"Our process peaks at {N} MiB", 1),
        Quote("smollm2 rss ours MB", rf"peaks at \S+ MiB \({N} MB\)", 1),
        Quote("smollm2 rss transformers", rf"against transformers' {N} MiB", 1),
        Quote("smollm2 rss ceiling", rf"a few buffers, peaks at {N} MiB", 1),
    ],
    "it/efficient-attention.md": [
        Quote("naive gain 512", rf"da {N} volte la velocità della versione ingenua", 1),
        Quote("naive gain 4096", rf"fino a\s+{N} volte a \$n = 4096\$", 1),
        Quote("sdpa_nw x 2048", rf"arriva a {N} volte la velocità di PyTorch", 2),
        Quote("sdpa_nw over ceiling 2048", rf"ci mette {N} volte il suo\s+tempo", 2),
    ],
    "en/efficient-attention.md": [
        Quote("naive gain 512", rf"from {N} times the speed of the naive version", 1),
        Quote("naive gain 4096", rf"to\s+{N} times at \$n = 4096\$", 1),
        Quote("sdpa_nw x 2048", rf"reaches {N} times the speed of PyTorch", 2),
        Quote("sdpa_nw over ceiling 2048", rf"takes {N} times its time", 2),
    ],
    "en/minilm.md": [
        Quote("minilm 2 threads", rf"our model runs at {N} times the\s+speed", 2),
        Quote("minilm 1 thread", rf"with one thread at {N}", 2, required=False),
    ],
    "it/minilm.md": [
        Quote("minilm 2 threads", rf"il nostro modello va a\s+{N} volte", 2),
        Quote("minilm 1 thread", rf"con un thread a {N}", 2, required=False),
    ],
    "en/decoding.md": [
        Quote("cache 200", rf"{N} times at 200", 1),
        Quote("cache 500", rf"{N} times at 500", 1),
    ],
    "it/decoding.md": [
        Quote("cache 200", rf"{N} volte a 200", 1),
        Quote("cache 500", rf"{N} volte a 500", 1),
    ],
    "en/smollm2.md": [
        Quote("smollm2 decoding", rf"decodes at {N} times", 2),
        Quote("smollm2 load", rf"loads at {N} times", 2, required=False),
        Quote("smollm2 prefill", rf"prefill at\s+{N} times", 2, required=False),
        Quote("smollm2 rss ours", rf"peaks at {N} Mi?B", 1, required=False),
        Quote("smollm2 rss transformers", rf"against transformers' {N}", 1, required=False),
    ],
    "it/smollm2.md": [
        Quote("smollm2 decoding", rf"decodifica a {N} volte", 2),
        Quote("smollm2 load", rf"si carica a {N} volte", 2, required=False),
        Quote("smollm2 prefill", rf"prefill va a\s+{N} volte", 2, required=False),
        Quote("smollm2 rss ours", rf"arriva a {N} Mi?B", 1, required=False),
        Quote(
            "smollm2 rss transformers", rf"contro i {N} (?:MiB )?di transformers", 1, required=False
        ),
    ],
}


def misquotes(text: str, quotes: list[Quote], figures: dict[str, float]) -> list[str]:
    """What is wrong with the quotes of one page: a figure quoted twice, missing, or not the
    saved one (rounded as the page writes it)."""
    wrong = []
    for quote in quotes:
        found = re.findall(quote.pattern, text)
        expected = f"{figures[quote.figure]:.{quote.digits}f}"
        if not found and not quote.required:
            continue
        if len(found) != 1:
            wrong.append(f"expected one quote of {quote.figure!r} ({quote.pattern}), got {found}")
        elif found[0] != expected:
            wrong.append(f"quotes {quote.figure} as {found[0]}, the JSON says {expected}")
    return wrong


@pytest.mark.parametrize("page", sorted(QUOTES))
def test_page_quotes_the_saved_benchmark_figures(page):
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    wrong = misquotes(text, QUOTES[page], _figures())
    assert not wrong, f"{page}: " + "; ".join(wrong)


def test_a_wrong_or_missing_quote_is_reported():
    quotes = [Quote("x", rf"runs at {N} times", 2), Quote("y", rf"loads at {N} times", 2, False)]
    figures = {"x": 0.944, "y": 5.66}
    assert misquotes("It runs at 0.94 times; it loads at 5.66 times.", quotes, figures) == []
    assert misquotes("It runs at 0.94 times.", quotes, figures) == []  # y: not required
    assert len(misquotes("It runs at 0.95 times.", quotes, figures)) == 1  # not the JSON's
    assert len(misquotes("It loads at 5.66 times.", quotes, figures)) == 1  # x: missing
    assert len(misquotes("It runs at 0.94 times, runs at 0.94 times.", quotes, figures)) == 1
    assert len(misquotes("It runs at 0.94 times; loads at 5.7 times.", quotes, figures)) == 1
