"""Which ATen ops of a window did work, read from the profiler's own records.

An op record *did work* when it, or an op it called, left one of these traces in the profile:

* an allocation (a ``[memory]`` event with ``Bytes > 0`` on its thread, inside it and inside no
  op it called): an out-of-place op allocates the tensor it writes;
* a launch of device work (a ``cuda_runtime``/``cuda_driver`` call inside it, on its thread);
* an in-place write: ATen's naming rule, an op whose name ends in one ``_`` writes its first
  argument (``copy_``, ``masked_fill_``, ``mul_``); its size is read from the record's
  ``Input Dims``/``Input type``. A wrapper whose own in-place callee writes a tensor of the
  same dims (``zero_`` -> ``fill_``) is not counted twice.

Any other record did no work: a view (``view``, ``_unsafe_view``, ``transpose``, ``expand``),
a ``.to`` to the dtype it already has, ``contiguous`` on a contiguous tensor. Nothing here is a
list of op names: the profile says what each op did. Its limits: an op that writes through
``out=`` without allocating is seen only by its callees; allocations the profiler filed
outside any op (a scalar wrapped before the op starts) belong to no op, though the window's
``allocated_bytes`` still counts them.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
from typing import Any

from perfsuite.trace.events import op_output_bytes


@dataclasses.dataclass(frozen=True)
class OpWork:
    """Op records of one window split by whether they did work (see the module docstring).

    ``work_ops``/``no_work_ops``: counts by op name (every record is in exactly one);
    ``written_in_place_bytes``: bytes written by in-place ops (their destinations' sizes).
    """

    work_ops: dict[str, int]
    no_work_ops: dict[str, int]
    written_in_place_bytes: int


def is_in_place(name: str) -> bool:
    """ATen's rule: ``aten::mul_`` writes its first argument; ``__and__``-style names do not."""
    return name.endswith("_") and not name.endswith("__")


def _end(event: dict[str, Any]) -> float:
    return float(event.get("ts", 0)) + float(event.get("dur", 0))


def _innermost(
    thread_ops: list[dict[str, Any]], starts: list[float], parents: list[int | None], ts: float
) -> int | None:
    """Index of the innermost op whose range holds ``ts`` (ops sorted by start): the last op
    started by then, or the nearest of its callers that is still open."""
    position: int | None = bisect.bisect_right(starts, ts) - 1
    while position is not None and position >= 0:
        if ts <= _end(thread_ops[position]):
            return position
        position = parents[position]
    return None


def op_work(
    ops: list[dict[str, Any]], memory: list[dict[str, Any]], launches: list[dict[str, Any]]
) -> OpWork:
    """Split ``cpu_op`` records into work and no work, by the allocations (``memory``: ``[memory]``
    instant events) and launch calls (``launches``) of the same window."""
    by_thread: dict[Any, list[dict[str, Any]]] = collections.defaultdict(list)
    for op in ops:
        by_thread[op.get("tid")].append(op)
    events_by_thread: dict[Any, list[float]] = collections.defaultdict(list)
    for event in memory:
        if int(event.get("args", {}).get("Bytes", 0)) > 0:
            events_by_thread[event.get("tid")].append(float(event.get("ts", 0)))
    for event in launches:
        events_by_thread[event.get("tid")].append(float(event.get("ts", 0)))
    work: collections.Counter[str] = collections.Counter()
    no_work: collections.Counter[str] = collections.Counter()
    written = 0
    for tid, thread_ops in by_thread.items():
        thread_ops.sort(key=lambda e: (float(e.get("ts", 0)), -float(e.get("dur", 0))))
        starts = [float(e.get("ts", 0)) for e in thread_ops]
        parents = _parents(thread_ops)
        did = [False] * len(thread_ops)
        for ts in events_by_thread.get(tid, ()):
            position = _innermost(thread_ops, starts, parents, ts)
            if position is not None:
                did[position] = True
        written += _in_place_writes(thread_ops, parents, did)
        for position in reversed(range(len(thread_ops))):  # a callee comes after its caller
            if did[position] and parents[position] is not None:
                did[parents[position]] = True
        for op, worked in zip(thread_ops, did):
            (work if worked else no_work)[op["name"]] += 1
    return OpWork(dict(sorted(work.items())), dict(sorted(no_work.items())), written)


def _parents(thread_ops: list[dict[str, Any]]) -> list[int | None]:
    parents: list[int | None] = []
    stack: list[int] = []
    for position, op in enumerate(thread_ops):
        while stack and _end(thread_ops[stack[-1]]) < float(op.get("ts", 0)):
            stack.pop()
        parents.append(stack[-1] if stack else None)
        stack.append(position)
    return parents


def _in_place_writes(
    thread_ops: list[dict[str, Any]], parents: list[int | None], did: list[bool]
) -> int:
    """Mark in-place ops as work and sum their destinations' bytes, each write counted once."""
    dims = lambda op: (op.get("args", {}).get("Input Dims") or [None])[0]
    in_place = [is_in_place(str(op.get("name", ""))) for op in thread_ops]
    covered = [False] * len(thread_ops)  # an in-place callee wrote the same destination
    for position in range(len(thread_ops)):
        up = parents[position]
        while in_place[position] and up is not None:
            if in_place[up] and dims(thread_ops[up]) == dims(thread_ops[position]):
                covered[up] = True
            up = parents[up]
    written = 0
    for position, op in enumerate(thread_ops):
        if in_place[position]:
            did[position] = True
            if not covered[position]:
                written += op_output_bytes(op) or 0
    return written
