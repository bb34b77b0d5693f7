"""The figures the chapters quote from the Benchmarks page are those of the saved results.

``make bench`` rewrites ``src/transformer_np/data/*.json`` and the page's tables; a chapter
sentence that quotes one of them ("0.88 times the speed of sentence-transformers") must then
be updated too. Each quote is read from the page's text and compared with the JSON, rounded
as the page writes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "src" / "transformer_np" / "data"


def _sizes(name: str) -> dict:
    res = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    return {s["label"]: s for s in res["sizes"]} | {"_": res}


def _figures():
    minilm, minilm1 = _sizes("minilm"), _sizes("minilm_1thread")
    dec, smol = _sizes("decoding"), _sizes("smollm2_bench")
    return {
        "minilm 2 threads": minilm["encode 32 sentences"]["x_reference"],
        "minilm 1 thread": minilm1["encode 32 sentences"]["x_reference"],
        "cache 200": dec["generate 200 tokens"]["cache_speedup"],
        "cache 500": dec["generate 500 tokens"]["cache_speedup"],
        "smollm2 decoding": smol["one decoding step (1 token)"]["x_reference"],
        "smollm2 load": smol["load (weights + tokenizer)"]["x_reference"],
        "smollm2 prefill": smol["prefill (90 tokens, 1 new)"]["x_reference"],
        "smollm2 rss ours": smol["_"]["peak_rss_mb"]["ours"],
        "smollm2 rss transformers": smol["_"]["peak_rss_mb"]["reference"],
    }


# page: [(figure, regex with one group for the number as the page writes it, digits)]
QUOTES = {
    "en/minilm.md": [
        ("minilm 2 threads", r"our model runs at (\d+(?:\.\d+)?) times the\s+speed", 2),
        ("minilm 1 thread", r"with one thread at (\d+(?:\.\d+)?)", 2),
    ],
    "it/minilm.md": [
        ("minilm 2 threads", r"il nostro modello va a\s+(\d+(?:\.\d+)?) volte", 2),
        ("minilm 1 thread", r"con un thread a (\d+(?:\.\d+)?)", 2),
    ],
    "en/decoding.md": [
        ("cache 200", r"(\d+(?:\.\d+)?) times at 200", 1),
        ("cache 500", r"(\d+(?:\.\d+)?) times at 500", 1),
    ],
    "it/decoding.md": [
        ("cache 200", r"(\d+(?:\.\d+)?) volte a 200", 1),
        ("cache 500", r"(\d+(?:\.\d+)?) volte a 500", 1),
    ],
    "en/smollm2.md": [
        ("smollm2 decoding", r"decodes at (\d+(?:\.\d+)?) times", 2),
        ("smollm2 load", r"loads at (\d+(?:\.\d+)?) times", 2),
        ("smollm2 prefill", r"prefill at\s+(\d+(?:\.\d+)?) times", 2),
        ("smollm2 rss ours", r"peaks at (\d+) MB", 0),
        ("smollm2 rss transformers", r"against transformers' (\d+)", 0),
    ],
    "it/smollm2.md": [
        ("smollm2 decoding", r"decodifica a (\d+(?:\.\d+)?) volte", 2),
        ("smollm2 load", r"si carica a (\d+(?:\.\d+)?) volte", 2),
        ("smollm2 prefill", r"prefill va a\s+(\d+(?:\.\d+)?) volte", 2),
        ("smollm2 rss ours", r"arriva a (\d+) MB", 0),
        ("smollm2 rss transformers", r"contro i (\d+) di transformers", 0),
    ],
}


@pytest.mark.parametrize("page", sorted(QUOTES))
def test_chapter_quotes_the_saved_benchmark_figures(page):
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    figures = _figures()
    for name, pattern, digits in QUOTES[page]:
        found = re.findall(pattern, text)
        assert len(found) == 1, f"{page}: expected one quote of {name!r} ({pattern}), got {found}"
        expected = f"{figures[name]:.{digits}f}"
        assert found[0] == expected, f"{page} quotes {name} as {found[0]}, the JSON says {expected}"
