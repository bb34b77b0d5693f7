"""Run the benchmarks at two commits, interleaved, and print the NumPy timings side by side.

For a change that must not make anything slower: each benchmark script runs once at the old
commit and once at the new one, old, new, old, new, ... (``--rounds`` times each), so that a
change in the load of this shared machine hits both alike. Each script's own NumPy figures are
read from its output; the table gives their medians and the speed of the new code relative to
the old (above 1 is faster). Both commits run in this checkout's ``.venv``, each with its own
``src`` first on the path (git worktrees in a temporary folder). Run from the repository root::

    .venv/bin/python benchmarks/compare_commits.py --old a7bffa7 --new HEAD --rounds 3

This is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

# Each regex has one group per output format (the scripts' old lines, then the rows of the table
# that report.py prints, in ms): the first group that matches is the figure.
TRAIN_STEP = r"numpy\s+median\s+([\d.]+) ms|^\| one training step[^|]*\|\s+([\d.]+)"
# name: (script arguments, {figure: regex on the script's output, one number in ms or s})
BENCHMARKS = {
    "train step, lm": (
        ["bench_train_step.py", "--model", "lm", "--reps", "30"],
        {"numpy ms": TRAIN_STEP},
    ),
    "train step, seq2seq": (
        ["bench_train_step.py", "--model", "seq2seq", "--reps", "30"],
        {"numpy ms": TRAIN_STEP},
    ),
    "decoding, 200 tokens": (
        ["bench_decoding.py", "--new", "200", "--reps", "3"],
        {
            "with cache ms": r"with cache\s+([\d.]+) ms",
            "without cache ms": r"without cache\s+([\d.]+) ms",
        },
    ),
    "attention, n = 2048": (
        [
            "bench_attention.py",
            "--sizes",
            "2048",
            "--impls",
            "sdpa",
            "sdpa_nw",
            "blockwise",
            "torch",
            "--reps",
            "7",
            "--max-reps",
            "7",
            "--no-plot",
        ],
        {
            "sdpa ms": r"^# sdpa +n= *2048: +([\d.]+) ms",
            "sdpa_nw ms": r"^# sdpa_nw +n= *2048: +([\d.]+) ms",
            "blockwise ms": r"^# blockwise +n= *2048: +([\d.]+) ms",
        },
    ),
    "MiniLM, 32 sentences": (
        ["bench_minilm.py", "--reps", "10", "--ref-python", str(ROOT / ".venv-ref/bin/python")],
        {"numpy ms": r"ours \(NumPy\):\s+([\d.]+) ms|^\| encode \d+ sentences\s*\|\s+([\d.]+)"},
    ),
}


def worktree(ref: str, parent: Path) -> Path:
    """A checkout of ``ref`` in ``parent`` (a git worktree, removed by :func:`main`)."""
    path = parent / ref.replace("/", "_")
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--force", str(path), ref],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return path


def run(tree: Path, args: list[str], out_dir: Path) -> str:
    """One run of a benchmark script of ``tree`` with ``tree/src`` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), HF_HUB_OFFLINE="1")
    extra = []
    if args[0] == "bench_attention.py":  # keep its saved results out of the checkout
        extra = ["--out", str(out_dir / "attention.json")]
    proc = subprocess.run(
        [PY, str(tree / "benchmarks" / args[0]), *args[1:], *extra],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed at {tree}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr  # some scripts report progress on stderr


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="the commit before the change")
    p.add_argument("--new", default="HEAD", help="the commit after it (default HEAD)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each side (at least 3)")
    p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="a subset")
    args = p.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    print(
        f"old {args.old}, new {args.new}; {args.rounds} interleaved rounds; {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = {side: worktree(ref, tmp) for side, ref in (("old", args.old), ("new", args.new))}
        try:
            print("| benchmark | figure | old (median) | new (median) | new speed / old |")
            print("|---|---|---|---|---|")
            for name in names:
                script, figures = BENCHMARKS[name]
                values = {side: {f: [] for f in figures} for side in trees}
                for _ in range(args.rounds):
                    for side, tree in trees.items():
                        out = run(tree, script, tmp)
                        for fig, pattern in figures.items():
                            m = re.search(pattern, out, re.MULTILINE)
                            if m is None:
                                raise RuntimeError(f"no {fig!r} in the output of {name}:\n{out}")
                            values[side][fig].append(float(next(g for g in m.groups() if g)))
                for fig in figures:
                    old = statistics.median(values["old"][fig])
                    new = statistics.median(values["new"][fig])
                    print(f"| {name} | {fig} | {old:.2f} | {new:.2f} | {old / new:.2f} |")
        finally:
            for tree in trees.values():
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
                )


if __name__ == "__main__":
    main()
