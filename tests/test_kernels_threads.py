"""The thread pool of the kernels (``_kernels/threads.py``): parallel_for, split_range,
num_threads and the BLAS thread limit inside the threaded kernels.

Sections: values (every piece runs once, errors are re-raised, nested calls run inline, the
environment variable sets the number of threads, BLAS threads are restored, the row groups of
for_each_group cover every row once).
"""

from __future__ import annotations

import os

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


# ============================================================================================
# cores shared with other processes
# ============================================================================================


@pytest.fixture
def machine(monkeypatch):
    """A machine whose CPU times the test sets: ``machine.look(others, own)`` advances the
    clock by one second in which the other processes used ``others`` seconds of CPU and this
    one ``own``, then calls share_cores; BLAS starts on two threads and is restored after."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from transformer_np._kernels import threads

    if not [lib for lib in threadpool_info() if lib["user_api"] == "blas"]:
        pytest.skip("no BLAS known to threadpoolctl")
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip("one core: nothing to share")
    state = {"busy": 0.0, "own": 0.0}
    monkeypatch.setattr(threads, "cpu_times", lambda cpus: state["busy"])
    monkeypatch.setattr(threads, "own_cpu_time", lambda: state["own"])
    monkeypatch.setattr(threads, "_look", {"last": None, "free": None, "lowered": {}})

    class Machine:
        @staticmethod
        def look(others, own=0.0):
            last = threads._look["last"]
            if last is not None:  # one second ago
                threads._look["last"] = (last[0] - 1.0, *last[1:])
            state["busy"] += others + own
            state["own"] += own
            threads.share_cores()
            return threads.free_cores()

        @staticmethod
        def blas():
            return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    with threadpool_limits(limits=2, user_api="blas"):
        yield Machine


def test_blas_gets_the_cores_other_processes_leave_free_and_then_its_threads_back(machine):
    assert machine.look(0.0) is None and machine.blas() == {2}  # the first look: a baseline
    assert machine.look(0.2, own=1.8) == 2 and machine.blas() == {2}  # others: 0.2 of a core
    assert machine.look(1.0, own=1.0) == 1 and machine.blas() == {1}  # one core taken
    assert machine.look(1.9, own=0.1) == 1 and machine.blas() == {1}  # never below one
    assert machine.look(0.0, own=2.0) == 2 and machine.blas() == {2}  # free again: back to 2


def test_a_look_within_half_a_second_of_the_last_reads_nothing(machine):
    from transformer_np._kernels import threads

    machine.look(0.0)
    machine.look(1.0, own=1.0)
    assert machine.blas() == {1}
    last = threads._look["last"]
    threads.share_cores()  # no time has passed since
    assert threads._look["last"] is last


def test_threads_set_by_someone_else_meanwhile_are_left_alone(machine):
    from threadpoolctl import threadpool_limits

    machine.look(0.0)
    machine.look(1.0, own=1.0)
    assert machine.blas() == {1}
    threadpool_limits(limits=2, user_api="blas")  # the user's own choice, after ours
    machine.look(1.0, own=1.0)
    assert machine.blas() == {1}  # lowered again, the user's 2 is now the number to go back to
    machine.look(0.0, own=2.0)
    assert machine.blas() == {2}
    threadpool_limits(limits=1, user_api="blas")  # the user asks for one thread
    machine.look(0.0, own=2.0)
    assert machine.blas() == {1}  # never raised above the user's number


def test_one_blas_thread_asked_by_the_package_is_not_changed(machine):
    machine.look(0.0)
    with blas_single_threaded():
        machine.look(0.0, own=2.0)
        assert machine.blas() == {1}
