"""Read Kineto / Chrome trace files and summarise what happened in annotated windows.

The same code reads a trace this suite just exported and one recorded elsewhere (the
A100, H100, MI250 and MI300X traces under ``tests/data/traces``). Every kernel-name rule
(families, copy and fill kernels, Memcpy names) comes from ``perfsuite.trace.kernel_families``. Event categories follow Kineto's
Chrome-trace export: ``cpu_op`` (ATen ops, with ``Input Dims`` when shapes are
recorded), ``user_annotation`` (``record_function`` ranges and ``ProfilerStep#N``),
``cuda_runtime``/``cuda_driver`` (launch API calls, HIP calls on ROCm), ``kernel``,
``gpu_memcpy``, ``gpu_memset`` (device lanes, linked to their launch by ``correlation``)
and ``cpu_instant_event`` ``[memory]`` (allocator events, when memory is profiled).
Timestamps and durations are microseconds.
"""

from __future__ import annotations

import bisect
import collections
import math
import re
from typing import Any

from perfsuite.errors import TraceError  # noqa: F401  (re-exported)
from perfsuite.trace.events import (  # noqa: F401  (CopyRecord, WindowSummary, load_trace are re-exported)
    COMPILED_GRAPH_PREFIX,
    CPU_COPY_OPS,
    CPU_GATHER_OPS,
    CopyRecord,
    WindowSummary,
    _DEVICE_CATEGORIES,
    _LAUNCH_CATEGORIES,
    _MEMORY_DEVICE_TYPES,
    _converts_dtype,
    _first_dims,
    _memcpy_kind,
    _memcpy_route,
    _tensor_types,
    device_event_kind,
    gather_element_bytes,
    gather_output_shape,
    load_trace,
    op_output_bytes,
)
from perfsuite.trace.kernel_families import is_copy_kernel, is_gather_kernel
from perfsuite.trace.work import op_work


class TraceIndex:
    """Events of one trace grouped for window queries; build once, query many windows."""

    def __init__(self, trace: dict[str, Any]):
        events = [e for e in trace["traceEvents"] if isinstance(e, dict)]
        by_cat = collections.defaultdict(list)
        for event in events:
            by_cat[event.get("cat")].append(event)
        self.annotations = by_cat["user_annotation"]
        self.cpu_ops = by_cat["cpu_op"]
        self.launches = [e for c in _LAUNCH_CATEGORIES for e in by_cat[c]]
        self.device_events = [
            e for c in _DEVICE_CATEGORIES for e in by_cat[c] if e.get("ph", "X") == "X"
        ]
        self.memory = [e for e in by_cat["cpu_instant_event"] if e.get("name") == "[memory]"]
        self.memory.sort(key=lambda e: e.get("ts", 0))
        self.op_by_external_id = {
            e["args"]["External id"]: e for e in self.cpu_ops if "External id" in e.get("args", {})
        }
        self.launch_by_correlation = {
            e["args"]["correlation"]: e
            for e in self.launches
            if e.get("args", {}).get("correlation") is not None
        }
        self.host_pids = {e.get("pid") for e in self.cpu_ops + self.launches}
        self.unattributed = [e for e in self.device_events if not self._launch_of(e)]

    def _launch_of(self, event: dict[str, Any]) -> dict[str, Any] | None:
        correlation = event.get("args", {}).get("correlation")
        return None if correlation is None else self.launch_by_correlation.get(correlation)

    def annotation_names(self) -> list[str]:
        """Distinct annotation names, ``#N`` suffixes folded (``ProfilerStep``)."""
        return sorted({re.sub(r"#\d+$", "", str(e.get("name", ""))) for e in self.annotations})

    def windows(self, annotation: str) -> list[dict[str, Any]]:
        """Annotation events named ``annotation`` or ``annotation#N``, in time order."""
        pattern = re.compile(re.escape(annotation) + r"(#\d+)?$")
        found = [
            e for e in self.annotations if pattern.match(str(e.get("name", ""))) and "dur" in e
        ]
        return sorted(found, key=lambda e: e["ts"])

    def host_ranges(self) -> list[dict[str, Any]]:
        """Annotations and CPU ops: where ``record_function`` ranges land, whichever category."""
        return self.annotations + self.cpu_ops

    def whole_trace(self) -> dict[str, Any]:
        """A pseudo-window spanning every CPU-side event of every process (the device events when
        there are none); it holds every device event of the trace, launched in it or not."""
        timed = (
            self.cpu_ops + self.launches + self.annotations + self.memory
        ) or self.device_events
        if not timed:
            return {"name": "whole trace", "ts": 0, "dur": 0, "pid": None, "whole": True}
        start = min(e.get("ts", 0) for e in timed)
        end = max(e.get("ts", 0) + e.get("dur", 0) for e in timed)
        return {"name": "whole trace", "ts": start, "dur": end - start, "pid": None, "whole": True}

    def _unattributed_warning(self, start: float, end: float, whole: bool) -> tuple[str, ...]:
        if not self.unattributed:
            return ()
        time_us = sum(float(e.get("dur", 0)) for e in self.unattributed)
        lost = (
            f"{len(self.unattributed)} device event(s) ({time_us:.1f} us) have no recorded launch"
        )
        if whole:
            return (f"{lost}: counted here as unattributed; per-window attribution is incomplete",)
        during = sum(1 for e in self.unattributed if start <= e.get("ts", -1) <= end)
        return (
            f"{lost} ({during} ran during this window): per-window attribution is incomplete, "
            "these counts may be short",
        )

    def summarize(self, window: dict[str, Any]) -> WindowSummary:
        """Summarise one window event (from ``windows`` or ``whole_trace``; pid None = any process)."""
        start, end, pid = window["ts"], window["ts"] + window["dur"], window.get("pid")
        whole = bool(window.get("whole"))
        if pid not in self.host_pids:
            pid = None  # some traces give annotations another pid namespace than ops (containers)

        def inside(e: dict[str, Any]) -> bool:
            return whole or (
                (pid is None or e.get("pid") == pid) and start <= e.get("ts", -1) <= end
            )

        ops = [e for e in self.cpu_ops if inside(e)]
        launches = [e for e in self.launches if inside(e)]
        if whole:
            device = self.device_events
        else:
            correlations = {e.get("args", {}).get("correlation") for e in launches} - {None}
            device = [
                e
                for e in self.device_events
                if e.get("args", {}).get("correlation") in correlations
            ]
        by_kind = collections.defaultdict(list)
        for e in device:
            by_kind[device_event_kind(e)].append(e)
        kernels, memcpys, memsets = by_kind["kernel"], by_kind["memcpy"], by_kind["memset"]
        memcpy_bytes: dict[str, int] = collections.Counter()
        kernel_time: dict[str, float] = collections.Counter()
        for e in memcpys:
            memcpy_bytes[_memcpy_kind(e["name"])] += self._event_bytes(e) or 0
        for e in kernels:
            kernel_time[e["name"]] += float(e.get("dur", 0))
        unattributed = self.unattributed if whole else []
        allocated, peak, level = self._memory(start, end, pid, whole)
        memory = [e for e in self.memory if inside(e)]
        work = op_work(ops, memory, launches)
        gathered = self._gathered(ops, memory)
        return WindowSummary(
            annotation=window["name"],
            start_us=float(start),
            duration_us=float(window["dur"]),
            cpu_ops=dict(collections.Counter(e["name"] for e in ops)),
            kernels=dict(collections.Counter(e["name"] for e in kernels)),
            kernel_time_us=dict(kernel_time),
            launch_calls=dict(collections.Counter(e["name"] for e in launches)),
            launch_time_us=float(sum(e.get("dur", 0) for e in launches if "aunch" in e["name"])),
            device_time_us=float(sum(kernel_time.values())),
            memcpy_counts=dict(collections.Counter(_memcpy_kind(e["name"]) for e in memcpys)),
            memcpy_bytes=dict(memcpy_bytes),
            memcpy_routes=dict(collections.Counter(_memcpy_route(e["name"]) for e in memcpys)),
            memset_count=len(memsets),
            memset_bytes=sum(self._event_bytes(e) or 0 for e in memsets),
            copies=tuple(self._cpu_copies(ops) + self._device_copies(kernels + memcpys)),
            gathers=tuple(
                [r for op, r in gathered.values() if r is not None]
                + self._device_gathers(kernels, gathered)
            ),
            allocated_bytes=allocated,
            peak_bytes=peak,
            allocated_level_bytes=level,
            compiled_graph_calls=sum(
                1
                for e in self.host_ranges()
                if inside(e) and str(e.get("name", "")).startswith(COMPILED_GRAPH_PREFIX)
            ),
            unattributed_events=len(unattributed),
            unattributed_time_us=float(sum(e.get("dur", 0) for e in unattributed)),
            warnings=self._unattributed_warning(start, end, whole),
            work_ops=work.work_ops,
            no_work_ops=work.no_work_ops,
            written_in_place_bytes=work.written_in_place_bytes,
        )

    def _event_bytes(self, event: dict[str, Any]) -> int | None:
        """A Memcpy/Memset's ``bytes``; when the event has none (ROCm), the launching op's size."""
        size = event.get("args", {}).get("bytes")
        if size is not None:
            return int(size)
        return op_output_bytes(self._launching_op(event.get("args", {})))

    def _cpu_copies(self, ops: list[dict[str, Any]]) -> list[CopyRecord]:
        """Outermost ``aten::copy_``/``aten::clone`` ops (a clone's inner copy_ is not counted twice)."""
        copy_ops = sorted((e for e in ops if e["name"] in CPU_COPY_OPS), key=lambda e: e["ts"])
        records, open_until = [], {}
        for e in copy_ops:
            tid = e.get("tid")
            if e["ts"] < open_until.get(tid, float("-inf")):
                continue  # nested inside a copy already counted
            open_until[tid] = e["ts"] + e.get("dur", 0)
            records.append(
                CopyRecord(
                    "cpu",
                    e["name"],
                    e["name"],
                    _first_dims(e),
                    op_output_bytes(e),
                    _converts_dtype(e),
                    _tensor_types(e),
                )
            )
        return records

    def _gathered(
        self, ops: list[dict[str, Any]], memory: list[dict[str, Any]]
    ) -> dict[int, tuple[dict[str, Any], CopyRecord | None]]:
        """Every gather op of the window (``CPU_GATHER_OPS``), by ``id``, with its ``cpu`` record,
        or None for a gather inside another (``stack`` -> ``cat``: counted once, as the outer).

        The record's shape is ``gather_output_shape``; its bytes that shape times the source's
        element size, else (``cat``/``stack`` record no dtype) the bytes allocated by the gather
        itself, by a gather inside it or by an ``empty*``/``resize_`` either calls: its result
        (an index cast inside ``aten::index`` allocates in ``aten::to``, not counted)."""
        by_thread: dict[Any, list[dict[str, Any]]] = collections.defaultdict(list)
        for e in ops:
            by_thread[e.get("tid")].append(e)
        allocations: dict[Any, list[tuple[float, int]]] = collections.defaultdict(list)
        for e in memory:
            size = int(e.get("args", {}).get("Bytes", 0))
            if size > 0:
                allocations[e.get("tid")].append((float(e.get("ts", 0)), size))
        found: dict[int, tuple[dict[str, Any], CopyRecord | None]] = {}
        for tid, thread_ops in by_thread.items():
            thread_ops.sort(key=lambda e: (float(e.get("ts", 0)), -float(e.get("dur", 0))))
            stack: list[dict[str, Any]] = []
            for position, e in enumerate(thread_ops):
                while stack and _end(stack[-1]) < float(e.get("ts", 0)):
                    stack.pop()
                if e["name"] in CPU_GATHER_OPS:
                    outer = any(s["name"] in CPU_GATHER_OPS for s in stack)
                    callees = []
                    for c in thread_ops[position + 1 :]:
                        if float(c.get("ts", 0)) > _end(e):
                            break
                        callees.append(c)
                    record = None
                    if not outer:
                        record = self._gather_record(e, callees, allocations.get(tid, []))
                    found[id(e)] = (e, record)
                stack.append(e)
        return found

    @staticmethod
    def _gather_record(
        op: dict[str, Any], callees: list[dict[str, Any]], allocations: list[tuple[float, int]]
    ) -> CopyRecord:
        shape = gather_output_shape(op, callees)
        element = gather_element_bytes(op)
        size = None
        if shape is not None and element is not None:
            size = element * math.prod(shape)
        else:
            size = _result_allocation(op, callees, allocations)
            if shape is not None and size:
                size = _bytes_of_shape(math.prod(shape), size)
        return CopyRecord("cpu", op["name"], op["name"], shape, size, False, _tensor_types(op))

    def _device_gathers(
        self,
        kernels: list[dict[str, Any]],
        gathered: dict[int, tuple[dict[str, Any], CopyRecord | None]],
    ) -> list[CopyRecord]:
        """Gather kernels (``is_gather_kernel``), each with the dims and bytes of the gather op
        that launched it (``gather_output_shape``), when that op is in the window."""
        by_op = {id(op): record for op, record in gathered.values()}
        records = []
        for e in kernels:
            if not is_gather_kernel(e["name"]):
                continue
            op = self._launching_op(e.get("args", {}))
            record = by_op.get(id(op)) if op is not None else None
            if record is None and op is not None and op.get("name") in CPU_GATHER_OPS:
                record = self._gather_record(op, [], [])
            records.append(
                CopyRecord(
                    "device",
                    "gather kernel",
                    e["name"],
                    record.shape if record else None,
                    record.size_bytes if record else None,
                    False,
                    _tensor_types(op),
                )
            )
        return records

    def _device_copies(self, device: list[dict[str, Any]]) -> list[CopyRecord]:
        """Memcpy events (or Memcpy filed as kernels) and copy kernels, each with the ATen op that
        made it; sizes from the event, else from that op."""
        records = []
        for e in device:
            is_memcpy = device_event_kind(e) == "memcpy"
            if not (is_memcpy or is_copy_kernel(e["name"])):
                continue
            args = e.get("args", {})
            op = self._launching_op(args)
            shape = _first_dims(op) if op else None
            kind = _memcpy_kind(e["name"]) if is_memcpy else "copy kernel"
            size = self._event_bytes(e) if is_memcpy else op_output_bytes(op)
            records.append(
                CopyRecord(
                    "device", kind, e["name"], shape, size, _converts_dtype(op), _tensor_types(op)
                )
            )
        return records

    def _launching_op(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The ATen op that issued a device event: by ``External id``, else the innermost
        op enclosing its launch call on the same thread (older Kineto traces)."""
        op = self.op_by_external_id.get(args.get("External id"))
        if op is not None and op.get("name") in CPU_COPY_OPS:
            return op
        correlation = args.get("correlation")
        launch = None if correlation is None else self.launch_by_correlation.get(correlation)
        if launch is None:
            return op
        enclosing = [
            e
            for e in self.cpu_ops
            if e.get("tid") == launch.get("tid")
            and e["ts"] <= launch["ts"] <= e["ts"] + e.get("dur", 0)
        ]
        return max(enclosing, key=lambda e: e["ts"]) if enclosing else op

    def _memory(
        self, start: float, end: float, pid: Any, whole: bool = False
    ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        allocated: dict[str, int] = collections.Counter()
        peak: dict[str, int] = {}
        level_at_start: dict[str, int] = {}
        for e in self.memory:
            if not whole and (
                (pid is not None and e.get("pid") != pid) or not (start <= e.get("ts", -1) <= end)
            ):
                continue
            args = e.get("args", {})
            device = _MEMORY_DEVICE_TYPES.get(args.get("Device Type"), str(args.get("Device Type")))
            size, total = int(args.get("Bytes", 0)), int(args.get("Total Allocated", 0))
            level_at_start.setdefault(device, total - size)
            if size > 0:
                allocated[device] += size
            peak[device] = max(peak.get(device, 0), total - level_at_start[device])
        return dict(allocated), peak, level_at_start


def _end(event: dict[str, Any]) -> float:
    return float(event.get("ts", 0)) + float(event.get("dur", 0))


def _result_allocation(
    op: dict[str, Any], callees: list[dict[str, Any]], allocations: list[tuple[float, int]]
) -> int | None:
    """Bytes allocated for a gather's result (``allocations``: ``(ts, bytes)`` of its thread, in
    time order): by the gather itself, a gather inside it, or an ``empty*``/``resize_`` either calls."""
    result_ops = [op] + [
        c
        for c in callees
        if c["name"] in CPU_GATHER_OPS
        or str(c["name"]).startswith(("aten::empty", "aten::resize_"))
    ]
    first = bisect.bisect_left(allocations, (float(op.get("ts", 0)), -1))
    size = 0
    for ts, nbytes in allocations[first:]:
        if ts > _end(op):
            break
        holders = [c for c in [op] + callees if float(c.get("ts", 0)) <= ts <= _end(c)]
        if max(holders, key=lambda c: float(c.get("ts", 0))) in result_ops:
            size += nbytes
    return size or None


# The CUDA caching allocator reports blocks rounded up to 512-byte multiples (at least 512).
_BLOCK = 512


def _bytes_of_shape(elements: int, allocated: int) -> int:
    """A result of ``elements`` elements that allocated ``allocated`` bytes: ``elements`` times the
    one element size (8, 4, 2, 1) the allocation fits exactly or as a rounded CUDA block; the
    allocation itself when none or several fit."""
    fits = [
        size
        for size in (8, 4, 2, 1)
        if elements * size == allocated
        or max(_BLOCK, -(-elements * size // _BLOCK) * _BLOCK) == allocated
    ]
    return elements * fits[0] if len(fits) == 1 else allocated


def summarize_windows(trace: dict[str, Any], annotation: str) -> list[WindowSummary]:
    """Summaries of every window named ``annotation`` (or ``annotation#N``) in ``trace``."""
    index = TraceIndex(trace)
    return [index.summarize(w) for w in index.windows(annotation)]
