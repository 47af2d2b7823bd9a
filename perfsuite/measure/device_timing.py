"""Device-side timing on CUDA, plugged into pytest-benchmark beside its host timer.

pytest-benchmark times a synchronized call with the host clock: launch overhead included,
L2 warm between rounds, no device-side time. This module times the device (``perfsuite_timer``):

- ``cuda_event``: each sample is the device time between two CUDA events around the step, with
  the start event recorded **behind queued GPU work**: the L2 flush, then a spin kernel
  (``torch.cuda._sleep``) sized from the step's measured host dispatch time, then the start
  event, the step and the end event. The GPU is still spinning while the host dispatches the
  step, so Python, dispatch, context managers and guards stay outside the interval (nvbench's
  blocking kernel). Each sample checks that the start event had not completed by the time the
  step was dispatched (``cudaEventQuery``); if it had, the GPU ran dry inside the interval: the
  sample is set aside and the spin doubled. The step is replayed from a **CUDA graph** where
  capture works (the default), the blocked-event eager step otherwise, with the capture
  failure recorded;
- ``kernel``: the kernels' own time, from one profiler session per block of samples: the
  kernels of each iteration, split at the spin kernels, with the L2 flush's kernels left out
  and the intervals merged (concurrent streams are not counted twice); the first iteration of
  a session is dropped (Kineto can miss kernels at session start) and every iteration must run
  the same kernel set (a different set is a named finding).

Both timers measure both clocks: the row carries the graph (or blocked-event) time, the kernel
time and the host dispatch per call as separate columns; the timer chooses which one is the
row's median. Event timing runs before profiling, so CUPTI is not attached by this benchmark's
kernel block while events are timed (``scripts/gpu_suite.sh`` also sets ``TEARDOWN_CUPTI=1``).

Sampling follows ``perfsuite.measure.sampling``: warm-up by device time, then samples until the
median's confidence interval is within the target (1%) or stops improving, within limits; a
benchmark that did not converge says so. Throttling is judged around each sample: the spin
before the step and a short spin after it give the SM clock on both sides (cycles / seconds), and
NVML's cumulative throttle counters are read before and after it; a sample whose counters rose or
whose clock is below ``THROTTLE_FRACTION`` of the reference (``_sample_events``) is flagged and left
out. The GPU's clocks, power and throttle reasons are also read before and after each benchmark.

With ``cuda_graph`` the step's eager device time sizes a graph of ``unroll_for`` steps; a sample is
one replay of it divided by its steps (the graph's launch and the events shared by them).

pytest-benchmark stores the kept samples: ``benchmark.pedantic`` runs with a clock that replays
them (``ReplayClock``), so its statistics, storage and comparison hold device time. Every CUDA
call goes through ``DeviceApi``; ``TorchCuda`` implements it and the unit tests fake it.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
import time
from typing import Any
from collections.abc import Callable

from perfsuite.attention.cases import Device
from perfsuite.errors import DeviceTimingError
from perfsuite.measure.device_api import (
    SPIN_KERNEL,
    DeviceApi,
    KernelRecord,
    L2Flush,
    TorchCuda,
    capture_step,
    first_cause,
)
from perfsuite.measure.gpu_state import slowing_reasons
from perfsuite.measure.sampling import Estimate, Sampler, SamplingRule
from perfsuite.measure.timing import synchronized

TIMERS = ("host", "cuda_event", "kernel")
# Resolution handed to pytest-benchmark so it never calibrates the device clock (nvFuser's value).
DEVICE_CLOCK_PRECISION_S = 1e-6
# A sample whose SM clock is below this fraction of the maximum is throttled (nvbench's 75%).
THROTTLE_FRACTION = 0.75
MIN_SPIN_S = 20e-6  # the spin covers at least this, and twice the measured dispatch time
MAX_SPIN_S = 20e-3  # a step still ahead of its spin at this length waits on the host itself
DISPATCH_PROBES = 3  # calls whose host dispatch time sizes the spin
DEFAULT_RULE = SamplingRule()
KERNEL_BLOCK = 20  # iterations per profiler session (one more is dropped at its start)
FALLBACK_SM_CLOCK_HZ = 2.0e9  # sizes the first spin when the GPU's maximum clock is unknown
# A graph replay runs this much device time at least: the steps it holds (``unroll_for``) share
# one graph launch and one pair of events, as in Triton's do_bench_cudagraph.
UNROLL_TARGET_S = 1e-3
MAX_UNROLL = 100  # steps in one graph at most (each call's temporaries are reused in its pool)
SIZING_SAMPLES = 3  # eager blocked-event samples that size the graph


class Clock:
    """What a row's median measures (stored as ``clock``)."""

    GRAPH = "cuda_graph"  # graph replay between blocked events
    BLOCKED_EVENT = "blocked_event"  # the eager step between blocked events
    KERNEL = "kernel"  # merged kernel intervals from the profiler
    HOST = "host"  # pytest-benchmark's synchronized wall clock


def parse_timer(text: str) -> str:
    """``"host"``, ``"cuda_event"`` or ``"kernel"`` (case and surrounding space ignored).

    Raises ``DeviceTimingError`` naming ``text`` and the allowed values otherwise.
    """
    timer = text.strip().lower()
    if timer not in TIMERS:
        raise DeviceTimingError(f"timer {text!r} is not one of {', '.join(TIMERS)}")
    return timer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sample:
    """One blocked-event sample: device seconds per step between the events (the interval over
    the calls one run makes), host seconds to dispatch the run, the lower SM clock (Hz) of the spin
    before the step (where it started behind queued work) and the short spin after it, whether
    the GPU ran dry (the start event had completed when the step was dispatched), and the
    nanoseconds NVML counted throttled across the sample (``gpu_state.read_throttle_counters``;
    None without NVML's counters)."""

    device_s: float
    dispatch_s: float
    sm_clock_hz: float
    ran_dry: bool
    throttled_ns: int | None = None

    @property
    def throttled_by_nvml(self) -> bool:
        return bool(self.throttled_ns)


def counters_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> int | None:
    """Nanoseconds NVML counted throttled (every reason) between two ``throttle_counters``
    readings; None when either is missing."""
    if before is None or after is None:
        return None
    return sum(max(after[k] - before[k], 0) for k in after if k in before)


class BlockedEventTimer:
    """Samples ``run`` between two events recorded behind a spin kernel (see the module's text).

    ``flush``: the L2 flush queued before the spin (None: a short spin takes its place, so the
    spin still starts behind queued work); ``spin_s``: the spin's initial length, in seconds at
    ``sm_clock_hz`` (the GPU's maximum SM clock); ``host_clock``: host seconds; ``calls_per_run``:
    steps one call of ``run`` makes (a graph of unrolled steps), the interval is divided by it.
    """

    def __init__(
        self,
        api: DeviceApi,
        run: Callable[[], object],
        *,
        flush: L2Flush | None,
        sm_clock_hz: float,
        spin_s: float = MIN_SPIN_S,
        host_clock: Callable[[], float] = time.perf_counter,
        calls_per_run: int = 1,
    ):
        if sm_clock_hz <= 0:
            raise DeviceTimingError(f"SM clock of {sm_clock_hz!r} Hz; must be > 0")
        if calls_per_run < 1:
            raise DeviceTimingError(f"calls_per_run={calls_per_run!r}; must be >= 1")
        self.api, self.run, self.flush, self.host = api, run, flush, host_clock
        self.calls_per_run = calls_per_run
        self.sm_clock_hz = sm_clock_hz
        self.spin_s = min(max(spin_s, MIN_SPIN_S), MAX_SPIN_S)

    @property
    def at_max_spin(self) -> bool:
        return self.spin_s >= MAX_SPIN_S

    def lengthen(self) -> None:
        """Double the spin (at most ``MAX_SPIN_S``) after a sample in which the GPU ran dry."""
        self.spin_s = min(2 * self.spin_s, MAX_SPIN_S)

    def sample(self) -> Sample:
        api = self.api
        counters_before = api.throttle_counters()
        if self.flush is not None:
            self.flush()
        else:
            api.spin(int(MIN_SPIN_S * self.sm_clock_hz))
        before_spin = api.record_event()
        cycles = int(self.spin_s * self.sm_clock_hz)
        api.spin(cycles)
        clock_known = not api.event_done(before_spin)  # else the spin did not start behind work
        start = api.record_event()
        began = self.host()
        self.run()
        dispatch_s = self.host() - began
        end = api.record_event()
        ran_dry = api.event_done(start)
        after_cycles = int(MIN_SPIN_S * self.sm_clock_hz)
        api.spin(after_cycles)  # the clock right after the step: the timed region is bracketed
        after_spin = api.record_event()
        api.synchronize()
        throttled_ns = counters_delta(counters_before, api.throttle_counters())
        after_elapsed = api.elapsed_s(end, after_spin)
        clocks = [after_cycles / after_elapsed] if after_elapsed > 0 else []
        spin_elapsed = api.elapsed_s(before_spin, start)
        if clock_known and spin_elapsed > 0:
            clocks.append(cycles / spin_elapsed)
        device_s = api.elapsed_s(start, end)
        if device_s < 0:
            raise DeviceTimingError(
                f"the device reported {device_s} s for an interval; a clock cannot run backwards"
            )
        return Sample(
            device_s=device_s / self.calls_per_run,
            dispatch_s=dispatch_s,
            sm_clock_hz=min(clocks, default=self.sm_clock_hz),
            ran_dry=ran_dry,
            throttled_ns=throttled_ns,
        )


def measure_dispatch_s(
    api: DeviceApi,
    step: Callable[[], object],
    sm_clock_hz: float,
    host_clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median host seconds to dispatch ``step`` (the call returning, no synchronize), over
    ``DISPATCH_PROBES`` calls queued behind a ``MAX_SPIN_S`` spin, so the GPU never starves."""
    times = []
    for _ in range(DISPATCH_PROBES):
        api.spin(int(MAX_SPIN_S * sm_clock_hz))
        began = host_clock()
        step()
        times.append(host_clock() - began)
        api.synchronize()
    return statistics.median(times)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelIteration:
    """The step's device work in one iteration of a kernel block: merged busy seconds (union of
    the kernels' intervals), summed kernel seconds, and the kernel names in order."""

    merged_s: float
    summed_s: float
    names: tuple[str, ...]


def merged_seconds(records: list[KernelRecord]) -> float:
    """Length of the union of the records' ``[start_s, end_s]`` intervals (seconds): time with at
    least one kernel running, so overlapping streams count once (tritonbench's profiler mode)."""
    total, reach = 0.0, None
    for record in sorted(records, key=lambda r: r.start_s):
        if reach is None or record.start_s > reach:
            total += record.end_s - record.start_s
            reach = record.end_s
        elif record.end_s > reach:
            total += record.end_s - reach
            reach = record.end_s
    return total


def split_iterations(records: list[KernelRecord]) -> list[KernelIteration]:
    """A kernel block's records as one ``KernelIteration`` per step, the flush's kernels left out
    and the spins dropped.

    The block ran ``flush, spin`` once, then ``flush, spin, step`` per iteration (``KernelTimer``),
    so the records between the first two spins are one flush, whatever the profiler missed at the
    session's start: its kernels are stripped from the end of every iteration followed by another
    spin. Raises ``DeviceTimingError`` when a stripped tail is not the flush (the iterations cannot
    be told apart) or fewer than two spins were recorded.
    """
    segments: list[list[KernelRecord]] = [[]]
    for record in records:
        if SPIN_KERNEL in record.name:
            segments.append([])
        else:
            segments[-1].append(record)
    if len(segments) < 3:
        raise DeviceTimingError(
            f"{len(segments) - 1} {SPIN_KERNEL!r} in the kernel block's {len(records)} records, "
            "at least 2 expected: cannot split it"
        )
    flush = [r.name for r in segments[1]]
    iterations = []
    for index, segment in enumerate(segments[2:], 1):
        if index < len(segments) - 2 and flush:
            tail = [r.name for r in segment[-len(flush) :]]
            if tail != flush:
                raise DeviceTimingError(
                    f"iteration {index} of the kernel block does not end with the L2 flush's "
                    f"kernels {flush}: {tail}"
                )
            segment = segment[: -len(flush)]
        iterations.append(
            KernelIteration(
                merged_s=merged_seconds(segment),
                summed_s=sum(r.end_s - r.start_s for r in segment),
                names=tuple(r.name for r in segment),
            )
        )
    return iterations


def kernel_set_findings(iterations: list[KernelIteration]) -> list[str]:
    """A line per iteration whose kernels (as a multiset of names) differ from the most common
    set: ``iteration 3 of 20 ran another kernel set: +1 x foo; -1 x bar``. [] when all agree."""
    sets = [collections.Counter(i.names) for i in iterations]
    common = collections.Counter(tuple(sorted(s.items())) for s in sets).most_common(1)
    if not common:
        return []
    usual = collections.Counter(dict(common[0][0]))
    findings = []
    for index, found in enumerate(sets, 1):
        if found == usual:
            continue
        extra, missing = found - usual, usual - found
        parts = [f"+{n} x {name}" for name, n in sorted(extra.items())]
        parts += [f"-{n} x {name}" for name, n in sorted(missing.items())]
        findings.append(
            f"iteration {index} of {len(sets)} ran another kernel set: {'; '.join(parts)}"
        )
    return findings


class KernelTimer:
    """Kernel time of ``step``: blocks of iterations, one profiler session each."""

    def __init__(self, api: DeviceApi, step: Callable[[], object], flush: L2Flush | None):
        self.api, self.step, self.flush = api, step, flush

    def block(self, count: int = KERNEL_BLOCK) -> list[KernelIteration]:
        """``count`` iterations from one session (its first, extra, iteration dropped: Kineto can
        miss kernels at a session's start, pytorch #192021)."""
        api = self.api

        def flush_and_spin() -> None:
            if self.flush is not None:
                self.flush()
            api.spin(int(MIN_SPIN_S * FALLBACK_SM_CLOCK_HZ))

        def run() -> None:
            flush_and_spin()  # a lone flush between the first two spins: its kernels, to strip
            for _ in range(count + 1):
                flush_and_spin()
                self.step()

        return split_iterations(api.trace_kernels(run))[1:]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceTiming:
    """One benchmark's device timing: the row's clock and estimate, the other clocks beside it.

    ``timer``: the setting (``cuda_event`` or ``kernel``); ``clock``: what ``samples_s`` and
    ``estimate`` measure (``Clock``); ``event_median_s``: graph-replay or blocked-event median
    (seconds); ``kernel_median_s``: merged kernel time per step; ``dispatch_median_s``: host
    seconds to dispatch one eager call; ``kernel_findings``: iterations that ran another kernel
    set; ``dry_samples``: samples set aside because the GPU ran dry; ``host_bound``: the GPU still
    ran dry at the longest spin (the step waits on the host itself); ``throttled_samples``:
    samples throttled while timed (NVML's counters rose, or the clock was low), left out
    (``all_set_aside``: every event sample was dry or throttled, so the event median is of them
    all); ``gpu_before``/``gpu_after``: the GPU's state (``gpu_state.read_clocks``);
    ``l2_flush_bytes``: 0 without a flush; ``cuda_graph``: ``"off"``, ``"replayed (N steps a
    replay)"`` or ``"capture failed: ..."``; ``kernel_findings`` also names a kernel block that
    could not be profiled (``kernel_median_s`` is then None).
    """

    timer: str
    clock: str
    samples_s: tuple[float, ...]
    estimate: Estimate
    event_median_s: float | None
    kernel_median_s: float | None
    dispatch_median_s: float
    kernel_findings: tuple[str, ...] = ()
    all_set_aside: bool = False
    dry_samples: int = 0
    host_bound: bool = False
    throttled_samples: int = 0
    max_sm_clock_hz: float | None = None
    gpu_before: dict = dataclasses.field(default_factory=dict)
    gpu_after: dict = dataclasses.field(default_factory=dict)
    l2_flush_bytes: int = 0
    cuda_graph: str = "off"

    @property
    def device_median_s(self) -> float:
        return self.estimate.median_s

    def throttle(self) -> str:
        """``""``, or why this benchmark ran throttled: throttle reasons before/after, samples
        below the clock threshold."""
        reasons = sorted(set(slowing_reasons(self.gpu_before) + slowing_reasons(self.gpu_after)))
        parts = [", ".join(reasons)] if reasons else []
        if self.throttled_samples:
            parts.append(
                f"{self.throttled_samples} samples throttled while timed (NVML's throttle counters "
                f"rose, or the SM clock around the step was below {THROTTLE_FRACTION:.0%} of the "
                "max) left out"
            )
        return "; ".join(parts)

    def notes(self) -> list[str]:
        """Everything the row must say about this timing, one line each."""
        notes = [self.estimate.note()] if self.estimate.note() else []
        if self.all_set_aside:
            notes.append(
                "every event sample was set aside (throttled or GPU idle): the median is of them all"
            )
        if self.throttle():
            notes.append(f"throttled: {self.throttle()}")
        if self.host_bound:
            notes.append(
                f"GPU idle inside the interval: the step waits on the host even behind a "
                f"{MAX_SPIN_S * 1e3:g} ms spin"
            )
        notes.extend(self.kernel_findings)
        return notes

    def extra_info(self) -> dict[str, object]:
        """Keys for ``benchmark.extra_info`` (units in the names)."""
        return {
            "timer": self.timer,
            "clock": self.clock,
            "device_median_s": self.device_median_s,
            "event_median_s": self.event_median_s,
            "kernel_median_s": self.kernel_median_s,
            "dispatch_median_s": self.dispatch_median_s,
            "sampling": self.estimate.as_dict(),
            "dry_samples": self.dry_samples,
            "host_bound": self.host_bound,
            "throttled_samples": self.throttled_samples,
            "throttle": self.throttle(),
            "kernel_findings": list(self.kernel_findings),
            "timing_notes": self.notes(),
            "max_sm_clock_hz": self.max_sm_clock_hz,
            "gpu_before": self.gpu_before,
            "gpu_after": self.gpu_after,
            "l2_flush_bytes": self.l2_flush_bytes,
            "cuda_graph": self.cuda_graph,
        }


def _max_clock_hz(state: dict[str, object]) -> float | None:
    mhz = state.get("max_sm_clock_mhz")
    return float(mhz) * 1e6 if isinstance(mhz, int | float) and mhz > 0 else None


@dataclasses.dataclass
class _EventRun:
    samples: list[float]
    dispatch: list[float]
    estimate: Estimate
    dry: int
    host_bound: bool
    throttled: int
    all_set_aside: bool


def _sample_events(
    timer: BlockedEventTimer,
    rule: SamplingRule,
    max_clock_hz: float | None,
    host_clock: Callable[[], float],
) -> _EventRun:
    """Warm-up by device time, then samples by ``rule`` (dry and throttled samples left out).

    A sample is throttled when NVML's throttle counters rose across it, or when its SM clock is
    below ``THROTTLE_FRACTION`` of a reference: the highest clock seen in this benchmark (warm-up
    included) where NVML's counters are read (they see power and thermal throttling themselves,
    so clocks locked low are not taken for throttling), else the GPU's maximum SM clock.
    """
    warm_s = seen_max = 0.0  # seen_max: the highest SM clock a sample ran at
    warm_began = host_clock()
    while warm_s < rule.warmup_s and host_clock() - warm_began < rule.max_wall_s:
        found = timer.sample()
        if found.ran_dry:
            timer.lengthen()
        warm_s += found.device_s
        seen_max = max(seen_max, found.sm_clock_hz)
    sampler = Sampler(rule)
    all_samples: list[Sample] = []
    dry = throttled = 0
    host_bound = False
    began = host_clock()
    while True:
        found = timer.sample()
        all_samples.append(found)
        seen_max = max(seen_max, found.sm_clock_hz)
        counters_read = found.throttled_ns is not None
        threshold = THROTTLE_FRACTION * (seen_max if counters_read else max_clock_hz or seen_max)
        if found.ran_dry and not timer.at_max_spin:
            dry += 1
            timer.lengthen()
        elif found.throttled_by_nvml or found.sm_clock_hz < threshold:
            throttled += 1
        else:
            host_bound = host_bound or found.ran_dry
            sampler.add(found.device_s)
        if sampler.done(host_clock() - began):
            break
    all_set_aside = not sampler.samples
    if all_set_aside:  # every sample set aside: estimate from them all, and say so
        for found in all_samples:
            sampler.add(found.device_s)
    return _EventRun(
        all_set_aside=all_set_aside,
        samples=list(sampler.samples),
        dispatch=[s.dispatch_s for s in all_samples],
        estimate=sampler.estimate(),
        dry=dry,
        host_bound=host_bound,
        throttled=throttled,
    )


def _sample_kernels(
    kernels: KernelTimer, rule: SamplingRule, host_clock: Callable[[], float]
) -> tuple[list[float], Estimate, list[str]]:
    """Kernel blocks until ``rule`` stops; the merged times, the estimate and kernel-set findings."""
    sampler = Sampler(rule)
    findings: list[str] = []
    began = host_clock()
    while True:
        block = kernels.block()
        findings.extend(kernel_set_findings(block))
        for iteration in block:
            sampler.add(iteration.merged_s)
        if sampler.done(host_clock() - began):
            return sampler.samples, sampler.estimate(), findings


class ReplayClock:
    """A clock for pytest-benchmark that replays measured samples: its two readings around
    round ``i`` differ by ``samples[i]``, so ``benchmark.pedantic`` stores exactly these samples."""

    def __init__(self, samples: list[float], name: str):
        self.samples, self.__name__ = list(samples), name  # pytest-benchmark stores __name__
        self.total_s, self._calls = 0.0, 0

    def __call__(self) -> float:
        if self._calls % 2 == 1:
            self.total_s += self.samples[self._calls // 2]
        self._calls += 1
        return self.total_s


def unroll_for(step_s: float) -> int:
    """Steps in one CUDA graph for a step of ``step_s`` device seconds: enough that a replay runs
    ``UNROLL_TARGET_S`` (so the graph's launch and its events are a small share of the sample), at
    most ``MAX_UNROLL``, at least 1. Raises ``DeviceTimingError`` for a time that is not > 0."""
    if not step_s > 0:
        raise DeviceTimingError(f"step time {step_s!r} s; must be > 0 to size the graph")
    return max(1, min(MAX_UNROLL, math.ceil(UNROLL_TARGET_S / step_s)))


class DeviceSampler:
    """The blocked-event timer of one step, set up once: the GPU's state read, the L2 flush
    buffer allocated, the step's host dispatch measured and the spin sized from it, its eager
    device time measured (``SIZING_SAMPLES``) and ``unroll_for`` it calls captured in one CUDA
    graph where capture works (``cuda_graph``). A sample is one replay divided by the steps it
    holds. ``samples(n)`` gives device seconds per step on request (A/B workers ask block by
    block); ``time_on_device`` samples it by a ``SamplingRule``.

    ``clock``: ``Clock.GRAPH`` when the replay is timed, else ``Clock.BLOCKED_EVENT``;
    ``cuda_graph``: ``"off"``, ``"replayed (N steps a replay)"`` or ``"capture failed: ..."``.
    """

    def __init__(
        self,
        step: Callable[[], object],
        *,
        api: DeviceApi | None = None,
        cuda_graph: bool = True,
        flush_l2: bool = True,
        host_clock: Callable[[], float] = time.perf_counter,
    ):
        self.api = api = api or TorchCuda()
        self.step, self.host_clock = step, host_clock
        self.dry_samples = 0
        self.seen_clock_hz = 0.0  # the highest SM clock a screened sample ran at
        self.gpu_before = api.read_state()
        self.flush = L2Flush(api) if flush_l2 else None
        self.max_clock_hz = _max_clock_hz(self.gpu_before)
        sm_hz = self.max_clock_hz or FALLBACK_SM_CLOCK_HZ
        self.dispatch_s = measure_dispatch_s(api, step, sm_hz, host_clock)
        self.timer = BlockedEventTimer(
            api,
            step,
            flush=self.flush,
            sm_clock_hz=sm_hz,
            spin_s=2 * self.dispatch_s,
            host_clock=host_clock,
        )
        self.capture = None
        if cuda_graph:
            eager_s = statistics.median(self.samples(SIZING_SAMPLES))
            # an empty step (no device work) still gets a graph of MAX_UNROLL calls
            self.capture = capture_step(api, step, unroll_for(max(eager_s, 1e-12)))
            self.timer.run, self.timer.calls_per_run = self.capture.step, self.capture.unroll
        self.clock = Clock.GRAPH if self.capture and self.capture.replayed else Clock.BLOCKED_EVENT
        self.cuda_graph = self.capture.description if self.capture else "off"

    def samples(self, count: int) -> list[float]:
        """``count`` device samples (seconds); a sample in which the GPU ran dry is taken again
        with a longer spin (kept once the spin is at ``MAX_SPIN_S``)."""
        found: list[float] = []
        while len(found) < count:
            sample = self.timer.sample()
            if sample.ran_dry and not self.timer.at_max_spin:
                self.dry_samples += 1
                self.timer.lengthen()
                continue
            found.append(sample.device_s)
        return found

    def warm_up(self, device_s: float = DEFAULT_RULE.warmup_s, max_samples: int = 10_000) -> None:
        """Untimed samples until ``device_s`` seconds of device time ran (clocks up), at most
        ``max_samples``."""
        spent = 0.0
        for _ in range(max_samples):
            if spent >= device_s:
                return
            spent += sum(self.samples(1))

    def screened_block(
        self, count: int, warmup_s: float = 0.0, max_tries: int | None = None
    ) -> tuple[list[float], int]:
        """A block of ``count`` device samples (seconds per step) for an A/B worker, screened as
        ``time_on_device`` screens its samples: ``warmup_s`` of device time run first (clocks up
        after the worker waited), then samples taken until ``count`` are kept, a sample whose
        NVML throttle counters rose or whose SM clock was below ``THROTTLE_FRACTION`` of the
        highest seen (the GPU's maximum without NVML's counters) set aside; at most ``max_tries``
        samples (default ``4 * count``), after which the block is what was kept, set-aside ones
        added where too few. Returns the samples and how many were set aside.

        Raises ``DeviceTimingError`` for ``count`` < 1."""
        if count < 1:
            raise DeviceTimingError(f"a block of {count!r} samples; at least 1")
        self.warm_up(warmup_s)
        kept, aside = [], []
        for _ in range(max_tries or 4 * count):
            sample = self.timer.sample()
            if sample.ran_dry and not self.timer.at_max_spin:
                self.dry_samples += 1
                self.timer.lengthen()
                continue
            self.seen_clock_hz = max(self.seen_clock_hz, sample.sm_clock_hz)
            counters_read = sample.throttled_ns is not None
            reference = (
                self.seen_clock_hz if counters_read else self.max_clock_hz or self.seen_clock_hz
            )
            throttled = (
                sample.throttled_by_nvml or sample.sm_clock_hz < THROTTLE_FRACTION * reference
            )
            (aside if throttled else kept).append(sample.device_s)
            if len(kept) == count:
                break
        return (kept + aside)[:count], len(aside)

    def kernel_block(self) -> list[KernelIteration]:
        """One profiler session of the eager step (``KernelTimer.block``)."""
        return KernelTimer(self.api, self.step, self.flush).block()


def time_on_device(
    benchmark: Any,
    step: Callable[[], object],
    timer: str,
    rule: SamplingRule = DEFAULT_RULE,
    flush_l2: bool = True,
    cuda_graph: bool = True,
    api: DeviceApi | None = None,
    host_clock: Callable[[], float] = time.perf_counter,
) -> DeviceTiming | None:
    """Time ``step`` on the device and store the samples of ``timer``'s clock in pytest-benchmark.

    ``step``: the unsynchronized step; with ``cuda_graph`` its CUDA-graph replay is timed where
    capture works. ``timer`` ``cuda_event``: the row's median is the graph/blocked-event time,
    sampled by ``rule``, and one kernel block gives the kernel column; ``kernel``: kernel blocks
    are sampled by ``rule``, and events give the event column. Events are always timed first
    (no profiler session of this benchmark is open while they are). Returns None when
    pytest-benchmark is disabled (``--benchmark-disable``: the step runs once, untimed).
    Raises ``DeviceTimingError`` for ``timer="host"`` (use the fixture directly).
    """
    if parse_timer(timer) == "host":
        raise DeviceTimingError(
            "timer 'host' is pytest-benchmark's own; call benchmark(step) instead"
        )
    if benchmark.disabled:
        benchmark.pedantic(step, rounds=1)
        return None
    sampler = DeviceSampler(
        step, api=api, cuda_graph=cuda_graph, flush_l2=flush_l2, host_clock=host_clock
    )
    events, max_clock_hz = sampler.timer, sampler.max_clock_hz
    if timer == "cuda_event":
        event_run = _sample_events(events, rule, max_clock_hz, host_clock)
        try:
            block = sampler.kernel_block()
            findings = kernel_set_findings(block)
        except Exception as exc:  # CUPTI taken (nsys, ncu) or a block that cannot be split: the
            # row keeps its event time and says why it has no kernel time
            block, findings = [], [f"kernel time unavailable: {first_cause(exc)}"]
        kernel_samples = [i.merged_s for i in block]
        samples, estimate, clock = event_run.samples, event_run.estimate, sampler.clock
    else:
        short = dataclasses.replace(rule, max_wall_s=min(rule.max_wall_s, 0.5))
        event_run = _sample_events(events, short, max_clock_hz, host_clock)
        kernel_samples, estimate, findings = _sample_kernels(
            KernelTimer(sampler.api, step, sampler.flush), rule, host_clock
        )
        samples, clock = kernel_samples, Clock.KERNEL
    after = sampler.api.read_state()
    replay = ReplayClock(samples, f"perfsuite_{clock}_clock")
    benchmark._timer = (
        replay  # private: pytest-benchmark has no public timer hook (nvFuser does the same)
    )
    benchmark._precisions[replay] = DEVICE_CLOCK_PRECISION_S
    try:
        benchmark.pedantic(lambda: None, rounds=len(samples), iterations=1, warmup_rounds=0)
    finally:
        benchmark._precisions.pop(replay, None)
    return DeviceTiming(
        timer=timer,
        clock=clock,
        samples_s=tuple(samples),
        estimate=estimate,
        event_median_s=statistics.median(event_run.samples),
        kernel_median_s=statistics.median(kernel_samples) if kernel_samples else None,
        dispatch_median_s=sampler.dispatch_s,
        kernel_findings=tuple(findings),
        all_set_aside=event_run.all_set_aside,
        dry_samples=event_run.dry,
        host_bound=event_run.host_bound,
        throttled_samples=event_run.throttled,
        max_sm_clock_hz=max_clock_hz,
        gpu_before=sampler.gpu_before,
        gpu_after=after,
        l2_flush_bytes=sampler.flush.size_bytes if sampler.flush else 0,
        cuda_graph=sampler.cuda_graph,
    )


def benchmark_step(
    benchmark: Any,
    step: Callable[[], object],
    device: str,
    timer: str = "host",
    rule: SamplingRule = DEFAULT_RULE,
    flush_l2: bool = True,
    cuda_graph: bool = True,
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
            benchmark, step, timer, rule, flush_l2=flush_l2, cuda_graph=cuda_graph, api=api
        )
        return timing, (timing.extra_info() if timing else {"timer": timer})
    graph = capture_step(api or TorchCuda(), step) if device == Device.CUDA and cuda_graph else None
    benchmark(synchronized(graph.step if graph else step, device))
    return None, {
        "timer": "host",
        "clock": Clock.HOST,
        "cuda_graph": graph.description if graph else "off",
    }
