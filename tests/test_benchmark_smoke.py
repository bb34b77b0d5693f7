"""The benchmark scripts run end to end and write their results.

Smoke runs on tiny sizes: they check that the scripts work (for attention: every
implementation, PyTorch in its own process, the memory and time measurements, the table, JSON
and plot; for decoding: both paths and the JSON), never how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_attention.py"
DECODING = ROOT / "benchmarks" / "bench_decoding.py"


@pytest.mark.slow
def test_benchmark_quick_run_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(SCRIPT), "--quick", "--sizes", "32", "--reps", "1", "--warmup", "0"]
    proc = subprocess.run(
        cmd + ["--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr

    res = json.loads(out.read_text())
    impls = {r["impl"] for r in res["rows"]}
    assert impls == {"naive", "sdpa", "sdpa_nw", "blockwise", "products", "products_exp", "torch"}
    for row in res["rows"]:
        assert row["n"] == 32 and row["measured"]
        assert row["median_s"] > 0 and row["gflops"] > 0
        assert row["peak_extra_bytes"] >= 0
        assert row["vs_torch"] is not None
    assert res["matmul_peak"]["gflops"] > 0
    assert res["machine"]["cores_available"] >= 1 and res["machine"]["numpy"]
    steps = res["steps"]
    assert steps["n"] == 32 and abs(sum(steps["fraction"].values()) - 1) < 1e-9
    assert steps["exp_ns_per_element"] > 0

    table = out.with_suffix(".md").read_text()
    assert table.startswith("| implementation | n | time (ms) | GFLOP/s |")
    assert table in proc.stdout  # the table is printed too
    assert len([ln for ln in table.splitlines() if ln.startswith("| ")]) == 1 + 7  # header + rows
    assert "| `sdpa`, output only | 32 |" in table
    assert "| two products only \u2020 | 32 |" in table
    assert "| two products + `np.exp` \u2020 | 32 |" in table
    assert "`sdpa` = `scaled_dot_product_attention`" in table

    table_it = out.with_suffix(".it.md").read_text()
    assert table_it.startswith("| implementazione | n |")
    assert "| solo i due prodotti \u2020 | 32 |" in table_it
    assert "| `sdpa`, solo output | 32 |" in table_it

    svg = out.with_suffix(".svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_decoding_benchmark_writes_json_with_identical_tokens(tmp_path):
    out = tmp_path / "decoding.json"
    cmd = [sys.executable, str(DECODING), "--new", "3", "6", "--reps", "1", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr

    res = json.loads(out.read_text())
    assert res["command"].startswith("python benchmarks/bench_decoding.py --new 3 6 ")
    assert [r["new_tokens"] for r in res["results"]] == [3, 6]
    for r in res["results"]:
        assert r["identical_tokens"] is True
        assert r["with_cache_s"] > 0 and r["without_cache_s"] > 0
        assert r["speedup"] == r["without_cache_s"] / r["with_cache_s"]
    assert "identical tokens: True" in proc.stdout
