"""The thread pool of the kernels (``_kernels/threads.py``): parallel_for, split_range,
num_threads and the BLAS thread limit inside the threaded kernels.

Sections: values (every piece runs once, errors are re-raised, nested calls run inline, the
environment variable sets the number of threads, BLAS threads are restored, the row groups of
for_each_group cover every row once).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np import scaled_dot_product_attention
from transformer_np._kernels.threads import (
    GROUP_ROWS,
    blas_single_threaded,
    for_each_group,
    num_threads,
    parallel_for,
    row_groups,
    split_range,
)

from helpers import random_qkv

# ============================================================================================
# values
# ============================================================================================


def test_parallel_for_runs_every_piece_once_and_reraises_errors():
    seen = []
    parallel_for(seen.append, range(11), threads=2)
    assert sorted(seen) == list(range(11))

    def fail_on_7(i):
        if i == 7:
            raise KeyError(i)

    with pytest.raises(KeyError):
        parallel_for(fail_on_7, range(11), threads=2)


def test_parallel_for_nested_calls_run_inline():
    cells = np.zeros((4, 4))

    def row(i):
        def cell(j):
            cells[i, j] = 10 * i + j

        parallel_for(cell, range(4), threads=2)

    parallel_for(row, range(4), threads=2)
    np.testing.assert_array_equal(cells, 10 * np.arange(4)[:, None] + np.arange(4))


def test_split_range_covers_the_range_in_near_equal_parts():
    for n in (1, 5, 10, 17):
        for parts in (1, 2, 3, 8):
            slices = split_range(n, parts)
            sizes = [s.stop - s.start for s in slices]
            assert [i for s in slices for i in range(s.start, s.stop)] == list(range(n))
            assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 15, 16, 17, 32, 33, 100])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_row_groups_cover_every_row_once_in_balanced_groups(n, threads):
    rows = np.arange(n)[::-1]  # a sorted list, as encode's order is
    groups = row_groups(rows, threads)
    assert sorted(np.concatenate(groups).tolist()) == list(range(n))
    if threads == 1 or n == 1:
        assert len(groups) == 1 and groups[0] is rows
        return
    sizes = [len(g) for g in groups]
    assert len(groups) == min(n, max(threads, -(-n // GROUP_ROWS)))  # a group per thread
    assert max(sizes) - min(sizes) <= 1 and max(sizes) <= max(GROUP_ROWS, -(-n // threads))
    # interleaved: the i-th longest rows are spread over the groups, not all in the first one
    assert [g[0] for g in groups] == list(rows[: len(groups)])


def test_for_each_group_runs_every_group_once_on_the_threads(monkeypatch):
    import threading

    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "2")
    seen, names = [], set()

    def fn(group):
        seen.extend(group.tolist())
        names.add(threading.current_thread().name)

    for_each_group(fn, np.arange(32))
    assert sorted(seen) == list(range(32)) and len(names) == 2
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "1")
    calls = []
    for_each_group(calls.append, np.arange(32))
    assert len(calls) == 1 and calls[0].tolist() == list(range(32))


def test_num_threads_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "1")
    assert num_threads() == 1
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="TRANSFORMER_NP_NUM_THREADS"):
        num_threads()
    monkeypatch.delenv("TRANSFORMER_NP_NUM_THREADS")
    assert num_threads() >= 1


def test_blas_threads_are_restored_after_the_fast_path():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("no BLAS known to threadpoolctl")
    # Two BLAS threads to start from, whatever the test process was given (one per worker under
    # pytest-xdist), so that "restored" and "one thread inside" are not the same state.
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        assert set(before) == {2}
        rng = np.random.default_rng(7)
        q, k, v = random_qkv(rng, (4, 512, 16), (4, 512, 16), dtype=np.float32)
        scaled_dot_product_attention(q, k, v)
        assert blas_threads() == before
        with blas_single_threaded():
            assert set(blas_threads()) == {1}
            with blas_single_threaded():  # nested: still one thread, restored by the outer exit
                pass
            assert set(blas_threads()) == {1}
        assert blas_threads() == before
