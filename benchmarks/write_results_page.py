"""Write the tables of the results page from the saved results of every benchmark.

Reads the JSON files that the benchmark scripts write (``src/transformer_np/data/*.json``, the
schema of ``report.py``; the older files of MiniLM, SmolLM2, decoding and attention are read
too) and writes, for each language, one Markdown fragment with a heading per workload and,
under it, a snippet section named after the file (``train_step_lm``, ``minilm_1thread``...): its
table (ours, the reference, the NumPy ceiling, "x reference" = reference time / our time and
ours / ceiling time), the rounds, the machine, the threads, the load, the date, the checks and
the command that made it, and an SVG plot (plain SVG, inline) where the workload is a sweep over
sizes. Attention has a second section, ``attention_versions``: every version that its benchmark
times, with GFLOP/s and peak extra memory. The pages ``docs/<lang>/benchmarks.md`` include the
sections one by one, with their own text around each::

    --8<-- "benchmarks/results/benchmarks.it.md:train_step_lm"

Nothing is measured here: ``make bench`` runs every benchmark, then this script, which only
reads the saved files. Run from the repository root::

    .venv/bin/python benchmarks/write_results_page.py
    .venv/bin/python benchmarks/write_results_page.py --data /tmp/quick --out /tmp/page
"""

from __future__ import annotations

import argparse
import json
import math
import re
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
    "decoding_charlm",
    "decoding_reverse",
    "smollm2_bench",
    "tokenizer_bench",
    "finetune_step",
)

TITLES = {
    "attention": ("Attention (solo l'output)", "Attention (output only)"),
    "train_step_lm": (
        "Un passo di addestramento, modello di linguaggio",
        "One training step, language model",
    ),
    "train_step_lm_1thread": (
        "Un passo di addestramento, modello di linguaggio, un thread",
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
    "decoding_charlm": (
        "Generazione con la cache, modello a caratteri",
        "Generation with the cache, character model",
    ),
    "decoding_reverse": (
        "Traduzione con la cache, modello dell'inversione",
        "Translation with the cache, reversal model",
    ),
    "smollm2": ("SmolLM2-135M: generazione", "SmolLM2-135M: generation"),
    "tokenizer": ("Tokenizer: encode", "Tokenizer: encode"),
    "finetune_step": ("Un passo di fine-tuning LoRA", "One LoRA fine-tuning step"),
}
# the versions the tables show: report.py's, and those of the libraries some benchmarks add
SHOWN_VERSIONS = (*VERSIONS, "tokenizers", "peft")

TEXT = {
    "it": {
        "header": ["carico di lavoro", "nostro ({u})", "{ref} ({u})", "tetto NumPy ({u})"],
        "ratios": ["× {ref}", "nostro / tetto"],
        "rounds": "Mediane di {rounds} giri alternati, ogni implementazione nel suo processo; fra "
        "parentesi, il rapporto più basso e il più alto di un singolo giro.",
        "machine": "Macchina: {cpu}, {cores} core; {versions}.",
        "threads": "Thread: {threads}.",
        "load": "Carico medio (1 min): {l0} prima, {l1} dopo; {date}.",
        "memory": "Memoria di picco del processo (`ru_maxrss`, MiB): {memory}.",
        "threads_per_row": "Thread: quelli di ogni riga, gli stessi per ogni implementazione.",
        "step_memory": "Memoria di due passi, ogni implementazione in un processo nuovo (MiB): "
        "la memoria residente prima dei passi, il suo picco durante i passi (`VmHWM`) e la "
        "differenza; per il nostro anche il picco visto da `tracemalloc`.",
        "memory_header": [
            "carico di lavoro",
            "nostro: prima",
            "nostro: picco",
            "nostro: passi",
            "nostro: `tracemalloc`",
            "{ref}: prima",
            "{ref}: picco",
            "{ref}: passi",
        ],
        "passed": "Verificato: {checks}.",
        "failed": "Non verificato: {checks}.",
        "and": "e",
        "nocache": "Senza cache (`use_cache=False`), {label}: {t} ms; la cache è {x:.1f} volte "
        "più veloce.",
        "legacy": "Risultati nel formato precedente, senza il tetto NumPy (non misurato).",
        "command": "Comando:",
        "plot": {
            "attention": "Tempo (ms, scala logaritmica) in funzione di n",
            "decoding": "Tempo (ms, scala logaritmica) in funzione dei token generati",
        },
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
            "translate": "tradurre 10 cifre in {n} token (batch {b})",
            "tokenizer": "{text} ({c} caratteri, {n} token), cache {cache}",
            "page": "una pagina",
            "chat": "un prompt di chat",
            "warm": "calda",
            "cold": "fredda",
            "finetune": "{b} × {t} token, {threads} thread",
        },
        # what each check of the saved results verified ({n}: the size it belongs to)
        "checks": {
            "same_parameter_count": "stesso numero di parametri",
            "max_abs_diff_embeddings": "differenza massima tra gli embedding {v}",
            "max_abs_diff": "differenza massima tra gli embedding {v}",
            "same_tokens": "stessi id dei token",
            "identical_tokens": "stessi token con e senza cache ({n} token)",
            "same_tokens_as_torch": "stessi token di PyTorch ({n} token)",
            "same_prompt_ids": "stessi id del prompt",
            "same_new_tokens": "stessi token generati",
            "page ids equal to tokenizers'": "stessi id di tokenizers sulla pagina",
            "chat ids equal to tokenizers'": "stessi id di tokenizers sul prompt di chat",
            "same_trainable_count": "stesso numero di parametri addestrabili",
            "first_loss_rel_diff_max": "differenza relativa massima della loss del primo passo {v}",
        },
    },
    "en": {
        "header": ["workload", "ours ({u})", "{ref} ({u})", "NumPy ceiling ({u})"],
        "ratios": ["× {ref}", "ours / ceiling"],
        "rounds": "Medians of {rounds} interleaved rounds, each implementation in its own process; "
        "in brackets, the lowest and the highest ratio of a single round.",
        "machine": "Machine: {cpu}, {cores} cores; {versions}.",
        "threads": "Threads: {threads}.",
        "load": "Load average (1 min): {l0} before, {l1} after; {date}.",
        "memory": "Peak memory of the process (`ru_maxrss`, MiB): {memory}.",
        "threads_per_row": "Threads: those of each row, the same for every implementation.",
        "step_memory": "Memory of two steps, each implementation in a fresh process (MiB): the "
        "resident memory before the steps, its peak during them (`VmHWM`) and the difference; "
        "for ours also the peak that `tracemalloc` sees.",
        "memory_header": [
            "workload",
            "ours: before",
            "ours: peak",
            "ours: steps",
            "ours: `tracemalloc`",
            "{ref}: before",
            "{ref}: peak",
            "{ref}: steps",
        ],
        "passed": "Checked: {checks}.",
        "failed": "Not verified: {checks}.",
        "and": "and",
        "nocache": "Without the cache (`use_cache=False`), {label}: {t} ms; the cache is {x:.1f} "
        "times faster.",
        "legacy": "Results in the earlier format, without the NumPy ceiling (not measured).",
        "command": "Command:",
        "plot": {
            "attention": "Time (ms, log scale) against n",
            "decoding": "Time (ms, log scale) against the tokens generated",
        },
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
            "translate": "translate 10 digits into {n} tokens (batch {b})",
            "tokenizer": "{text} ({c} characters, {n} tokens), {cache} cache",
            "page": "a page",
            "chat": "a chat prompt",
            "warm": "warm",
            "cold": "cold",
            "finetune": "{b} × {t} tokens, {threads} thread{s}",
        },
        "checks": {
            "same_parameter_count": "same number of parameters",
            "max_abs_diff_embeddings": "largest difference between the embeddings {v}",
            "max_abs_diff": "largest difference between the embeddings {v}",
            "same_tokens": "same token ids",
            "identical_tokens": "same tokens with and without the cache ({n} tokens)",
            "same_tokens_as_torch": "same tokens as PyTorch ({n} tokens)",
            "same_prompt_ids": "same prompt ids",
            "same_new_tokens": "same generated tokens",
            "page ids equal to tokenizers'": "same ids as tokenizers on the page",
            "chat ids equal to tokenizers'": "same ids as tokenizers on the chat prompt",
            "same_trainable_count": "same number of trainable parameters",
            "first_loss_rel_diff_max": "largest relative difference of the first step's loss {v}",
        },
    },
}
COLOURS = {"ours": "#3f51b5", "reference": "#e65100", "ceiling": "#2e7d32"}

# The versions of attention that bench_attention.py times, in its order, as the page names them.
VERSION_NAMES = {
    "naive": {"it": "NumPy ingenua", "en": "naive NumPy"},
    "sdpa": "`sdpa`",
    "sdpa_nw": {"it": "`sdpa`, solo output", "en": "`sdpa`, output only"},
    "blockwise": "`blockwise_attention`",
    "products": {"it": "solo i due prodotti †", "en": "two products only †"},
    "products_exp": {"it": "due prodotti + `np.exp` †", "en": "two products + `np.exp` †"},
    "torch": "PyTorch SDPA",
}
VERSION_TEXT = {
    "it": {
        "header": [
            "implementazione",
            "n",
            "tempo (ms)",
            "GFLOP/s",
            "% del picco",
            "× PyTorch",
            "memoria extra di picco (MiB)",
        ],
        "caption": "`sdpa` = `scaled_dot_product_attention`; † non è attention, solo i suoi due "
        "prodotti di matrici (e `np.exp` di ogni punteggio), con i gruppi di righe e i thread di "
        "`sdpa`. float32, batch 1, {heads} teste, d_head {d}. Tempo: mediana delle chiamate "
        "cronometrate; GFLOP/s: le $4n^2d$ operazioni dei due prodotti, per testa, divise per il "
        "tempo; % del picco: di un prodotto di matrici float32 {pn}×{pn} cronometrato negli "
        "stessi giri ({peak:.1f} GFLOP/s, mediana sulle dimensioni); memoria extra: il picco "
        "della memoria residente del processo durante la chiamata, meno quella di prima. "
        "Macchina: {cpu}, {cores} core, {mem} GB di RAM; NumPy {numpy} ({blas}), PyTorch "
        "{torch}; {date}.",
        "extrapolated": "\\* non misurato a questo n (i punteggi n × n richiederebbero "
        "{need:.1f} GB): tempo e memoria estrapolati da n = {base}, moltiplicati per "
        "(n / {base})².",
    },
    "en": {
        "header": [
            "implementation",
            "n",
            "time (ms)",
            "GFLOP/s",
            "% of peak",
            "× PyTorch",
            "peak extra memory (MiB)",
        ],
        "caption": "`sdpa` = `scaled_dot_product_attention`; † not attention, only its two "
        "matrix products (and `np.exp` of every score), in the chunks of rows and threads of "
        "`sdpa`. float32, batch 1, {heads} heads, d_head {d}. Time: median of the timed calls; "
        "GFLOP/s: the $4n^2d$ operations of the two products, per head, divided by the time; "
        "% of peak: of a float32 {pn}×{pn} matrix product timed in the same rounds "
        "({peak:.1f} GFLOP/s, median over the sizes); extra memory: the peak resident memory "
        "of the process during the call, minus that before it. Machine: {cpu}, {cores} cores, "
        "{mem} GB of RAM; NumPy {numpy} ({blas}), PyTorch {torch}; {date}.",
        "extrapolated": "\\* not measured at this n (the n × n scores would need {need:.1f} "
        "GB): time and memory extrapolated from n = {base}, multiplied by (n / {base})².",
    },
}


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
        out.append({**res, "section": name})  # the snippet section of the fragments
    return out


# --------------------------------------------------------------------------------------------
# Tables and plots
# --------------------------------------------------------------------------------------------


def label(res: dict, e: dict, lang: str) -> str:
    labels, w, size = TEXT[lang]["labels"], res["workload"], e["size"]
    b = res["benchmark"]
    if b == "attention":
        return f"n = {size}"
    if b == "decoding" and w.get("model") == "reverse":
        return labels["translate"].format(n=size, b=w.get("batch", 1))
    if b == "decoding":
        return labels["new"].format(n=size)
    if b == "tokenizer":
        text, cache = size.split("_")
        c, n = e.get("characters", "?"), e.get("tokens", "?")
        return labels["tokenizer"].format(text=labels[text], c=c, n=n, cache=labels[cache])
    if b == "finetune_step":
        n = e["threads"]
        return labels["finetune"].format(b=e["batch"], t=e["length"], threads=n, s="s" * (n > 1))
    if b.startswith("minilm"):
        return labels["encode"].format(n=w.get("sentences", 32))
    if b == "smollm2":
        n = w.get("prompt_tokens") if size == "prefill" else w.get("new_tokens")
        return labels[size].format(n=n)
    return labels.get(size, e.get("label", size))


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def threads(value) -> dict[str, int]:
    """The threads a benchmark recorded for one side, by pool: ``{"BLAS": 1, "package": 2}``.

    The scripts write them as text ("BLAS one, transformer_np 2", "BLAS and transformer_np 2",
    "transformer_np 2, BLAS 1 per product", "torch 2") or as one number for every pool.
    """
    if isinstance(value, int):
        return {"all": value}
    pools = {}
    for part in re.split(r",\s*", str(value)):
        m = re.fullmatch(r"(.+?) (one|\d+)(?: per product)?", part.strip())
        if not m:
            return {"text": value}
        n = 1 if m[2] == "one" else int(m[2])
        for name in m[1].split(" and "):
            pools[{"transformer_np": "package"}.get(name.strip(), name.strip())] = n
    return pools


def threads_text(value) -> str:
    """One side's threads for the page: "2", or "2 (BLAS 1)" when BLAS runs fewer per product."""
    pools = threads(value)
    if "text" in pools:
        return str(pools["text"])
    main = pools.get("package") or pools.get("torch") or pools.get("all") or pools.get("BLAS")
    blas = pools.get("BLAS")
    return f"{main} (BLAS {blas})" if blas and blas != main else str(main)


def round_range(e: dict) -> str:
    """`` (lo–hi)``: the least and the largest reference time / our time of a single round, or
    nothing without the times of each round (the sides are timed in the same rounds)."""
    ours = (e.get("ours") or {}).get("times_s") or []
    ref = (e.get("reference") or {}).get("times_s") or []
    if len(ours) < 2 or len(ours) != len(ref):
        return ""
    ratios = [r / o for o, r in zip(ours, ref, strict=True)]
    return f" ({min(ratios):.2f}–{max(ratios):.2f})"


def _rounds(res: dict) -> str:
    """The rounds behind the medians: one number, or a range when the sizes differ."""
    counts = {len(e["ours"]["times_s"]) for e in res["sizes"] if e.get("ours", {}).get("times_s")}
    if len(counts) > 1:
        return f"{min(counts)}–{max(counts)}"
    return str(res["rounds"])


def checks_text(checks: dict, lang: str) -> list[str]:
    """The checks of a result in ``lang``: what was verified, what was not (and the numbers).

    A check saved once per size (``identical_tokens_200``, ``identical_tokens_500``) is said
    once, with its sizes; a number (a largest difference) is shown, not judged.
    """
    text = TEXT[lang]
    names, both = text["checks"], text["and"]
    said: dict[tuple[str, bool], list[str]] = {}  # (base, passed) -> sizes, in order
    values = {}
    for key, value in checks.items():
        m = re.fullmatch(r"(.+?)_(\d+)", key)
        base, n = (m[1], m[2]) if m and m[1] in names else (key, "")
        if isinstance(value, float):
            values[base] = f"{value:.1e}"
            value = True
        said.setdefault((base, bool(value)), []).append(n)
    lines = []
    for passed, template in ((True, "passed"), (False, "failed")):
        parts = []
        for (base, ok), sizes in said.items():
            if ok is passed:
                n = f" {both} ".join(s for s in sizes if s)
                name = names.get(base, f"{base} {{v}}" if base in values else base)
                parts.append(name.format(v=values.get(base, ""), n=n))
        if parts:
            lines.append(text[template].format(checks="; ".join(parts)))
    return lines


def markdown(res: dict, lang: str) -> str:
    """The table of one result, and under it how, where and when it was measured."""
    text, unit, ref = TEXT[lang], res["unit"], res["reference"]
    k = 1e3 if unit == "ms" else 1.0
    # without a ceiling (a tokenizer, a trained model's generation) its two columns are left out
    ceiling = any(e.get("ceiling") for e in res["sizes"])
    head = text["header"] + text["ratios"] if ceiling else text["header"][:3] + text["ratios"][:1]
    head = [h.format(u=unit, ref=ref) for h in head]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for e in res["sizes"]:
        cells = [_fmt(e[s]["median_s"] * k) if e.get(s) else "–" for s in SIDES]
        x = f"{e['x_reference']:.2f}{round_range(e)}" if e.get("x_reference") else "–"
        c = f"{e['ours_over_ceiling']:.2f}" if e.get("ours_over_ceiling") else "–"
        row = [*cells, x, c] if ceiling else [*cells[:2], x]
        lines.append(f"| {label(res, e, lang)} | " + " | ".join(row) + " |")
    m, load_, sides = res["machine"], res["load"], text["sides"]
    versions = ", ".join(f"{v} {m[v]}" for v in SHOWN_VERSIONS if m.get(v))
    recorded = {s: t for s, t in m.get("threads", {}).items() if t is not None}
    pools = ", ".join(
        f"{sides.get(s, s).format(ref=ref)} {threads_text(t)}" for s, t in recorded.items()
    )
    if any("text" in threads(t) for t in recorded.values()):  # set per row (the labels say it)
        pools = ""
    legacy = res.get("schema") == "legacy" and not any(e.get("ceiling") for e in res["sizes"])
    # one paragraph: how and where it was measured
    lines += ["", text["legacy"] if legacy else text["rounds"].format(rounds=_rounds(res))]
    cores = m.get("cores", "?")
    lines.append(text["machine"].format(cpu=m.get("cpu", "?"), cores=cores, versions=versions))
    if pools:
        lines.append(text["threads"].format(threads=pools))
    elif recorded:
        lines.append(text["threads_per_row"])
    l0, l1 = load_["before"][0], load_["after"][0]
    lines.append(text["load"].format(l0=l0, l1=l1, date=res["date"]))
    if res.get("peak_rss_mb"):
        memory = ", ".join(
            f"{sides.get(s, s).format(ref=ref)} {mib:.1f}" for s, mib in res["peak_rss_mb"].items()
        )
        lines.append(text["memory"].format(memory=memory))
    # another: what was checked, and the cache's speed-up
    more = checks_text(res.get("checks", {}), lang)
    for e in res["sizes"]:
        if e.get("without_cache"):
            t = _fmt(e["without_cache"]["median_s"] * k)
            x = e["cache_speedup"]
            more.append(text["nocache"].format(label=label(res, e, lang), t=t, x=x))
    if more:
        lines += ["", *more]
    if any(e.get("memory") for e in res["sizes"]):
        lines += ["", memory_table(res, lang)]
    lines += ["", text["command"], "", "```bash", res["command"].strip(), "```"]
    return "\n".join(lines) + "\n"


def memory_table(res: dict, lang: str) -> str:
    """The memory of each workload's steps, each side in a fresh process (bench_finetune_step)."""
    text, ref = TEXT[lang], res["reference"]
    head = [h.format(ref=ref) for h in text["memory_header"]]
    lines = [text["step_memory"], "", "| " + " | ".join(head) + " |"]
    lines.append("|---|" + "--:|" * (len(head) - 1))
    for e in res["sizes"]:
        if not e.get("memory"):
            continue
        o, r = e["memory"]["ours"], e["memory"]["reference"]
        cells = [o["rss_before_mib"], o["peak_rss_mib"], o["step_rss_mib"]]
        cells += [o.get("step_traced_mib")]
        cells += [r["rss_before_mib"], r["peak_rss_mib"], r["step_rss_mib"]]
        cells = [f"{c:.0f}" if c is not None else "–" for c in cells]
        lines.append(f"| {label(res, e, lang)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versions_table(res: dict, lang: str) -> str:
    """Every version of attention that bench_attention.py times, one row per version and n."""
    from bench_attention import D_HEAD, HEADS, estimated_need

    text, m, mp = VERSION_TEXT[lang], res["machine"], res["matmul_peak"]
    lines = ["| " + " | ".join(text["header"]) + " |", "|---|--:|--:|--:|--:|--:|--:|"]
    for r in res["rows"]:
        name = VERSION_NAMES[r["impl"]]
        name = name[lang] if isinstance(name, dict) else name
        star = "" if r["measured"] else " \\*"
        vs = f"{r['vs_torch']:.2f}" if r.get("vs_torch") is not None else "–"
        lines.append(
            f"| {name}{star} | {r['n']} | {r['median_s'] * 1e3:.1f} | {r['gflops']:.1f} | "
            f"{100 * r['gflops'] / mp['gflops']:.0f} | {vs} | {r['peak_extra_bytes'] / 2**20:.1f} |"
        )
    lines += [
        "",
        text["caption"].format(
            heads=HEADS,
            d=D_HEAD,
            peak=mp["gflops"],
            pn=mp["n"],
            cpu=m["cpu"],
            cores=m["cores_available"],
            mem=m["memory_gb"],
            numpy=m["numpy"],
            blas=m["blas"],
            torch=m["torch"],
            date=m["date"],
        ),
    ]
    for r in res["rows"]:
        if not r["measured"]:
            need = estimated_need(r["impl"], r["n"]) / 1e9
            lines += ["", text["extrapolated"].format(need=need, base=r["extrapolated_from"])]
            break
    return "\n".join(lines) + "\n"


def svg_plot(res: dict, lang: str, width: int = 560, height: int = 300) -> str:
    """Time against size, one line per side, log-log: plain SVG, no script, no fonts fetched."""
    text, ref = TEXT[lang], res["reference"]
    title = text["plot"].get(res["benchmark"], text["plot"]["attention"])
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
        f"<title>{title}</title>",
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
    out.append(f'<text x="{left}" y="{top - 10}">{title}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _has_plot(res: dict) -> bool:
    swept = len([e for e in res["sizes"] if e.get("ours")]) > 1
    return swept and res["benchmark"] in ("attention", "decoding")


def section(name: str, body: str) -> list[str]:
    """``body`` between the markers of a snippet section (pymdownx.snippets drops the markers)."""
    return [f"<!-- --8<-- [start:{name}] -->", body.rstrip("\n"), f"<!-- --8<-- [end:{name}] -->"]


def page(results: list[dict], lang: str) -> str:
    """The fragment of one language: per result a heading and its section (and the plot)."""
    parts = []
    for res in results:
        title = TITLES.get(res["section"], TITLES[res["benchmark"]])[0 if lang == "it" else 1]
        body = markdown(res, lang)
        if _has_plot(res):
            body += "\n" + "\n".join(
                ['<div class="benchmark-plot">', svg_plot(res, lang), "</div>"]
            )
        parts += [f"## {title}", "", *section(res["section"], body), ""]
        if res["benchmark"] == "attention" and res.get("rows"):
            parts += [*section("attention_versions", versions_table(res, lang)), ""]
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
        if _has_plot(res):
            path = args.out / f"{res['section']}_sizes.svg"
            path.write_text(svg_plot(res, "en") + "\n", encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
