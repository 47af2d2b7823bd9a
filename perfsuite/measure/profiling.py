"""Run a forward under ``torch.profiler`` and keep its Chrome trace.

Profiling is separate from timing: the profiler adds overhead, so its numbers are
counts (ops, kernels, copies, bytes), never latencies for the benchmark table.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from perfsuite.attention.cases import Device
from perfsuite.storage import write_bytes_atomic
from perfsuite.trace.summary import WindowSummary, summarize_windows

FORWARD_ANNOTATION = "perfsuite::forward"


def step_annotation(mode: str) -> str:
    """The ``record_function`` name of one step of ``mode``: ``perfsuite::forward``, ``perfsuite::backward``, ..."""
    return f"perfsuite::{mode}"


# wait 1 step, warm up 1 (discarded, absorbs lazy init), record ACTIVE_STEPS.
WAIT_STEPS, WARMUP_STEPS, ACTIVE_STEPS = 1, 1, 2


def activities_for(device: str) -> list[ProfilerActivity]:
    """CPU activity always; CUDA activity (CUPTI/roctracer) for a CUDA device."""
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == Device.CUDA else [])


def profile_steps(
    forward: Callable[[], object],
    device: str,
    trace_path: Path,
    annotation: str = FORWARD_ANNOTATION,
) -> list[WindowSummary]:
    """Profile ``forward`` (any step) over a wait/warmup/active schedule and summarise each active call.

    See ``record_trace``; returns one ``WindowSummary`` per active call (``ACTIVE_STEPS`` of them),
    read from the trace exactly as for a trace recorded elsewhere (``perfsuite.trace.summary``).
    """
    return summarize_windows(record_trace(forward, device, trace_path, annotation), annotation)


def record_trace(
    forward: Callable[[], object],
    device: str,
    trace_path: Path,
    annotation: str = FORWARD_ANNOTATION,
) -> dict[str, Any]:
    """Profile ``forward`` over a wait/warmup/active schedule; returns the Chrome trace as a dict.

    Each call is wrapped in ``record_function(annotation)``; CUDA work is
    synchronized before the step ends so its kernels land in the recorded step.
    Shapes (``record_shapes``) and memory are recorded. The trace is written
    gzip-compressed to ``trace_path`` (``.json.gz``) atomically.
    """
    steps = WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS
    plan = schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1)
    with profile(
        activities=activities_for(device), schedule=plan, record_shapes=True, profile_memory=True
    ) as prof:
        for _ in range(steps):
            with record_function(annotation):
                forward()
            if device == Device.CUDA:
                torch.cuda.synchronize()
            prof.step()
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "trace.json"
        prof.export_chrome_trace(str(raw))
        trace = json.loads(raw.read_text(encoding="utf-8"))
        write_bytes_atomic(trace_path, gzip.compress(raw.read_bytes(), compresslevel=6))
    return trace
