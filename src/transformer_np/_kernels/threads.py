"""Threads for the kernels: a small persistent pool, and one BLAS thread inside it.

A small persistent thread pool for the NumPy work that NumPy runs on one core.

Matrix products already run on every core (OpenBLAS has its own threads), but NumPy's
element-wise functions and reductions (``exp``, ``max``, ``sum``, division) run on the calling
thread only. They release the GIL while they loop over large arrays, so splitting an array into
independent pieces and handing the pieces to a few Python threads uses the other cores too.

The pool is created on first use and reused: starting threads at every call would cost more than
it saves on small problems. Callers decide when a problem is big enough to pay for the
hand-off; :func:`parallel_for` runs everything on the calling thread when there is one worker,
one piece, or when it is itself called from inside a worker (no nested pools, no deadlock).

The number of threads is the number of cores this process may use, or the value of the
environment variable ``TRANSFORMER_NP_NUM_THREADS`` (``1`` turns the threading off).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

from .._checks.calls import state as calls

__all__ = [
    "blas_single_threaded",
    "for_each_group",
    "num_threads",
    "parallel_for",
    "row_chunks",
    "row_groups",
    "share_cores",
    "split_range",
]

_ENV_VAR = "TRANSFORMER_NP_NUM_THREADS"

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()
_state = threading.local()  # _state.inside is True on pool threads while they run a piece


def num_threads() -> int:
    """The number of threads :func:`parallel_for` uses (at least 1).

    ``TRANSFORMER_NP_NUM_THREADS`` if it is set to a positive integer, else the number of CPU
    cores available to this process.
    """
    value = os.environ.get(_ENV_VAR, "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"{_ENV_VAR} must be a positive integer, got {value!r}") from None
        if n < 1:
            raise ValueError(f"{_ENV_VAR} must be a positive integer, got {n}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _get_pool(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="transformer_np")
            _pool_size = size
        return _pool


def _run_share(fn: Callable, share: Sequence) -> None:
    """Run ``fn`` on each piece of ``share``, marking this thread as busy (no nested pools) and
    as running the package's own maths (what a piece calls is not checked again)."""
    outer, checked = getattr(_state, "inside", False), calls.inside
    _state.inside = calls.inside = True
    try:
        for piece in share:
            fn(piece)
    finally:
        _state.inside, calls.inside = outer, checked


def parallel_for(
    fn: Callable, pieces: Sequence, *, threads: int | None = None, one_blas_thread: bool = False
) -> None:
    """Call ``fn(piece)`` for every piece, spread over up to ``threads`` threads.

    The pieces must be independent (each writes its own part of an output array). The calling
    thread works too: with ``t`` threads it runs the first share itself while ``t - 1`` pool
    threads run the others. An exception raised by any piece is re-raised here, after every
    piece has finished.

    Parameters
    ----------
    fn : callable
        Called once per piece; its return value is ignored.
    pieces : sequence
        The work items, for example slices of an axis (see :func:`split_range`).
    threads : int, optional
        At most this many threads; default :func:`num_threads`.
    one_blas_thread : bool, default False
        For pieces that do small matrix products: ask OpenBLAS to run each product on its
        calling thread (see :func:`blas_single_threaded`), also when there is one thread only.
        On small products OpenBLAS's own threads cost more than they give, and after each
        product they keep spinning for a while on the cores the element-wise steps need.
    """
    pieces = list(pieces)
    t = min(num_threads() if threads is None else threads, len(pieces))
    if t <= 1 or getattr(_state, "inside", False):
        with blas_single_threaded() if one_blas_thread else contextlib.nullcontext():
            for piece in pieces:
                fn(piece)
        return
    # Piece i goes to thread i mod t: interleaving balances pieces of unequal cost (for example
    # the query blocks of causal attention, which grow with the row index).
    shares = [pieces[i::t] for i in range(t)]

    pool = _get_pool(t - 1)
    error = None
    with blas_single_threaded() if one_blas_thread else contextlib.nullcontext():
        futures = [pool.submit(_run_share, fn, share) for share in shares[1:]]
        try:
            _run_share(fn, shares[0])
        except BaseException as exc:  # still wait for the workers before raising
            error = exc
        for future in futures:
            exc = future.exception()
            if exc is not None and error is None:
                error = exc
    if error is not None:
        raise error


def split_range(n: int, parts: int) -> list[slice]:
    """Split ``range(n)`` into at most ``parts`` contiguous slices of nearly equal length.

    Examples
    --------
    >>> split_range(10, 3)
    [slice(0, 4, None), slice(4, 7, None), slice(7, 10, None)]
    """
    parts = max(1, min(parts, n))
    bounds = [0] + [n - (n * (parts - i)) // parts for i in range(1, parts)] + [n]
    return [slice(bounds[i], bounds[i + 1]) for i in range(parts)]


# Rows (sentences) per group in for_each_group. Encoding the 32 sentences of
# benchmarks/bench_minilm.py on 2 cores (medians of 20 interleaved calls): 233 ms in groups of 8,
# 259 ms in groups of 4, 315 ms in groups of 2, 267 ms in 2 groups of 16, 346 ms in one batch.
GROUP_ROWS = 8


def row_groups(rows: Sequence, threads: int) -> list:
    """Split ``rows`` into groups to run on ``threads`` threads, interleaved: ``rows[i::g]``.

    ``g`` is at least ``threads`` (every thread gets a group) and about ``len(rows) /
    GROUP_ROWS`` for long lists, never more than ``len(rows)``. Interleaving keeps the groups
    alike when ``rows`` is sorted (sentences longest first: each group gets long and short
    ones). One thread, or one row, gives the single group ``[rows]``.

    Examples
    --------
    >>> row_groups(list(range(10)), 2)
    [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    >>> [len(g) for g in row_groups(list(range(32)), 2)]
    [8, 8, 8, 8]
    """
    n = len(rows)
    if threads <= 1 or n <= 1:
        return [rows]
    g = min(n, max(threads, -(-n // GROUP_ROWS)))
    return [rows[i::g] for i in range(g)]


def for_each_group(fn: Callable, rows: Sequence) -> None:
    """Call ``fn(group)`` for the groups of :func:`row_groups`, the groups on every core.

    For work that splits along the batch: every group is an independent forward pass (for
    example the sentences of :meth:`~transformer_np.pretrained.MiniLM.encode`). Each thread
    runs its matrix products on one BLAS thread, so that the element-wise steps of the groups
    (GELU, softmax, layer norm), which NumPy runs on one core, also run side by side. With one
    group, ``fn(rows)`` runs alone, with BLAS on every core.
    """
    share_cores()
    groups = row_groups(rows, num_threads())
    if len(groups) == 1:
        fn(groups[0])
    else:
        parallel_for(fn, groups, one_blas_thread=True)


# Chunks of about this many bytes (of float32 scores: 512 rows of 2048), small enough to stay in
# the L2 or L3 cache between the steps that read them (src/transformer_np/data/attention.json).
CHUNK_BYTES = 1 << 22
# Below this size (the whole problem), one vectorised pass beats the hand-off to threads.
MIN_SPLIT_BYTES = 1 << 21


def row_chunks(
    lead: tuple[int, ...],
    n_rows: int,
    row_bytes: int,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    min_bytes: int = MIN_SPLIT_BYTES,
) -> list[tuple[tuple, slice]] | None:
    """Cut an array of shape ``lead + (n_rows, ...)`` into chunks of about ``chunk_bytes``.

    Each chunk is ``(items, rows)``: ``items`` indexes the leading axes (ints, and a slice of
    the last leading axis that groups several small matrices), ``rows`` is a slice of the row
    axis; ``a[items][..., rows, :]`` is the chunk. Chunks are made smaller than ``chunk_bytes``
    when needed to give about 8 of them (so that the threads share the work evenly). Returns
    None if the whole array is smaller than ``min_bytes`` (not worth splitting).

    Examples
    --------
    >>> chunks = row_chunks((8,), 2048, 2048 * 4)  # 8 heads, 2048 rows of 2048 float32
    >>> len(chunks), chunks[1]
    (32, ((slice(0, 1, None),), slice(512, 1024, None)))
    """
    n_items = 1
    for size in lead:
        n_items *= size
    total = n_items * n_rows * row_bytes
    if total < max(min_bytes, 1):
        return None
    chunk_bytes = min(chunk_bytes, total // 8)  # at least ~8 chunks, to share among threads
    rows = max(1, min(n_rows, chunk_bytes // max(row_bytes, 1)))
    row_slices = [slice(r, min(r + rows, n_rows)) for r in range(0, n_rows, rows)]
    if not lead:
        return [((), sl) for sl in row_slices]
    # Whole matrices smaller than a chunk: take several of them along the last leading axis.
    last = lead[-1]
    group = 1 if rows < n_rows else max(1, min(last, chunk_bytes // max(n_rows * row_bytes, 1)))
    chunks = []
    for outer in itertools.product(*(range(size) for size in lead[:-1])):
        for start in range(0, last, group):
            items = outer + (slice(start, min(start + group, last)),)
            chunks.extend((items, sl) for sl in row_slices)
    return chunks


# --------------------------------------------------------------------------------------------
# BLAS's own threads
# --------------------------------------------------------------------------------------------
#
# Inside parallel_for every thread calls matrix products of its own. If BLAS also split each of
# them over all cores, 2 Python threads would start 2 x 2 BLAS threads on 2 cores, which then
# wait for each other (OpenBLAS's idle threads even spin for a while). So parallel code asks
# BLAS for one thread per call while it runs (threadpoolctl finds the library NumPy loaded):
# the cores are then shared out by parallel_for alone.

_blas_lock = threading.Lock()
_blas_users = 0
_blas_limit = None  # the threadpoolctl limiter while some caller is inside
_controller = None  # threadpoolctl's view of the loaded libraries, inspected once


@contextlib.contextmanager
def blas_single_threaded() -> Iterator[None]:
    """Within the block, BLAS runs each matrix product on the calling thread only.

    Nested and concurrent uses are counted: the first one in limits BLAS to one thread, the
    last one out restores its thread count. Without a BLAS that threadpoolctl knows, this
    does nothing.
    """
    global _blas_users, _blas_limit, _controller
    with _blas_lock:
        if _controller is None:
            _controller = ThreadpoolController()
        if _blas_users == 0:
            _blas_limit = _controller.limit(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                _blas_limit.restore_original_limits()
                _blas_limit = None


# --------------------------------------------------------------------------------------------
# cores shared with other processes
# --------------------------------------------------------------------------------------------
#
# OpenBLAS splits a product over its threads, and the part that ends first waits for the others
# by spinning. When other processes keep the cores busy, the scheduler sets one of our threads
# aside for a time slice, and the rest of ours spin on the cores that are left: measured with
# benchmarks/bench_shared_cores.py, a fine-tuning step ran 36 times slower beside two busy
# processes on 2 cores (3.3 times with BLAS on one thread). So where long work goes on (a user's
# call of a layer or a model, each training step, each decoding step) the package looks at the
# machine's load, at most every LOOK_EVERY seconds, and gives BLAS only the cores that the
# other processes leave free; once they are free again, BLAS gets its threads back.

LOOK_EVERY = 0.5  # seconds between two looks at /proc/stat
TAKEN = 0.5  # a core that other processes used for half the time or more counts as taken

_look_lock = threading.Lock()
_look = {"last": None, "free": None, "lowered": {}}  # lowered: library -> (ours, its own)


def cpu_times(cpus: frozenset[int]) -> float | None:
    """Seconds the CPUs ``cpus`` have been busy since boot (from ``/proc/stat``), or None where
    the system does not say."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, _, _, irq, softirq, steal = (int(x) for x in fields[:8])
            busy += user + nice + system + irq + softirq + steal
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_time() -> float:
    """Seconds of CPU this process has used, all its threads together."""
    times = os.times()
    return times.user + times.system


def free_cores() -> int | None:
    """The cores the other processes left free at the last look of :func:`share_cores` (None
    before the second look)."""
    return _look["free"]


def share_cores() -> None:
    """Give BLAS at most the cores that other processes have left free since the last look.

    The others' use is the busy time of this process's CPUs less this process's own CPU time,
    over the wall time between two looks; a core counts as taken when they used it for
    :data:`TAKEN` of that time or more. BLAS's threads are lowered to the free cores (at least
    one), and raised back to their own number once the cores are free again, unless someone
    else changed them meanwhile. At most one look every :data:`LOOK_EVERY` seconds: a call in
    between costs a clock reading.
    """
    now = time.monotonic()
    last = _look["last"]
    if last is not None and now - last[0] < LOOK_EVERY:
        return
    if not _look_lock.acquire(blocking=False):  # another thread is looking
        return
    try:
        cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        busy = None if cpus is None else cpu_times(cpus)
        if busy is None:  # not Linux: never look again
            _look["last"] = (math.inf, 0.0, 0.0)
            return
        own = own_cpu_time()
        _look["last"] = (now, busy, own)
        if last is None:
            return
        wall, others = now - last[0], (busy - last[1]) - (own - last[2])
        taken = int(max(others, 0.0) / wall + (1 - TAKEN))
        _look["free"] = free = max(1, len(cpus) - taken)
        fit_blas(free)
    finally:
        _look_lock.release()


def fit_blas(free: int) -> None:
    """BLAS on at most ``free`` threads, or back on its own number of them."""
    global _controller
    if _blas_users:  # blas_single_threaded is in force: one thread already
        return
    if _controller is None:
        _controller = ThreadpoolController()
    lowered = _look["lowered"]
    for lib in _controller.select(user_api="blas").lib_controllers:
        now = lib.num_threads
        ours, own = lowered.get(lib.filepath, (None, now))
        if ours is not None and now != ours:  # changed by someone else: theirs now
            lowered.pop(lib.filepath)
            ours, own = None, now
        want = min(free, own)
        if want != now:
            lib.set_num_threads(want)
        if want < own:
            lowered[lib.filepath] = (want, own)
        else:
            lowered.pop(lib.filepath, None)
