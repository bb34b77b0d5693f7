"""One LoRA fine-tuning step of SmolLM2-135M in NumPy against PyTorch + PEFT and the NumPy ceiling.

Workload (issue 27, item 5): a ``LlamaModel`` of SmolLM2-135M's sizes (vocabulary 49152,
d_model 576, 30 layers, 9 heads and 3 key/value heads, d_ff 1536, tied embeddings), float32,
random weights N(0, 0.02^2) (the same on both sides: the step's cost does not depend on the
values); LoRA with r = 8, alpha = 16 on the queries and values of every block, the rest frozen.
One step is: forward, the cross-entropy of the next tokens on the answer's tokens only (the
second half of every sequence; the prompt's targets are ignored, ``-100``), backward, one AdamW
update of the adapters (lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01), and the
gradients zeroed. Batches (``--sizes``): 2 sequences of 128 tokens and 1 of 256.

- **ours**: ``add_lora(LlamaModel(cfg), r=8, alpha=16, targets=("q", "v"))``,
  ``cross_entropy(..., ignore_index=-100)``, ``LlamaModel.backward``,
  ``Adam(lora_params(model), weight_decay=0.01)`` (AdamW). ``backward`` overwrites ``grads``
  (nothing accumulates), so there is nothing to zero.
- **PyTorch + PEFT**: ``get_peft_model(LlamaForCausalLM(config), LoraConfig(r=8,
  lora_alpha=16, target_modules=["q_proj", "v_proj"]))`` with our weights and our A matrices
  (B = 0 on both sides), transformers' default attention (``sdpa``), ``use_cache=False``,
  ``F.cross_entropy(..., ignore_index=-100)``, ``loss.backward()``,
  ``torch.optim.AdamW(trainable)``, ``zero_grad(set_to_none=True)``.
- **ceiling**: only the matrix products of the same step at their shapes, on the same BLAS
  threads, and one ``np.exp`` per attention score, per SwiGLU hidden element (SiLU) and per
  logit (see ``ceiling.py``); backward: the products for the gradient of every activation, and
  the weight-gradient products of the adapters only (none for a frozen weight).

Threads (``--threads``, default 1 and 2): every side gets the same number: PyTorch's
``set_num_threads``, and for NumPy the BLAS limit (threadpoolctl) and
``TRANSFORMER_NP_NUM_THREADS``, with the usual variables of OpenBLAS and OpenMP set in each
side's process.

Method: as ``bench_train_step.py``: each side in a process of its own, ``--warmup`` untimed
steps, then ``--rounds`` interleaved rounds of one step per side (``report.py``); medians,
"x PyTorch" = PyTorch time / our time (above 1: ours is faster) and ours / ceiling. The first
step's loss of both sides is checked to agree (same weights, same batch).

Memory (``--memory``, on by default): for each batch, each side once more in a **fresh
process** of its own: built (weights, adapters, optimiser, batch), then the kernel's peak
counter reset (``5`` to ``/proc/self/clear_refs``) and two steps run. Reported per side: the
resident memory before the steps (``rss_before_mib``: the weights, the libraries), the peak
resident memory during them (``peak_rss_mib``, ``VmHWM``: everything the process touched,
BLAS buffers and PyTorch's allocations included) and the difference (``step_rss_mib``: what the
steps add at their worst moment: activations kept for backward, logits and their gradient,
scratch). For ours also ``step_traced_mib``: the peak that ``tracemalloc`` sees during the same
two steps (every NumPy array and Python object allocated in them and alive at the worst
moment). PyTorch has no peak counter for CPU memory, so its figure is the RSS one; the two RSS
figures are measured the same way.

``--profile`` runs our step under cProfile in this process instead (``--size``, first of
``--sizes``, ``--threads`` first value) and prints the top costs.

Usage::

    python benchmarks/bench_finetune_step.py --json src/transformer_np/data/finetune_step.json
    python benchmarks/bench_finetune_step.py --size tiny --rounds 3       # a quick look
    python benchmarks/bench_finetune_step.py --profile --sizes 1x256 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_lora_memory import SIZES
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

# SmolLM2-135M's sizes and a tiny model: the memory benchmark's own.
MODELS = SIZES
R, ALPHA, TARGETS = 8, 16, ("q", "v")
LR, BETAS, EPS, WD = 1e-4, (0.9, 0.999), 1e-8, 0.01
IGNORE = -100
MIB = 2**20


def parse_size(text):
    b, t = text.lower().split("x")
    return int(b), int(t)


def status_kib(field):
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM (the peak) back to the current VmRSS


def batch(cfg, b, t):
    """ids (b, t) and the targets (b, t): the next tokens, the first half (the prompt) ignored."""
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.integers(0, cfg.vocab_size, (b, t + 1))
    ids, targets = x[:, :-1].copy(), x[:, 1:].copy()
    targets[:, : t // 2] = IGNORE  # the loss on the answer's tokens only
    return ids, targets


def our_model(args):
    """The LlamaModel with random weights drawn in place (float32, no float64 draw)."""
    import numpy as np

    from transformer_np import LlamaConfig, LlamaModel

    cfg = LlamaConfig(**MODELS[args.size], dtype="float32")
    model = LlamaModel(cfg, init=False)  # zero matrices, unit gains
    rng = np.random.default_rng(0)
    for name, p in model.params.items():
        if not name.endswith("gamma"):
            rng.standard_normal(out=p, dtype=p.dtype)
            p *= 0.02
    return model


def limit_threads(n):
    """NumPy's BLAS on ``n`` threads (the environment already says so; this makes it sure)."""
    from threadpoolctl import threadpool_limits

    if n:
        threadpool_limits(n)


# --------------------------------------------------------------------------------------------
# the sides
# --------------------------------------------------------------------------------------------


def ours_step_fn(args):
    """Build our side; returns (step, first loss, ready info)."""
    from transformer_np import Adam, cross_entropy
    from transformer_np.lora import add_lora, lora_params

    model = our_model(args)
    add_lora(model, r=R, alpha=ALPHA, targets=TARGETS, rng=0)
    model.train()
    opt = Adam(lora_params(model), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)  # AdamW
    ids, targets = batch(model.config, args.batch, args.length)
    losses = []

    def step():
        logits = model(ids)  # (B, T, V)
        loss, dlogits = cross_entropy(logits, targets, ignore_index=IGNORE)
        model.backward(dlogits)  # grads of the adapters only, overwritten
        opt.step(model.grads)
        losses.append(loss)

    info = {
        "trainable": int(sum(p.size for p in lora_params(model).values())),
        "parameters": model.num_parameters(),
    }
    return step, losses, info


def torch_step_fn(args):
    import gc

    import numpy as np
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers import LlamaForCausalLM

    from transformer_np.lora import add_lora, lora_layers, peft_path

    if args.threads_one:
        torch.set_num_threads(args.threads_one)
    torch.manual_seed(0)
    ours = our_model(args)  # the same weights, copied, then dropped
    add_lora(ours, r=R, alpha=ALPHA, targets=TARGETS, rng=0)  # the same A matrices
    c = ours.config
    hf_cfg = HFLlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff,
        num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads, max_position_embeddings=c.max_len,
        rms_norm_eps=c.eps, rope_parameters={"rope_type": "default", "rope_theta": c.rope_base},
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
    )  # fmt: skip
    hf = LlamaForCausalLM(hf_cfg).to(torch.float32)

    def put(param, array):
        param.copy_(torch.from_numpy(np.ascontiguousarray(array)))

    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}
    with torch.no_grad():
        put(hf.model.embed_tokens.weight, ours.params["embed.W"])
        put(hf.model.norm.weight, ours.params["blocks.norm.gamma"])
        for layer, block in zip(hf.model.layers, ours.blocks.layers, strict=True):
            p = block.params
            for k, n in names.items():
                put(getattr(layer.self_attn, n).weight, p[f"attn.W_{k}"].T)
            for k in ("gate", "up", "down"):
                put(getattr(layer.mlp, f"{k}_proj").weight, p[f"ff.W_{k}"].T)
            put(layer.input_layernorm.weight, p["norm1.gamma"])
            put(layer.post_attention_layernorm.weight, p["norm2.gamma"])
    model = get_peft_model(
        hf, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["q_proj", "v_proj"])
    )
    with torch.no_grad():
        for path, layer in lora_layers(ours).items():
            target = model.base_model.model.get_submodule(peft_path(path))
            put(target.lora_A["default"].weight, layer.params["lora_A"].T)
            put(target.lora_B["default"].weight, layer.params["lora_B"].T)
    ids, targets = (torch.from_numpy(a) for a in batch(c, args.batch, args.length))
    V = c.vocab_size
    del ours, layer, block, p
    gc.collect()
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    losses = []

    def step():
        out = model(input_ids=ids, use_cache=False)
        loss = F.cross_entropy(out.logits.reshape(-1, V), targets.reshape(-1), ignore_index=IGNORE)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())

    info = {
        "trainable": int(sum(p.numel() for p in trainable)),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "attention": hf.config._attn_implementation,
        "torch": torch.__version__,
        "threads_torch": torch.get_num_threads(),
    }
    return step, losses, info


def ceiling_ops(args):
    """The least NumPy work of one LoRA step (see the module docstring)."""
    from ceiling import mm

    c = MODELS[args.size]
    B, T, D, H, KV = args.batch, args.length, c["d_model"], c["n_heads"], c["n_kv_heads"]
    F, V, L = c["d_ff"], c["vocab_size"], c["n_layers"]
    Dh, G, M = D // H, H // KV, B * T
    fwd = []  # (op, needs the input's gradient, needs the second operand's gradient)
    for layer in range(L):
        p, first = f"L{layer}", layer == 0  # the first layer's input (the lookup) needs none
        fwd += [
            (mm("a", (M, D), f"{p}.Wq", (D, H * Dh)), not first, False),
            (mm("a", (M, D), f"{p}.Aq", (D, R)), not first, True),
            (mm("a", (M, R), f"{p}.Bq", (R, H * Dh)), True, True),
            (mm("a", (M, D), f"{p}.Wk", (D, KV * Dh)), not first, False),
            (mm("a", (M, D), f"{p}.Wv", (D, KV * Dh)), not first, False),
            (mm("a", (M, D), f"{p}.Av", (D, R)), not first, True),
            (mm("a", (M, R), f"{p}.Bv", (R, KV * Dh)), True, True),
            (mm("a", (B, KV, G * T, Dh), "b", (B, KV, Dh, T)), True, True),  # q k^T
            (("exp", B * H * T * T), False, False),
            (mm("a", (B, KV, G * T, T), "b", (B, KV, T, Dh)), True, True),  # weights @ v
            (mm("a", (M, H * Dh), f"{p}.Wo", (H * Dh, D)), True, False),
            (mm("a", (M, D), f"{p}.Wgu", (D, 2 * F)), True, False),  # gate and up
            (("exp", M * F), False, False),  # SiLU
            (mm("a", (M, F), f"{p}.Wd", (F, D)), True, False),
        ]
    fwd += [(mm("a", (M, D), "E", (D, V)), True, False), (("exp", M * V), False, False)]
    ops = [op for op, _, _ in fwd]
    for op, d_in, d_other in reversed(fwd):  # backward
        if op[0] != "mm":
            continue
        (_, sa), (kb, sb) = op[1], op[2]
        *lead, m, k = sa
        n = sb[-1]
        if d_in:
            ops.append(mm("g", (*lead, m, n), kb, (*sb[:-2], n, k)))  # dA = dY B^T
        if d_other:
            ops.append(mm("a", (*lead, k, m), "g", (*lead, m, n)))  # dB = A^T dY
    return ops


def worker(args):
    limit_threads(args.threads_one)
    if args.worker == "ceiling":
        from ceiling import Ceiling, flops

        ops = ceiling_ops(args)
        ceiling = Ceiling([ops])
        for _ in range(args.warmup):
            ceiling.run()
        ready = {"products": sum(op[0] == "mm" for op in ops), "gflop": flops(ops) / 1e9}
        return serve(ceiling.run, ready)
    make = ours_step_fn if args.worker == "ours" else torch_step_fn
    if args.memory_worker:
        return memory(make, args)
    step, losses, info = make(args)
    for _ in range(args.warmup):
        step()
    serve(step, {**info, "first_loss": losses[0] if losses else None})


def memory(make, args):
    """Peak memory of two steps in this fresh process; one JSON line."""
    import tracemalloc

    step, losses, info = make(args)
    rss_before = status_kib("VmRSS") / 1024
    reset_peak_rss()
    traced = args.worker == "ours"
    if traced:
        tracemalloc.start()
    for _ in range(2):
        step()
    out = {"rss_before_mib": rss_before, "peak_rss_mib": status_kib("VmHWM") / 1024}
    out["step_rss_mib"] = out["peak_rss_mib"] - rss_before
    if traced:
        out["step_traced_mib"] = tracemalloc.get_traced_memory()[1] / MIB
        tracemalloc.stop()
    print(json.dumps({**info, **out, "loss": losses[0]}), flush=True)


# --------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------


def worker_cmd(which, args, b, t, threads, memory_run=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", which, "--size", args.size]
    cmd += ["--warmup", str(args.warmup), "--batch", str(b), "--length", str(t)]
    cmd += ["--threads-one", str(threads)] + (["--memory-worker"] if memory_run else [])
    return cmd


def measure_memory(args, b, t, threads):
    out = {}
    for which in ("ours", "torch"):
        run = subprocess.run(
            worker_cmd(which, args, b, t, threads, memory_run=True),
            env=worker_env(threads), capture_output=True, text=True,
        )  # fmt: skip
        if run.returncode:
            raise RuntimeError(f"the {which} memory run failed:\n{run.stderr[-3000:]}")
        out["ours" if which == "ours" else "reference"] = json.loads(run.stdout.splitlines()[-1])
    return out


def profile(args):
    import cProfile
    import pstats

    args.batch, args.length = parse_size(args.sizes[0])
    args.threads_one = args.threads[0]
    os.environ.update(dict.fromkeys(("TRANSFORMER_NP_NUM_THREADS",), str(args.threads_one)))
    limit_threads(args.threads_one)
    step, _, _ = ours_step_fn(args)
    step()  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.profile_steps):
        step()
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    print(f"our step, {args.size} sizes, {args.batch} x {args.length} tokens, "
          f"{args.threads_one} thread(s): {1e3 * total / args.profile_steps:.0f} ms per step "
          f"under cProfile, {args.profile_steps} steps")  # fmt: skip
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[: args.top]
    print(f"{'own ms/step':>12} {'share':>6} {'calls/step':>10}  function")
    for (file, line, name), (_, ncalls, tt, _, _) in rows:
        where = f"{os.path.relpath(file) if file.startswith('/') else file}:{line}({name})"
        print(f"{1e3 * tt / args.profile_steps:12.1f} {tt / total:6.1%} "
              f"{ncalls / args.profile_steps:10.0f}  {where}")  # fmt: skip
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(MODELS), default="smollm2", help="model sizes")
    p.add_argument("--sizes", nargs="+", default=["2x128", "1x256"], help="batches, B x T")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="threads per side")
    p.add_argument("--warmup", type=int, default=2)
    add_rounds_argument(p, 7, "interleaved rounds (one step each)")
    p.add_argument("--pause", type=float, default=0.2, help="seconds before each side's turn")
    p.add_argument("--no-memory", dest="memory", action="store_false",
                   help="skip the peak-memory runs")  # fmt: skip
    p.add_argument("--profile", action="store_true", help="cProfile our step, print top costs")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--json", metavar="PATH", help="write the results (shared schema) here")
    p.add_argument("--worker", choices=["ours", "torch", "ceiling"], help=argparse.SUPPRESS)
    p.add_argument("--memory-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, default=256, help=argparse.SUPPRESS)
    p.add_argument("--threads-one", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.profile:
        return profile(args)

    def make_result(complete):
        cfg = MODELS[args.size]
        res = result(
            "finetune_step",
            "One LoRA fine-tuning step, SmolLM2-135M sizes",
            {
                "model": f"LlamaModel, {args.size} sizes",
                **cfg,
                "dtype": "float32",
                "lora": {"r": R, "alpha": ALPHA, "targets": ["q_proj", "v_proj"]},
                "optimizer": {
                    "name": "AdamW",
                    "lr": LR,
                    "betas": list(BETAS),
                    "eps": EPS,
                    "weight_decay": WD,
                },
                "loss": "cross-entropy on the second half of every sequence (the answer)",
                "batches": args.sizes,
                "threads": args.threads,
                "parameters": {
                    "ours": infos["ours"]["parameters"],
                    "torch": infos["reference"]["parameters"],
                },
                "trainable": {
                    "ours": infos["ours"]["trainable"],
                    "torch": infos["reference"]["trainable"],
                },
                "ceiling_products": infos["ceiling"]["products"],
                "torch_attention": infos["reference"]["attention"],
            },  # fmt: skip
            "PyTorch",
            entries,
            unit="ms",
            checks={
                "same_trainable_count": infos["ours"]["trainable"]
                == infos["reference"]["trainable"],
                "first_loss_rel_diff_max": max(e["loss_rel_diff"] for e in entries),
            },
            machine=machine(
                {
                    "ours": "BLAS = transformer_np = the size's threads",
                    "reference": "torch.set_num_threads = the size's threads",
                    "ceiling": "BLAS = the size's threads",
                },
                {"torch": infos["reference"]["torch"]},
            ),  # fmt: skip
            load={"before": load_before, "after": load_average()},
            command=command_line("bench_finetune_step.py", argv),
            rounds=args.rounds,
        )
        res["complete"] = complete  # False: saved after a workload, more to come
        return res

    load_before = load_average()
    entries, loads, infos = [], [], {}
    for threads in args.threads:
        for text in args.sizes:
            b, t = parse_size(text)
            starters = {
                side: (lambda _, w=which, b=b, t=t, n=threads: TimedProcess(
                    worker_cmd(w, args, b, t, n), f"the {w} side", worker_env(n)))
                for side, which in (("ours", "ours"), ("reference", "torch"),
                                    ("ceiling", "ceiling"))
            }  # fmt: skip
            before = load_average()
            times, ready = time_sides(starters, args.rounds, args.pause)
            mem = measure_memory(args, b, t, threads) if args.memory else None
            loss_ours, loss_torch = ready["ours"]["first_loss"], ready["reference"]["first_loss"]
            label = f"{b} x {t} tokens, {threads} thread" + ("s" if threads > 1 else "")
            entries.append(size_entry(
                f"{b}x{t}_{threads}t", label, times, batch=b, length=t, threads=threads,
                first_loss={"ours": loss_ours, "reference": loss_torch},
                loss_rel_diff=abs(loss_ours - loss_torch) / abs(loss_torch),
                memory=mem, load={"before": before, "after": load_average()},
            ))  # fmt: skip
            infos = ready
            print(f"{label}: ours {1e3 * entries[-1]['ours']['median_s']:.0f} ms, PyTorch "
                  f"{1e3 * entries[-1]['reference']['median_s']:.0f} ms, x PyTorch "
                  f"{entries[-1]['x_reference']:.2f}, first loss ours {loss_ours:.6f} "
                  f"torch {loss_torch:.6f}", flush=True)  # fmt: skip
            loads.append(before)
            if args.json:  # saved after every workload: a long run keeps what it measured
                Path(args.json).write_text(json.dumps(make_result(False), indent=1) + "\n")
    res = make_result(True)
    print(f"one LoRA fine-tuning step (r {R}, alpha {ALPHA}, q and v), {args.size} sizes, "
          f"float32; trainable {infos['ours']['trainable']:,} of "
          f"{infos['ours']['parameters']:,} (ours), {infos['reference']['trainable']:,} "
          f"(PEFT); PyTorch attention: {infos['reference']['attention']}")  # fmt: skip
    report(res, args.json)
    spread = "spread (min-max of the rounds), ms"
    print(f"{'workload':28s} {spread:>40s}")
    for e in entries:
        rng = {s: (1e3 * min(e[s]["times_s"]), 1e3 * max(e[s]["times_s"]))
               for s in ("ours", "reference")}  # fmt: skip
        print(f"{e['label']:28s} ours {rng['ours'][0]:.0f}-{rng['ours'][1]:.0f}, "
              f"PyTorch {rng['reference'][0]:.0f}-{rng['reference'][1]:.0f}")  # fmt: skip
    if args.memory:
        print(
            "peak memory of two steps, each side in a fresh process (MiB): RSS before the "
            "steps / peak RSS / the steps' increase; ours also the tracemalloc peak"
        )
        for e in entries:
            o, r = e["memory"]["ours"], e["memory"]["reference"]
            print(f"{e['label']:28s} ours {o['rss_before_mib']:.0f} / {o['peak_rss_mib']:.0f} "
                  f"/ +{o['step_rss_mib']:.0f} (traced {o['step_traced_mib']:.0f}); PyTorch "
                  f"{r['rss_before_mib']:.0f} / {r['peak_rss_mib']:.0f} / "
                  f"+{r['step_rss_mib']:.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
