"""Threads a variant's call started and left running: named after the call, and never allowed to keep
the process alive.

``ThreadWatch`` finds the threads alive after a block that were not alive before it, less library
helper threads that only wait for work (``waits_for_work``); ``threads_failure`` names them after
the call; ``release_at_exit`` takes a non-daemon thread out of the interpreter's exit join, so a
thread that never ends cannot keep pytest, or an isolated probe, from exiting. No torch import: an
isolated probe child and the tests use it cheaply.
"""

from __future__ import annotations

import threading


class ThreadWatch:
    """Threads alive after a block that were not alive before it: ``with ThreadWatch() as w: call()``,
    then ``w.left_running()``."""

    def __enter__(self) -> ThreadWatch:
        self._before = set(threading.enumerate())
        return self

    def __exit__(self, *exc) -> None:
        self._after = [t for t in threading.enumerate() if t not in self._before and t.is_alive()]

    def left_running(self) -> list[threading.Thread]:
        """The new threads still alive, less library threads that only wait (``waits_for_work``)."""
        return [t for t in self._after if t.is_alive() and not waits_for_work(t)]


def waits_for_work(thread: threading.Thread) -> bool:
    """A library's helper thread that holds no work of the call: tqdm's monitor (torch.compile's
    progress bars), or a ``concurrent.futures.ThreadPoolExecutor`` worker whose pool is idle (torch.compile
    starts such pools; a pool with work queued or running is not idle, so work handed to it is caught)."""
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", "") or type(thread).__module__
    if module.startswith("tqdm"):
        return True
    if module == "concurrent.futures.thread" and getattr(target, "__name__", "") == "_worker":
        args = getattr(thread, "_args", ())
        executor = args[0]() if args and callable(args[0]) else None
        queue = args[1] if len(args) > 1 else None
        if executor is None:
            return queue is not None and queue.empty()
        idle = getattr(getattr(executor, "_idle_semaphore", None), "_value", 0)
        return queue is not None and queue.empty() and idle >= len(executor._threads)
    return False


def describe_threads(threads: list[threading.Thread]) -> str:
    """``'Thread-3 (fill)' (not a daemon, target module.fill)``, joined with commas."""
    parts = []
    for thread in threads:
        target = getattr(thread, "_target", None)
        where = (
            f", target {getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
            if target
            else ""
        )
        parts.append(f"{thread.name!r} ({'a daemon' if thread.daemon else 'not a daemon'}{where})")
    return ", ".join(parts)


def threads_failure(variant_name: str, threads: list[threading.Thread], during: str) -> str:
    """The failure naming the threads ``during`` (``the first call of ...``) left running."""
    return (
        f"variant {variant_name} left {len(threads)} thread(s) running after {during}: "
        f"{describe_threads(threads)}; work that runs after the call returns escapes its timing "
        "(the threads were released so they cannot keep the process alive at exit)"
    )


def release_at_exit(thread: threading.Thread) -> bool:
    """Let the interpreter exit without waiting for ``thread`` (as if it were a daemon).

    Python joins every non-daemon thread at exit (``threading._shutdown``), so a variant's thread
    that never ends would keep pytest (or an isolated probe) alive forever. This takes the thread out
    of that join where the interpreter allows it (CPython 3.11 and 3.12: ``threading._shutdown_locks``;
    3.13: the thread's handle). Returns True when released (or already a daemon)."""
    if thread.daemon or not thread.is_alive():
        return True
    released = False
    lock = getattr(thread, "_tstate_lock", None)
    locks = getattr(threading, "_shutdown_locks", None)
    guard = getattr(threading, "_shutdown_locks_lock", None)
    if lock is not None and locks is not None and guard is not None:
        with guard:
            locks.discard(lock)
        released = True
    handles = getattr(threading, "_shutdown_handles", None)  # not in every version
    handle = getattr(thread, "_handle", None)
    if handles is not None and handle is not None:
        handles.discard(handle)
        released = True
    if released:
        thread._daemonic = True  # private, so threading.enumerate() reports it as a daemon
    return released
