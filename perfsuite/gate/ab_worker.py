"""A/B worker: times one implementation on request, in its own process and source tree.

Started by ``perfsuite.gate.ab`` as ``python -m perfsuite.gate.ab_worker`` with ``PYTHONPATH`` set to a
source tree, so it imports that tree's perfsuite and variants. It reads one JSON request
per line on stdin and answers one JSON line on stdout:

* ``{"setup": {"variant", "case", "seed", "slowdown", "mode", "specs", "fingerprint"}}`` ->
  ``{"fingerprint": ..., "step_s": ..., "setup_s": ...}`` (the fingerprint with the score-sized
  writes, and in forward_backward the bytes saved for backward, as a saved run's; ``step_s`` the median of
  7 steps; ``setup_s`` the seconds of building the inputs, the variant's per-case ``prepare`` and its first
  call, imports and compiling included); ``{"ready": true, "setup_s": ...}`` instead when
  ``fingerprint`` is false (the gate's other workers of a side only time: no step timed or warmed up
  beyond the first call, their visits warm up), ``{"missing": reason}`` or ``{"unsupported": reason}``. ``mode``: forward (default), backward or forward_backward.
  ``specs``: users' ``module:function`` variants to register first (entry points of the
  ``perfsuite.variants`` group always are). ``slowdown`` (0.1 = 10%) adds busy CPU work after
  each step, lasting that fraction of the same call's time (calibration of
  the gate: a real slowdown, not a sleep);
* ``{"time": rounds, "warmup": n, "placement": seed}`` -> ``{"times": [seconds, ...], "cpu_times": [...],
  "contention": {...}, "clock": ..., "block_s": seconds}``; with ``placement`` (an integer, host clock only) the
  inputs are first re-created at random aligned offsets drawn from that seed, with a spacer of random size held
  through the block (``perfsuite.measure.placement``), and the step rebuilt on them;
  ``n`` untimed steps (default 0), then one step per round: its seconds on the worker's clock (what the gate judges), this process's CPU seconds
  over all threads (``validation.block_noise`` compares the two clocks), and the block's contention evidence (``perfsuite.measure.contention``, read before
  and after the block, never between rounds); ``block_s``: the worker's own wall seconds from the first
  timed round's start to the last one's end (the coordinator compares it with its own clock). The clock (also in the setup's reply): on the CPU ``host`` (the
  wall time of the call); on CUDA the device clock of ``perfsuite.measure.device_timing`` (``DeviceSampler``):
  ``cuda_graph`` (graph replay between blocked events) where the step can be captured, else ``blocked_event``,
  the L2 flushed before every round outside the interval. ``slowdown`` is host work, which a device clock
  does not see: it is refused on CUDA;
* ``{"info": true}`` -> torch version and device names; ``{"ping": true}`` -> ``{"pong": true}`` (the
  coordinator's measure of the transport); ``{"quit": true}`` ends the worker.

Every reply to ``setup`` and ``time`` carries ``handled_s`` (the worker's wall seconds from reading the
request to writing the reply) and ``untimed_s`` (of which untimed: placement and warm-up steps), on
clocks this module took before any user code was imported; the coordinator checks them against its own
clock (``perfsuite.gate.outside_clock``). The worker is guarded as the suite is
(``perfsuite.measure.measurement_guard``, and this module's own timing functions): after set-up and after
every block, a replaced timer or changed setting is answered ``{"tampered": "..."}`` naming it, and the
coordinator fails the gate; nothing of that benchmark is kept.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The clocks, taken before any user code runs: a variant that replaces time.perf_counter or
# time.process_time later changes neither what this worker measures nor the guard's verdict on it.
_WALL = time.perf_counter
_CPU = time.process_time
# This module's own timing functions, guarded beside the suite's (a variant could replace them); in
# the module as it runs (``__main__`` when started with ``-m``).
WORKER_GUARDED = tuple(
    f"{__name__}:{name}"
    for name in (
        "Worker._clocked",
        "Worker._host_times",
        "Worker._device_block",
        "Worker.handle",
        "_WALL",
        "_CPU",
    )
) + ("perfsuite.measure.contention:Probe.evidence",)


# Device seconds of work before each block on a device clock: the GPU's clocks come up after the
# worker waited while the other side ran (``DeviceSampler.screened_block``).
DEVICE_WARMUP_S = 0.02


def _spin(seconds: float) -> None:
    end = _WALL() + seconds
    while _WALL() < end:
        pass


class Worker:
    def __init__(self):
        self.forward = None
        self.loaded = False
        self.device_sampler = None  # a DeviceSampler on CUDA: rounds on the device clock
        self.clock = "host"
        self.prepared = self.mode = self.case = None  # the benchmark set up last (host clock)
        # injected busy work after each step, a fraction of its time (calibration)
        self.slowdown = 0.0
        self.placed: tuple[int, object, object] | None = None  # (seed, step, spacer) last drawn

    def setup(self, request: dict) -> dict:
        from perfsuite.attention.cases import parse_case_id
        from perfsuite.attention.modes import Mode, make_step
        from perfsuite.measure.refusals import VariantUnsupported
        from perfsuite.measure.evidence import prepare_case, run_once
        from perfsuite.measure.evidence import input_tensors
        from perfsuite.measure.profiling import FORWARD_ANNOTATION, record_trace
        from perfsuite.measure.saved_tensors import measure_saved
        from perfsuite.measure.score_accounting import account_windows
        from perfsuite.trace.summary import summarize_windows
        from perfsuite.measure.timing import synchronized
        from perfsuite.trace.structure import fingerprint
        from perfsuite.variants import get_variant, variant_names
        from perfsuite.variants.registry import certain_skip

        self.load_variants(request.get("specs", []))
        self.placed = None
        case, mode = parse_case_id(request["case"]), request.get("mode", Mode.FORWARD)
        if request["variant"] not in variant_names():  # renamed or removed on this side
            return {"missing": f"no variant {request['variant']!r} in this tree"}
        variant = get_variant(request["variant"])
        skip = certain_skip(variant, case, mode)  # what the suite would not generate
        if skip is not None:
            return {"unsupported": skip}
        started = _WALL()
        try:
            prepared = prepare_case(variant, case, request["seed"])
            raw_step = make_step(mode, prepared.fn, prepared.inputs, prepared.grad_output)
            step = synchronized(raw_step, case.device)
            run_once(variant, case, step)
            setup_s = _WALL() - started
        except VariantUnsupported as exc:
            return {"unsupported": str(exc)}
        found = {"ready": True, "setup_s": setup_s}
        if request.get("fingerprint", True):
            with tempfile.TemporaryDirectory() as scratch:
                trace = record_trace(step, case.device, Path(scratch) / "t.json.gz")
            summary = summarize_windows(trace, FORWARD_ANNOTATION)[0]
            scores = account_windows(trace, FORWARD_ANNOTATION, case.score_shape, case.head_dim)[
                0
            ].by_label()
            saved = (
                measure_saved(step, case.score_shape, input_tensors(prepared.inputs)).bytes
                if mode == "forward_backward"
                else None
            )
            found = {
                "fingerprint": fingerprint(summary, case.device, scores, saved),
                "setup_s": setup_s,
            }
        if case.device == "cuda":
            from perfsuite.measure.device_timing import DeviceSampler

            if request.get("slowdown", 0.0):
                raise ValueError(
                    "slowdown adds host work, which the device clock of a CUDA gate does not see"
                )
            self.device_sampler = DeviceSampler(raw_step)
            self.clock = self.device_sampler.clock
            self.forward = self.device_sampler.timer.run
            self.device_sampler.warm_up()  # by device time: clocks up before the first block
            return {**found, "clock": self.clock, "cuda_graph": self.device_sampler.cuda_graph}
        self.slowdown = request.get("slowdown", 0.0)
        self.prepared, self.mode, self.case = prepared, mode, case
        self.forward = self._with_slowdown(step)
        if not request.get("fingerprint", True):  # only times: its first visit warms it up
            return {**found, "clock": self.clock}
        step_s = statistics.median(self._times(step, 7))
        self._times(self.forward, 5)  # warm-up
        return {**found, "clock": self.clock, "step_s": step_s}

    def _with_slowdown(self, step):
        """``step``, followed by busy work lasting ``slowdown`` times that call's own seconds: a
        regression proportional to the work in whatever speed state the call ran (a fraction of the
        set-up's first steps, which run slower than warm ones, injected 5% for a requested 3%)."""
        slowdown = self.slowdown
        if not slowdown:
            return step

        def slowed():
            start = _WALL()
            step()
            _spin(slowdown * (_WALL() - start))

        return slowed

    def _placed(self, seed: int):
        """The step rebuilt on inputs re-created at offsets drawn from ``seed``, and the spacer to hold
        through the block (``perfsuite.measure.placement``); the same ``seed`` as the block before
        keeps that block's placement (the coordinator re-draws every few blocks, ``PLACEMENT_PAIRS``)."""
        if self.placed is not None and self.placed[0] == seed:
            return self.placed[1], self.placed[2]
        self.placed = None  # the old placement's buffers are freed before the new ones are drawn
        step, held = self._draw_placement(seed)
        self.placed = (seed, step, held)
        return step, held

    def _draw_placement(self, seed: int):
        import numpy as np

        from perfsuite.attention.modes import make_step
        from perfsuite.measure.placement import relocated_inputs, spacer

        rng = np.random.default_rng(seed)
        prepared = self.prepared
        inputs = relocated_inputs(prepared.inputs, rng)
        step = make_step(self.mode, prepared.fn, inputs, prepared.grad_output)
        return self._with_slowdown(step), spacer(rng, self.case.device)

    def _device_block(self, rounds: int) -> dict:
        """A block on the device clock: ``DEVICE_WARMUP_S`` of device work first (clocks up after the
        worker waited), then ``rounds`` samples screened for throttling (``DeviceSampler.screened_block``:
        a sample whose NVML throttle counters rose or whose clock was low is set aside and retaken)."""
        from perfsuite.measure.contention import Probe

        with Probe() as probe:
            start = _WALL()
            times, aside = self.device_sampler.screened_block(rounds, warmup_s=DEVICE_WARMUP_S)
            block_s = _WALL() - start
        return {
            "times": times,
            "cpu_times": None,
            "throttled_set_aside": aside,
            "contention": probe.evidence(times).as_dict(),
            "clock": self.clock,
            "block_s": block_s,
            "untimed_s": 0.0,
        }

    def load_variants(self, specs: list[str]) -> None:
        """Register installed entry points and users' ``module:function`` specs (once each)."""
        from perfsuite.variants.user import load_entry_point_variants, load_variant_spec

        if not self.loaded:
            load_entry_point_variants()
            self.loaded = True
        for spec in specs:
            load_variant_spec(spec)

    def _host_times(self, rounds: int, forward=None) -> tuple[list[float], list[float]]:
        return self._clocked(forward or self.forward, rounds)

    @staticmethod
    def _times(forward, rounds: int) -> list[float]:
        return Worker._clocked(forward, rounds)[0]

    @staticmethod
    def _clocked(forward, rounds: int) -> tuple[list[float], list[float]]:
        """Per round: wall seconds (``perf_counter``) and this process's CPU seconds, all threads
        (``process_time``)."""
        wall, cpu = [], []
        for _ in range(rounds):
            start, start_cpu = _WALL(), _CPU()
            forward()
            cpu.append(_CPU() - start_cpu)
            wall.append(_WALL() - start)
        return wall, cpu

    def handle(self, request: dict) -> dict:
        if "setup" in request:
            return self.setup(request["setup"])
        if "time" in request:
            from perfsuite.measure.contention import Probe

            if self.device_sampler:
                return self._device_block(int(request["time"]))
            clocked = self._host_times
            started = _WALL()
            forward, held = None, None
            if request.get("placement") is not None and not self.device_sampler:
                forward, held = self._placed(int(request["placement"]))
            with Probe() as probe:
                clocked(int(request.get("warmup", 0)), forward)  # untimed rounds first
                start = _WALL()
                times, cpu_times = clocked(int(request["time"]), forward)
                block_s = _WALL() - start
            del held
            return {
                "times": times,
                "cpu_times": cpu_times,
                "contention": probe.evidence(times).as_dict(),
                "clock": self.clock,
                "block_s": block_s,
                "untimed_s": start - started,
            }
        if "ping" in request:
            return {"pong": True}
        if "info" in request:
            from perfsuite.measure.machine import torch_machine_info

            return torch_machine_info(request["info"])
        raise ValueError(f"unknown request {request!r}")


# Requests between two checks of every guarded namespace function (``MeasurementState.changes``); a
# replacement found later still fails the gate (``tampered``), only a few blocks later.
NAMESPACE_CHECK_EVERY = 8


def main() -> None:
    # Ctrl-C reaches the whole process group: the coordinator alone handles it and ends this worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch  # at start: a gate's workers import at once, not one by one at their first setup

    threads = os.environ.get("PERFSUITE_AB_TIMING_THREADS")  # perfsuite.gate.ab.TIMING_THREADS_ENV
    if threads:
        torch.set_num_threads(int(threads))
    replies = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the reply channel
    from perfsuite.measure.measurement_guard import MeasurementState

    guard = MeasurementState.capture(extra=WORKER_GUARDED)  # before any user code is imported
    worker = Worker()
    handled = 0
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            # no interpreter teardown (0.6 s of unloading torch per worker, 24 per gate): every reply
            # was flushed, and nothing of this process outlives it
            sys.stderr.flush()
            os._exit(0)
        received = _WALL()
        try:
            reply = worker.handle(request)
        except Exception as exc:  # reported to the coordinator, which fails with it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        handled += 1
        # the namespaces' functions (about 0.5 ms) every NAMESPACE_CHECK_EVERY requests and after any
        # set-up; the timers and settings after every request
        full = "time" not in request or handled % NAMESPACE_CHECK_EVERY == 0
        if changes := guard.changes(namespaces=full):
            guard.restore()
            reply = {"tampered": "; ".join(changes)}
        reply["handled_s"] = _WALL() - received
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
