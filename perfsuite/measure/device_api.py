"""The CUDA calls device timing makes, behind one small interface so tests can fake them.

``DeviceApi`` is the contract; ``TorchCuda`` implements it with ``torch.cuda`` (events and their
queries, the spin kernel ``torch.cuda._sleep``, the profiler's kernel records, the device's L2
size, CUDA-graph capture, the GPU's clocks); ``L2Flush`` and ``GraphCapture`` are the two pieces
of device work a timed sample may need besides the step itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol
from collections.abc import Callable

from perfsuite.errors import DeviceTimingError

# L2 flush buffer = this many times the device's L2 (an LRU-like cache holds none of the step's
# data after this many bytes are written; Triton uses 256 MB, larger than every L2 so far).
L2_FLUSH_FACTOR = 2


# The kernel torch.cuda._sleep launches (aten/src/ATen/cuda/Sleep.cu): the separator between the
# iterations of a kernel-time block.
SPIN_KERNEL = "spin_kernel"
# Kineto activity types (``_KinetoEvent.activity_type()``) that are device work.
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


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

    def capture_graph(self, step: Callable[[], object]) -> Callable[[], object]:
        """Warm ``step`` up on a side stream, capture it in a CUDA graph, return its replay.
        Raises whatever torch raises when capture fails."""


class TorchCuda:
    """``DeviceApi`` on ``torch.cuda`` (needs a CUDA device)."""

    def __init__(self) -> None:
        import torch

        self._torch = torch

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
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            run()
            self._torch.cuda.synchronize()
        # Kineto's raw records, in nanoseconds: kernels, memcpy and memset on the device; not the
        # synchronization records ("cuda_sync": Context Sync, Stream Wait Event), which span waits.
        records = [
            KernelRecord(e.name(), e.start_ns() / 1e9, e.end_ns() / 1e9, e.device_resource_id())
            for e in profiler.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CUDA and e.activity_type() in DEVICE_WORK
        ]
        return sorted(records, key=lambda r: (r.start_s, r.end_s))

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

    def capture_graph(self, step: Callable[[], object]) -> Callable[[], object]:
        torch = self._torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as torch.cuda.graphs' docs require
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        return graph.replay


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

    @property
    def description(self) -> str:
        return "replayed" if self.replayed else f"capture failed: {self.failure}"


def capture_step(api: DeviceApi, step: Callable[[], object]) -> GraphCapture:
    """Capture ``step`` in a CUDA graph; on failure keep ``step`` and report torch's first line."""
    try:
        return GraphCapture(api.capture_graph(step), True, None)
    except Exception as exc:  # any capture error is reported, never hidden: the row says so
        first_line = (str(exc).splitlines() or [""])[0]
        return GraphCapture(step, False, f"{type(exc).__name__}: {first_line}")
