"""Trace events and the records a summary is made of: loading a Kineto / Chrome trace, reading
one event (its dims, dtypes, bytes, device kind), and the ``CopyRecord`` / ``WindowSummary`` types.

``perfsuite.trace.summary`` indexes a loaded trace and summarises its windows with these.
Timestamps and durations are microseconds.
"""

from __future__ import annotations
import collections
import dataclasses
import gzip
import json
import math
from pathlib import Path
from typing import Any
from collections.abc import Iterable
from perfsuite.errors import TraceError
from perfsuite.trace.kernel_families import (
    is_memset_kernel,
    kernel_family,
    memcpy_kind,
    sdpa_backends,
)

CPU_COPY_OPS = ("aten::copy_", "aten::clone")
# ATen ops that gather data into a new tensor: one output written from many places of their
# inputs (a paged KV cache made dense by ``cache[block_table]`` or ``torch.cat`` of its pages).
# The outermost of them counts (``stack`` calls ``cat``; a copy_ inside one is still a copy).
CPU_GATHER_OPS = (
    "aten::cat",
    "aten::concat",
    "aten::concatenate",
    "aten::stack",
    "aten::index",
    "aten::index_select",
    "aten::gather",
    "aten::take",
)
COMPILED_GRAPH_PREFIX = (
    "## Call CompiledFxGraph"  # Inductor's range around a compiled graph, forward or backward
)
# c10::DeviceType of allocator events: 0 CPU, 1 CUDA, 6 HIP (ROCm builds of torch record HIP
# but call the device "cuda", so both are reported as "cuda"); others keep their number.
_MEMORY_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "cuda"}
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Bytes per element of the dtypes ATen writes in ``Input type`` (c10's scalar type names).
_ELEMENT_BYTES = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "bool": 1,
    "long int": 8,
    "long": 8,  # older torch (the A100 trace)
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
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


def _concrete_int(op: dict[str, Any], position: int, default: int) -> int:
    """An int argument of an op record (``Concrete Inputs``), ``default`` when not recorded."""
    values = op.get("args", {}).get("Concrete Inputs") or []
    try:
        return int(values[position])
    except (IndexError, TypeError, ValueError):
        return default


def _int_list(value: Any) -> tuple[int, ...] | None:
    """``[2, 2, 4]`` (a dims list or its text ``"[2, 2, 4]"``) as a tuple; None otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, list) and all(isinstance(d, int) for d in value):
        return tuple(value)
    return None


def gather_output_shape(
    op: dict[str, Any], callees: Iterable[dict[str, Any]] = ()
) -> tuple[int, ...] | None:
    """Dims of the tensor a gather op (``CPU_GATHER_OPS``) wrote, from its record; None when unknown.

    ``cat``: the inputs' dims summed along ``dim`` (``Concrete Inputs``, default 0; legacy empty
    ``[0]`` inputs skipped); ``stack``: ``len(tensors)`` inserted at ``dim``; ``index_select(self,
    dim, index)``: ``self`` with ``dim`` of ``index``'s length; ``gather``/``take``: the index's
    dims. ``aten::index`` records no index dims (its index list is one empty entry), so its
    result's dims are read from the ``aten::as_strided`` it calls on ``self`` (ATen restrides
    the source to the result's shape); ``callees`` are the ops recorded inside it.
    """
    name = op.get("name")
    dims = op.get("args", {}).get("Input Dims") or []
    if not dims:
        return None
    if name in ("aten::cat", "aten::concat", "aten::concatenate", "aten::stack"):
        tensors = [_int_list(d) for d in dims[0]] if isinstance(dims[0], list) else []
        tensors = [t for t in tensors if t is not None and t != (0,)]
        if not tensors or not all(isinstance(d, list) for d in dims[0]):
            return None
        first = tensors[0]
        if name == "aten::stack":
            dim = _concrete_int(op, 1, 0) % (len(first) + 1)
            return first[:dim] + (len(tensors),) + first[dim:]
        if not first:
            return None
        dim = _concrete_int(op, 1, 0) % len(first)
        return first[:dim] + (sum(t[dim] for t in tensors),) + first[dim + 1 :]
    source = _int_list(dims[0])
    if name == "aten::index_select" and source and len(dims) >= 3:
        index = _int_list(dims[2])
        if index is None:
            return None
        dim = _concrete_int(op, 1, 0) % len(source)
        return source[:dim] + (math.prod(index),) + source[dim + 1 :]
    if name == "aten::gather" and len(dims) >= 3:
        return _int_list(dims[2])
    if name == "aten::take" and len(dims) >= 2:
        return _int_list(dims[1])
    if name == "aten::index":
        for callee in callees:
            args = callee.get("args", {})
            if (
                callee.get("name") == "aten::as_strided"
                and _int_list((args.get("Input Dims") or [None])[0]) == source
            ):
                return _int_list((args.get("Concrete Inputs") or [None, None])[1])
    return None


def gather_element_bytes(op: dict[str, Any]) -> int | None:
    """Bytes per element of what a gather op wrote: its source's dtype (``Input type``); None
    for ``cat``/``stack``, whose tensor list records no dtype."""
    types = op.get("args", {}).get("Input type") or []
    return _ELEMENT_BYTES.get(types[0]) if types else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowSummary:
    """What one annotated window (one forward, one profiler step) did.

    Counts are per window. ``cpu_ops``/``kernels``/``launch_calls`` map names to counts,
    ``kernel_time_us`` kernel names to their summed device time; ``launch_time_us`` is the
    CPU time spent in launch API calls (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
    ``hipLaunchKernel``, ...). ``memcpy_counts``/``memcpy_bytes`` are keyed by kind (``DtoD``),
    ``memcpy_routes`` by kind and memory (``HtoD Pinned -> Device``);
    ``allocated_bytes`` sums allocations by device (``"cpu"``, ``"cuda"``);
    ``peak_bytes`` is the highest live allocation above the level at the window's start;
    ``allocated_level_bytes``: that level, by device (the allocator's running ``Total Allocated`` before
    the window's first memory event; bytes live when the window began), empty without memory events;
    ``compiled_graph_calls`` counts Inductor graphs run (``## Call CompiledFxGraph`` ranges).

    A window holds the device work whose launch call lies in it (linked by ``correlation``);
    the whole trace holds every device event of the file. Device events whose launch was not
    recorded (the profiler can lose host events, mostly at the start of a session) are counted
    in the whole trace as ``unattributed_events`` / ``unattributed_time_us`` (kernels, Memcpy
    and Memset, all device time in microseconds) and cannot be placed in a window;
    ``warnings`` then says that per-window attribution is incomplete.
    ``work_ops``/``no_work_ops`` split ``cpu_ops`` by whether the op did work (allocated, launched
    device work or wrote in place), ``written_in_place_bytes`` sums the in-place writes
    (``perfsuite.trace.work``).
    ``copies``: ``aten::copy_``/``aten::clone`` (``CPU_COPY_OPS``), Memcpy and copy kernels;
    ``gathers``: ops that gather into a new tensor (``CPU_GATHER_OPS``: ``cat``, ``stack``,
    ``index``, ``index_select``, ``gather``, ``take``) and their kernels
    (``kernel_families.is_gather_kernel``), as ``CopyRecord`` s of kind op name or
    ``"gather kernel"`` with the result's dims and bytes (``gather_output_shape``).
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
    work_ops: dict[str, int] = dataclasses.field(default_factory=dict)
    no_work_ops: dict[str, int] = dataclasses.field(default_factory=dict)
    written_in_place_bytes: int = 0
    allocated_level_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    gathers: tuple[CopyRecord, ...] = ()

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

    def copies_with_shape(self, shape: Iterable[int], lane: str) -> list[CopyRecord]:
        """Same-dtype copies on ``lane`` whose destination has exactly ``shape`` (e.g. the scores)."""
        wanted = tuple(shape)
        return [
            c
            for c in self.copies
            if c.lane == lane and c.shape == wanted and not c.dtype_conversion
        ]

    def copies_of_shape(self, shape: Iterable[int], lane: str) -> int:
        """How many ``copies_with_shape``."""
        return len(self.copies_with_shape(shape, lane))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["copies"] = [dataclasses.asdict(c) for c in self.copies]
        data["gathers"] = [dataclasses.asdict(c) for c in self.gathers]
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
    if (
        not dims
        or not types
        or not isinstance(dims[0], list)
        or not all(isinstance(d, int) for d in dims[0])
    ):
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
