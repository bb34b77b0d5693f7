"""A small persistent thread pool for the NumPy work that NumPy runs on one core.

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
import ctypes
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

__all__ = ["blas_single_threaded", "num_threads", "parallel_for", "row_blocks", "split_range"]

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
    """Run ``fn`` on each piece of ``share``, marking this thread as busy (no nested pools)."""
    outer = getattr(_state, "inside", False)
    _state.inside = True
    try:
        for piece in share:
            fn(piece)
    finally:
        _state.inside = outer


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


# Blocks of about this many bytes (of float32 scores: 512 rows of 2048). Measured on the 2-core
# machine of the benchmark: 256 KiB to 4 MiB blocks (which live in the L2 or L3 cache between
# the steps that read them) all beat one pass over the whole matrix; the larger ones, with fewer
# Python calls per second, held up best when other processes shared the cores.
BLOCK_BYTES = 1 << 22
# Below this size (the whole problem), one vectorised pass beats the hand-off to threads.
MIN_SPLIT_BYTES = 1 << 21


def row_blocks(
    lead: tuple[int, ...],
    n_rows: int,
    row_bytes: int,
    *,
    block_bytes: int = BLOCK_BYTES,
    min_bytes: int = MIN_SPLIT_BYTES,
) -> list[tuple[tuple, slice]] | None:
    """Cut an array of shape ``lead + (n_rows, ...)`` into blocks of about ``block_bytes``.

    Each block is ``(items, rows)``: ``items`` indexes the leading axes (ints, and a slice of
    the last leading axis that groups several small matrices), ``rows`` is a slice of the row
    axis; ``a[items][..., rows, :]`` is the block. Blocks are made smaller than ``block_bytes``
    when needed to give about 8 of them (so that the threads share the work evenly). Returns
    None if the whole array is smaller than ``min_bytes`` (not worth splitting).

    Examples
    --------
    >>> blocks = row_blocks((8,), 2048, 2048 * 4)  # 8 heads, 2048 rows of 2048 float32
    >>> len(blocks), blocks[1]
    (32, ((slice(0, 1, None),), slice(512, 1024, None)))
    """
    n_items = 1
    for size in lead:
        n_items *= size
    total = n_items * n_rows * row_bytes
    if total < max(min_bytes, 1):
        return None
    block_bytes = min(block_bytes, total // 8)  # at least ~8 blocks, to share among threads
    rows = max(1, min(n_rows, block_bytes // max(row_bytes, 1)))
    row_slices = [slice(r, min(r + rows, n_rows)) for r in range(0, n_rows, rows)]
    if not lead:
        return [((), sl) for sl in row_slices]
    # Whole matrices smaller than a block: take several of them along the last leading axis.
    last = lead[-1]
    group = 1 if rows < n_rows else max(1, min(last, block_bytes // max(n_rows * row_bytes, 1)))
    blocks = []
    for outer in itertools.product(*(range(size) for size in lead[:-1])):
        for start in range(0, last, group):
            items = outer + (slice(start, min(start + group, last)),)
            blocks.extend((items, sl) for sl in row_slices)
    return blocks


# --------------------------------------------------------------------------------------------
# OpenBLAS's own threads
# --------------------------------------------------------------------------------------------
#
# Inside parallel_for every thread calls matrix products of its own. If OpenBLAS also split each
# of them over all cores, 2 Python threads would start 2 x 2 BLAS threads on 2 cores, which then
# wait for each other (OpenBLAS's idle threads even spin for a while). So parallel code asks
# OpenBLAS for one thread per call while it runs (what threadpoolctl does, without the
# dependency): the cores are then shared out by parallel_for alone.

_blas_lock = threading.Lock()
_blas_users = 0
_blas_saved = 0
_blas_api: tuple | None | bool = False  # False: not looked up yet; None: not found


def _find_openblas():
    """``(get_num_threads, set_num_threads)`` of the OpenBLAS loaded by NumPy, or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    except OSError:  # not Linux: leave BLAS alone
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (
            ("scipy_openblas", "64_"),
            ("scipy_openblas", ""),
            ("openblas", "64_"),
            ("openblas", ""),
        ):
            get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                set_.restype, set_.argtypes = None, [ctypes.c_int]
                return get, set_
    return None


@contextlib.contextmanager
def blas_single_threaded() -> Iterator[None]:
    """Within the block, OpenBLAS runs each matrix product on the calling thread only.

    Nested and concurrent uses are counted: the first one in saves OpenBLAS's thread count,
    the last one out restores it. Without a recognised OpenBLAS this does nothing.
    """
    global _blas_api, _blas_users, _blas_saved
    with _blas_lock:
        if _blas_api is False:
            _blas_api = _find_openblas()
        api = _blas_api
        if api is not None:
            if _blas_users == 0:
                _blas_saved = api[0]()
                api[1](1)
            _blas_users += 1
    try:
        yield
    finally:
        if api is not None:
            with _blas_lock:
                _blas_users -= 1
                if _blas_users == 0:
                    api[1](_blas_saved)
