"""The CUDA calls device timing makes, behind one small interface so tests can fake them.

``DeviceApi`` is the contract; ``TorchCuda`` implements it with ``torch.cuda`` (events, the
profiler's kernel time, the device's L2 size, synchronization); ``L2Flush`` and ``GraphCapture``
are the two pieces of device work a timed round may need besides the step itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol
from collections.abc import Callable

from perfsuite.errors import DeviceTimingError

# L2 flush buffer = this many times the device's L2 (an LRU-like cache holds none of the step's
# data after this many bytes are written; Triton uses 256 MB, larger than every L2 so far).
L2_FLUSH_FACTOR = 2


class DeviceApi(Protocol):
    """The CUDA calls device timing makes (``TorchCuda`` on a GPU, a fake in tests)."""

    def synchronize(self) -> None: ...

    def synchronize_stream(self) -> None:
        """Wait for the current stream only (what CUDA events recorded on it see)."""

    def record_event(self) -> Any:
        """Record a timing-enabled event on the current stream and return it."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Seconds of device time between two recorded events (both completed)."""

    def start_kernel_trace(self) -> None: ...

    def stop_kernel_trace(self) -> float:
        """Stop the kernel trace started last; the summed device seconds of the kernels in it."""

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
        self._profiler = None

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

    def start_kernel_trace(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._profiler = profile(activities=[ProfilerActivity.CUDA])
        self._profiler.start()

    def stop_kernel_trace(self) -> float:
        from torch.autograd import DeviceType

        profiler, self._profiler = self._profiler, None
        profiler.stop()
        # Device events are kernels, memcpy and memset; self time, in microseconds (as nvFuser sums them).
        total_us = sum(
            getattr(e, "self_device_time_total", 0.0)
            for e in profiler.key_averages()
            if e.device_type == DeviceType.CUDA
        )
        return total_us / 1e6

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
