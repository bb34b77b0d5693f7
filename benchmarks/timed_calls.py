"""Timed calls served on request: how the benchmarks interleave separate processes.

A benchmark that compares two libraries runs each in a process of its own (their thread pools
never share one) and times them in *rounds*: one call each, in turn, so that a change in the
load of the machine hits both alike. The serving process calls :func:`serve`; the driver starts
it as a :class:`TimedProcess` and asks for one call at a time.

The protocol, one JSON object per line on the server's standard output: first the ``ready``
object (whatever the server wants to report: versions, threads, memory, results), then
``{"t": seconds}`` for every line ``run`` read on its standard input. A line ``run N`` asks for
a *burst* of N calls one after the other, and ``t`` is then their mean time: the steady state of
a loop (a training loop, say), where one call alone, after the idle pause between sides, also
pays for caches and a CPU that have gone cold. Any other line, or the end of the input, stops
the server.

Also :func:`cpu_model`, the name of the CPU that every benchmark writes next to its results.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: The variables that set how many threads BLAS, OpenMP and our kernels use: a benchmark sets all
#: of them in each side's process, so that both sides run on the same threads.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TRANSFORMER_NP_NUM_THREADS",
)


def worker_env(threads: int | None = None, **extra: str) -> dict:
    """The environment of a side's process: this one's, plus ``extra``, with the repository's
    ``src`` first on ``PYTHONPATH`` and, if ``threads`` is given, every :data:`THREAD_VARS` set
    to it (before the worker's NumPy and PyTorch start their thread pools)."""
    env = dict(os.environ, **extra)
    if threads:
        env.update(dict.fromkeys(THREAD_VARS, str(threads)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


def cpu_model() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` on Linux), for the results files."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def serve(call: Callable[[], object], ready: dict) -> None:
    """Print ``ready``, then time ``call()`` for every ``run`` (or ``run N``) line read."""
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "run" or len(words) > 2:
            break
        n = int(words[1]) if len(words) == 2 else 1
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        print(json.dumps({"t": (time.perf_counter() - t0) / n}), flush=True)


class TimedProcess:
    """A process running ``cmd`` that serves timed calls (see :func:`serve`).

    ``ready`` holds the server's first JSON object. A server that dies raises RuntimeError
    with the end of its standard error.
    """

    def __init__(self, cmd: list[str], name: str, env: dict | None = None):
        self.name = name
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()
            self.proc.wait()
            raise RuntimeError(f"{self.name} failed:\n{err[-3000:]}")
        return json.loads(line)

    def time_one_call(self, burst: int = 1) -> float:
        """Seconds of one call; with ``burst`` > 1, the mean of that many consecutive calls."""
        self.proc.stdin.write("run\n" if burst == 1 else f"run {burst}\n")
        self.proc.stdin.flush()
        return self._read()["t"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            self.proc.wait()
