"""A time limit on a variant's calls, so one that never returns fails its case and the run goes on.

The limit is a POSIX interval timer (``signal.setitimer``, ``SIGALRM``) armed around the calls
and disarmed after them; when it fires, ``CallTimeLimitExceeded`` is raised in the call. It
interrupts Python code and returns from blocking waits at once; a single C++ kernel that never
returns cannot be interrupted in-process (``--perfsuite-isolate`` runs first calls in a child
that is killed). Where no interval timer exists (not the main thread, or Windows) there is no limit.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

# Seconds one call may take, by device: generous for the largest cases of the named case sets
# (a compiled variant's first call compiles), short enough that a hang does not eat a CI job.
DEFAULT_CALL_TIME_LIMIT_S = {"cpu": 600.0, "cuda": 120.0}


class CallTimeLimitExceeded(AssertionError):
    """A call of a variant ran past its time limit; the message names the variant, the case and the limit."""


def default_limit_s(device: str) -> float:
    """``DEFAULT_CALL_TIME_LIMIT_S`` for ``device`` (the CPU's for a device it does not list)."""
    return DEFAULT_CALL_TIME_LIMIT_S.get(device, DEFAULT_CALL_TIME_LIMIT_S["cpu"])


def _available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class Limit:
    """What ``time_limit`` yields: ``expired`` turns True when the limit fired (also when the code
    interrupted replaced ``CallTimeLimitExceeded`` by an error of its own while cleaning up)."""

    expired: bool = False


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[Limit]:
    """Raise ``CallTimeLimitExceeded`` naming ``what`` and ``seconds`` if the block runs longer.

    ``seconds`` None or 0: no limit. Nested limits keep the outer one (the inner block runs without its own).
    """
    limit = Limit()
    if not seconds or not _available() or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield limit
        return

    def expired(signum, frame):
        limit.expired = True
        raise CallTimeLimitExceeded(
            f"{what} ran past the time limit of {seconds:g} s (--perfsuite-call-time-limit); "
            "this case fails, the run goes on"
        )

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield limit
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
