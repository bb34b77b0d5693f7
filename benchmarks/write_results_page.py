"""Write the tables of the results page from the saved results of every benchmark.

Reads the JSON files that the benchmark scripts write (``src/transformer_np/data/*.json``, the
schema of ``report.py``; the older files of MiniLM, SmolLM2, decoding and attention are read
too) and writes, for each language, one Markdown fragment with a section per workload: its
table (ours, the reference, the NumPy ceiling, "x reference" = reference time / our time and
ours / ceiling time), the machine, the threads, the load, the date and the command that made
it, and an SVG plot (plain SVG, inline) where the workload is a sweep over sizes. The pages
``docs/<lang>/benchmarks.md`` include the fragments::

    --8<-- "benchmarks/results/benchmarks.it.md"

``make bench`` runs every benchmark, then this script. Run from the repository root::

    .venv/bin/python benchmarks/write_results_page.py
    .venv/bin/python benchmarks/write_results_page.py --data /tmp/quick --out /tmp/page
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from report import DATA, SCHEMA, SIDES, VERSIONS, size_entry

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
# The files, in the order of the page.
FILES = (
    "attention",
    "train_step_lm",
    "train_step_lm_1thread",
    "train_step_seq2seq",
    "train_step_seq2seq_1thread",
    "minilm",
    "minilm_1thread",
    "decoding",
    "smollm2_bench",
)

TITLES = {
    "attention": ("Attention (solo l'output)", "Attention (output only)"),
    "train_step_lm": (
        "Un passo di addestramento, modello linguistico",
        "One training step, language model",
    ),
    "train_step_lm_1thread": (
        "Un passo di addestramento, modello linguistico, un thread",
        "One training step, language model, one thread",
    ),
    "train_step_seq2seq": ("Un passo di addestramento, seq2seq", "One training step, seq2seq"),
    "train_step_seq2seq_1thread": (
        "Un passo di addestramento, seq2seq, un thread",
        "One training step, seq2seq, one thread",
    ),
    "minilm": ("MiniLM: embedding di frasi", "MiniLM: sentence embeddings"),
    "minilm_1thread": (
        "MiniLM: embedding di frasi, un thread",
        "MiniLM: sentence embeddings, one thread",
    ),
    "decoding": ("Generazione con la cache", "Generation with the cache"),
    "smollm2": ("SmolLM2-135M: generazione", "SmolLM2-135M: generation"),
}

TEXT = {
    "it": {
        "header": ["carico di lavoro", "nostro ({u})", "{ref} ({u})", "tetto NumPy ({u})"],
        "ratios": ["× {ref}", "nostro / tetto"],
        "caption": "Mediane di {rounds} giri alternati (ogni lato nel suo processo). "
        "× {ref} = tempo di {ref} / il nostro (sopra 1 = il nostro è più veloce); "
        "nostro / tetto = il nostro tempo / quello del minimo lavoro NumPy (1 = niente di più).",
        "machine": "Macchina: {cpu}, {cores} core; {versions}; thread per lato: {threads}; "
        "carico medio (1 min) {l0} prima, {l1} dopo; {date}.",
        "checks": "Controlli: {checks}.",
        "nocache": "Senza cache (`use_cache=False`), {label}: {t} ms; la cache è {x:.1f} volte "
        "più veloce.",
        "legacy": "Risultati nel formato precedente, senza il tetto NumPy (non misurato): mediane "
        "di {rounds} chiamate per lato. "
        "× {ref} = tempo di {ref} / il nostro (sopra 1 = il nostro è più veloce).",
        "command": "Comando:",
        "plot": "Tempo (ms, scala logaritmica) in funzione della taglia",
        "sides": {"ours": "nostro", "reference": "{ref}", "ceiling": "tetto NumPy"},
        "labels": {
            "lm": "un passo (forward, backward, Adam)",
            "seq2seq": "un passo (forward, backward, Adam)",
            "encode": "encode di {n} frasi",
            "new": "generare {n} token",
            "load": "caricamento (pesi + tokenizer)",
            "prefill": "prefill ({n} token, 1 nuovo)",
            "decode_step": "un passo di decodifica (1 token)",
            "generate": "generare {n} token",
        },
    },
    "en": {
        "header": ["workload", "ours ({u})", "{ref} ({u})", "NumPy ceiling ({u})"],
        "ratios": ["× {ref}", "ours / ceiling"],
        "caption": "Medians of {rounds} interleaved rounds (each side in its own process). "
        "× {ref} = {ref} time / ours (above 1 = ours is faster); "
        "ours / ceiling = our time / that of the least NumPy work (1 = nothing more).",
        "machine": "Machine: {cpu}, {cores} cores; {versions}; threads per side: {threads}; "
        "load average (1 min) {l0} before, {l1} after; {date}.",
        "checks": "Checks: {checks}.",
        "nocache": "Without the cache (`use_cache=False`), {label}: {t} ms; the cache is {x:.1f} "
        "times faster.",
        "legacy": "Results in the earlier format, without the NumPy ceiling (not measured): "
        "medians "
        "of {rounds} calls per side. "
        "× {ref} = {ref} time / ours (above 1 = ours is faster).",
        "command": "Command:",
        "plot": "Time (ms, log scale) against the size",
        "sides": {"ours": "ours", "reference": "{ref}", "ceiling": "NumPy ceiling"},
        "labels": {
            "lm": "one step (forward, backward, Adam)",
            "seq2seq": "one step (forward, backward, Adam)",
            "encode": "encode {n} sentences",
            "new": "generate {n} tokens",
            "load": "load (weights + tokenizer)",
            "prefill": "prefill ({n} tokens, 1 new)",
            "decode_step": "one decoding step (1 token)",
            "generate": "generate {n} tokens",
        },
    },
}
COLOURS = {"ours": "#3f51b5", "reference": "#e65100", "ceiling": "#2e7d32"}


# --------------------------------------------------------------------------------------------
# Older files, read into the shared schema
# --------------------------------------------------------------------------------------------


def _legacy(name: str, res: dict) -> dict:
    """A file written before the shared schema, in that schema (no ceiling: not measured)."""
    ms = [t / 1e3 for t in res.get("ours_times_ms", [])]
    if name.startswith("minilm"):
        times = {"ours": ms, "reference": [t / 1e3 for t in res["torch_times_ms"]]}
        sizes = [size_entry("encode", "encode", times)]
        v = res["versions"]
        versions = {"torch": v["torch"], "sentence_transformers": v["sentence_transformers"]}
        threads = {"ours": res["threads"], "reference": v["torch_threads"]}
        ref, unit, checks = "sentence-transformers", "ms", {"max_abs_diff": res["max_abs_diff"]}
        workload, rounds = res["input"], res["reps"]
    elif name == "smollm2_bench":
        raw, new = res["raw"], res["input"]["new_tokens"]

        def t(what, f=lambda x: x):
            return {"ours": [f(x) for x in raw["ours"][what]], "reference": raw["torch"][what]}

        step = {
            s: [x / (new - 1) for x in raw[k]["steps"]]
            for s, k in (("ours", "ours"), ("reference", "torch"))
        }
        sizes = [
            size_entry("load", "load", t("load")),
            size_entry("prefill", "prefill", t("prefill")),
            size_entry("decode_step", "decode step", step),
            size_entry("generate", "generate", t("decode")),
        ]
        v = res["versions"]
        versions = {k: v[k] for k in ("torch", "transformers", "gguf")}
        threads = {"ours": res["threads"], "reference": v["torch_threads"]}
        ref, unit, rounds = "transformers", "s", res["rounds"]
        checks = {k: res["input"][k] for k in ("same_prompt_ids", "same_new_tokens")}
        workload = {k: v for k, v in res["input"].items() if k != "prompt"}
        versions["numpy"] = v["numpy"]
    elif name == "decoding":
        sizes = [
            size_entry(str(r["new_tokens"]), "", {"ours": [r["with_cache_s"]]})
            for r in res["results"]
        ]
        versions, threads = {"numpy": res["numpy"]}, {"ours": "BLAS 1"}
        ref, unit, rounds = "PyTorch", "ms", res["config"]["reps"]
        checks = {
            f"identical_tokens_{r['new_tokens']}": r["identical_tokens"] for r in res["results"]
        }
        workload = res["config"]
    else:
        raise ValueError(f"no reader for the old format of {name}")
    before, after = res["load_average_1min"]
    return {
        "schema": "legacy",
        "benchmark": "smollm2" if name == "smollm2_bench" else name,
        "workload": workload,
        "reference": ref,
        "unit": unit,
        "sizes": sizes,
        "checks": checks,
        "machine": {**res["machine"], **versions, "threads": threads},
        "load": {"before": [before], "after": [after]},
        "date": res["date"],
        "command": res["command"],
        "rounds": rounds,
    }


def load(data: Path) -> list[dict]:
    """Every saved result in ``data``, in the order of the page, in the shared schema."""
    out = []
    for name in FILES:
        path = data / f"{name}.json"
        if not path.exists():
            continue
        res = json.loads(path.read_text(encoding="utf-8"))
        if res.get("schema") != SCHEMA:
            if name == "attention" and "rows" in res:
                from bench_attention import summary

                res = {**res, **summary(res), "schema": "legacy"}
            else:
                res = _legacy(name, res)
        out.append(res)
    return out


# --------------------------------------------------------------------------------------------
# Tables and plots
# --------------------------------------------------------------------------------------------


def label(res: dict, e: dict, lang: str) -> str:
    labels, w, size = TEXT[lang]["labels"], res["workload"], e["size"]
    b = res["benchmark"]
    if b == "attention":
        return f"n = {size}"
    if b == "decoding":
        return labels["new"].format(n=size)
    if b.startswith("minilm"):
        return labels["encode"].format(n=w.get("sentences", 32))
    if b == "smollm2":
        n = w.get("prompt_tokens") if size == "prefill" else w.get("new_tokens")
        return labels[size].format(n=n)
    return labels.get(size, e.get("label", size))


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def markdown(res: dict, lang: str) -> str:
    text, unit, ref = TEXT[lang], res["unit"], res["reference"]
    k = 1e3 if unit == "ms" else 1.0
    head = [h.format(u=unit, ref=ref) for h in text["header"] + text["ratios"]]
    lines = ["| " + " | ".join(head) + " |", "|---|--:|--:|--:|--:|--:|"]
    for e in res["sizes"]:
        cells = [_fmt(e[s]["median_s"] * k) if e.get(s) else "–" for s in SIDES]
        x = f"{e['x_reference']:.2f}" if e.get("x_reference") else "–"
        c = f"{e['ours_over_ceiling']:.2f}" if e.get("ours_over_ceiling") else "–"
        lines.append(f"| {label(res, e, lang)} | " + " | ".join([*cells, x, c]) + " |")
    m, load_ = res["machine"], res["load"]
    versions = ", ".join(f"{v} {m[v]}" for v in VERSIONS if m.get(v))
    threads = m.get("threads", {})
    threads = ", ".join(
        f"{text['sides'].get(s, s).format(ref=ref)} {t}" for s, t in threads.items()
    )
    checks = ", ".join(f"{k} = {_check(v)}" for k, v in res.get("checks", {}).items())
    legacy = res.get("schema") == "legacy" and not any(e.get("ceiling") for e in res["sizes"])
    caption = text["legacy" if legacy else "caption"]
    lines += [
        "",
        caption.format(rounds=res["rounds"], ref=ref),
        text["machine"].format(
            cpu=m.get("cpu", "?"),
            cores=m.get("cores", "?"),
            versions=versions,
            threads=threads or "–",
            l0=load_["before"][0],
            l1=load_["after"][0],
            date=res["date"],
        ),
    ]
    if checks:
        lines += [text["checks"].format(checks=checks)]
    for e in res["sizes"]:
        if e.get("without_cache"):
            t = _fmt(e["without_cache"]["median_s"] * k)
            x = e["cache_speedup"]
            lines += [text["nocache"].format(label=label(res, e, lang), t=t, x=x)]
    lines += ["", text["command"], "", "```bash", res["command"], "```"]
    return "\n".join(lines) + "\n"


def _check(v) -> str:
    return f"{v:.1e}" if isinstance(v, float) else str(v)


def svg_plot(res: dict, lang: str, width: int = 560, height: int = 300) -> str:
    """Time against size, one line per side, log-log: plain SVG, no script, no fonts fetched."""
    text, ref = TEXT[lang], res["reference"]
    sizes = [e for e in res["sizes"] if e.get("ours")]
    xs = [float(e["size"]) for e in sizes]
    ys = [e[s]["median_s"] * 1e3 for e in sizes for s in SIDES if e.get(s)]
    left, right, top, bottom = 60, 150, 30, 40
    lx0, lx1 = math.log10(min(xs)), math.log10(max(xs))
    ly0, ly1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    lx1 = lx1 if lx1 > lx0 else lx0 + 1
    ly1 = ly1 if ly1 > ly0 else ly0 + 1
    pw, ph = width - left - right, height - top - bottom

    def px(x):
        return left + (math.log10(x) - lx0) / (lx1 - lx0) * pw

    def py(y):
        return top + ph - (math.log10(y) - ly0) / (ly1 - ly0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" font-family="sans-serif" font-size="12">',
        f"<title>{text['plot']}</title>",
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for p in range(ly0, ly1 + 1):
        y = py(10**p)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10**p:g}</text>')
    for e, x in zip(sizes, xs, strict=True):
        out.append(
            f'<text x="{px(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{e["size"]}</text>'
        )
    for i, s in enumerate(SIDES):
        pts = [
            (px(x), py(e[s]["median_s"] * 1e3)) for e, x in zip(sizes, xs, strict=True) if e.get(s)
        ]
        if not pts:
            continue
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{COLOURS[s]}" stroke-width="2"/>'
        )
        for a, b in pts:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{COLOURS[s]}"/>')
        y = top + 14 + 18 * i
        name = text["sides"][s].format(ref=ref)
        out.append(
            f'<line x1="{left + pw + 10}" x2="{left + pw + 30}" y1="{y - 4}" y2="{y - 4}" '
            f'stroke="{COLOURS[s]}" stroke-width="2"/>'
        )
        out.append(f'<text x="{left + pw + 36}" y="{y}">{name}</text>')
    out.append(f'<text x="{left}" y="{top - 10}">{text["plot"]}</text>')
    out.append("</svg>")
    return "\n".join(out)


def page(results: list[dict], lang: str) -> str:
    parts = []
    for res in results:
        title = TITLES[res["benchmark"]][0 if lang == "it" else 1]
        parts += [f"## {title}", "", markdown(res, lang)]
        if len([e for e in res["sizes"] if e.get("ours")]) > 1 and res["benchmark"] in (
            "attention",
            "decoding",
        ):
            parts += ['<div class="benchmark-plot">', svg_plot(res, lang), "</div>", ""]
    return "\n".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA, help="folder of the saved JSON results")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the fragments")
    args = p.parse_args(argv)
    results = load(args.data)
    if not results:
        sys.exit(f"no benchmark results in {args.data}")
    args.out.mkdir(parents=True, exist_ok=True)
    for lang in ("it", "en"):
        path = args.out / f"benchmarks.{lang}.md"
        path.write_text(page(results, lang), encoding="utf-8")
        print(f"wrote {path}")
    for res in results:  # the plots also as files, for the README and the repository
        if len(res["sizes"]) > 1 and res["benchmark"] in ("attention", "decoding"):
            path = args.out / f"{res['benchmark']}_sizes.svg"
            path.write_text(svg_plot(res, "en") + "\n", encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
