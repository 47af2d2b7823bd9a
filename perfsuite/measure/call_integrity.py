"""A call's work is inside the call, and its answer depends on this call's inputs.

Checks made on a variant's checked (untimed) calls, each failing with its reason named:

* ``ThreadWatch``: threads a call started and left running (a thread that fills the output after
  the call returned, so the work escapes the timer) are named after the call; they are released
  so they cannot keep the process alive at exit (``release_at_exit``).
* ``output_settled``: the output does not change after the call returned (work left on a side
  CUDA stream or in a thread); on CUDA the current stream is waited for, then the device.
* ``fresh_input_failures``: the same tensors given other values (another seed, written in place so
  the data pointers stay the same) must give the reference's answer for those values: a cached
  answer (keyed on shapes or data pointers) fails with "the output did not change with the inputs",
  a computation on a subset of the inputs with the element named, and an output that a later
  call overwrites (it aliases the variant's own storage) with that said.
* ``kept_bytes_per_call``: memory a variant keeps across calls (host RSS on the CPU,
  ``torch.cuda.memory_allocated`` on CUDA), measured over a few calls.
* ``reproducibility_failure``: for a variant that declares itself deterministic, N reruns of the
  step compared bitwise with the first.

Cost (outside every timed interval): one more call of the step and one more float64 reference
(and its plain computation in the case's dtype) for the fresh inputs; ``KEPT_MEMORY_CALLS`` calls
for the memory measurement; N calls for a variant declaring determinism.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from perfsuite.attention.inputs import AttentionInputs, make_inputs
from perfsuite.attention.modes import StepResult
from perfsuite.units import format_bytes

FRESH_SEED_OFFSET = 7_919  # the fresh inputs' seed is the suite's seed plus this
KEPT_MEMORY_CALLS = 4  # calls over which kept memory is measured
KEPT_MEMORY_MIN_BYTES_PER_CALL = 1 << 20  # host RSS noise stays below this; CUDA counts exactly
DEFAULT_DETERMINISM_RUNS = 10

# -- threads ------------------------------------------------------------------------------


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


# -- work outside the call ------------------------------------------------------------------


def settle(output: torch.Tensor, device: str, api=None) -> torch.Tensor:
    """A copy of ``output`` as the call's own stream left it; then the whole device is waited for.

    On CUDA the current stream is synchronized first (what CUDA events around the call measure),
    the copy taken, then the device synchronized, so work left on a side stream shows as an output
    that changes afterwards (``changed_after_return``). ``api``: the ``DeviceApi`` (a fake in tests).
    """
    if device == "cuda" or api is not None:
        from perfsuite.measure.device_api import TorchCuda

        api = api or TorchCuda()
        api.synchronize_stream()
        copy = output.detach().clone()
        api.synchronize()
        return copy
    return output.detach().clone()


def changed_after_return(
    output: torch.Tensor, settled: torch.Tensor, variant_name: str, during: str
) -> str | None:
    """The failure when ``output`` differs (bitwise, NaN equal to NaN) from the copy ``settle`` took."""
    if _bitwise_equal(output.detach(), settled):
        return None
    return (
        f"variant {variant_name}'s output changed after {during} returned: work the call started ran on "
        "after it (a side CUDA stream not joined, or a thread), outside its timed interval"
    )


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        return bool(same.all()) and torch.equal(torch.signbit(a), torch.signbit(b))
    return torch.equal(a, b)


# -- fresh inputs ----------------------------------------------------------------------------

_REPLACED = ("query", "key", "value")


@contextlib.contextmanager
def substituted(inputs: AttentionInputs, values: AttentionInputs) -> Iterator[None]:
    """``inputs``' query, key and value hold ``values``' for the block, written in place (same
    tensors, same data pointers), restored after it. Written through ``.data``, so the autograd
    version counters do not move and a stored graph (the backward mode's) stays valid once restored."""
    saved = {name: getattr(inputs, name).detach().clone() for name in _REPLACED}
    with torch.no_grad():
        for name in _REPLACED:
            getattr(inputs, name).data.copy_(getattr(values, name))
    try:
        yield
    finally:
        with torch.no_grad():
            for name in _REPLACED:
                getattr(inputs, name).data.copy_(saved[name])


def fresh_values(case, seed: int, pristine: AttentionInputs) -> AttentionInputs:
    """``pristine`` with query, key and value drawn from ``seed + FRESH_SEED_OFFSET`` (the mask kept)."""
    drawn = make_inputs(case, seed + FRESH_SEED_OFFSET)
    return pristine.replace(query=drawn.query, key=drawn.key, value=drawn.value)


def fresh_input_failures(
    variant_name: str,
    first: StepResult,
    first_copy: torch.Tensor,
    fresh_result: StepResult,
    fresh_comparison_failure: str | None,
    fresh_seed: int,
) -> list[str]:
    """What the call on fresh inputs showed: a stale answer, an overwritten earlier output, a wrong answer.

    ``first``: the first call's result on the case's inputs, ``first_copy`` a copy of its output
    taken then; ``fresh_result``: a later call on the same tensors holding other values (seed
    ``fresh_seed``); ``fresh_comparison_failure``: its comparison with the reference for those values.
    """
    failures = []
    where = f"inputs of the same case drawn from seed {fresh_seed} (same tensors, new values)"
    if _bitwise_equal(fresh_result.output.detach(), first_copy):
        failures.append(
            f"variant {variant_name}: the output did not change with the inputs: on {where} it returned "
            "exactly the first call's output (a cached or stale answer)"
        )
    elif fresh_comparison_failure:
        failures.append(
            f"variant {variant_name} is wrong on {where}, right on the case's own: "
            f"{fresh_comparison_failure}"
        )
    if not _bitwise_equal(first.output.detach(), first_copy):
        failures.append(
            f"variant {variant_name}: a later call overwrote the output of an earlier one (the output aliases "
            "storage the variant keeps and reuses); every call must return its own tensor"
        )
    return failures


# -- memory kept across calls ---------------------------------------------------------------


def _rss_bytes() -> int | None:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def _memory_now(device: str) -> int | None:
    if device == "cuda":
        torch.cuda.synchronize()
        return int(torch.cuda.memory_allocated())
    return _rss_bytes()


def kept_bytes_per_call(
    step: Callable[[], object],
    device: str,
    calls: int = KEPT_MEMORY_CALLS,
    memory: Callable[[str], int | None] = _memory_now,
) -> int | None:
    """Bytes a step keeps per call: the memory after each of ``calls`` calls (results dropped),
    reported when it grew after every call by at least ``KEPT_MEMORY_MIN_BYTES_PER_CALL`` on the CPU
    (host RSS; allocator noise stays below it) or by any amount on CUDA (live tensor bytes).
    Returns the mean growth per call in bytes, or None when nothing was kept (or not measurable)."""
    step()  # a first call may allocate what every later call reuses
    readings = [memory(device)]
    for _ in range(calls):
        step()
        readings.append(memory(device))
    if any(r is None for r in readings):
        return None
    growth = [b - a for a, b in zip(readings, readings[1:])]
    least = 1 if device == "cuda" else KEPT_MEMORY_MIN_BYTES_PER_CALL
    if all(g >= least for g in growth):
        return sum(growth) // len(growth)
    return None


def kept_memory_warning(variant_name: str, case_id: str, mode: str, bytes_per_call: int) -> str:
    """The warning line for a variant that keeps memory across calls."""
    return (
        f"variant {variant_name} on {case_id} ({mode}) keeps {format_bytes(bytes_per_call)} per call "
        f"({bytes_per_call} bytes): memory it holds on to grows with every call (a cache or a list of outputs); "
        "a long run will run out of memory"
    )


# -- determinism --------------------------------------------------------------------------


def reproducibility_failure(
    step: Callable[[], StepResult], first: StepResult, runs: int, variant_name: str
) -> str | None:
    """For a variant declaring determinism: ``runs`` more calls of ``step``, each compared bitwise
    (output and gradients) with ``first``; the first difference named, or None."""
    expected = [first.output.detach().clone()] + [
        g.detach().clone() for g in (first.gradients or ())
    ]
    names = ["output", "grad_query", "grad_key", "grad_value"]
    for run in range(1, runs + 1):
        result = step()
        got = [result.output] + list(result.gradients or ())
        for name, a, b in zip(names, got, expected):
            if not _bitwise_equal(a.detach(), b):
                differing = int((a.detach() != b).sum())
                return (
                    f"variant {variant_name} declares itself deterministic, but rerun {run} of {runs} differs "
                    f"bitwise from the first call in its {name} ({differing} of {b.numel()} elements)"
                )
    return None
