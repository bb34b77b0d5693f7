"""What every benchmark prints and saves: one convention, one schema.

Each workload (a size, a model, a phase) is measured on three sides, each in a process of its
own: **ours** (``transformer_np``), the **reference** (PyTorch, or sentence-transformers /
transformers for the pretrained models) and the **ceiling** (the least NumPy work that gives
the same result, see ``ceiling.py``). The sides are timed in interleaved rounds (one call each,
the order rotating from round to round), and every figure is a median over the rounds.

Ratios, always the same two:

- ``x_reference`` = reference time / our time: "x times the speed of PyTorch", above 1 = ours
  is faster;
- ``ours_over_ceiling`` = our time / ceiling time: 1 = ours does no more than the least NumPy
  work, 2 = it takes twice as long.

The JSON schema (``SCHEMA``), shared by all the scripts::

    {"schema": "transformer_np-bench/1", "benchmark": "train_step_lm", "title": "...",
     "workload": {...sizes of the model and the input...}, "reference": "PyTorch",
     "unit": "ms",            # how the tables show the times (they are saved in seconds)
     "sizes": [{"size": "lm", "label": "...",
                "ours": {"median_s": .., "times_s": [...]}, "reference": {...},
                "ceiling": {...} or null, "x_reference": .., "ours_over_ceiling": .. or null}],
     "checks": {...}, "machine": {...}, "load": {"before": [1, 5, 15 min], "after": [...]},
     "date": "YYYY-MM-DD HH:MM", "command": "...", "rounds": 5}

The scripts write it to ``src/transformer_np/data/<benchmark>.json`` by default (package data,
next to the references); ``benchmarks/write_results_page.py`` turns every such file into the
tables of the results page.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from timed_calls import cpu_model

SCHEMA = "transformer_np-bench/1"
ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "src" / "transformer_np" / "data"
SIDES = ("ours", "reference", "ceiling")
# the versions the header and the results page show, when a benchmark records them
VERSIONS = ("python", "numpy", "blas", "torch", "sentence_transformers", "transformers", "gguf")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine(threads: dict, versions: dict) -> dict:
    """The CPU, its cores, the versions of the libraries and the threads of each side."""
    import numpy as np

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        **versions,
        "threads": threads,
    }


def run_rounds(calls: dict, rounds: int, pause: float) -> dict[str, list[float]]:
    """``rounds`` rounds of one call per side; the order rotates every round.

    ``calls`` maps a side to a zero-argument function returning the seconds of one call
    (usually ``TimedProcess.time_one_call``).
    """
    times = {side: [] for side in calls}
    names = list(calls)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for side in order:
            time.sleep(pause)  # let the previous side's threads go idle
            times[side].append(calls[side]())
    return times


def time_sides(starters: dict, rounds: int, pause: float, burst: int = 1) -> tuple[dict, dict]:
    """Start every side, time them in :func:`run_rounds`, and close them all (on error too).

    ``starters`` maps a side to a function that starts its ``TimedProcess``; it is given the
    sides started before it (in the order of ``starters``), whose ``ready`` objects it may
    read. With ``burst`` > 1 a side's turn is that many consecutive calls, timed as their mean
    (see ``timed_calls.py``). Returns the times of every side and their ``ready`` objects.
    """
    sides = {}
    try:
        for name, start in starters.items():
            sides[name] = start(sides)
        calls = {
            name: (lambda p=process: p.time_one_call(burst)) for name, process in sides.items()
        }
        times = run_rounds(calls, max(1, rounds), pause)
    finally:
        for process in sides.values():
            process.close()
    return times, {name: process.ready for name, process in sides.items()}


def add_rounds_argument(parser, default: int, help: str = "interleaved rounds") -> None:
    """``--rounds`` (also spelled ``--reps``, the older name), the same in every script."""
    parser.add_argument("--rounds", "--reps", dest="rounds", type=int, default=default, help=help)


def side(times: list[float] | None) -> dict | None:
    if not times:
        return None
    return {"median_s": statistics.median(times), "times_s": list(times)}


def size_entry(size: str, label: str, times: dict, **extra) -> dict:
    """One workload: per-side medians and round values, and the two ratios."""
    entry = {"size": size, "label": label}
    for s in SIDES:
        entry[s] = side(times.get(s))
    ours, ref, ceil = (entry[s]["median_s"] if entry[s] else None for s in SIDES)
    entry["x_reference"] = ref / ours if ref and ours else None
    entry["ours_over_ceiling"] = ours / ceil if ceil and ours else None
    entry.update(extra)
    return entry


def result(benchmark: str, title: str, workload: dict, reference: str, sizes: list, **rest):
    """The shared schema (see the module docstring); ``rest``: checks, machine, load..."""
    res = {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "title": title,
        "workload": workload,
        "reference": reference,
        "unit": rest.pop("unit", "ms"),
        "sizes": sizes,
    }
    res.update(rest)
    res.setdefault("date", time.strftime("%Y-%m-%d %H:%M"))
    return res


def command_line(script: str, argv: list[str] | None = None, prefix: str = "") -> str:
    argv = sys.argv[1:] if argv is None else argv
    return f"{prefix}.venv/bin/python benchmarks/{script} " + " ".join(argv)


SCALE = {"ms": 1e3, "s": 1.0}


def table(res: dict) -> str:
    """The plain-text table every script prints (the same figures as the results page)."""
    unit, ref = res["unit"], res["reference"]
    k = SCALE[unit]
    w = max(14, len(ref))
    head = f"| {'workload':30s} | {'ours':>10s} | {ref:>{w}s} | {'ceiling':>10s} |"
    head += f" {'x ' + ref:>{w + 2}s} | {'ours / ceiling':>14s} |"
    lines = [f"times in {unit}, medians of {res['rounds']} rounds", head]
    lines.append("|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|")
    for e in res["sizes"]:
        cells = [f"{e[s]['median_s'] * k:10.3f}" if e[s] else f"{'-':>10s}" for s in SIDES]
        cells[1] = cells[1].strip()
        x = f"{e['x_reference']:{w + 2}.2f}" if e["x_reference"] else f"{'-':>{w + 2}s}"
        c = f"{e['ours_over_ceiling']:14.2f}" if e["ours_over_ceiling"] else f"{'-':>14s}"
        lines.append(
            f"| {e['label'][:30]:30s} | {cells[0]} | {cells[1]:>{w}s} | {cells[2]} | {x} | {c} |"
        )
    lines += [
        f"x {ref} = {ref} time / our time (above 1 = ours is faster); "
        "ours / ceiling = our time / the time of the least NumPy work (1 = nothing more)"
    ]
    return "\n".join(lines)


def header(res: dict) -> str:
    m, load = res["machine"], res["load"]
    versions = ", ".join(f"{k} {m[k]}" for k in VERSIONS if m.get(k))
    threads = ", ".join(f"{k} {v}" for k, v in m["threads"].items())
    return (
        f"machine: {m['cpu']}, {m['cores']} cores ({m['cores_available']} available), "
        f"{m['arch']}\nversions: {versions}\nthreads per side: {threads}\n"
        f"load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}"
    )


def report(res: dict, path: Path | str | None) -> None:
    """Print the header and the table; write the JSON to ``path`` (if given)."""
    print(header(res))
    print(table(res))
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
