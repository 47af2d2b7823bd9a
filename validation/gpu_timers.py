"""Time the same attention steps with every GPU timer and compare them (docs/validation.md: "GPU timers").

For each step (``variant:mode:case``), in this order, ``--samples`` samples each (200 by default):

* ``old event``: the event timer perfsuite had before the blocked start: L2 flush, synchronize,
  start event on the idle GPU, step, end event (host dispatch inside the interval);
* ``blocked event``: ``perfsuite.measure.device_timing.DeviceSampler`` on the eager step (start event
  behind a spin kernel, L2 flushed before the spin);
* ``graph replay``: the same on a CUDA graph of several unrolled steps (sized to a 1 ms replay; one
  replay a sample, divided by its steps, as ``do_bench_cudagraph`` divides its graph's time) with the
  L2 flushed, and ``graph replay, warm L2`` without the flush (what ``do_bench_cudagraph`` measures);
* ``triton do_bench``: ``triton.testing.do_bench(return_mode="all")`` (a cache clear before each
  sample, events around each call);
* ``triton do_bench_cudagraph``: ``triton.testing.do_bench_cudagraph(return_mode="all")`` on a side
  stream (calls replayed from one graph, warm L2; each sample is a mean over the graph's calls);
* ``kernel time``: merged kernel intervals from profiler sessions of 20 iterations
  (``KernelTimer``), run last so no profiler session is open before the event timers.

Each timer warms up for ``--warmup-ms`` of GPU time first. The GPU's clocks, power and throttle
reasons are read before and after each step. The table gives per timer the samples, median,
IQR / median and the ratio to ``do_bench_cudagraph``'s median; ``--json`` keeps every sample.

    python -m validation.gpu_timers --out validation/reports/h200/gpu_timers.md --json gpu_timers.json

Needs a CUDA device and triton; on a machine without them it stops with exit status 2 and says
why. A step that raises is reported in its place (``failed: ...``) and the others still run; the
exit status is then 1. No network access is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_STEPS = (
    "sdpa:forward:b8h16s1024d64-bf16-causal-cuda",  # the post's case
    "sdpa:forward:b4h32kv8q1k4096d128-bf16-noncausal-cuda",  # a GQA decode step
    "sdpa:backward:b8h16s1024d64-bf16-causal-cuda",
)
REFERENCE = "triton do_bench_cudagraph"


def fail(message: str) -> None:
    print(f"validation.gpu_timers: {message}", file=sys.stderr)
    raise SystemExit(2)


def iqr_over_median(samples: list[float]) -> float:
    """Interquartile range / median (pytest-benchmark's quartiles: ``statistics.quantiles``, n=4)."""
    if len(samples) < 2:
        return float("nan")
    q1, q2, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / q2


def warm_up(step: Callable[[], object], ms: float) -> None:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    spent = 0.0
    while spent < ms:
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        spent += start.elapsed_time(end)


def old_event_samples(step, flush, count: int) -> list[float]:
    import torch

    found = []
    for _ in range(count):
        flush()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        found.append(start.elapsed_time(end) / 1e3)
    return found


def triton_samples(step, count: int, estimate_s: float, graph: bool) -> list[float]:
    """Seconds per sample from ``do_bench`` (about ``count`` samples: its ``rep`` is sized from
    ``estimate_s``) or ``do_bench_cudagraph`` (its own number of samples)."""
    import torch
    import triton.testing

    rep_ms = max(count * estimate_s * 1e3, 5.0)
    if graph:
        with torch.cuda.stream(torch.cuda.Stream()):
            found = triton.testing.do_bench_cudagraph(step, rep=rep_ms, return_mode="all")
    else:
        found = triton.testing.do_bench(step, warmup=25, rep=rep_ms, return_mode="all")
    return [t / 1e3 for t in found]


def time_step(spec: str, count: int, warmup_ms: float, seed: int) -> dict:
    """Every timer on one ``variant:mode:case`` step; samples in seconds."""
    import torch

    from perfsuite.attention.cases import parse_case_id
    from perfsuite.attention.modes import make_step
    from perfsuite.measure.device_api import L2Flush, TorchCuda
    from perfsuite.measure.device_timing import DeviceSampler, KernelTimer, kernel_set_findings
    from perfsuite.measure.evidence import prepare_case
    from perfsuite.measure.gpu_state import read_clocks
    from perfsuite.variants import get_variant

    try:
        variant_name, mode, case_id = spec.split(":", 2)
        case = parse_case_id(case_id)
    except ValueError as exc:
        fail(f"bad step {spec!r} ({exc}); expected variant:mode:case-id")
    prepared = prepare_case(get_variant(variant_name), case, seed)
    step = make_step(mode, prepared.fn, prepared.inputs, prepared.grad_output)
    step()
    torch.cuda.synchronize()
    api = TorchCuda()
    before = read_clocks()
    samples: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    began = time.perf_counter()

    warm_up(step, warmup_ms)
    samples["old event"] = old_event_samples(step, L2Flush(api), count)
    for name, graph, flush in (
        ("blocked event", False, True),
        ("graph replay", True, True),
        ("graph replay, warm L2", True, False),
    ):
        sampler = DeviceSampler(step, api=api, cuda_graph=graph, flush_l2=flush)
        warm_up(sampler.timer.run, warmup_ms)
        samples[name] = sampler.samples(count)
        notes[name] = (
            f"clock {sampler.clock}"
            + (f"; {sampler.cuda_graph}" if graph else "")
            + (f"; {sampler.dry_samples} dry samples retaken" if sampler.dry_samples else "")
        )
    estimate_s = statistics.median(samples["blocked event"])
    if mode == "backward":  # its capture stream differs from its warm-up stream (see below)
        notes[REFERENCE] = (
            "backward: triton captures on its own stream, where the step's forward runs again "
            "(one forward per stream), so its graph holds forward and backward"
        )
    for name, graph in (("triton do_bench", False), (REFERENCE, True)):
        warm_up(step, warmup_ms)
        try:
            samples[name] = triton_samples(step, count, estimate_s, graph)
        except Exception as exc:  # reported in the table: a capture triton refuses, for one
            notes[name] = (
                f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
    kernels = KernelTimer(api, step, L2Flush(api))
    found, findings = [], []
    while len(found) < count:
        block = kernels.block()
        findings += kernel_set_findings(block)
        found += [i.merged_s for i in block]
    samples["kernel time"] = found[:count]
    notes["kernel time"] = "; ".join(findings[:3]) or "kernel set identical in every iteration"
    return {
        "step": spec,
        "samples_s": samples,
        "notes": notes,
        "gpu_before": before,
        "gpu_after": read_clocks(),
        "seconds": time.perf_counter() - began,
    }


def time_step_or_failure(spec: str, count: int, warmup_ms: float, seed: int) -> dict:
    """``time_step``, or the step with its error (``"error"``: type and first line) when it
    raises, so one failing step costs its own row, not the report."""
    try:
        return time_step(spec, count, warmup_ms, seed)
    except SystemExit:
        raise
    except Exception as exc:  # reported in the table and the JSON; the exit status says so
        first = (str(exc).splitlines() or [""])[0]
        return {"step": spec, "error": f"{type(exc).__name__}: {first}", "samples_s": {}}


def table(result: dict) -> list[str]:
    if "error" in result:
        return [f"### {result['step']}", "", f"failed: {result['error']}", ""]
    samples = result["samples_s"]
    reference = statistics.median(samples[REFERENCE]) if samples.get(REFERENCE) else None
    lines = [
        f"### {result['step']}",
        "",
        "| timer | samples | median us | IQR / median | ratio to do_bench_cudagraph | notes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in (
        "old event",
        "blocked event",
        "graph replay",
        "graph replay, warm L2",
        "triton do_bench",
        REFERENCE,
        "kernel time",
    ):
        found = samples.get(name) or []
        median = statistics.median(found) if found else None
        ratio = f"{median / reference:.3f}" if median and reference else "-"
        lines.append(
            f"| {name} | {len(found)} | {median * 1e6:.1f} | {iqr_over_median(found):.1%} | "
            f"{ratio} | {result['notes'].get(name, '')} |"
            if median
            else f"| {name} | 0 | - | - | - | {result['notes'].get(name, '')} |"
        )
    for when in ("before", "after"):
        state = result[f"gpu_{when}"]
        lines.append("")
        lines.append(
            f"GPU {when}: SM {state.get('sm_clock_mhz')} MHz (max {state.get('max_sm_clock_mhz')}), "
            f"memory {state.get('memory_clock_mhz')} MHz, power {state.get('power_draw_w')} W "
            f"of {state.get('power_limit_w')}, throttle reasons {state.get('throttle_reasons')} "
            f"({state.get('source', state.get('reason'))})"
        )
    return lines + [""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--step",
        action="append",
        help=f"variant:mode:case-id (repeatable; default: {', '.join(DEFAULT_STEPS)})",
    )
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--warmup-ms", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="the Markdown table (also printed)")
    parser.add_argument("--json", type=Path, help="every sample, the GPU states and notes")
    args = parser.parse_args(argv)
    if args.samples < 10:
        fail(f"--samples {args.samples}: at least 10 are needed for an IQR")
    import torch

    if not torch.cuda.is_available():
        fail(
            f"needs a CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"torch.version.cuda={torch.version.cuda})"
        )
    try:
        import triton.testing  # noqa: F401
    except ImportError as exc:
        fail(f"needs triton for do_bench and do_bench_cudagraph: {exc}")
    # Kineto detaches CUPTI when a profiler session ends (TEARDOWN_CUPTI=1), so no CUPTI left
    # attached by the kernel timer slows the launches of a later step's event timers.
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    results = [
        time_step_or_failure(spec, args.samples, args.warmup_ms, args.seed)
        for spec in (args.step or DEFAULT_STEPS)
    ]
    name = torch.cuda.get_device_name(0)
    lines = [
        f"## GPU timers on {name} (torch {torch.__version__}, triton "
        f"{__import__('triton').__version__}, {args.samples} samples each)",
        "",
    ]
    for result in results:
        lines += table(result)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"device": name, "results": results}, indent=1) + "\n")
    if any("error" in result for result in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
