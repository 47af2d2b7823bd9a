"""A simulated GPU behind ``DeviceApi`` for the device-timing tests: a host clock and a device
queue, both in simulated seconds, so every timing is computed, never measured.

The host advances by ``launch_s`` per API call and by the step's host gaps (Python, dispatch,
autograd hand-offs); the device runs queued work in order, each piece starting when the device
is free and the host has launched it; events are stamped when the device reaches them (on an
idle device: when the host records them). ``clock_for_call(n)`` sets the SM clock (Hz) while
step call ``n`` runs: spins take ``cycles / clock`` and the step's kernels stretch by
``max_clock / clock``. ``kernels_for_call(n)`` is the step's kernel set on call ``n``.
"""

from __future__ import annotations

import dataclasses
import random

from perfsuite.measure.device_api import SPIN_KERNEL, KernelRecord

MAX_CLOCK_HZ = 2.0e9
L2_BYTES = 50 * 2**20
FLUSH_KERNEL = "fill_kernel<unsigned char> (L2 flush)"


@dataclasses.dataclass
class Event:
    at_s: float


class FakeGpu:
    def __init__(
        self,
        *,
        kernels=(("attn_fwd", 100e-6),),
        host_gap_s=50e-6,
        launch_s=2e-6,
        flush_s=30e-6,
        noise=0.0,
        seed=0,
        clock_for_call=None,
        kernels_for_call=None,
        step_syncs=False,
        capture_error=None,
        state=None,
    ):
        self.host_s = self.free_s = 0.0
        self.kernels, self.host_gap_s, self.launch_s, self.flush_s = (
            kernels,
            host_gap_s,
            launch_s,
            flush_s,
        )
        self.rng = random.Random(seed)
        self.noise = noise
        self.clock_for_call = clock_for_call or (lambda n: MAX_CLOCK_HZ)
        self.kernels_for_call = kernels_for_call or (lambda n: self.kernels)
        self.step_syncs = step_syncs
        self.capture_error = capture_error
        self.state = state or {"present": True, "max_sm_clock_mhz": MAX_CLOCK_HZ / 1e6}
        self.calls = 0  # step calls (eager or replayed)
        self.replays = 0
        self.recording: list[KernelRecord] | None = None
        self.buffers: list[int] = []

    # the simulation
    def host_clock(self) -> float:
        return self.host_s

    def _launch(self) -> None:
        self.host_s += self.launch_s

    def _run(self, name: str, seconds: float, stream: int = 0) -> None:
        start = max(self.free_s, self.host_s)
        self.free_s = start + seconds
        if self.recording is not None:
            self.recording.append(KernelRecord(name, start, self.free_s, stream))

    def _clock(self) -> float:
        return self.clock_for_call(self.calls)

    def _kernels(self, host_gaps: bool) -> None:
        stretch = MAX_CLOCK_HZ / self._clock()
        for index, (name, seconds) in enumerate(self.kernels_for_call(self.calls)):
            if host_gaps and index == 0:
                self.host_s += self.host_gap_s  # Python and dispatch before the first kernel
            if host_gaps:
                self._launch()
            jitter = 1 + self.noise * self.rng.gauss(0, 1) if self.noise else 1.0
            self._run(name, seconds * stretch * max(jitter, 0.1))
        if self.step_syncs:
            self.synchronize()
        self.calls += 1

    def step(self) -> None:
        """The eager step: a host gap, then its kernels launched one by one."""
        self._kernels(host_gaps=True)

    # DeviceApi
    def synchronize(self) -> None:
        self.host_s = max(self.host_s, self.free_s)

    def record_event(self) -> Event:
        self._launch()
        self.free_s = max(self.free_s, self.host_s)
        return Event(self.free_s)

    def elapsed_s(self, start: Event, end: Event) -> float:
        return end.at_s - start.at_s

    def event_done(self, event: Event) -> bool:
        return event.at_s <= self.host_s

    def spin(self, cycles: int) -> None:
        self._launch()
        self._run(SPIN_KERNEL, cycles / self._clock())

    def trace_kernels(self, run) -> list[KernelRecord]:
        self.recording = []
        try:
            run()
            self.synchronize()
            return sorted(self.recording, key=lambda r: r.start_s)
        finally:
            self.recording = None

    def read_state(self) -> dict:
        return dict(self.state)

    def l2_cache_bytes(self) -> int:
        return L2_BYTES

    def flush_buffer(self, size_bytes: int) -> int:
        self.buffers.append(size_bytes)
        return size_bytes

    def write(self, buffer) -> None:
        self._launch()
        self._run(FLUSH_KERNEL, self.flush_s)

    def capture_graph(self, step):
        if self.capture_error:
            raise self.capture_error

        def replay() -> None:
            self.replays += 1
            self._launch()  # one launch for the whole graph, no host gap
            self._kernels(host_gaps=False)

        return replay
