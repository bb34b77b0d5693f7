"""The peak memory of one fine-tuning step of a LlamaModel: LoRA with the base frozen, against
every weight trainable.

Workload: a LlamaModel of SmolLM2-135M's sizes (``--size smollm2``: vocabulary 49152, d_model
576, 30 layers, 9 heads and 3 key/value heads, d_ff 1536; ``--size tiny`` for a quick look),
float32, random weights N(0, 0.02^2) drawn in place (the memory does not depend on the values), a
batch of ``--batch`` sequences of ``--length`` tokens. One step is: forward, the cross-entropy of
the next tokens, ``LlamaModel.backward``, one AdamW update (``Adam(..., weight_decay=0.01)``),
the optimiser built just before (its two moments are part of the step's memory). Two sides:

- ``full``: every weight trainable, ``Adam(model.params)``;
- ``lora``: ``add_lora(model, r=--r, alpha=2 r, targets=--targets)`` (the base frozen: no
  gradient computed or kept for it), ``Adam(lora_params(model))``.

Method: each side runs in a fresh process of its own (this script re-invokes itself with
``--worker``), so that no side inherits the memory of the other. In the worker, after the model
is built: ``tracemalloc`` starts (NumPy reports its arrays to it) and the kernel's peak-RSS
counter is reset (``5`` written to ``/proc/self/clear_refs``); then the adapters (lora side),
the optimiser and the step; then the traced peak (every NumPy array and Python object allocated
during the step and alive at its worst moment: gradients, Adam's moments and scratch, the
activations kept for the backward pass) and the process's peak resident memory ``VmHWM`` (the
weights included, and what tracemalloc does not see, such as BLAS buffers). Printed: both, per
side, and full / lora.

Usage::

    python benchmarks/bench_lora_memory.py                    # SmolLM2's sizes, ~1 minute
    python benchmarks/bench_lora_memory.py --size tiny        # a quick look
    python benchmarks/bench_lora_memory.py --json /tmp/lora_memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

SIZES = {
    # SmolLM2-135M (HuggingFaceTB/SmolLM2-135M-Instruct's config.json)
    "smollm2": dict(
        vocab_size=49152,
        d_model=576,
        n_layers=30,
        n_heads=9,
        n_kv_heads=3,
        d_ff=1536,
        max_len=8192,
        rope_base=100000.0,
    ),  # fmt: skip
    "tiny": dict(
        vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128, max_len=256
    ),  # fmt: skip
}
MIB = 2**20


def status_kib(field):
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(side, args):
    """One fine-tuning step of one side; prints its measures as one JSON line."""
    import tracemalloc

    import numpy as np

    from transformer_np import Adam, LlamaConfig, LlamaModel, cross_entropy
    from transformer_np.lora import add_lora, lora_params

    cfg = LlamaConfig(**SIZES[args.size], dtype="float32")
    model = LlamaModel(cfg, init=False)  # zero matrices, unit gains: no draw in float64
    rng = np.random.default_rng(0)
    for name, p in model.params.items():  # small random matrices, written in place: resident
        if not name.endswith("gamma"):  # (untouched zero pages would not count in the RSS)
            rng.standard_normal(out=p, dtype=p.dtype)
            p *= 0.02
    ids = rng.integers(0, cfg.vocab_size, (args.batch, args.length + 1))
    weights = sum(p.nbytes for p in model.params.values())
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM (the peak) back to the current VmRSS
    tracemalloc.start()
    if side == "lora":
        add_lora(model, r=args.r, alpha=2 * args.r, targets=tuple(args.targets), rng=0)
        params = lora_params(model)
    else:
        params = dict(model.params)
    opt = Adam(params, lr=1e-4, weight_decay=0.01)  # AdamW: decoupled weight decay
    _, dlogits = cross_entropy(model(ids[:, :-1]), ids[:, 1:])
    model.backward(dlogits)
    opt.step(model.grads)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({
        "side": side,
        "trainable": int(sum(p.size for p in params.values())),
        "gradients": len(model.grads),
        "weights_mib": weights / MIB,
        "step_peak_traced_mib": peak / MIB,
        "peak_rss_mib": status_kib("VmHWM") / 1024,
    }))  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="smollm2")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--length", type=int, default=256, help="tokens per sequence")
    parser.add_argument("--r", type=int, default=8, help="LoRA rank")
    parser.add_argument("--targets", nargs="+", default=["q", "v"], help="add_lora's targets")
    parser.add_argument("--json", help="also save the results to this file")
    parser.add_argument("--worker", choices=["full", "lora"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args)
    workload = {k: v for k, v in vars(args).items() if k not in ("json", "worker")}
    passed = [f"--{k}={v}" for k, v in workload.items() if k != "targets"]
    passed += ["--targets", *args.targets]
    results = {}
    for side in ("full", "lora"):
        out = subprocess.run([sys.executable, __file__, *passed, "--worker", side],
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
        results[side] = json.loads(out.strip().splitlines()[-1])
    full, lora = results["full"], results["lora"]
    print(f"# one fine-tuning step (forward, loss, backward, AdamW), {args.size} sizes, float32, "
          f"batch {args.batch} x {args.length} tokens; LoRA r = {args.r} on {args.targets}; "
          f"weights {full['weights_mib']:.1f} MiB")  # fmt: skip
    print(f"{'side':6} {'trainable':>12} {'step peak (traced)':>20} {'process peak RSS':>18}")
    for r in (full, lora):
        print(f"{r['side']:6} {r['trainable']:>12,} {r['step_peak_traced_mib']:>16.1f} MiB "
              f"{r['peak_rss_mib']:>14.1f} MiB")  # fmt: skip
    ratio = full["step_peak_traced_mib"] / lora["step_peak_traced_mib"]
    print(
        f"full / lora: {ratio:.2f}x the step's traced peak, "
        f"{full['peak_rss_mib'] / lora['peak_rss_mib']:.2f}x the process's peak RSS"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": workload, "sides": results}, f, indent=2)


if __name__ == "__main__":
    main()
