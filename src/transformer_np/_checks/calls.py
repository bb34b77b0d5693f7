"""Who is calling: a user (the checks run) or the package's own maths (they do not).

The first public function, layer call, construction or ``backward`` that a user makes marks
this thread as inside the package (:mod:`.boundary`); what it calls in turn sees the mark and
skips the checks that the user's call already made.
"""

from __future__ import annotations

import functools
import threading


class Calls(threading.local):
    inside = False  # a user's call into the package is running on this thread
    in_backward = False  # a backward pass is running on this thread
    gradient_to_check = False  # the backward pass has not read its incoming gradient yet


state = Calls()


def user_entry() -> bool:
    """Whether the call being made comes from outside the package (its checks must run)."""
    return not state.inside


def incoming_gradient() -> bool:
    """Whether the gradient a ``backward`` is about to read enters the backward pass (check it,
    once), or was passed on by the layer above (take it as it is)."""
    if state.gradient_to_check:
        state.gradient_to_check = False
        return True
    return not state.in_backward


def user_code(function):
    """``function``, a callable the user passed in (a callback, a schedule, a source of
    batches), run as the user's own code whenever the package calls it: what it calls is
    checked as any call of the user's is."""
    if function is None:
        return None

    @functools.wraps(function)
    def run(*args, **kwargs):
        inside, state.inside = state.inside, False
        try:
            return function(*args, **kwargs)
        finally:
            state.inside = inside

    return run
