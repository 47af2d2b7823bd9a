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

import collections
import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterable

from perfsuite.errors import TraceError
from perfsuite.trace.kernel_families import is_copy_kernel, is_memset_kernel, kernel_family, memcpy_kind, sdpa_backends

CPU_COPY_OPS = ("aten::copy_", "aten::clone")
COMPILED_GRAPH_PREFIX = "## Call CompiledFxGraph"  # Inductor's range around a compiled graph, forward or backward
# c10::DeviceType of allocator events: 0 CPU, 1 CUDA, 6 HIP (ROCm builds of torch record HIP
# but call the device "cuda", so both are reported as "cuda"); others keep their number.
_MEMORY_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "cuda"}
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Bytes per element of the dtypes ATen writes in ``Input type`` (c10's scalar type names).
_ELEMENT_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "bool": 1, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}


@dataclasses.dataclass(frozen=True)
class CopyRecord:
    """One copy seen in a window.

    ``lane``: ``"cpu"`` for an ATen copy op, ``"device"`` for a ``gpu_memcpy`` event or a
    copy kernel. ``kind``: the op name, the Memcpy kind as the profiler spells it
    (``"DtoD"``, ``"HtoD"``) or ``"copy kernel"``. ``shape``: destination dims of the ATen
    op that made it, when recorded. ``size_bytes``: from the event, when recorded.
    ``dtype_conversion``: the ATen op's source and destination dtypes differ (a cast such
    as SDPA math's fp32 -> bf16, which moves data but is not a duplicate of it).
    """

    lane: str
    kind: str
    name: str
    shape: tuple[int, ...] | None
    size_bytes: int | None
    dtype_conversion: bool = False
    types: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class WindowSummary:
    """What one annotated window (one forward, one profiler step) did.

    Counts are per window. ``cpu_ops``/``kernels``/``launch_calls`` map names to counts,
    ``kernel_time_us`` kernel names to their summed device time; ``launch_time_us`` is the
    CPU time spent in launch API calls (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
    ``hipLaunchKernel``, ...). ``memcpy_counts``/``memcpy_bytes`` are keyed by kind (``DtoD``),
    ``memcpy_routes`` by kind and memory (``HtoD Pinned -> Device``);
    ``allocated_bytes`` sums allocations by device (``"cpu"``, ``"cuda"``);
    ``peak_bytes`` is the highest live allocation above the level at the window's start;
    ``compiled_graph_calls`` counts Inductor graphs run (``## Call CompiledFxGraph`` ranges).

    A window holds the device work whose launch call lies in it (linked by ``correlation``);
    the whole trace holds every device event of the file. Device events whose launch was not
    recorded (the profiler can lose host events, mostly at the start of a session) are counted
    in the whole trace as ``unattributed_events`` / ``unattributed_time_us`` (kernels, Memcpy
    and Memset, all device time in microseconds) and cannot be placed in a window;
    ``warnings`` then says that per-window attribution is incomplete.
    """

    annotation: str
    start_us: float
    duration_us: float
    cpu_ops: dict[str, int]
    kernels: dict[str, int]
    kernel_time_us: dict[str, float]
    launch_calls: dict[str, int]
    launch_time_us: float
    device_time_us: float
    memcpy_counts: dict[str, int]
    memcpy_bytes: dict[str, int]
    memcpy_routes: dict[str, int]
    memset_count: int
    memset_bytes: int
    copies: tuple[CopyRecord, ...]
    allocated_bytes: dict[str, int]
    peak_bytes: dict[str, int]
    compiled_graph_calls: int = 0
    unattributed_events: int = 0
    unattributed_time_us: float = 0.0
    warnings: tuple[str, ...] = ()

    @property
    def cpu_op_count(self) -> int:
        return sum(self.cpu_ops.values())

    @property
    def kernel_count(self) -> int:
        return sum(self.kernels.values())

    @property
    def sdpa_backends(self) -> list[str]:
        """SDPA backends whose dispatch op ran in this window (``["FLASH_ATTENTION"]``)."""
        return sdpa_backends(self.cpu_ops)

    def kernel_families(self) -> dict[str, int]:
        """Kernel count per family (``perfsuite.trace.kernel_families``)."""
        families: dict[str, int] = collections.Counter()
        for name, count in self.kernels.items():
            families[kernel_family(name)] += count
        return dict(families)

    @property
    def copy_kernel_count(self) -> int:
        return sum(1 for c in self.copies if c.kind == "copy kernel")

    def copies_of_shape(self, shape: Iterable[int], lane: str) -> int:
        """Same-dtype copies on ``lane`` whose destination has exactly ``shape`` (e.g. the scores)."""
        wanted = tuple(shape)
        return sum(1 for c in self.copies if c.lane == lane and c.shape == wanted and not c.dtype_conversion)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["copies"] = [dataclasses.asdict(c) for c in self.copies]
        data["kernel_families"] = self.kernel_families()
        data["sdpa_backends"] = self.sdpa_backends
        return data


def load_trace(path: str | Path) -> dict[str, Any]:
    """Load a ``.json`` or ``.json.gz`` Chrome trace.

    Returns the trace as a dict with a ``traceEvents`` list (a bare list of events is
    wrapped). Raises ``TraceError`` naming the file when it is missing, not JSON,
    truncated, or has no ``traceEvents``.
    """
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file") from None
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a readable Chrome/Kineto trace ({exc})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: JSON without a 'traceEvents' list, so not a profiler trace")
    if not any(isinstance(e, dict) and "ph" in e for e in data["traceEvents"]):
        raise TraceError(f"{path}: 'traceEvents' holds no trace events (nothing was recorded)")
    return data


def _first_dims(event: dict[str, Any]) -> tuple[int, ...] | None:
    dims = event.get("args", {}).get("Input Dims")
    if not dims or not isinstance(dims[0], list):
        return None
    return tuple(dims[0])


def _tensor_types(event: dict[str, Any] | None) -> tuple[str, ...]:
    """``Input type`` of an ATen op without the scalar/empty entries (``("c10::BFloat16", "float")``)."""
    types = (event or {}).get("args", {}).get("Input type") or []
    return tuple(t for t in types if t and t != "Scalar")


def _converts_dtype(event: dict[str, Any] | None) -> bool:
    """True for ``aten::copy_`` whose destination and source dtypes differ (``Input type``)."""
    types = (event or {}).get("args", {}).get("Input type") or []
    return (event or {}).get("name") == "aten::copy_" and len(types) >= 2 and types[0] != types[1]


def _memcpy_kind(name: str) -> str:
    return memcpy_kind(name) or name


def op_output_bytes(op: dict[str, Any] | None) -> int | None:
    """Bytes of the first tensor argument of an ATen op (a copy's destination, ``item()``'s
    scalar), from its ``Input Dims`` and ``Input type``; None when not recorded or the dtype
    is not in ``_ELEMENT_BYTES``."""
    args = (op or {}).get("args", {})
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not dims or not types or not isinstance(dims[0], list) or not all(isinstance(d, int) for d in dims[0]):
        return None
    size = _ELEMENT_BYTES.get(types[0])
    if size is None:
        return None
    for dim in dims[0]:
        size *= dim
    return size


def _memcpy_route(name: str) -> str:
    """``Memcpy HtoD (Pinned -> Device)`` -> ``HtoD Pinned -> Device``."""
    return name.removeprefix("Memcpy ").replace("(", "").replace(")", "")


def device_event_kind(event: dict[str, Any]) -> str:
    """``"memcpy"``, ``"memset"`` or ``"kernel"`` for a device event.

    Some ROCm profiler versions file copies and fills as ``kernel`` events (named
    ``Memcpy DtoD ...`` or after ROCclr's blit kernels); those are read as the copy or fill
    they are (``perfsuite.trace.kernel_families``).
    """
    category, name = event.get("cat"), str(event.get("name", ""))
    if category == "gpu_memcpy" or (category == "kernel" and memcpy_kind(name)):
        return "memcpy"
    if category == "gpu_memset" or (category == "kernel" and is_memset_kernel(name)):
        return "memset"
    return "kernel"


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
        self.device_events = [e for c in _DEVICE_CATEGORIES for e in by_cat[c] if e.get("ph", "X") == "X"]
        self.memory = [e for e in by_cat["cpu_instant_event"] if e.get("name") == "[memory]"]
        self.memory.sort(key=lambda e: e.get("ts", 0))
        self.op_by_external_id = {
            e["args"]["External id"]: e for e in self.cpu_ops if "External id" in e.get("args", {})
        }
        self.launch_by_correlation = {
            e["args"]["correlation"]: e for e in self.launches if e.get("args", {}).get("correlation") is not None
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
        found = [e for e in self.annotations if pattern.match(str(e.get("name", ""))) and "dur" in e]
        return sorted(found, key=lambda e: e["ts"])

    def host_ranges(self) -> list[dict[str, Any]]:
        """Annotations and CPU ops: where ``record_function`` ranges land, whichever category."""
        return self.annotations + self.cpu_ops

    def whole_trace(self) -> dict[str, Any]:
        """A pseudo-window spanning every CPU-side event of every process (the device events when
        there are none); it holds every device event of the trace, launched in it or not."""
        timed = (self.cpu_ops + self.launches + self.annotations + self.memory) or self.device_events
        if not timed:
            return {"name": "whole trace", "ts": 0, "dur": 0, "pid": None, "whole": True}
        start = min(e.get("ts", 0) for e in timed)
        end = max(e.get("ts", 0) + e.get("dur", 0) for e in timed)
        return {"name": "whole trace", "ts": start, "dur": end - start, "pid": None, "whole": True}

    def _unattributed_warning(self, start: float, end: float, whole: bool) -> tuple[str, ...]:
        if not self.unattributed:
            return ()
        time_us = sum(float(e.get("dur", 0)) for e in self.unattributed)
        lost = f"{len(self.unattributed)} device event(s) ({time_us:.1f} us) have no recorded launch"
        if whole:
            return (f"{lost}: counted here as unattributed; per-window attribution is incomplete",)
        during = sum(1 for e in self.unattributed if start <= e.get("ts", -1) <= end)
        return (f"{lost} ({during} ran during this window): per-window attribution is incomplete, "
                "these counts may be short",)

    def summarize(self, window: dict[str, Any]) -> WindowSummary:
        """Summarise one window event (from ``windows`` or ``whole_trace``; pid None = any process)."""
        start, end, pid = window["ts"], window["ts"] + window["dur"], window.get("pid")
        whole = bool(window.get("whole"))
        if pid not in self.host_pids:
            pid = None  # some traces give annotations another pid namespace than ops (containers)

        def inside(e: dict[str, Any]) -> bool:
            return whole or ((pid is None or e.get("pid") == pid) and start <= e.get("ts", -1) <= end)

        ops = [e for e in self.cpu_ops if inside(e)]
        launches = [e for e in self.launches if inside(e)]
        if whole:
            device = self.device_events
        else:
            correlations = {e.get("args", {}).get("correlation") for e in launches} - {None}
            device = [e for e in self.device_events if e.get("args", {}).get("correlation") in correlations]
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
        allocated, peak = self._memory(start, end, pid, whole)
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
            allocated_bytes=allocated,
            peak_bytes=peak,
            compiled_graph_calls=sum(1 for e in self.host_ranges() if inside(e) and
                                 str(e.get("name", "")).startswith(COMPILED_GRAPH_PREFIX)),
            unattributed_events=len(unattributed),
            unattributed_time_us=float(sum(e.get("dur", 0) for e in unattributed)),
            warnings=self._unattributed_warning(start, end, whole),
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
            records.append(CopyRecord("cpu", e["name"], e["name"], _first_dims(e), None, _converts_dtype(e), _tensor_types(e)))
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
            records.append(CopyRecord("device", kind, e["name"], shape, size, _converts_dtype(op), _tensor_types(op)))
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
            e for e in self.cpu_ops
            if e.get("tid") == launch.get("tid") and e["ts"] <= launch["ts"] <= e["ts"] + e.get("dur", 0)
        ]
        return max(enclosing, key=lambda e: e["ts"]) if enclosing else op

    def _memory(self, start: float, end: float, pid: Any, whole: bool = False) -> tuple[dict[str, int], dict[str, int]]:
        allocated: dict[str, int] = collections.Counter()
        peak: dict[str, int] = {}
        level_at_start: dict[str, int] = {}
        for e in self.memory:
            if not whole and ((pid is not None and e.get("pid") != pid) or not (start <= e.get("ts", -1) <= end)):
                continue
            args = e.get("args", {})
            device = _MEMORY_DEVICE_TYPES.get(args.get("Device Type"), str(args.get("Device Type")))
            size, total = int(args.get("Bytes", 0)), int(args.get("Total Allocated", 0))
            level_at_start.setdefault(device, total - size)
            if size > 0:
                allocated[device] += size
            peak[device] = max(peak.get(device, 0), total - level_at_start[device])
        return dict(allocated), peak


def summarize_windows(trace: dict[str, Any], annotation: str) -> list[WindowSummary]:
    """Summaries of every window named ``annotation`` (or ``annotation#N``) in ``trace``."""
    index = TraceIndex(trace)
    return [index.summarize(w) for w in index.windows(annotation)]
