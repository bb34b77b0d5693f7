"""One training step (forward, loss, backward, Adam) in NumPy against PyTorch and the NumPy ceiling.

Workload (issue 5): d_model 64, 2 layers, 4 heads, d_ff 256, batch 32, length 32, float32.

- ``--model lm`` (default): the decoder-only ``LanguageModel`` (pre-LN, GELU, tied
  embeddings, vocabulary 64) against ``torch.nn.TransformerEncoderLayer`` blocks with a causal
  mask, the same embedding/positions/tied output.
- ``--model seq2seq``: the encoder-decoder ``Transformer`` (post-LN, ReLU, 2 + 2 layers,
  source and target of length 32 with padding) against ``torch.nn.TransformerEncoderLayer`` /
  ``TransformerDecoderLayer`` stacks.

Both steps use the cross-entropy loss, gradient clipping at norm 1 and Adam. PyTorch runs
with its default threads (``torch.get_num_threads()``); NumPy runs its matrix products on one
OpenBLAS thread, as :func:`transformer_np.train.fit` does (``--numpy-blas-threads default`` to
leave OpenBLAS alone), and its GELU on every core. ``--threads 1`` gives every side one thread
(PyTorch's ``set_num_threads(1)``, ``TRANSFORMER_NP_NUM_THREADS=1``, and the usual thread
variables of OpenBLAS and OpenMP); its results are named ``train_step_<model>_1thread``.

The third side, the **ceiling**, makes only the matrix products of the
same step (every product of the forward and the backward pass, at the same shapes, float32, on
the same BLAS threads as ours) and one ``np.exp`` per attention score, per GELU element and per
logit (see ``ceiling.py``): the least NumPy work of any implementation.

Method: each side runs in its own process (this script re-invokes itself with ``--worker``),
makes ``--warmup`` untimed steps, then the three are timed in ``--rounds`` interleaved rounds of
one step each (see ``report.py``); ``--burst N`` makes each turn N consecutive steps, timed as
their mean (the steady state of a training loop). Printed and saved: the medians, "x PyTorch" =
PyTorch time / our time (above 1 = ours is faster) and ours / ceiling time.

Usage::

    python benchmarks/bench_train_step.py --json src/transformer_np/data/train_step_lm.json
    python benchmarks/bench_train_step.py --model seq2seq --rounds 50
    python benchmarks/bench_train_step.py --threads 1 --json train_step_lm_1thread.json
"""

from __future__ import annotations

import argparse
import os
import sys

from report import (
    add_rounds_argument,
    command_line,
    load_average,
    machine,
    report,
    result,
    size_entry,
    time_sides,
)
from timed_calls import TimedProcess, serve, worker_env

B, T, D, H, L, DFF, V = 32, 32, 64, 4, 2, 256, 64


def _batch(rng, model_kind):
    import numpy as np

    if model_kind == "lm":
        x = rng.integers(0, V, (B, T + 1))
        return x[:, :-1], x[:, 1:]
    src = rng.integers(3, V, (B, T))
    tgt = rng.integers(3, V, (B, T + 1))
    lengths = rng.integers(T // 2, T + 1, B)
    for b, n in enumerate(lengths):  # right padding with id 0
        src[b, n:] = 0
        tgt[b, n + 1 :] = 0
    tgt[:, 0] = 1
    return src, tgt[:, :-1], tgt[:, 1:].astype(np.int64)


def worker_numpy(args):
    import contextlib

    import numpy as np

    from transformer_np._kernels.threads import blas_single_threaded
    from transformer_np.losses import CrossEntropyLoss
    from transformer_np.model import (
        LanguageModel,
        LanguageModelConfig,
        Transformer,
        TransformerConfig,
    )
    from transformer_np.optim import Adam
    from transformer_np.train import train_step

    rng = np.random.default_rng(0)
    if args.model == "lm":
        cfg = LanguageModelConfig(
            vocab_size=V, d_model=D, n_heads=H, d_ff=DFF, n_layers=L, max_len=T
        )
        model = LanguageModel(cfg, rng=0)
        loss_fn = CrossEntropyLoss()
    else:
        cfg = TransformerConfig(
            src_vocab_size=V,
            tgt_vocab_size=V,
            d_model=D,
            n_heads=H,
            d_ff=DFF,
            n_encoder_layers=L,
            n_decoder_layers=L,
            max_len=T,
        )
        model = Transformer(cfg, rng=0)
        loss_fn = CrossEntropyLoss(ignore_index=0)
    model.train()
    opt = Adam(model.params, lr=1e-4)
    batch = _batch(rng, args.model)
    ctx = blas_single_threaded() if args.numpy_blas_threads == "one" else contextlib.nullcontext()
    from transformer_np._kernels.threads import num_threads

    def step():
        train_step(model, batch, opt, loss_fn, clip_norm=1.0)

    with ctx:
        for _ in range(args.warmup):
            step()
        ready = {
            "parameters": model.num_parameters(),
            "threads": f"BLAS {args.numpy_blas_threads}, transformer_np {num_threads()}",
        }
        serve(step, ready)


def worker_ceiling(args):
    import contextlib

    from ceiling import Ceiling, train_lm, train_seq2seq

    from transformer_np._kernels.threads import blas_single_threaded

    ops = (train_lm if args.model == "lm" else train_seq2seq)(B, T, D, H, L, DFF, V)
    ceiling = Ceiling([ops])
    ctx = blas_single_threaded() if args.numpy_blas_threads == "one" else contextlib.nullcontext()
    with ctx:
        for _ in range(args.warmup):
            ceiling.run()
        ready = {
            "products": sum(op[0] == "mm" for op in ops),
            "threads": f"BLAS {args.numpy_blas_threads}",
        }
        serve(ceiling.run, ready)


def worker_torch(args):
    import math

    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    pe = torch.zeros(T + 1, D)
    pos = torch.arange(T + 1)[:, None].float()
    omega = 10000 ** (-torch.arange(0, D, 2).float() / D)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * omega), torch.cos(pos * omega)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, D)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(
                    D, H, DFF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
                )
                for _ in range(L)
            )
            self.norm = nn.LayerNorm(D)
            self.bias = nn.Parameter(torch.zeros(V))
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

        def forward(self, x):
            h = self.embed(x) * math.sqrt(D) + pe[: x.shape[1]]
            for blk in self.blocks:
                h = blk(h, src_mask=self.mask, is_causal=True)
            return self.norm(h) @ self.embed.weight.T + self.bias

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed, self.tgt_embed = nn.Embedding(V, D), nn.Embedding(V, D)
            kw = {"dropout": 0.0, "batch_first": True}
            self.enc = nn.ModuleList(nn.TransformerEncoderLayer(D, H, DFF, **kw) for _ in range(L))
            self.dec = nn.ModuleList(nn.TransformerDecoderLayer(D, H, DFF, **kw) for _ in range(L))
            self.out = nn.Linear(D, V)
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

        def forward(self, src, tgt):
            skpm, tkpm = src == 0, tgt == 0
            x = self.src_embed(src) * math.sqrt(D) + pe[:T]
            for layer in self.enc:
                x = layer(x, src_key_padding_mask=skpm)
            y = self.tgt_embed(tgt) * math.sqrt(D) + pe[:T]
            for layer in self.dec:
                y = layer(
                    y,
                    x,
                    tgt_mask=self.mask,
                    tgt_key_padding_mask=tkpm,
                    memory_key_padding_mask=skpm,
                )
            return self.out(y)

    model = LM() if args.model == "lm" else Seq2Seq()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    batch = [torch.from_numpy(np.ascontiguousarray(a)) for a in _batch(rng, args.model)]
    *inputs, targets = batch
    ignore = -100 if args.model == "lm" else 0

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(*inputs)
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(args.warmup):
        step()
    ready = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "threads": f"torch {torch.get_num_threads()}",
        "torch": torch.__version__,
    }
    serve(step, ready)


def _start(which, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", which, "--model", args.model]
    cmd += ["--warmup", str(args.warmup), "--numpy-blas-threads", args.numpy_blas_threads]
    cmd += ["--torch-threads", str(args.torch_threads)]
    return TimedProcess(cmd, f"the {which} side", worker_env(args.threads))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["lm", "seq2seq"], default="lm")
    p.add_argument("--warmup", type=int, default=5)
    add_rounds_argument(p, 30, "interleaved rounds (one step each)")
    p.add_argument("--pause", type=float, default=0.05, help="seconds before each side's turn")
    p.add_argument(
        "--burst",
        type=int,
        default=1,
        help="consecutive steps per side and round, timed as their mean (1: one step alone)",
    )
    p.add_argument("--numpy-blas-threads", choices=["one", "default"], default="one")
    p.add_argument(
        "--torch-threads", type=int, default=0, help="torch.set_num_threads (0: its default)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="threads for every side (BLAS, OpenMP, torch, transformer_np); 0: as described above",
    )
    p.add_argument("--json", metavar="PATH", help="write the results (shared schema) here")
    p.add_argument(
        "--worker", choices=["numpy", "torch", "ceiling"], default=None, help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error(f"--threads must be 0 or a positive number of threads, got {args.threads}")
    if args.threads:
        args.torch_threads = args.threads
    if args.worker:
        {"numpy": worker_numpy, "torch": worker_torch, "ceiling": worker_ceiling}[args.worker](args)
        return 0

    load_before = load_average()
    workers = {"ours": "numpy", "reference": "torch", "ceiling": "ceiling"}
    starters = {side: (lambda _, w=which: _start(w, args)) for side, which in workers.items()}
    times, ready = time_sides(starters, args.rounds, args.pause, args.burst)
    label = f"one training step, {args.model}"
    one = "_1thread" if args.threads == 1 else ""
    res = result(
        f"train_step_{args.model}{one}",
        "One training step"
        + (" (decoder-only LM)" if args.model == "lm" else " (seq2seq)")
        + (", one thread" if one else ""),
        {
            "model": args.model,
            "d_model": D,
            "layers": L,
            "heads": H,
            "d_ff": DFF,
            "batch": B,
            "length": T,
            "vocabulary": V,
            "dtype": "float32",
            "parameters": {
                "ours": ready["ours"]["parameters"],
                "torch": ready["reference"]["parameters"],
            },
            "ceiling_products": ready["ceiling"]["products"],
        },
        "PyTorch",
        [size_entry(args.model, label, times)],
        unit="ms",
        checks={
            "same_parameter_count": ready["ours"]["parameters"] == ready["reference"]["parameters"]
        },
        machine=machine(
            {s: ready[s]["threads"] for s in ready}, {"torch": ready["reference"]["torch"]}
        ),
        load={"before": load_before, "after": load_average()},
        command=command_line("bench_train_step.py", argv),
        rounds=args.rounds,
    )
    print(
        f"one training step, {args.model}: d_model {D}, {L} layers, {H} heads, d_ff {DFF}, "
        f"batch {B}, length {T}, vocabulary {V}, float32"
    )
    print(
        f"parameters: numpy {ready['ours']['parameters']}, torch {ready['reference']['parameters']}"
    )
    report(res, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
