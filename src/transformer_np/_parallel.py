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

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

__all__ = ["num_threads", "parallel_for", "split_range"]

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


def parallel_for(fn: Callable, pieces: Sequence, *, threads: int | None = None) -> None:
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
    """
    pieces = list(pieces)
    t = min(num_threads() if threads is None else threads, len(pieces))
    if t <= 1 or getattr(_state, "inside", False):
        for piece in pieces:
            fn(piece)
        return
    # Piece i goes to thread i mod t: interleaving balances pieces of unequal cost (for example
    # the query blocks of causal attention, which grow with the row index).
    shares = [pieces[i::t] for i in range(t)]

    pool = _get_pool(t - 1)
    futures = [pool.submit(_run_share, fn, share) for share in shares[1:]]
    error = None
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
