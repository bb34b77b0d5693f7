"""Where the milliseconds go: a per-operation profile of one workload, ours and PyTorch's.

The workloads are the benchmarks' own (the same model, batch and threads, built by the same
worker functions): ``train-lm`` and ``train-seq2seq`` (one training step,
``bench_train_step.py``) and ``minilm`` (one ``encode`` of 32 sentences, ``bench_minilm.py``).
Each worker ends by handing its timed call to ``timed_calls.serve``; this script hands it to a
profiler instead:

* ours: ``cProfile``, reported per function of ``transformer_np`` by its self time (a function
  of the package is one operation: ``Linear.forward`` is its matrix product and bias,
  ``gelu_range32`` the GELU kernel, ``softmax_inplace`` the softmax...), the NumPy calls made
  by operators counted in the function that makes them;
* PyTorch: ``torch.profiler``, reported per ATen operator by its self CPU time.

Both as milliseconds per call and share of the total. Profilers add their own overhead (cProfile
about a microsecond per Python call), so the totals are above the benchmarks' timings: read the
shares, and the benchmarks for the times. Usage::

    .venv/bin/python benchmarks/profile_ops.py train-lm
    .venv/bin/python benchmarks/profile_ops.py minilm --ref-python .venv-ref/bin/python
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import inspect
import json
import os
import pstats
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WORKLOADS = ("train-lm", "train-seq2seq", "minilm")


class _Done(Exception):
    """Raised by the profiling ``serve`` to leave the worker once the profile is taken."""


def _profile_ours(fn, calls: int) -> list[dict]:
    """Self time per function of transformer_np (and NumPy's own Python functions)."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    names = _qualnames()
    stats = pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    total = sum(entry[2] for entry in stats.values())
    rows = []
    for (file, line, name), (_, ncalls, tottime, _, _) in stats.items():
        label = names.get((file, line))
        if label is None:
            label = name if file == "~" else f"{Path(file).name}:{name}"
        rows.append({"op": label, "calls": ncalls / calls, "ms": 1e3 * tottime / calls})
    return _rows(rows, 1e3 * total / calls)


def _qualnames() -> dict[tuple[str, int], str]:
    """``(file, first line) -> module.qualname`` for every function and method of the package."""
    names = {}
    for mod_name, module in list(sys.modules.items()):
        if not mod_name.startswith("transformer_np") or module is None:
            continue
        short = mod_name.removeprefix("transformer_np.")
        for obj in vars(module).values():
            members = [obj]
            if inspect.isclass(obj):
                members = [m for m in vars(obj).values() if inspect.isfunction(m)]
            for fn in members:
                code = getattr(fn, "__code__", None)
                if code is not None and getattr(fn, "__module__", None) == mod_name:
                    names[(code.co_filename, code.co_firstlineno)] = f"{short}.{fn.__qualname__}"
    return names


def _profile_torch(fn, calls: int) -> list[dict]:
    """Self CPU time per ATen operator."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    events = prof.key_averages()
    rows = [
        {"op": e.key, "calls": e.count / calls, "ms": e.self_cpu_time_total / 1e3 / calls}
        for e in events
    ]
    return _rows(rows, sum(r["ms"] for r in rows))


def _rows(rows: list[dict], total_ms: float) -> list[dict]:
    rows = [r for r in rows if r["ms"] > 0]
    rows.sort(key=lambda r: -r["ms"])
    for r in rows:
        r["share"] = r["ms"] / total_ms if total_ms else 0.0
    return [{"op": "total", "calls": 1, "ms": total_ms, "share": 1.0}, *rows]


def _worker(
    workload: str, side: str, calls: int, warmup: int, threads: int, blas: str = "one"
) -> list[dict]:
    """Run the benchmark's own worker for ``side``; its served call is profiled, not timed."""
    bench = importlib.import_module("bench_minilm" if workload == "minilm" else "bench_train_step")
    profiled = {}

    def serve(fn, ready):
        fn()  # one more warm-up call outside the profile
        profile = _profile_torch if side == "torch" else _profile_ours
        profiled["rows"] = profile(fn, calls)
        raise _Done

    bench.serve = serve
    try:
        if workload == "minilm":
            if side == "torch":
                bench.torch_worker(warmup, threads)
            else:
                bench.ours_worker(warmup)
        else:
            args = argparse.Namespace(
                model=workload.removeprefix("train-"),
                warmup=warmup,
                numpy_blas_threads=blas,
                torch_threads=threads,
            )
            (bench.worker_torch if side == "torch" else bench.worker_numpy)(args)
    except _Done:
        return profiled["rows"]
    raise RuntimeError(f"the {side} worker of {workload} never served its call")


def table(title: str, rows: list[dict], top: int) -> str:
    lines = [
        f"### {title}",
        "",
        "| operation | calls per run | ms per run | share |",
        "|---|---|---|---|",
    ]
    for r in rows[: top + 1]:
        lines.append(f"| {r['op']} | {r['calls']:g} | {r['ms']:.2f} | {100 * r['share']:.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload", choices=WORKLOADS)
    p.add_argument("--calls", type=int, default=20, help="profiled calls (default 20)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="threads for every side (default 2)")
    p.add_argument("--top", type=int, default=15, help="rows of each table")
    p.add_argument(
        "--numpy-blas-threads",
        choices=["one", "default"],
        default="one",
        help="our BLAS threads in the training step, as in bench_train_step.py (default one)",
    )
    p.add_argument(
        "--ref-python", default=None, help="Python with sentence-transformers (for minilm)"
    )
    p.add_argument("--side", choices=["ours", "torch"], default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:  # a worker process: print the rows as JSON
        rows = _worker(
            args.workload, args.side, args.calls, args.warmup, args.threads, args.numpy_blas_threads
        )
        print(json.dumps(rows))
        return 0
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    env["TRANSFORMER_NP_NUM_THREADS"] = str(args.threads)
    out = []
    for side in ("ours", "torch"):
        python = (
            args.ref_python if side == "torch" and args.workload == "minilm" else sys.executable
        )
        if python is None:
            p.error("minilm needs --ref-python (a Python with sentence-transformers)")
        cmd = [python, __file__, args.workload, "--side", side, "--calls", str(args.calls)]
        cmd += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
        cmd += ["--numpy-blas-threads", args.numpy_blas_threads]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"the {side} profile failed:\n{proc.stderr}")
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        name = (
            "ours (cProfile, self time per function)"
            if side == "ours"
            else ("PyTorch (torch.profiler, self CPU time per operator)")
        )
        out.append(table(f"{args.workload}: {name}", rows, args.top))
    print(f"{args.workload}, {args.calls} calls per side, {args.threads} threads per side\n")
    print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
