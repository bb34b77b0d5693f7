"""Generation with and without the key/value cache: time and speed-up.

A ``LanguageModel`` (d_model 64, 4 heads, 2 layers by default, float32) continues a prompt of
8 tokens by ``--new`` tokens, greedily, with ``use_cache=True`` and ``use_cache=False``; the
two outputs must be identical (checked here too). Without the cache, step ``t`` runs the model
on all ``t`` tokens so far; with it, on the one new token.

Usage::

    python benchmarks/bench_decoding.py
    python benchmarks/bench_decoding.py --new 500 --layers 4 --batch 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from transformer_np._parallel import blas_single_threaded
from transformer_np.decoding import generate
from transformer_np.model import LanguageModel, LanguageModelConfig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--new", type=int, default=200, help="tokens to generate")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)

    cfg = LanguageModelConfig(
        vocab_size=64,
        d_model=args.d_model,
        n_heads=4,
        n_layers=args.layers,
        max_len=8 + args.new,
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
                outputs[use_cache] = generate(model, prompt, args.new, use_cache=use_cache)
                runs.append(time.perf_counter() - t0)
            times[use_cache] = statistics.median(runs)
    same = bool(np.array_equal(outputs[True], outputs[False]))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"generate {args.new} tokens after a prompt of 8, batch {args.batch}, "
        f"d_model {args.d_model}, {args.layers} layers, float32 (load average {load:.2f})"
    )
    for use_cache in (True, False):
        t = times[use_cache]
        print(
            f"  {'with cache   ' if use_cache else 'without cache'} {1e3 * t:8.1f} ms  "
            f"({1e3 * t / args.new:.2f} ms per token, median of {args.reps})"
        )
    print(f"speed-up: {times[False] / times[True]:.1f}x; identical tokens: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
