"""benchmarks/profile_ops.py profiles a benchmark's own workload, ours and PyTorch's.

A smoke run on one call: the script drives the benchmark's workers, and prints both tables
with a total and the operations below it. What the times are is never checked.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "profile_ops.py"


@pytest.mark.slow
def test_profile_of_one_training_step_lists_our_functions_and_torch_operators():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "train-lm", "--calls", "1", "--warmup", "0", "--top", "40"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "### train-lm: ours (cProfile, self time per function)" in out
    assert "### train-lm: PyTorch (torch.profiler, self CPU time per operator)" in out
    ours, theirs = out.split("### train-lm: PyTorch")
    # our rows are named by the package's own functions; PyTorch's by ATen operators
    # 2 blocks x (4 attention maps + 2 feed-forward maps) = 12 Linear layers, one call each
    assert "| layers.Linear.backward | 12 |" in ours
    assert "| _kernels.gelu.gelu_range32 | 2 |" in ours
    assert re.search(r"\| aten::(mm|addmm) \| \d+ \|", theirs)
    # each table: a total of 100% and its operations, whose shares add up to at most the total
    for table in (ours, theirs):
        shares = [float(s) for s in re.findall(r"\| ([\d.]+)% \|", table)]
        assert shares[0] == 100.0 and 0 < sum(shares[1:]) <= 100.5


@pytest.mark.slow
def test_profile_of_one_cached_generation_runs_the_decoding_benchmark_workers():
    cmd = [sys.executable, str(SCRIPT), "decode-reverse", "--calls", "1", "--warmup", "0"]
    proc = subprocess.run(
        [*cmd, "--threads", "1", "--top", "60"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    ours, theirs = proc.stdout.split("### decode-reverse: PyTorch")
    # the reversal model writes 11 tokens: translate is called once, the model's cached step
    # (Model.decode_step's closure) once per token
    assert "| decoding.translate | 1 |" in ours
    assert "| model.py:step | 11 |" in ours
    assert re.search(r"\| aten::(mm|addmm) \| \d+ \|", theirs)
