"""Device-side timing on CUDA, plugged into pytest-benchmark beside its host timer.

pytest-benchmark times a synchronized call with the host clock: launch overhead included,
L2 warm between rounds, no device-side time. This module adds, selectable per run
(``perfsuite_timer``):

- ``cuda_event``: CUDA events recorded around each round (device time between the two
  records, as Triton's ``do_bench`` measures);
- ``kernel``: the summed duration of the kernels the profiler saw in each round (CUPTI time,
  as nvFuser's pytest-benchmark integration measures; gaps between kernels excluded);
- an L2 flush before every round, kept out of the measured interval (a buffer of twice the
  device's L2 is written; Triton's ``do_bench`` writes a fixed 256 MB buffer, nvFuser one of the
  L2's size);
- CUDA-graph replay of the step where capture works; a failed capture is reported with torch's
  error and the step runs eagerly.

The timer replaces the fixture's clock (``benchmark._timer``; a monotonic "device clock" whose
differences are device seconds) and runs under ``benchmark.pedantic``, which never calibrates,
with its precision preset as nvFuser does (``benchmarks/python/core.py``, ``NVFBenchmark``),
so pytest-benchmark's statistics, storage and comparison hold device time. Each round's host
wall time is recorded too, so the table can show wall, device and their difference (launch and
host overhead). Every CUDA call goes through ``DeviceApi``; ``TorchCuda`` implements it and the
unit tests fake it.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any
from collections.abc import Callable

from perfsuite.attention.cases import Device
from perfsuite.errors import DeviceTimingError
from perfsuite.measure.device_api import (
    DeviceApi,
    L2Flush,
    TorchCuda,
    capture_step,
)
from perfsuite.measure.timing import synchronized

TIMERS = ("host", "cuda_event", "kernel")
# Resolution handed to pytest-benchmark so it never calibrates the device clock (nvFuser's value).
DEVICE_CLOCK_PRECISION_S = 1e-6


def parse_timer(text: str) -> str:
    """``"host"``, ``"cuda_event"`` or ``"kernel"`` (case and surrounding space ignored).

    Raises ``DeviceTimingError`` naming ``text`` and the allowed values otherwise.
    """
    timer = text.strip().lower()
    if timer not in TIMERS:
        raise DeviceTimingError(f"timer {text!r} is not one of {', '.join(TIMERS)}")
    return timer


@dataclasses.dataclass
class _Interval:
    wall_s: float
    device_s: float
    gap: bool


class DeviceClock:
    """A monotonic clock in device seconds for pytest-benchmark's runner.

    pytest-benchmark calls the timer before and after each round and stores the difference.
    Each call closes the interval opened by the previous call (synchronizing the device),
    adds its device time to the clock, and opens a new one; the host wall time of each
    interval is kept beside it. Intervals during which ``mark_gap`` was called (the setup
    between rounds: the L2 flush) are gaps, not rounds. ``kind``: ``"cuda_event"`` or ``"kernel"``.
    """

    def __init__(
        self, api: DeviceApi, kind: str, host_clock: Callable[[], float] = time.perf_counter
    ):
        if kind not in ("cuda_event", "kernel"):
            raise DeviceTimingError(f"device clock kind {kind!r} is not cuda_event or kernel")
        self.api, self.kind, self._host = api, kind, host_clock
        self.__name__ = f"perfsuite_{kind}_clock"  # pytest-benchmark stores the timer's __name__
        self.total_s = 0.0
        self.intervals: list[_Interval] = []
        self._open: tuple[Any, float] | None = None
        self._gap = False

    def mark_gap(self) -> None:
        """Say that the open interval holds work between rounds (called by the round's setup)."""
        self._gap = True

    def __call__(self) -> float:
        if not self._open:
            self._gap = False  # the setup before the first round opened no interval
        if self.kind == "cuda_event":
            end = self.api.record_event() if self._open else None
            self.api.synchronize()
            now = self._host()
            if self._open:
                start, opened = self._open
                self._close(now - opened, self.api.elapsed_s(start, end))
            self._open = (self.api.record_event(), self._host())
        else:
            self.api.synchronize()
            now = self._host()
            if self._open:
                self._close(now - self._open[1], self.api.stop_kernel_trace())
            self.api.start_kernel_trace()
            self._open = (None, self._host())
        return self.total_s

    def _close(self, wall_s: float, device_s: float) -> None:
        if device_s < 0:
            raise DeviceTimingError(
                f"the device reported {device_s} s for an interval; a clock cannot run backwards"
            )
        self.total_s += device_s
        self.intervals.append(_Interval(wall_s, device_s, self._gap))
        self._gap = False

    def finish(self) -> None:
        """Close the interval left open after the last round (stops a running kernel trace)."""
        if self._open and self.kind == "kernel":
            self.api.synchronize()
            self.api.stop_kernel_trace()
        self._open = None

    def rounds(self) -> list[_Interval]:
        """The intervals that were rounds (warm-up rounds first), in order."""
        return [i for i in self.intervals if not i.gap]


@dataclasses.dataclass(frozen=True)
class DeviceTiming:
    """Per-round wall and device seconds of one timed step, and how they were measured.

    ``timer``: ``"cuda_event"`` or ``"kernel"``; ``wall_s``: host seconds per round (synchronized),
    ``device_s``: device seconds per round; ``l2_flush_bytes``: the buffer written before each
    round (0: no flush); ``cuda_graph``: ``"off"``, ``"replayed"`` or ``"capture failed: ..."``.
    """

    timer: str
    wall_s: tuple[float, ...]
    device_s: tuple[float, ...]
    l2_flush_bytes: int
    cuda_graph: str

    @property
    def wall_median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def device_median_s(self) -> float:
        return statistics.median(self.device_s)

    @property
    def overhead_median_s(self) -> float:
        """Median over rounds of wall minus device time: launch and host overhead."""
        return statistics.median(w - d for w, d in zip(self.wall_s, self.device_s))

    def extra_info(self) -> dict[str, object]:
        """Keys for ``benchmark.extra_info`` (units in the names)."""
        return {
            "timer": self.timer,
            "wall_median_s": self.wall_median_s,
            "device_median_s": self.device_median_s,
            "host_overhead_median_s": self.overhead_median_s,
            "l2_flush_bytes": self.l2_flush_bytes,
            "cuda_graph": self.cuda_graph,
        }


def time_on_device(
    benchmark: Any,
    step: Callable[[], object],
    timer: str,
    rounds: int,
    warmup_rounds: int = 1,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    api: DeviceApi | None = None,
) -> DeviceTiming | None:
    """Time ``step`` with pytest-benchmark's ``benchmark`` fixture on the device clock ``timer``.

    Runs ``benchmark.pedantic`` (``rounds`` measured rounds after ``warmup_rounds``, one call
    each) with the fixture's timer replaced by a ``DeviceClock``; the L2 flush (``flush_l2``)
    runs in each round's setup, outside the measured interval. With ``cuda_graph`` the step is
    captured first and its replay timed; a failed capture is reported in ``cuda_graph``.
    Returns None when pytest-benchmark is disabled (``--benchmark-disable``: the step runs once,
    untimed). Raises ``DeviceTimingError`` for ``timer="host"`` (use the fixture directly) or bad counts.
    """
    if parse_timer(timer) == "host":
        raise DeviceTimingError(
            "timer 'host' is pytest-benchmark's own; call benchmark(step) instead"
        )
    if rounds < 1 or warmup_rounds < 0:
        raise DeviceTimingError(
            f"rounds must be >= 1 and warmup_rounds >= 0, got {rounds} and {warmup_rounds}"
        )
    if benchmark.disabled:
        benchmark.pedantic(step, rounds=1)
        return None
    api = api or TorchCuda()
    clock = DeviceClock(api, timer)
    flush = L2Flush(api) if flush_l2 else None
    capture = capture_step(api, step) if cuda_graph else None

    def setup() -> None:
        clock.mark_gap()
        if flush is not None:
            flush()

    benchmark._timer = (
        clock  # private: pytest-benchmark has no public timer hook (nvFuser does the same)
    )
    benchmark._precisions[clock] = DEVICE_CLOCK_PRECISION_S
    try:
        benchmark.pedantic(
            capture.step if capture else step,
            setup=setup,
            rounds=rounds,
            warmup_rounds=warmup_rounds,
            iterations=1,
        )
    finally:
        clock.finish()
        benchmark._precisions.pop(clock, None)
    measured = clock.rounds()[-rounds:]
    return DeviceTiming(
        timer,
        tuple(i.wall_s for i in measured),
        tuple(i.device_s for i in measured),
        flush.size_bytes if flush else 0,
        capture.description if capture else "off",
    )


def benchmark_step(
    benchmark: Any,
    step: Callable[[], object],
    device: str,
    timer: str = "host",
    rounds: int = 5,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    api: DeviceApi | None = None,
) -> tuple[DeviceTiming | None, dict[str, object]]:
    """Time ``step`` on ``device`` as the run's settings say; returns the device timing (None with
    the host timer or a disabled benchmark) and the keys for ``benchmark.extra_info``.

    On CUDA with ``timer`` ``cuda_event`` or ``kernel``: ``time_on_device``. Otherwise (the CPU,
    which has no device clock, or ``timer="host"``) pytest-benchmark's own timer around a
    synchronized call, of the CUDA-graph replay when ``cuda_graph`` and capture works.
    """
    if device == Device.CUDA and parse_timer(timer) != "host":
        timing = time_on_device(
            benchmark, step, timer, rounds, flush_l2=flush_l2, cuda_graph=cuda_graph, api=api
        )
        return timing, (timing.extra_info() if timing else {"timer": timer})
    graph = capture_step(api or TorchCuda(), step) if device == Device.CUDA and cuda_graph else None
    benchmark(synchronized(graph.step if graph else step, device))
    return None, {"timer": "host", "cuda_graph": graph.description if graph else "off"}
