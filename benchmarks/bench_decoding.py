"""Greedy generation with the key/value cache: ours against PyTorch and the NumPy ceiling.

``--model lm`` (the default): a ``LanguageModel`` (d_model 64, 4 heads, 2 layers by default,
float32, weights of ``rng=0``: the character model's architecture, pre-LN, GELU, tied
embeddings) continues a prompt of 8 tokens by ``--new`` tokens, greedily. ``--model charlm``:
the same with the trained character model shipped with the package (its context of 64 tokens
holds the prompt and at most 56 new ones). ``--model reverse``: the trained reversal model
(an encoder-decoder, post-LN, ReLU) translates ``--batch`` sources of 10 digits into 11
tokens (no end token, so every step runs), with ``translate``; PyTorch runs the same encoder
once and the same decoder with a key/value cache (the cross-attention's keys and values
projected once). Four sides (three for ``reverse``: no ceiling), each in a process of its own,
timed in interleaved rounds (see ``report.py``):

- ours: ``generate(model, prompt, new, use_cache=True)``;
- ours without the cache: ``use_cache=False`` (step ``t`` runs the model on all ``t`` tokens
  so far); its tokens must be identical to those with the cache (checked here);
- PyTorch: the same model, its weights copied into torch tensors, the same loop with a
  key/value cache (``torch.nn.functional`` layer norm, ``scaled_dot_product_attention``,
  exact GELU), under ``torch.inference_mode``; its tokens are compared with ours too;
- the NumPy ceiling: the matrix-vector products of every token at the same shapes (each weight
  read once per token, the keys and values read from a cache), one ``np.exp`` per score and per
  GELU element, and the prefill's products (see ``ceiling.py``): the memory-bound least work.

Every side runs on ``--threads`` threads (default 1). Printed and saved: the medians,
"x PyTorch" = PyTorch time / our time (above 1 = ours is faster), ours / ceiling time, and the
speed-up of the cache (time without / time with).

Usage::

    python benchmarks/bench_decoding.py
    python benchmarks/bench_decoding.py --model charlm --new 56 --json /tmp/charlm.json
    python benchmarks/bench_decoding.py --model reverse --new 11 --json /tmp/reverse.json
    python benchmarks/bench_decoding.py --new 500 --layers 4 --batch 8
    python benchmarks/bench_decoding.py --new 200 500 --json src/transformer_np/data/decoding.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from report import (
    DATA,
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

PROMPT_TOKENS, HEADS, VOCAB = 8, 4, 64


def build(args, new):
    """Our model (weights of ``rng=0``, or the trained one) and the prompt (B, 8), or for
    ``reverse`` the sources (B, 10)."""
    import numpy as np

    from transformer_np.model import LanguageModel, LanguageModelConfig

    if args.model == "reverse":
        from transformer_np.examples.reverse import load_trained

        model, _ = load_trained()
        return model, np.random.default_rng(0).integers(3, 13, (args.batch, 10))
    if args.model == "charlm":
        from transformer_np.examples.charlm import load_trained

        model, _ = load_trained()
        V = model.config.vocab_size
        return model, np.random.default_rng(0).integers(0, V, (args.batch, PROMPT_TOKENS))
    cfg = LanguageModelConfig(
        vocab_size=VOCAB,
        d_model=args.d_model,
        n_heads=HEADS,
        n_layers=args.layers,
        max_len=PROMPT_TOKENS + new,
    )
    prompt = np.random.default_rng(0).integers(0, VOCAB, (args.batch, PROMPT_TOKENS))
    return LanguageModel(cfg, rng=0), prompt


def model_sizes(model, prompt) -> dict:
    """The workload's sizes as the model built has them (the trained models have their own)."""
    c = model.config
    if hasattr(c, "n_layers"):  # a LanguageModel
        layers, vocabulary = c.n_layers, c.vocab_size
    else:  # the encoder-decoder Transformer
        layers, vocabulary = f"{c.n_encoder_layers} + {c.n_decoder_layers}", c.tgt_vocab_size
    return {
        "layers": layers,
        "d_model": c.d_model,
        "heads": c.n_heads,
        "vocabulary": vocabulary,
        "prompt_tokens": int(prompt.shape[1]),
    }


def worker_ours(args, use_cache: bool) -> None:
    from transformer_np._kernels.threads import blas_single_threaded
    from transformer_np.decoding import generate, translate

    model, prompt = build(args, args.size)
    if args.model == "reverse":

        def run():
            return translate(model, prompt, args.size, bos_id=1, use_cache=use_cache)
    else:

        def run():
            return generate(model, prompt, args.size, use_cache=use_cache)

    with blas_single_threaded():
        out = run()  # the warm-up
        ready = {"tokens": out.tolist(), "d_ff": model.config.d_ff, "threads": "BLAS 1"}
        ready["sizes"] = model_sizes(model, prompt)
        serve(run, ready)


def worker_torch(args) -> None:
    """The same model and greedy loop in PyTorch, with a key/value cache."""
    import math

    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    model, prompt = build(args, args.size)
    if args.model == "reverse":
        return worker_torch_seq2seq(args, model, prompt)
    p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in model.params.items()}
    pe = torch.from_numpy(np.ascontiguousarray(model.pe))
    D, L, HEADS = model.config.d_model, model.config.n_layers, model.config.n_heads
    Dh = D // HEADS
    ids0 = torch.from_numpy(prompt)

    def forward(ids, cache):  # ids (B, T) -> logits of the last position (B, V)
        B, T = ids.shape
        start = cache[0][0].shape[2] if cache[0] else 0
        x = p["embed.W"][ids] * math.sqrt(D) + pe[start : start + T]
        for i in range(L):
            b = f"blocks.{i}."
            h = F.layer_norm(x, (D,), p[b + "norm1.gamma"], p[b + "norm1.beta"], 1e-5)
            q, k, v = (
                (h @ p[b + f"attn.W_{n}"] + p[b + f"attn.b_{n}"])
                .view(B, T, HEADS, Dh)
                .transpose(1, 2)
                for n in "qkv"
            )
            if cache[i]:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and T > 1)
            a = a.transpose(1, 2).reshape(B, T, D)
            x = x + a @ p[b + "attn.W_o"] + p[b + "attn.b_o"]
            h = F.layer_norm(x, (D,), p[b + "norm2.gamma"], p[b + "norm2.beta"], 1e-5)
            h = F.gelu(h @ p[b + "ff.linear1.W"] + p[b + "ff.linear1.b"])
            x = x + h @ p[b + "ff.linear2.W"] + p[b + "ff.linear2.b"]
        x = F.layer_norm(x[:, -1], (D,), p["blocks.norm.gamma"], p["blocks.norm.beta"], 1e-5)
        return x @ p["embed.W"].T + p["out.b"]

    def run():
        with torch.inference_mode():
            cache = [None] * L
            out = [ids0]
            logits = forward(ids0, cache)
            for t in range(args.size):
                nxt = logits.argmax(-1, keepdim=True)
                out.append(nxt)
                if t + 1 < args.size:
                    logits = forward(nxt, cache)
            return torch.cat(out, dim=1)

    ready = {
        "tokens": run().tolist(),
        "threads": f"torch {torch.get_num_threads()}",
        "torch": torch.__version__,
    }
    serve(run, ready)


def worker_torch_seq2seq(args, model, src) -> None:
    """The reversal model in PyTorch: the encoder once, then the greedy decoder loop with a
    key/value cache (self-attention appended, cross-attention projected once); post-LN, ReLU."""
    import math

    import numpy as np
    import torch
    import torch.nn.functional as F

    cfg = model.config
    p = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in model.params.items()}
    pe = torch.from_numpy(np.ascontiguousarray(model.pe))
    D, H, eps = cfg.d_model, cfg.n_heads, cfg.eps
    Dh = D // H
    src_t = torch.from_numpy(src)

    def heads(x):  # (B, T, D) -> (B, H, T, Dh)
        return x.view(x.shape[0], x.shape[1], H, Dh).transpose(1, 2)

    def linear(x, name):
        return x @ p[name + ".W"] + p[name + ".b"]

    def project(x, name, n):  # the map W_n of the attention `name`
        return x @ p[f"{name}.W_{n}"] + p[f"{name}.b_{n}"]

    def merge(a):  # (B, H, T, Dh) -> (B, T, D)
        return a.transpose(1, 2).reshape(a.shape[0], a.shape[2], D)

    def norm(x, name):
        return F.layer_norm(x, (D,), p[name + ".gamma"], p[name + ".beta"], eps)

    def ffn(x, name):
        return linear(F.relu(linear(x, name + ".linear1")), name + ".linear2")

    def encode(src):
        keep = src != cfg.pad_id  # (B, S)
        mask = keep[:, None, None, :]
        x = p["src_embed.W"][src] * math.sqrt(D) + pe[: src.shape[1]]
        for i in range(cfg.n_encoder_layers):
            b = f"encoder.{i}."
            q, k, v = (heads(project(x, b + "attn", n)) for n in "qkv")
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = norm(x + project(merge(a), b + "attn", "o"), b + "norm1")
            x = norm(x + ffn(x, b + "ff"), b + "norm2")
        return x, mask

    def run():
        with torch.inference_mode():
            memory, mask = encode(src_t)
            B = src_t.shape[0]
            cross = [
                tuple(heads(project(memory, f"decoder.{i}.cross_attn", n)) for n in "kv")
                for i in range(cfg.n_decoder_layers)
            ]
            cache = [None] * cfg.n_decoder_layers
            token = torch.full((B, 1), 1, dtype=torch.int64)  # BOS
            out = []
            for t in range(args.size):
                x = p["tgt_embed.W"][token] * math.sqrt(D) + pe[t : t + 1]
                for i in range(cfg.n_decoder_layers):
                    b = f"decoder.{i}."
                    q, k, v = (heads(project(x, b + "self_attn", n)) for n in "qkv")
                    if cache[i] is not None:
                        k = torch.cat([cache[i][0], k], dim=2)
                        v = torch.cat([cache[i][1], v], dim=2)
                    cache[i] = (k, v)
                    a = F.scaled_dot_product_attention(q, k, v)
                    x = norm(x + project(merge(a), b + "self_attn", "o"), b + "norm1")
                    q = heads(project(x, b + "cross_attn", "q"))
                    a = F.scaled_dot_product_attention(q, *cross[i], attn_mask=mask)
                    x = norm(x + project(merge(a), b + "cross_attn", "o"), b + "norm2")
                    x = norm(x + ffn(x, b + "ff"), b + "norm3")
                logits = linear(x[:, -1], "out")
                logits[:, cfg.pad_id] = -math.inf  # padding is never generated
                token = logits.argmax(-1, keepdim=True)
                out.append(token)
            return torch.cat(out, dim=1)

    ready = {
        "tokens": run().tolist(),
        "threads": f"torch {torch.get_num_threads()}",
        "torch": torch.__version__,
    }
    serve(run, ready)


def worker_ceiling(args) -> None:
    from ceiling import Ceiling, generation

    from transformer_np._kernels.threads import blas_single_threaded

    D = args.d_model
    cfg = {"L": args.layers, "D": D, "H": HEADS, "KV": HEADS, "Dh": D // HEADS}
    cfg.update({"F": args.d_ff, "V": VOCAB, "gated": False, "exp_ff": True})
    prefill, steps = generation(cfg, args.batch, PROMPT_TOKENS, args.size)
    ops = prefill + [op for step in steps for op in step]
    ceiling = Ceiling([ops])
    with blas_single_threaded():
        ceiling.run()
        serve(ceiling.run, {"products": sum(op[0] == "mm" for op in ops), "threads": "BLAS 1"})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["lm", "charlm", "reverse"], default="lm")
    p.add_argument("--new", type=int, nargs="+", default=[200], help="tokens to generate")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    add_rounds_argument(p, 5, "interleaved rounds per length")
    p.add_argument("--pause", type=float, default=0.1, help="seconds before each timed call")
    p.add_argument("--threads", type=int, default=1, help="threads of every side")
    p.add_argument(
        "--json",
        metavar="PATH",
        default=str(DATA / "decoding.json"),
        help="where to write the results (default: src/transformer_np/data/decoding.json)",
    )
    p.add_argument(
        "--worker", choices=["ours", "nocache", "torch", "ceiling"], help=argparse.SUPPRESS
    )
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--d-ff", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        if args.worker in ("ours", "nocache"):
            worker_ours(args, use_cache=args.worker == "ours")
        elif args.worker == "torch":
            worker_torch(args)
        else:
            worker_ceiling(args)
        return 0

    env = worker_env(args.threads)
    common = [sys.executable, str(Path(__file__).resolve()), "--batch", str(args.batch)]
    common += ["--layers", str(args.layers), "--d-model", str(args.d_model)]
    common += ["--threads", str(args.threads), "--model", args.model]
    load_before = load_average()
    sizes, checks, ready = [], {}, {}
    for new in args.new:

        def starter(side, worker, new=new, extra=lambda started: []):
            def start(started):
                cmd = [*common, "--worker", worker, "--size", str(new), *extra(started)]
                return TimedProcess(cmd, f"the {side} side, {new} tokens", env)

            return start

        starters = {
            side: starter(side, worker)
            for side, worker in (("ours", "ours"), ("reference", "torch"), ("nocache", "nocache"))
        }
        # the ceiling's feed-forward width is the model's (the ceiling knows the random LM only)
        starters["ceiling"] = (
            None
            if args.model != "lm"
            else starter(
                "ceiling",
                "ceiling",
                extra=lambda started: ["--d-ff", str(started["ours"].ready["d_ff"])],
            )
        )
        starters = {side: begin for side, begin in starters.items() if begin is not None}
        times, ready = time_sides(starters, args.rounds, args.pause)
        nocache = times.pop("nocache")
        entry = size_entry(str(new), f"generate {new} tokens", times)
        entry["without_cache"] = {"median_s": statistics.median(nocache), "times_s": nocache}
        entry["cache_speedup"] = entry["without_cache"]["median_s"] / entry["ours"]["median_s"]
        entry["ms_per_token"] = 1e3 * entry["ours"]["median_s"] / new
        sizes.append(entry)
        checks[f"identical_tokens_{new}"] = ready["ours"]["tokens"] == ready["nocache"]["tokens"]
        checks[f"same_tokens_as_torch_{new}"] = (
            ready["ours"]["tokens"] == ready["reference"]["tokens"]
        )
    res = result(
        "decoding",
        "Greedy generation with the key/value cache",
        {
            "model": args.model,
            "batch": args.batch,
            **ready["ours"]["sizes"],  # the model's own (for charlm and reverse, the trained one)
            "new_tokens": args.new,
            "dtype": "float32",
        },
        "PyTorch",
        sizes,
        unit="ms",
        checks=checks,
        machine=machine(
            {
                "ours": ready["ours"]["threads"],
                "reference": ready["reference"]["threads"],
                "ceiling": ready["ceiling"]["threads"] if "ceiling" in ready else None,
            },
            {"torch": ready["reference"]["torch"]},
        ),
        load={"before": load_before, "after": load_average()},
        command=command_line("bench_decoding.py", sys.argv[1:] if argv is None else argv),
        rounds=args.rounds,
    )
    sizes_of = ready["ours"]["sizes"]
    print(
        f"{args.model}: prompt of {sizes_of['prompt_tokens']} tokens, batch {args.batch}, "
        f"d_model {sizes_of['d_model']}, {sizes_of['layers']} layers, float32"
    )
    for e in sizes:
        new = e["size"]
        print(
            f"generate {new} tokens: with cache {e['ours']['median_s'] * 1e3:8.1f} ms, "
            f"without cache {e['without_cache']['median_s'] * 1e3:8.1f} ms; "
            f"speed-up of the cache: {e['cache_speedup']:.1f}x; "
            f"identical tokens: {checks[f'identical_tokens_{new}']}; "
            f"same tokens as PyTorch: {checks[f'same_tokens_as_torch_{new}']}"
        )
    report(res, args.json)
    return 0 if all(checks[k] for k in checks if k.startswith("identical")) else 1


if __name__ == "__main__":
    sys.exit(main())
