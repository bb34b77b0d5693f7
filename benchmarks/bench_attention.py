"""Benchmark attention in NumPy against PyTorch's CPU scaled_dot_product_attention.

Workload (issue 6): float32, batch 1, 8 heads, d_head 64, n = 512, 1024, 2048, 4096, and
n = 16384 for the memory-efficient versions. Implementations:

- ``naive``     the textbook vectorised NumPy: softmax(q k^T / sqrt(d)) v, one thread, new
                arrays at every step (what plain NumPy gives before any care);
- ``sdpa``      ``transformer_np.scaled_dot_product_attention`` (returns the weights too);
- ``sdpa_nw``   the same with ``need_weights=False`` (the output only, as PyTorch's);
- ``blockwise`` ``transformer_np.blockwise_attention`` (online softmax, no n x n matrix);
- ``products``  not attention: only its two matrix products, q k^T and (scores) v, in the
                chunks of rows and threads of ``sdpa_nw`` (see :func:`_products_only`). No NumPy
                attention can be faster than its own products: the ceiling if exp were free;
- ``products_exp`` not attention either: the same two products with ``np.exp`` applied in
                place to every score between them (no maximum, no sums, no division). Every
                NumPy softmax attention does at least this much work: its time is the floor
                of NumPy attention on this machine, measured instead of estimated;
- ``torch``     ``torch.nn.functional.scaled_dot_product_attention`` on CPU.

Method
------
Every implementation runs in a fresh Python process of its own (this script re-invokes itself
with ``--worker``), so PyTorch's and OpenBLAS's thread pools never share a process and no
measurement inherits the memory of another. For each n the driver starts one worker per
implementation, plus one for the matrix-product peak, one after the other.

- **Peak extra memory**: measured first thing in each fresh worker. It creates the inputs,
  makes one small call (so that OpenBLAS/PyTorch allocate their thread buffers and load their
  code), resets the kernel's peak-RSS counter (writing ``5`` to ``/proc/self/clear_refs``),
  reads the resident memory ``VmRSS``, makes one call and reads the peak ``VmHWM``. Extra
  memory = peak - resident before the call. This counts every page the process touched, BLAS
  buffers included (``tracemalloc`` does not see those), and includes the result arrays (the
  output, and for ``sdpa`` the returned weights).
- **Time**: after ``--warmup`` calls (the memory call is the first; one only at n > 4096), the
  workers are timed in *interleaved rounds*: in each round every worker makes one call in turn
  (the order rotates, with a ``--pause`` before each call so the previous process's threads go
  idle) while the others wait. Noise from other processes on a shared machine then hits every
  implementation alike. At least ``--reps`` rounds, and more until ``--min-time`` seconds
  have passed (fast sizes: many short calls, whose medians need more rounds to settle), up to
  ``--max-reps``; fewer once ``--budget`` seconds have passed (at least 3). Reported: the
  median time; "x PyTorch" = PyTorch's median time / ours (above 1 = ours is faster), and
  ours / ceiling = the median time of ``sdpa_nw`` / that of ``products_exp``. The JSON also
  holds these in the schema shared by every benchmark (``sizes``, see ``report.py``).
- **FLOPs** count the two matrix products only: ``4 n^2 d`` per head (``2 n^2 d`` for q k^T
  and as many for the weights times v). **% of peak** divides by a float32 2048 x 2048 NumPy
  matrix product (``2 n^3`` FLOPs) timed in the same rounds.
- **Where the time goes**: at the size closest to 2048, a separate worker times each step of
  the chunked path of ``scaled_dot_product_attention(..., need_weights=False)`` on one core
  with ``time.thread_time`` (see :func:`profile_steps`): the fractions of CPU time and the cost
  of ``np.exp`` per element.
- **Too big to run**: ``sdpa`` and ``naive`` at n = 16384 need 8.6 GB of scores (more for
  ``naive``). They run only if ``MemAvailable`` exceeds their estimated need; otherwise their
  time and memory are *extrapolated* from the largest measured n (both scaled by (n / n_0)^2:
  at n_0 = 4096 the n^2 terms already dominate) and marked as extrapolated.

Usage::

    python benchmarks/bench_attention.py                     # full run, ~10 minutes
    python benchmarks/bench_attention.py --quick             # smoke run, tiny sizes
    python benchmarks/bench_attention.py --out results/x.json

Writes ``<out>.json`` (all numbers and the machine; by default
``src/transformer_np/data/attention.json``, package data that the site's page reads, also from an
installed wheel), and ``<tables>.md`` and ``<tables>.it.md`` (the table, in English and Italian)
and ``<tables>.svg`` (the plot, drawn by the site's figure module
``figures/efficient_attention_benchmark.py``), and prints the table. ``<tables>`` is
``benchmarks/results/attention`` by default, and next to ``--out`` when only ``--out`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from report import SCHEMA, header, size_entry
from report import table as table_of
from timed_calls import TimedProcess, cpu_model, serve, worker_env

HERE = Path(__file__).resolve().parent
# The results the site reads are package data (one copy, read in the repository and from a wheel);
# the plot made from them stays here (the results page's tables: write_results_page.py).
DEFAULT_OUT = HERE.parent / "src" / "transformer_np" / "data" / "attention.json"
DEFAULT_PLOT = HERE / "results" / "attention.svg"
IMPLS = ("naive", "sdpa", "sdpa_nw", "blockwise", "products", "products_exp", "torch")
# measured at every big n: they do not hold the n x n matrix (products: one chunk per thread)
BIG_ONLY = ("sdpa_nw", "blockwise", "products", "products_exp", "torch")
HEADS, D_HEAD = 8, 64


# --------------------------------------------------------------------------------------------
# Worker side: one measurement in this (fresh) process
# --------------------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _make_call(impl: str, n: int, tile_size: int | None):
    """Inputs of shape (1, 8, n, 64) float32 and a zero-argument callable running ``impl``."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (1, HEADS, n, D_HEAD)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    if impl == "torch":
        import torch

        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def call():
            with torch.no_grad():
                return sdpa(tq, tk, tv)

        return call
    if impl == "naive":

        def call():
            s = q @ k.swapaxes(-1, -2) / np.float32(np.sqrt(D_HEAD))
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            w = e / e.sum(axis=-1, keepdims=True)
            return w @ v, w

        return call
    if impl == "sdpa":
        from transformer_np import scaled_dot_product_attention

        return lambda: scaled_dot_product_attention(q, k, v)
    if impl == "sdpa_nw":
        from transformer_np import scaled_dot_product_attention

        return lambda: scaled_dot_product_attention(q, k, v, need_weights=False)
    if impl == "products":
        return lambda: _products_only(q, k, v)
    if impl == "products_exp":
        q_scaled = q / np.float32(np.sqrt(D_HEAD))  # the scores of attention, scaled once here
        return lambda: _products_only(q_scaled, k, v, with_exp=True)
    if impl == "blockwise":
        from transformer_np.blockwise import blockwise_attention

        kwargs = {} if tile_size is None else {"tile_size": tile_size}
        return lambda: blockwise_attention(q, k, v, **kwargs)
    if impl == "matmul":
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        return lambda: a @ b
    raise ValueError(f"unknown implementation {impl!r}")


def _nw_chunks(n: int):
    """The chunks of rows of ``scaled_dot_product_attention(..., need_weights=False)`` at n."""
    from transformer_np._kernels.attention import row_chunks_of_scores

    # (one chunk, the whole array, for sizes the package does not split)
    return row_chunks_of_scores((1, HEADS), n, n, 4, need_weights=False) or [
        ((0, slice(None)), slice(None))
    ]


def _products_only(q, k, v, *, with_exp=False):
    """The two matrix products of attention and nothing else, as the package lays them out.

    The chunks of query rows and the threads of ``scaled_dot_product_attention(...,
    need_weights=False)``, one buffer per thread, one OpenBLAS thread per product: the time
    that any NumPy attention spends at least, with an ``exp`` that would cost nothing. With
    ``with_exp``, ``np.exp`` is also applied in place to every chunk of scores between the two
    products: the least work of any NumPy attention with a softmax.
    """
    import numpy as np

    from transformer_np._kernels.attention import thread_buffer
    from transformer_np._kernels.threads import parallel_for

    n = q.shape[-2]
    out = np.empty(q.shape[:-1] + (v.shape[-1],), q.dtype)
    buffers = {}

    def one_chunk(chunk):
        items, rows = chunk
        q_chunk = q[items][..., rows, :]
        scores = thread_buffer(buffers, q_chunk.shape[:-1] + (n,), q.dtype)
        np.matmul(q_chunk, k[items].swapaxes(-1, -2), out=scores)
        if with_exp:
            np.exp(scores, out=scores)
        np.matmul(scores, v[items], out=out[items][..., rows, :])

    parallel_for(one_chunk, _nw_chunks(n), one_blas_thread=True)
    return out


def profile_steps(n: int, reps: int = 3) -> dict:
    """CPU time of each step of ``scaled_dot_product_attention(..., need_weights=False)``.

    The chunks of the package's chunked path, one thread, one OpenBLAS thread; each step timed
    with ``time.thread_time`` (CPU time of this thread, less sensitive than wall time to other
    processes sharing the machine). Median over ``reps`` calls. The inputs of the benchmark
    have small scores, so the package skips the row maximum: so do these steps.
    """
    import math

    import numpy as np

    from transformer_np._kernels.attention import scores_are_bounded, thread_buffer
    from transformer_np._kernels.threads import blas_single_threaded

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, HEADS, n, D_HEAD), dtype=np.float32) for _ in range(3))
    assert scores_are_bounded(q, k, v, None)
    output = np.empty((1, HEADS, n, D_HEAD), np.float32)
    scale = np.float32(1 / math.sqrt(D_HEAD))
    ones = np.ones(n, np.float32)
    names = ["1. q k^T", "4. exp", "4. row sums", "5. w v", "5. divide"]
    chunks = _nw_chunks(n)
    buffers = {}
    runs = []
    with blas_single_threaded():
        for _ in range(reps + 1):  # the first run, which also maps the memory, is not counted
            spent = dict.fromkeys(names, 0.0)
            for items, rows in chunks:
                qb, kb, vb = q[items][..., rows, :], k[items], v[items]
                o = output[items][..., rows, :]
                s = thread_buffer(buffers, qb.shape[:-1] + (n,), np.float32)
                t0 = time.thread_time()
                np.matmul(qb * scale, kb.swapaxes(-1, -2), out=s)
                t1 = time.thread_time()
                np.exp(s, out=s)
                t2 = time.thread_time()
                total = np.matmul(s, ones)[..., None]
                total[total == 0] = 1
                t3 = time.thread_time()
                np.matmul(s, vb, out=o)
                t4 = time.thread_time()
                o /= total
                t5 = time.thread_time()
                for name, dt in zip(names, np.diff([t0, t1, t2, t3, t4, t5]), strict=True):
                    spent[name] += dt
            runs.append(spent)
    runs = runs[1:]
    median = {name: statistics.median(r[name] for r in runs) for name in names}
    total = sum(median.values())
    return {
        "n": n,
        "core_seconds": total,
        "fraction": {name: t / total for name, t in median.items()},
        "exp_ns_per_element": median["4. exp"] / (HEADS * n * n) * 1e9,
    }


def worker(args) -> None:
    """Serve one implementation at one n: memory first, then one timed call per request.

    Prints one JSON line when ready (with the peak extra memory), then for every line ``run``
    read from stdin makes one call and prints its time; stops at ``quit`` or end of input.
    """
    impl, n = args.impl, args.n
    if impl == "steps":
        print(json.dumps(profile_steps(n)), flush=True)
        return
    # 1. Memory, first thing in this fresh process. Let the libraries allocate their buffers and
    #    thread pools on a small problem, then count the pages one call touches.
    _make_call(impl, 64, args.tile_size)()
    call = _make_call(impl, n, args.tile_size)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM (the peak) to the current VmRSS
    before = _status_kib("VmRSS")
    out = call()
    ready = {"impl": impl, "n": n, "peak_extra_bytes": (_status_kib("VmHWM") - before) * 1024}
    del out
    # 2. Warm-up (the call above was the first one).
    for _ in range(max(0, args.warmup - 1)):
        call()
    if impl == "torch":
        import torch

        ready["threads"] = torch.get_num_threads()
    # 3. Timed calls, on request, so the driver can interleave the implementations.
    serve(call, ready)


# --------------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------------


class Worker(TimedProcess):
    """A fresh process serving one implementation at one n (see :func:`worker`)."""

    def __init__(self, impl: str, n: int, args):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", impl, str(n)]
        cmd += ["--warmup", str(args.warmup if n <= 4096 else 1)]
        if args.tile_size is not None:
            cmd += ["--tile-size", str(args.tile_size)]
        super().__init__(cmd, f"worker {impl} n={n}", worker_env())


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def machine_info() -> dict:
    import numpy as np

    cpu = cpu_model()
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # noqa: BLE001 - informative only
        blas = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        mem = 0
    info = {
        "cpu": cpu,
        "cores_available": len(os.sched_getaffinity(0)),
        "memory_gb": round(mem / 1e9, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "loadavg_start": os.getloadavg(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    return info


def gflops(n: int, seconds: float) -> float:
    return 4 * n * n * D_HEAD * HEADS / seconds / 1e9


def estimated_need(impl: str, n: int) -> int:
    """Bytes the full (n x n) versions need at n: scores (x2 for naive's temporaries), x1.2."""
    scores = HEADS * n * n * 4
    return int(scores * (3 if impl == "naive" else 1) * 1.2)


def measure_at(n: int, impls: list[str], args) -> dict[str, dict]:
    """Memory and interleaved timings of ``impls`` (and the matmul peak) at one n.

    One fresh worker per implementation, started one after the other (so that their memory
    measurements and warm-ups do not overlap); then rounds in which each worker in turn makes
    one call while the others wait. Noise from other processes on a shared machine then hits
    every implementation alike, and each round gives a ratio between two calls made a few
    seconds apart.
    """
    workers = {}
    try:
        for impl in ["matmul"] + impls:
            try:
                workers[impl] = Worker(impl, args.peak_n if impl == "matmul" else n, args)
            except RuntimeError as exc:
                print(f"# {exc}", file=sys.stderr)
        times = {impl: [] for impl in workers}
        start = time.perf_counter()
        for r in range(args.max_reps):
            order = list(workers)
            order = order[r % len(order) :] + order[: r % len(order)]  # rotate who goes first
            for impl in order:
                time.sleep(args.pause)  # let the previous process's threads go idle
                times[impl].append(workers[impl].time_one_call())
            elapsed = time.perf_counter() - start
            if r >= 2 and elapsed > args.budget:
                break  # slow sizes: 3 rounds are enough
            if r + 1 >= args.reps and elapsed >= args.min_time:
                break
    finally:
        for w in workers.values():
            w.close()
    return {impl: {**workers[impl].ready, "times": times[impl]} for impl in workers}


def _ratio(num: list[float], den: list[float]) -> float:
    """median(num) / median(den): how many times faster ``den`` is than ``num``."""
    return statistics.median(num) / statistics.median(den)


def summary(res: dict) -> dict:
    """The shared schema of every benchmark (see report.py) from the rows of ``res``.

    Per n: ours = ``sdpa`` with the output only (what PyTorch's SDPA returns), the reference =
    PyTorch, the ceiling = ``products_exp`` (the two products and one exp per score).
    """
    sizes = []
    for n in sorted({r["n"] for r in res["rows"]}):
        rows = {r["impl"]: r for r in res["rows"] if r["n"] == n and r["measured"]}
        times = {
            side: rows[impl]["times"]
            for side, impl in (
                ("ours", "sdpa_nw"),
                ("reference", "torch"),
                ("ceiling", "products_exp"),
            )
            if impl in rows
        }
        if "ours" in times:
            sizes.append(size_entry(str(n), f"n = {n}", times))
    m = res["machine"]
    m.setdefault("cores", os.cpu_count())
    m.setdefault("arch", platform.machine())
    m["threads"] = {
        "ours": f"transformer_np {m['cores_available']}, BLAS 1 per product",
        "reference": f"torch {res.get('torch_threads') or m['cores_available']}",
        "ceiling": f"transformer_np {m['cores_available']}, BLAS 1 per product",
    }
    return {
        "schema": SCHEMA,
        "benchmark": "attention",
        "title": "Attention, output only (float32, batch 1, 8 heads, d_head 64)",
        "reference": "PyTorch",
        "unit": "ms",
        "sizes": sizes,
        "checks": {},
        "load": {
            "before": [round(x, 2) for x in m["loadavg_start"]],
            "after": [round(x, 2) for x in m["loadavg_end"]],
        },
        "date": m["date"],
        "command": res["settings"]["command"].replace("python ", ".venv/bin/python ", 1),
        "rounds": min((len(e["ours"]["times_s"]) for e in sizes), default=0),
    }


def drive(args) -> dict:
    sizes = args.sizes
    big = [n for n in sizes if n > 4096]
    info = machine_info()
    print(
        f"# machine: {info['cpu']}, {info['cores_available']} cores, numpy {info['numpy']} "
        f"({info['blas']}), torch {info['torch']}",
        file=sys.stderr,
    )
    rows, peaks, torch_threads = [], [], None
    for n in sizes:
        impls = []
        for impl in args.impls:
            if n in big and impl not in BIG_ONLY:
                if not args.full_big or estimated_need(impl, n) > mem_available():
                    continue  # not run: extrapolated below
            impls.append(impl)
        res = measure_at(n, impls, args)
        torch_threads = res.get("torch", {}).get("threads", torch_threads)
        mm = res.pop("matmul")
        peak = 2 * args.peak_n**3 / statistics.median(mm["times"]) / 1e9
        peaks.append({"n": n, "gflops": peak, "times": mm["times"]})
        for impl, r in res.items():
            row = {"impl": impl, "n": n, "measured": True, "times": r["times"]}
            row["median_s"] = statistics.median(r["times"])
            row["peak_extra_bytes"] = r["peak_extra_bytes"]
            row["gflops"] = gflops(n, row["median_s"])
            row["pct_peak"] = 100 * row["gflops"] / peak  # of the peak measured at this n
            if "torch" in res:
                row["vs_torch"] = _ratio(res["torch"]["times"], r["times"])
            if "sdpa" in res:
                row["vs_sdpa"] = _ratio(res["sdpa"]["times"], r["times"])
            rows.append(row)
            print(
                f"# {impl:9s} n={n:5d}: {row['median_s'] * 1e3:9.1f} ms, "
                f"{row['gflops']:6.1f} GFLOP/s, {row['peak_extra_bytes'] / 2**20:8.1f} MiB"
                + (f", {row['vs_torch']:.2f} x torch" if "vs_torch" in row else ""),
                file=sys.stderr,
            )
        print(f"# n={n}: float32 {args.peak_n}^2 matmul {peak:.1f} GFLOP/s", file=sys.stderr)

    # Extrapolate the n x n versions to the big sizes from their largest measured n.
    for n in big:
        for impl in args.impls:
            if any(r["impl"] == impl and r["n"] == n for r in rows):
                continue
            base = [r for r in rows if r["impl"] == impl and r["measured"]]
            if not base:
                continue
            b = max(base, key=lambda r: r["n"])
            f = (n / b["n"]) ** 2
            row = {
                "impl": impl,
                "n": n,
                "measured": False,
                "extrapolated_from": b["n"],
                "median_s": b["median_s"] * f,
                "gflops": b["gflops"],
                "pct_peak": b["pct_peak"],
                "peak_extra_bytes": int(b["peak_extra_bytes"] * f),
                "times": [],
            }
            same_n = {r["impl"]: r for r in rows if r["n"] == n and r["measured"]}
            if "torch" in same_n:
                row["vs_torch"] = same_n["torch"]["median_s"] / row["median_s"]
            rows.append(row)
    for row in rows:  # the extrapolated full version as the reference of its n
        ref = next((r for r in rows if r["n"] == row["n"] and r["impl"] == "sdpa"), None)
        if ref is not None and not ref["measured"]:
            row["vs_sdpa"] = ref["median_s"] / row["median_s"]

    # Where the time of the full version goes, step by step, at the size closest to 2048.
    n_steps = min(sizes, key=lambda n: abs(n - 2048))
    steps = None
    if "sdpa" in args.impls:
        try:
            w = Worker("steps", n_steps, args)
            steps = w.ready
            w.close()
        except RuntimeError as exc:
            print(f"# {exc}", file=sys.stderr)

    info["loadavg_end"] = os.getloadavg()
    overall = statistics.median(p["gflops"] for p in peaks)
    return {
        "workload": {
            "batch": 1,
            "heads": HEADS,
            "d_head": D_HEAD,
            "dtype": "float32",
            "flops_per_call": "4 * n^2 * d_head * heads",
        },
        "settings": {
            "command": " ".join(["python", "benchmarks/bench_attention.py"] + sys.argv[1:]),
            "reps": args.reps,
            "min_time_s": args.min_time,
            "max_reps": args.max_reps,
            "warmup": args.warmup,
            "budget_s": args.budget,
            "pause_s": args.pause,
            "tile_size": args.tile_size,
            "quick": args.quick,
        },
        "machine": info,
        "matmul_peak": {"n": args.peak_n, "gflops": overall, "per_size": peaks},
        "steps": steps,
        "rows": sorted(rows, key=lambda r: (r["n"], IMPLS.index(r["impl"]))),
        "torch_threads": torch_threads,
    }


def plot(res: dict, path: Path) -> None:
    """Draw ``res`` with the site's figure module (figures/attention_benchmark.py), as SVG."""
    import importlib.util

    import matplotlib

    matplotlib.use("Agg")
    module_path = HERE.parent / "figures" / "efficient_attention_benchmark.py"
    spec = importlib.util.spec_from_file_location("attention_benchmark_figure", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.figure("en", res).savefig(path, format="svg", metadata={"Date": None})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="JSON path (default: the package data folder)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="path of the .svg plot (default: benchmarks/results/attention.svg, or next to "
        "--out when --out is given)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes, few reps: a smoke run")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    p.add_argument("--reps", type=int, default=None, help="timed rounds per n, at least (7)")
    p.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="seconds of timed rounds per n before stopping, at least (default 30)",
    )
    p.add_argument("--max-reps", type=int, default=51, help="timed rounds per n, at most")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 2)")
    p.add_argument(
        "--budget",
        type=float,
        default=60.0,
        help="seconds of timed rounds per n before stopping (after at least 3 rounds)",
    )
    p.add_argument(
        "--pause", type=float, default=None, help="seconds of pause before each timed call"
    )
    p.add_argument("--tile-size", type=int, default=None, help="blockwise tile size")
    p.add_argument("--peak-n", type=int, default=None, help="matmul size for the peak")
    p.add_argument(
        "--full-big",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the n x n versions at n > 4096 when the memory allows",
    )
    p.add_argument("--no-plot", action="store_true")
    p.add_argument(
        "--tables-only",
        action="store_true",
        help="measure nothing: redraw the plot of the results already in --out",
    )
    p.add_argument("--worker", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        args.impl, n = args.worker
        args.n = int(n)
        args.warmup = 2 if args.warmup is None else args.warmup
        worker(args)
        return 0

    if args.quick:
        args.sizes = args.sizes or [64, 128]
        args.reps = args.reps or 2
        args.min_time = args.min_time or 0.0
        args.warmup = 1 if args.warmup is None else args.warmup
        args.peak_n = args.peak_n or 512
        args.pause = 0.02 if args.pause is None else args.pause
    else:
        args.sizes = args.sizes or [512, 1024, 2048, 4096, 16384]
        args.reps = args.reps or 7
        args.min_time = 30.0 if args.min_time is None else args.min_time
        args.warmup = 2 if args.warmup is None else args.warmup
        args.peak_n = args.peak_n or 2048
        args.pause = 0.3 if args.pause is None else args.pause

    out = args.out.with_suffix(".json")
    if args.tables_only:  # no measurement: the tables and plot of the saved results
        res = json.loads(out.read_text())
    else:
        res = drive(args)
        res.update(summary(res))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")
    if args.plot is not None:
        svg = args.plot
    else:
        svg = DEFAULT_PLOT if out.resolve() == DEFAULT_OUT.resolve() else out.with_suffix(".svg")
    if not args.no_plot:
        svg.parent.mkdir(parents=True, exist_ok=True)
        plot(res, svg)
    if "sizes" in res:
        print(header(res))
        print(table_of(res))
    # The results page's tables are written from the JSON by write_results_page.py.
    print(
        f"wrote {'' if args.tables_only else f'{out}'}"
        + ("" if args.no_plot else f"{'' if args.tables_only else ', '}{svg}"),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
