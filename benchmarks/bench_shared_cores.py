"""How the package's speed degrades when other processes keep the cores busy.

A workload runs in a process of its own, first alone, then beside ``--competitors`` busy
processes (each a Python loop that never sleeps: one core's worth of work each). Its slowdown,
the time beside them over the time alone, is printed next to the fair share: with ``w`` threads
of ours and ``c`` busy processes on ``n`` cores, a fair scheduler gives us ``min(w, n w / (w + c))``
cores, so a workload that used its ``w`` threads fully slows down by at most
``w / min(w, n w / (w + c))`` (1.5 for w = n = 2 and c = 1, 2 for c = 2). A slowdown far above it
is time lost to threads that wait for each other, not to the competitors.

Workloads (``--workload``):

- ``finetune``: one LoRA fine-tuning step of a model of SmolLM2-135M's sizes (random weights,
  r = 8 on the queries and values, one sequence of 128 tokens: ``bench_finetune_step.py``'s);
- ``tutor``: one step of the fine-tuning demo with its defaults (``python -m
  transformer_np.examples.finetune``): SmolLM2-135M-Instruct itself, r = 8 on its seven maps,
  2 batches of 4 training pairs accumulated, AdamW;
- ``decode``: 32 tokens of greedy generation with the cache by the same model, from a prompt
  of 16 tokens.

Each measure is the median of ``--steps`` calls after one untimed call. The threads are the
package's own choice (nothing is set), unless ``--threads`` sets them all (``worker_env``) or
``--env`` sets one (``--env OPENBLAS_NUM_THREADS=1``: BLAS alone on one thread).

Usage::

    python benchmarks/bench_shared_cores.py                        # finetune, 0 and 1 competitor
    python benchmarks/bench_shared_cores.py --workload decode --competitors 0 1 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import load_average, machine
from timed_calls import worker_env

HERE = Path(__file__).resolve().parent


def spin() -> None:
    """A busy process: one core's worth of work, forever."""
    while True:
        pass


def workload(name):
    """The call to time, built in this process."""
    import numpy as np
    from bench_finetune_step import ALPHA, TARGETS, R, batch, our_model

    if name == "tutor":
        return tutor_step()
    args = argparse.Namespace(size="smollm2")
    model = our_model(args)
    if name == "finetune":
        from transformer_np import Adam, cross_entropy
        from transformer_np.lora import add_lora, lora_params

        add_lora(model, r=R, alpha=ALPHA, targets=TARGETS, rng=0)
        model.train()
        opt = Adam(lora_params(model), lr=1e-4, weight_decay=0.01)
        ids, targets = batch(model.config, 1, 128)

        def step():
            loss, dlogits = cross_entropy(model(ids), targets, ignore_index=-100)
            model.backward(dlogits)
            opt.step(model.grads)

        return step
    from transformer_np import generate

    prompt = np.random.default_rng(1).integers(0, model.config.vocab_size, (1, 16))
    return lambda: generate(model, prompt, 32)


def tutor_step():
    """One step of the fine-tuning demo with its defaults: SmolLM2-135M-Instruct, r = 8 on its
    seven maps, 2 batches of 4 training pairs accumulated, AdamW (examples/tutor.py)."""
    from transformer_np import Adam
    from transformer_np.examples.finetune import load_smollm2_model
    from transformer_np.examples.tutor import (
        TARGETS,
        accumulated_gradients,
        batches_of,
        encode_pair,
        load_pairs,
        make_batch,
    )
    from transformer_np.lora import add_lora, lora_params

    model, tokenizer = load_smollm2_model()
    pairs = load_pairs("train")[:8]
    examples = [encode_pair(tokenizer, p["question"], p["answer"]) for p in pairs]
    batches = [make_batch(b, tokenizer.eos_id) for b in batches_of(examples, 4)]
    add_lora(model, 8, 16, targets=TARGETS, rng=0)
    params = lora_params(model)
    optimizer = Adam(params, lr=1e-4, weight_decay=0.01)
    model.train()

    def step():
        _, grads = accumulated_gradients(model, batches, params)
        optimizer.step(grads)

    return step


def worker(name, steps) -> None:
    """Time ``steps`` calls of the workload after one untimed call; print the times as JSON."""
    call = workload(name)
    call()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    from threadpoolctl import threadpool_info

    blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    print(json.dumps({"times": times, "blas": blas}), flush=True)


def measure(args, competitors: int) -> dict:
    """The workload's times in a fresh process, beside ``competitors`` busy processes."""
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(competitors)]
    for p in busy:
        p.start()
    try:
        env = worker_env(args.threads, **dict(item.split("=", 1) for item in args.env))
        cmd = [sys.executable, __file__, "--worker", args.workload, "--steps", str(args.steps)]
        out = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, check=False)
    finally:
        for p in busy:
            p.kill()
            p.join()
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.splitlines()[-1])


def fair_slowdown(w: int, c: int, n: int) -> float:
    """The slowdown of a workload on ``w`` threads beside ``c`` busy processes, on ``n`` cores,
    under a fair scheduler."""
    return w / min(w, n * w / (w + c))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=("finetune", "tutor", "decode"), default="finetune")
    parser.add_argument("--competitors", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, help="every thread variable set to this")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable for the workload's process (OPENBLAS_NUM_THREADS=1, ...)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps)
        return 0
    n = len(os.sched_getaffinity(0))
    print(f"{args.workload}: {args.steps} calls per measure, {n} cores, load {load_average()}")
    rows, alone = [], None
    for c in sorted(set(args.competitors) | {0}):
        got = measure(args, c)
        median = statistics.median(got["times"])
        alone = median if c == 0 else alone
        w = args.threads or n
        row = {
            "competitors": c,
            "median_s": median,
            "slowdown": median / alone,
            "fair_slowdown": fair_slowdown(w, c, n),
            "blas": got["blas"],
        }
        rows.append(row)
        print(
            f"  {c} busy: {median:.3f} s per call, {row['slowdown']:.2f}x the time alone "
            f"(fair share: {row['fair_slowdown']:.2f}x)"
        )
    if args.json:
        threads = {"ours": args.threads or "package default"}
        result = {"workload": args.workload, "machine": machine(threads, {}), "rows": rows}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
