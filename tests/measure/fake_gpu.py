"""A simulated GPU for the device-timing tests: a host clock and a device queue, both in simulated
seconds, so every timing is computed, never measured; and a fake of the ``torch`` module's CUDA
surface (``FakeTorch``) that the real ``TorchCuda`` code runs against.

The host advances by ``launch_s`` per API call and by the step's host gaps (Python, dispatch,
autograd hand-offs); the device runs queued work in order, each piece starting when the device
is free and the host has launched it. Events cost ``event_s`` of device time and are stamped when
the device has run them. ``clock_for_call(n)`` sets the SM clock (Hz) while step call ``n`` runs
(its kernels stretch by ``max_clock / clock``); the spin kernel has its own clock,
``spin_clock_for_call(n)`` (default: the maximum: a one-thread spin draws too little power for a
power cap to slow it), and NVML's cumulative throttle counters (``throttle_counters``) grow by the
time kernels ran below the maximum clock. ``kernels_for_call(n)`` is the step's kernel set on call
``n``.

CUDA graphs behave as torch's do (``FakeTorch``): capture runs the step (warm-ups included, on a
side stream), records its kernels instead of running them, and fails the way torch fails: a step
that synchronizes, or a backward whose forward ran on a stream other than the capture's, invalidates
the capture; ``capture_end`` then raises torch's generic "previous error during capture" over the
cause, and (``fixed_capture_end=False``, torch 2.11) leaves the caching allocator believing a
capture is underway, so every later ``empty_cache()`` fails its internal assert. A replay costs
``replay_launch_s`` of host time and ``replay_device_s`` of device time besides its kernels.

Kernel names are real demangled names read from the recorded traces in ``tests/data/traces``, and
the profiler's records are fake Kineto events with exactly the methods the installed torch's
``torch._C._autograd._KinetoEvent`` has (torch 2.11's has no ``activity_type``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import json
import random
from pathlib import Path

import torch
from torch.autograd import DeviceType

from perfsuite.measure.device_api import KernelRecord, kineto_records

MAX_CLOCK_HZ = 2.0e9
L2_BYTES = 50 * 2**20
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
# torch.cuda._sleep's kernel (aten/src/ATen/cuda/Sleep.cu, in at::cuda's anonymous namespace)
SPIN_KERNEL_NAME = "at::cuda::(anonymous namespace)::spin_kernel(long)"
CAPTURE_INVALIDATED = "CUDA error: operation not permitted when stream is capturing"
PREVIOUS_ERROR = "CUDA error: operation failed due to a previous error during capture"
ALLOCATOR_ASSERT = (
    "captures_underway.empty() INTERNAL ASSERT FAILED at "
    '"../c10/cuda/CUDACachingAllocator.cpp":3018, please report a bug to PyTorch.'
)
NOT_RECORDING = "endAllocatePool: not currently recording to mempool_id"


@functools.cache
def trace_events(name: str) -> tuple[dict, ...]:
    """The ``traceEvents`` of a recorded trace in ``tests/data/traces``."""
    with gzip.open(TRACES / name, "rt") as handle:
        data = json.load(handle)
    return tuple(data["traceEvents"] if isinstance(data, dict) else data)


def trace_kernel(name: str, contains: str) -> str:
    """The first kernel of trace ``name`` whose demangled name contains ``contains``."""
    for event in trace_events(name):
        if event.get("cat") == "kernel" and contains in event["name"]:
            return event["name"]
    raise LookupError(f"no kernel with {contains!r} in {name}")


H100 = "h100_bert-small_sdpa-flash.json.gz"
FLASH_FWD = trace_kernel(H100, "pytorch_flash::flash_fwd_kernel")
GEMM = trace_kernel(H100, "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm")
SOFTMAX = trace_kernel("h100_timesformer_naive-bmm-softmax.json.gz", "softmax")
# the L2 flush's buffer.zero_() on uint8: FillFunctor<unsigned char>, named as the A100 trace's
# FillFunctor<float> kernel is
FLUSH_KERNEL = trace_kernel("a100_train_step_rank0.json.gz", "FillFunctor<float>").replace(
    "float", "unsigned char"
)


# Kineto records --------------------------------------------------------------------------------


def _kineto_methods(record: dict) -> dict:
    return {
        "name": lambda self: record["name"],
        "start_ns": lambda self: record["start_ns"],
        "end_ns": lambda self: record["end_ns"],
        "duration_ns": lambda self: record["end_ns"] - record["start_ns"],
        "device_resource_id": lambda self: record["stream"],
        "device_type": lambda self: record["device_type"],
        "activity_type": lambda self: record["cat"],
        "is_user_annotation": lambda self: (
            record["cat"] in ("user_annotation", "gpu_user_annotation")
        ),
        "correlation_id": lambda self: record.get("correlation", 0),
    }


def kineto_event(record: dict, without: tuple[str, ...] = ()):
    """A fake ``_KinetoEvent`` for ``record`` (keys name, start_ns, end_ns, stream, cat,
    device_type) with only the methods the installed torch's ``_KinetoEvent`` has, less
    ``without`` (``("activity_type",)``: torch 2.11's)."""
    real = set(dir(torch._C._autograd._KinetoEvent)) - set(without)
    methods = {k: v for k, v in _kineto_methods(record).items() if k in real}
    return type("FakeKinetoEvent", (), methods)()


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def trace_kineto_events(name: str, without: tuple[str, ...] = ()) -> list:
    """The events of a recorded trace as fake Kineto events: device categories on CUDA, the
    rest (CPU ops, runtime calls, annotations) on the CPU; times in nanoseconds."""
    found = []
    for event in trace_events(name):
        if event.get("ph") != "X" or "dur" not in event:
            continue
        cat = event.get("cat")
        record = {
            "name": event["name"],
            "start_ns": int(round(float(event["ts"]) * 1e3)),
            "end_ns": int(round((float(event["ts"]) + float(event["dur"])) * 1e3)),
            "stream": int((event.get("args") or {}).get("stream", 0) or 0),
            "cat": cat,
            "device_type": DeviceType.CUDA if cat in DEVICE_CATEGORIES else DeviceType.CPU,
        }
        found.append(kineto_event(record, without))
    return found


# the simulated GPU -----------------------------------------------------------------------------


@dataclasses.dataclass
class Event:
    at_s: float


class FakeGpu:
    def __init__(
        self,
        *,
        kernels=((FLASH_FWD, 100e-6),),
        host_gap_s=50e-6,
        launch_s=2e-6,
        flush_s=30e-6,
        event_s=0.5e-6,
        replay_launch_s=4e-6,
        replay_device_s=3e-6,
        noise=0.0,
        seed=0,
        clock_for_call=None,
        spin_clock_for_call=None,
        kernels_for_call=None,
        step_syncs=False,
        fixed_capture_end=False,
        state=None,
        nvml_counters=True,
        locked_clock_hz=None,
    ):
        self.host_s = self.free_s = 0.0
        self.kernels, self.host_gap_s, self.launch_s, self.flush_s = (
            kernels,
            host_gap_s,
            launch_s,
            flush_s,
        )
        self.event_s, self.replay_launch_s, self.replay_device_s = (
            event_s,
            replay_launch_s,
            replay_device_s,
        )
        self.rng = random.Random(seed)
        self.noise = noise
        # clocks locked (nvidia-smi -lgc) run everything at that clock, which NVML does not count
        # as throttling
        self.reference_clock_hz = locked_clock_hz or MAX_CLOCK_HZ
        self.clock_for_call = clock_for_call or (lambda n: self.reference_clock_hz)
        self.spin_clock_for_call = spin_clock_for_call or (lambda n: self.reference_clock_hz)
        self.kernels_for_call = kernels_for_call or (lambda n: self.kernels)
        self.step_syncs = step_syncs
        self.state = state or {"present": True, "max_sm_clock_mhz": MAX_CLOCK_HZ / 1e6}
        self.nvml_counters = nvml_counters
        self.throttled_ns = 0.0  # NVML's cumulative sw_power_cap counter
        self.calls = 0  # step calls (eager, warm-up or captured)
        self.replays = 0
        self.recording: list[KernelRecord] | None = None
        self.buffers: list[int] = []
        self.torch = FakeTorch(self, fixed_capture_end=fixed_capture_end)

    # the simulation
    def host_clock(self) -> float:
        return self.host_s

    def _launch(self) -> None:
        self.host_s += self.launch_s

    def _run(self, name: str, seconds: float, stream: int = 7) -> None:
        start = max(self.free_s, self.host_s)
        self.free_s = start + seconds
        if self.recording is not None:
            self.recording.append(KernelRecord(name, start, self.free_s, stream))

    def _run_call(self, kernels, launch: bool) -> None:
        """One step call's kernels at this call's clock (NVML counts the time run below the
        maximum) with its noise; ``launch``: each launched by the host (eager)."""
        clock = self.clock_for_call(self.calls)
        for name, seconds in kernels:
            jitter = 1 + self.noise * self.rng.gauss(0, 1) if self.noise else 1.0
            length = seconds * MAX_CLOCK_HZ / clock * max(jitter, 0.1)
            if clock < self.reference_clock_hz:
                self.throttled_ns += length * 1e9
            if launch:
                self._launch()
            self._run(name, length)
        self.calls += 1

    def step(self) -> None:
        """The eager step: a host gap, then its kernels launched one by one (recorded into the
        graph instead while a capture is underway on the current stream)."""
        kernels = tuple(self.kernels_for_call(self.calls))
        capture = self.torch.cuda.capturing()
        self.host_s += self.host_gap_s  # Python and dispatch before the first kernel
        if capture is not None:
            self.host_s += self.launch_s * len(kernels)
            capture.calls.append(kernels)
        else:
            self._run_call(kernels, launch=True)
        if self.step_syncs:
            self.synchronize()

    # DeviceApi
    def synchronize(self) -> None:
        if self.torch.cuda.capturing() is not None:
            self.torch.cuda.invalidate(RuntimeError(CAPTURE_INVALIDATED))
        self.host_s = max(self.host_s, self.free_s)

    def synchronize_stream(self) -> None:
        self.synchronize()

    def record_event(self) -> Event:
        self._launch()
        self._run("event", self.event_s)
        return Event(self.free_s)

    def elapsed_s(self, start: Event, end: Event) -> float:
        return end.at_s - start.at_s

    def event_done(self, event: Event) -> bool:
        return event.at_s <= self.host_s

    def spin(self, cycles: int) -> None:
        self._launch()
        self._run(SPIN_KERNEL_NAME, cycles / self.spin_clock_for_call(self.calls))

    def trace_kernels(self, run) -> list[KernelRecord]:
        """``run`` in a profiler session; its device work read back through the real
        ``kineto_records`` from fake Kineto events (a GPU-side annotation and CPU records too)."""
        self.recording = []
        began = self.host_s
        try:
            run()
            self.synchronize()
            recorded = self.recording
        finally:
            self.recording = None
        cats = {SPIN_KERNEL_NAME: "kernel", FLUSH_KERNEL: "kernel", "event": None}
        events = [
            kineto_event(
                {
                    "name": "ProfilerStep#1",
                    "start_ns": int(began * 1e9),
                    "end_ns": int(self.host_s * 1e9),
                    "stream": 7,
                    "cat": "gpu_user_annotation",
                    "device_type": DeviceType.CUDA,
                }
            )
        ]
        for record in recorded:
            cat = cats.get(record.name, "kernel")
            if cat is None:
                continue  # events are not Kineto activities
            events.append(
                kineto_event(
                    {
                        "name": record.name,
                        "start_ns": int(round(record.start_s * 1e9)),
                        "end_ns": int(round(record.end_s * 1e9)),
                        "stream": record.stream,
                        "cat": cat,
                        "device_type": DeviceType.CUDA,
                    }
                )
            )
            events.append(
                kineto_event(
                    {
                        "name": "cudaLaunchKernel",
                        "start_ns": int(round(record.start_s * 1e9)),
                        "end_ns": int(round(record.start_s * 1e9)) + 2000,
                        "stream": 0,
                        "cat": "cuda_runtime",
                        "device_type": DeviceType.CPU,
                    }
                )
            )
        return kineto_records(events)

    def read_state(self) -> dict:
        return dict(self.state)

    def throttle_counters(self) -> dict[str, int] | None:
        """NVML's cumulative clock-event counters (nanoseconds), or None (no NVML)."""
        return {"sw_power_cap": int(self.throttled_ns)} if self.nvml_counters else None

    def l2_cache_bytes(self) -> int:
        return L2_BYTES

    def flush_buffer(self, size_bytes: int) -> int:
        self.buffers.append(size_bytes)
        return size_bytes

    def write(self, buffer) -> None:
        self._launch()
        self._run(FLUSH_KERNEL, self.flush_s)

    def capture_graph(self, step, unroll: int = 1):
        from perfsuite.measure.device_api import capture_cuda_graph

        return capture_cuda_graph(self.torch, step, unroll)

    def replay(self, calls: list[tuple]) -> None:
        """One graph launch: the host pays ``replay_launch_s``, the device ``replay_device_s``
        before the captured calls' kernels run back to back (each call at its own clock)."""
        self.replays += 1
        self.host_s += self.replay_launch_s
        self._run("graph launch", self.replay_device_s)
        if self.recording is not None:
            self.recording.pop()  # not a Kineto activity
        for kernels in calls:
            self._run_call(kernels, launch=False)


# the torch module's CUDA surface, as torch behaves --------------------------------------------


class FakeStream:
    ids = iter(range(1, 10_000))

    def __init__(self):
        self.stream_id = next(FakeStream.ids)

    def wait_stream(self, other) -> None:
        pass


class FakeGraph:
    pools = iter(range(1, 10_000))

    def __init__(self, gpu: FakeGpu):
        self.gpu, self.calls, self._pool = gpu, [], None
        self.error: BaseException | None = None
        self.stream = None
        self.capture_ended = False

    def pool(self) -> tuple[int, int]:
        if not self.capture_ended:  # as torch's CUDAGraph::pool()
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool

    def replay(self) -> None:
        self.gpu.replay(self.calls)


class FakeCuda:
    """``torch.cuda`` as far as ``capture_cuda_graph`` uses it, with the caching allocator's
    capture bookkeeping (``captures_underway``)."""

    def __init__(self, gpu: FakeGpu, fixed_capture_end: bool):
        self.gpu, self.fixed_capture_end = gpu, fixed_capture_end
        self.default = FakeStream()
        self.current = self.default
        self.captures_underway: list[tuple[int, int]] = []
        self.capture: FakeGraph | None = None
        self.default_capture_stream = FakeStream()
        self.Stream = FakeStream
        self.CUDAGraph = lambda: FakeGraph(gpu)

    def current_stream(self, device=None) -> FakeStream:
        return self.current

    def current_device(self) -> int:
        return 0

    def set_stream(self, stream: FakeStream) -> None:
        self.current = stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def synchronize(self) -> None:
        self.gpu.synchronize()

    def empty_cache(self) -> None:
        if self.captures_underway:
            raise RuntimeError(ALLOCATOR_ASSERT)

    def capturing(self) -> FakeGraph | None:
        """The graph being captured on the current stream, or None."""
        capture = self.capture
        return capture if capture is not None and capture.stream is self.current else None

    def invalidate(self, error: BaseException) -> None:
        """A CUDA call the capture cannot hold: the capture is invalidated and the call raises."""
        self.capture.error = self.capture.error or error
        raise error

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph, pool=None, stream: FakeStream | None = None):
        """``torch.cuda.graph``: synchronize, gc and ``empty_cache()`` on entry (torch does), capture
        on ``stream`` (default: the class's own capture stream), ``capture_end`` on exit."""
        self.synchronize()
        self.empty_cache()
        graph._pool = pool or self.graph_pool_handle()
        graph.stream = stream or self.default_capture_stream
        self.captures_underway.append(graph._pool)
        self.capture = graph
        before, self.current = self.current, graph.stream
        try:
            yield graph
        finally:
            self.capture = None
            if graph.error is not None:  # capture_end: cudaStreamEndCapture fails
                if self.fixed_capture_end:  # pytorch#180090: the pool's capture is ended first
                    self.captures_underway.remove(graph._pool)
                    self.current = before
                # torch 2.11: raises before its stream context is exited: the capture stream
                # stays current
                raise RuntimeError(PREVIOUS_ERROR)
            self.captures_underway.remove(graph._pool)
            graph.capture_ended = True
            self.current = before

    def graph_pool_handle(self) -> tuple[int, int]:
        return (0, next(FakeGraph.pools))


class FakeC:
    def __init__(self, cuda: FakeCuda):
        self.cuda = cuda

    def _cuda_endAllocateToPool(self, device: int, mempool_id: tuple[int, int]) -> None:
        if mempool_id not in self.cuda.captures_underway:
            raise RuntimeError(NOT_RECORDING)
        self.cuda.captures_underway.remove(mempool_id)


class FakeTorch:
    """The part of the ``torch`` module ``capture_cuda_graph`` calls; ``conformance`` tests check
    each name against the real torch."""

    __version__ = "2.11.0+fake"

    def __init__(self, gpu: FakeGpu, fixed_capture_end: bool):
        self.cuda = FakeCuda(gpu, fixed_capture_end)
        self._C = FakeC(self.cuda)


def backward_step(gpu: FakeGpu):
    """A backward-mode step as ``perfsuite.attention.modes`` makes it: the forward stored once per
    stream (``stream_key``), its backward launched where autograd puts it: on the stream the stored
    forward ran on. Launching it on a stream other than the capturing one invalidates the capture."""
    stored: dict[int, int] = {}

    def backward() -> None:
        cuda = gpu.torch.cuda
        key = cuda.current.stream_id
        if key not in stored:
            gpu.step()  # the forward
            stored[key] = key
        capture = cuda.capture
        if capture is not None and capture.stream.stream_id != stored[key]:
            cuda.invalidate(RuntimeError(CAPTURE_INVALIDATED))
        gpu.step()  # the backward

    return backward
