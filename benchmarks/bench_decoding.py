"""Generation with and without the key/value cache: time and speed-up.

A ``LanguageModel`` (d_model 64, 4 heads, 2 layers by default, float32) continues a prompt of
8 tokens by ``--new`` tokens, greedily, with ``use_cache=True`` and ``use_cache=False``; the
two outputs must be identical (checked here too). Without the cache, step ``t`` runs the model
on all ``t`` tokens so far; with it, on the one new token.

Usage::

    python benchmarks/bench_decoding.py
    python benchmarks/bench_decoding.py --new 500 --layers 4 --batch 8
    python benchmarks/bench_decoding.py --new 200 500 --json src/transformer_np/data/decoding.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from timed_calls import cpu_model

from transformer_np._kernels.threads import blas_single_threaded
from transformer_np.decoding import generate
from transformer_np.model import LanguageModel, LanguageModelConfig


def measure(new: int, args) -> dict:
    """Generate ``new`` tokens with and without the cache; median times and the check."""
    cfg = LanguageModelConfig(
        vocab_size=64,
        d_model=args.d_model,
        n_heads=4,
        n_layers=args.layers,
        max_len=8 + new,
    )
    model = LanguageModel(cfg, rng=0)
    prompt = np.random.default_rng(0).integers(0, 64, (args.batch, 8))
    times = {}
    outputs = {}
    with blas_single_threaded():
        for use_cache in (True, False):
            runs = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                outputs[use_cache] = generate(model, prompt, new, use_cache=use_cache)
                runs.append(time.perf_counter() - t0)
            times[use_cache] = statistics.median(runs)
    return {
        "new_tokens": new,
        "with_cache_s": times[True],
        "without_cache_s": times[False],
        "ms_per_token_with_cache": 1e3 * times[True] / new,
        "speedup": times[False] / times[True],
        "identical_tokens": bool(np.array_equal(outputs[True], outputs[False])),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--new", type=int, nargs="+", default=[200], help="tokens to generate")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument(
        "--json",
        metavar="PATH",
        help="also write the results as JSON (e.g. src/transformer_np/data/decoding.json)",
    )
    args = p.parse_args(argv)

    load_before = os.getloadavg()[0]
    results = [measure(new, args) for new in args.new]
    load_after = os.getloadavg()[0]
    print(
        f"prompt of 8 tokens, batch {args.batch}, d_model {args.d_model}, {args.layers} layers, "
        f"float32; {cpu_model()}; load average {load_before:.2f} -> {load_after:.2f}"
    )
    for r in results:
        print(f"generate {r['new_tokens']} tokens:")
        for use_cache in (True, False):
            t = r["with_cache_s" if use_cache else "without_cache_s"]
            print(
                f"  {'with cache   ' if use_cache else 'without cache'} {1e3 * t:8.1f} ms  "
                f"({1e3 * t / r['new_tokens']:.2f} ms per token, median of {args.reps})"
            )
        print(f"  speed-up: {r['speedup']:.1f}x; identical tokens: {r['identical_tokens']}")
    if args.json:
        command = "python benchmarks/bench_decoding.py --new " + " ".join(map(str, args.new))
        command += f" --batch {args.batch} --layers {args.layers} --d-model {args.d_model}"
        command += f" --reps {args.reps} --json {args.json}"
        out = {
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
            "load_average_1min": [round(load_before, 2), round(load_after, 2)],
            "numpy": np.__version__,
            "config": {
                "batch": args.batch,
                "layers": args.layers,
                "d_model": args.d_model,
                "heads": 4,
                "prompt_tokens": 8,
                "dtype": "float32",
                "reps": args.reps,
            },
            "results": results,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0 if all(r["identical_tokens"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
