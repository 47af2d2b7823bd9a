"""The CUDA calls device timing makes, behind one small interface so tests can fake them.

``DeviceApi`` is the contract; ``TorchCuda`` implements it with ``torch.cuda`` (events and their
queries, the spin kernel ``torch.cuda._sleep``, the profiler's kernel records, the device's L2
size, CUDA-graph capture, the GPU's clocks and NVML's throttle counters); ``L2Flush`` and
``GraphCapture`` are the two pieces of device work a timed sample may need besides the step itself.
Every torch name used here is checked against the installed torch on the CPU
(``tests/measure/test_torch_api_conformance.py``), in both CI lanes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol
from collections.abc import Callable, Iterable

from perfsuite.errors import DeviceTimingError

# L2 flush buffer = this many times the device's L2 (an LRU-like cache holds none of the step's
# data after this many bytes are written; Triton uses 256 MB, larger than every L2 so far).
L2_FLUSH_FACTOR = 2
# Calls of the step on a side stream before its capture (torch.cuda.graphs' docs: warm up first).
CAPTURE_WARMUPS = 3


# The kernel torch.cuda._sleep launches (aten/src/ATen/cuda/Sleep.cu): the separator between the
# iterations of a kernel-time block.
SPIN_KERNEL = "spin_kernel"
# Kineto activity types (``_KinetoEvent.activity_type()``, torch 2.12+) that are device work.
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
# The ``_KinetoEvent`` methods ``kineto_records`` calls on every torch; ``activity_type`` only where
# the installed torch has it (absent from torch 2.11's ``torch/_C/_autograd.pyi``).
KINETO_EVENT_METHODS = ("name", "start_ns", "end_ns", "device_resource_id", "device_type")
# The names Kineto gives the device-side records that are not device work: CUDA synchronization
# (``cuda_sync``, recorded only with ``enable_cuda_sync_events``; libkineto's ``syncTypeString``).
CUDA_SYNC_NAMES = frozenset(
    ("Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync", "Unknown")
)


@dataclasses.dataclass(frozen=True)
class KernelRecord:
    """One piece of device work the profiler saw: a kernel, memcpy or memset, its start and end
    (device seconds, one clock for the session) and its stream."""

    name: str
    start_s: float
    end_s: float
    stream: int = 0


class DeviceApi(Protocol):
    """The CUDA calls device timing makes (``TorchCuda`` on a GPU, a fake in tests)."""

    def synchronize(self) -> None: ...

    def synchronize_stream(self) -> None:
        """Wait for the current stream only (what CUDA events recorded on it see)."""

    def record_event(self) -> Any:
        """Record a timing-enabled event on the current stream and return it."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds of device time between two recorded events (both completed)."""

    def event_done(self, event: Any) -> bool:
        """Whether the device has reached ``event`` (``cudaEventQuery``; never waits)."""

    def spin(self, cycles: int) -> None:
        """Queue a kernel that spins for ``cycles`` SM clock cycles (``torch.cuda._sleep``)."""

    def trace_kernels(self, run: Callable[[], None]) -> list[KernelRecord]:
        """Run ``run`` inside one profiler session (device activity only) and return the device
        work it recorded, in start order; the profiler is stopped before this returns."""

    def read_state(self) -> dict[str, object]:
        """The GPU's clocks, power and throttle reasons (``perfsuite.measure.gpu_state.read_clocks``)."""

    def l2_cache_bytes(self) -> int: ...

    def flush_buffer(self, size_bytes: int) -> Any:
        """A device buffer of ``size_bytes`` to write for an L2 flush."""

    def write(self, buffer: Any) -> None:
        """Overwrite ``buffer`` on the device (evicting L2)."""

    def throttle_counters(self) -> dict[str, int] | None:
        """NVML's cumulative clock-event (throttle) counters, nanoseconds per reason
        (``gpu_state.read_throttle_counters``); None where NVML cannot give them."""

    def capture_graph(self, step: Callable[[], object], unroll: int = 1) -> Callable[[], object]:
        """Warm ``step`` up on a side stream, capture ``unroll`` calls of it in one CUDA graph,
        return its replay. Raises ``CaptureFailed`` (or what torch raises) when capture fails."""


class TorchCuda:
    """``DeviceApi`` on ``torch.cuda`` (needs a CUDA device)."""

    def __init__(self, torch_module: Any = None) -> None:
        if torch_module is None:
            import torch as torch_module

        self._torch = torch_module

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def synchronize_stream(self) -> None:
        self._torch.cuda.current_stream().synchronize()

    def record_event(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_s(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    def event_done(self, event: Any) -> bool:
        return bool(event.query())

    def spin(self, cycles: int) -> None:
        self._torch.cuda._sleep(int(cycles))

    def trace_kernels(self, run: Callable[[], None]) -> list[KernelRecord]:
        profiling = self._torch.profiler
        with profiling.profile(activities=[profiling.ProfilerActivity.CUDA]) as profiler:
            run()
            self._torch.cuda.synchronize()
        return kineto_records(profiler.profiler.kineto_results.events())

    def read_state(self) -> dict[str, object]:
        from perfsuite.measure.gpu_state import read_clocks

        return read_clocks()

    def l2_cache_bytes(self) -> int:
        return int(
            self._torch.cuda.get_device_properties(self._torch.cuda.current_device()).L2_cache_size
        )

    def flush_buffer(self, size_bytes: int) -> Any:
        return self._torch.empty(size_bytes, dtype=self._torch.uint8, device="cuda")

    def write(self, buffer: Any) -> None:
        buffer.zero_()

    def throttle_counters(self) -> dict[str, int] | None:
        from perfsuite.measure.gpu_state import read_throttle_counters

        return read_throttle_counters()

    def capture_graph(self, step: Callable[[], object], unroll: int = 1) -> Callable[[], object]:
        return capture_cuda_graph(self._torch, step, unroll)


def capture_cuda_graph(
    torch: Any, step: Callable[[], object], unroll: int = 1
) -> Callable[[], object]:
    """Warm ``step`` up ``CAPTURE_WARMUPS`` times on a side stream, capture ``unroll`` calls of it in
    one CUDA graph on that same stream, return the graph's replay (``torch``: the torch module, or
    a fake of it). ``unroll`` >= 1; a replay then runs ``unroll`` steps back to back, so the graph's
    launch is shared by them (Triton's ``do_bench_cudagraph`` does the same).

    The capture runs on the warm-ups' stream (``torch.cuda.graph(..., stream=side)``): a backward
    step whose stored forward ran in the warm-ups is captured on the stream autograd runs its
    backward on (autograd runs each backward op on its forward's stream). A failed capture is
    released from the caching allocator (``release_failed_capture``), the caller's stream made
    current again, and raised as ``CaptureFailed`` naming its first cause, not torch's generic
    "previous error during capture".
    """
    if not isinstance(unroll, int) or unroll < 1:
        raise DeviceTimingError(f"unroll={unroll!r}: a graph holds at least 1 call of the step")
    before = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(before)
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUPS):  # on a side stream, as torch.cuda.graphs' docs require
            step()
    torch.cuda.current_stream().wait_stream(side)
    # the graph's memory pool, named here: after a failed capture ``graph.pool()`` refuses to answer
    pool = torch.cuda.graph_pool_handle()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, pool=pool, stream=side):
            for _ in range(unroll):
                step()
    except Exception as exc:
        # torch 2.11's graph.__exit__ raises from capture_end before it restores the stream
        torch.cuda.set_stream(before)
        release_failed_capture(torch, pool)
        raise CaptureFailed(first_cause(exc)) from exc
    return graph.replay


class CaptureFailed(DeviceTimingError):
    """A CUDA-graph capture failed; the message is its first cause (``first_cause``)."""


def first_cause(exc: BaseException) -> str:
    """``"Type: first line"`` of the earliest exception in ``exc``'s chain (``__cause__``, else
    ``__context__``): a capture's own error, not the one ``capture_end`` raised over it."""
    seen, root = {id(exc)}, exc
    while True:
        inner = root.__cause__ or root.__context__
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        root = inner
    first_line = (str(root).splitlines() or [""])[0]
    return f"{type(root).__name__}: {first_line}"


def release_failed_capture(torch: Any, pool: tuple[int, int]) -> None:
    """End the caching allocator's capture into ``pool`` (the failed graph's memory pool, from
    ``torch.cuda.graph_pool_handle()``: ``CUDAGraph.pool()`` answers only after a successful
    capture) after a failed capture.

    On torch builds without pytorch#180090, a ``capture_end`` that raises leaves the allocator
    believing a capture is underway, and every later ``torch.cuda.empty_cache()`` (each later
    capture, teardown, the out-of-memory path) fails ``captures_underway.empty()``. Ending the
    pool's capture (``torch._C._cuda_endAllocateToPool``) undoes that; where torch already ended it,
    the allocator answers "not currently recording to mempool_id", which is taken as done. Any
    other error is raised. The pool itself is left to torch (a failed capture's few blocks stay
    in it): releasing it here could release it twice where torch does.
    """
    end_allocate = getattr(torch._C, "_cuda_endAllocateToPool", None)
    if end_allocate is None:
        raise DeviceTimingError(
            f"torch {torch.__version__} has no torch._C._cuda_endAllocateToPool: a failed capture "
            "cannot be released from the caching allocator"
        )
    try:
        end_allocate(torch.cuda.current_device(), pool)
    except RuntimeError as exc:
        if "not currently recording" not in str(exc):
            raise


def is_device_work(event: Any) -> bool:
    """Whether a Kineto record (``torch._C._autograd._KinetoEvent``) is device work: a kernel,
    memcpy or memset on the CUDA device, not a GPU-side user annotation or a synchronization
    record (which span waits, not work).

    Features are detected, not versions: ``activity_type()`` where the installed torch has it
    (2.12+); else (torch 2.11) a CUDA event that is not a user annotation (``is_user_annotation()``,
    torch's own rule for device time in ``torch/autograd/profiler_util.py``) nor a sync record
    (Kineto's fixed names).
    """
    from torch.autograd import DeviceType

    if event.device_type() != DeviceType.CUDA:
        return False
    activity_type = getattr(event, "activity_type", None)
    if activity_type is not None:
        return activity_type() in DEVICE_WORK
    annotation = getattr(event, "is_user_annotation", None)
    if annotation is not None and annotation():
        return False
    return event.name() not in CUDA_SYNC_NAMES


def kineto_records(events: Iterable[Any]) -> list[KernelRecord]:
    """The device work among Kineto's raw records (``is_device_work``) as ``KernelRecord``s in
    start order; Kineto's times are nanoseconds, the records' seconds."""
    records = [
        KernelRecord(e.name(), e.start_ns() / 1e9, e.end_ns() / 1e9, e.device_resource_id())
        for e in events
        if is_device_work(e)
    ]
    return sorted(records, key=lambda r: (r.start_s, r.end_s))


class L2Flush:
    """Write a buffer of ``L2_FLUSH_FACTOR`` x the device's L2 before a round, so each round
    starts with a cold L2 (as Triton's ``do_bench`` and nvFuser's benchmarks do)."""

    def __init__(self, api: DeviceApi):
        l2 = api.l2_cache_bytes()
        if not isinstance(l2, int) or l2 <= 0:
            raise DeviceTimingError(
                f"the device reported an L2 cache of {l2!r} bytes; cannot size the flush"
            )
        self.api, self.size_bytes = api, L2_FLUSH_FACTOR * l2
        self.buffer = api.flush_buffer(self.size_bytes)

    def __call__(self) -> None:
        self.api.write(self.buffer)


@dataclasses.dataclass(frozen=True)
class GraphCapture:
    """The step to time: the graph's replay when capture worked, else the eager step and why."""

    step: Callable[[], object]
    replayed: bool
    failure: str | None
    unroll: int = 1  # calls of the step in one replay (1 for the eager step)

    @property
    def description(self) -> str:
        if not self.replayed:
            return f"capture failed: {self.failure}"
        return "replayed" if self.unroll == 1 else f"replayed ({self.unroll} steps a replay)"


def capture_step(api: DeviceApi, step: Callable[[], object], unroll: int = 1) -> GraphCapture:
    """Capture ``unroll`` calls of ``step`` in a CUDA graph; on failure keep ``step`` (one call a
    run) and report the failure's first cause (``first_cause``)."""
    try:
        return GraphCapture(api.capture_graph(step, unroll), True, None, unroll)
    except CaptureFailed as exc:
        return GraphCapture(step, False, str(exc))
    except Exception as exc:  # any capture error is reported, never hidden: the row says so
        return GraphCapture(step, False, first_cause(exc))
