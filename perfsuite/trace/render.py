"""Text and JSON renderings of trace summaries, and the difference between two traces."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from perfsuite.trace.kernel_families import kernel_family
from perfsuite.trace.structure import copy_counts, count_changes, gather_counts
from perfsuite.units import format_bytes
from perfsuite.trace.summary import WindowSummary


def _kernel_lines(summary: WindowSummary, top: int) -> list[str]:
    lines = [
        f"    device kernels: {summary.kernel_count}, {summary.device_time_us:.1f} us on device"
    ]
    ranked = sorted(summary.kernel_time_us.items(), key=lambda kv: -kv[1])[:top]
    for name, time_us in ranked:
        count = summary.kernels[name]
        lines.append(f"      {time_us:10.1f} us  x{count:<4} [{kernel_family(name)}] {name[:110]}")
    families = ", ".join(
        f"{family} x{n}"
        for family, n in sorted(summary.kernel_families().items(), key=lambda kv: -kv[1])
    )
    lines.append(f"    kernel families: {families}")
    if summary.unattributed_events:
        lines.append(
            f"    unattributed (no recorded launch): {summary.unattributed_events} device event(s), "
            f"{summary.unattributed_time_us:.1f} us"
        )
    return lines


def _copy_lines(summary: WindowSummary) -> list[str]:
    lines = []
    for route, count in sorted(summary.memcpy_routes.items()):
        lines.append(f"    Memcpy {route}: x{count}")
    for kind, size in sorted(summary.memcpy_bytes.items()):
        lines.append(f"    Memcpy {kind} bytes: {format_bytes(size)}")
    if summary.memset_count:
        lines.append(f"    Memset: x{summary.memset_count}, {format_bytes(summary.memset_bytes)}")
    copies = collections.Counter()
    for copy in summary.copies:
        what = f"dtype conversion {' <- '.join(copy.types)}" if copy.dtype_conversion else "copy"
        shape = list(copy.shape) if copy.shape is not None else "?"
        copies[f"{copy.lane} {what}: {copy.kind} of {shape}"] += 1
    lines += [f"    {text} x{count}" for text, count in copies.items()]
    gathers: dict[str, list[int]] = {}
    for gather in summary.gathers:
        shape = list(gather.shape) if gather.shape is not None else "?"
        seen = gathers.setdefault(f"{gather.lane} gather: {gather.kind} of {shape}", [0, 0])
        seen[0] += 1
        seen[1] += gather.size_bytes or 0
    lines += [
        f"    {text} x{count}, {format_bytes(size)}" for text, (count, size) in gathers.items()
    ]
    return lines


def describe(summary: WindowSummary, top: int, has_device: bool) -> list[str]:
    """Readable lines for one window: time split, kernels, copies, launches, memory, SDPA backend."""
    lines = [
        f"  {summary.annotation}: {summary.cpu_op_count} CPU ops, window {summary.duration_us:.1f} us on the CPU"
    ]
    if has_device:
        lines += _kernel_lines(summary, top)
    lines += _copy_lines(summary)
    if summary.launch_calls:
        calls = ", ".join(f"{name} x{n}" for name, n in sorted(summary.launch_calls.items()))
        lines.append(f"    launch API: {calls}; {summary.launch_time_us:.1f} us in launch calls")
        if summary.device_time_us:
            lines.append(
                f"    CPU window / device time: {summary.duration_us / summary.device_time_us:.2f}"
            )
    for device, size in sorted(summary.allocated_bytes.items()):
        lines.append(
            f"    allocated on {device}: {format_bytes(size)}, peak {format_bytes(summary.peak_bytes.get(device, 0))}"
        )
    if summary.sdpa_backends:
        lines.append(f"    SDPA backend: {', '.join(summary.sdpa_backends)}")
    lines += [f"    warning: {warning}" for warning in summary.warnings]
    return lines


@dataclasses.dataclass(frozen=True)
class TraceDiff:
    """What changed from trace A to trace B (per-name count changes and totals)."""

    kernels: list[tuple[str, float, float]]
    cpu_ops: list[tuple[str, float, float]]
    memcpy: list[tuple[str, float, float]]
    copies: list[tuple[str, float, float]]
    device_time_us: tuple[float, float]
    window_us: tuple[float, float]
    allocated_bytes: dict[str, tuple[int, int]]
    gathers: list[tuple[str, float, float]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def diff(a: WindowSummary, b: WindowSummary) -> TraceDiff:
    """Per-name differences between two summaries (kernels, ops, memcpy kinds, copies, gathers)."""
    return TraceDiff(
        kernels=count_changes(a.kernels, b.kernels),
        cpu_ops=count_changes(a.cpu_ops, b.cpu_ops),
        memcpy=count_changes(a.memcpy_routes, b.memcpy_routes),
        copies=count_changes(copy_counts(a), copy_counts(b)),
        device_time_us=(a.device_time_us, b.device_time_us),
        window_us=(a.duration_us, b.duration_us),
        allocated_bytes={
            d: (a.allocated_bytes.get(d, 0), b.allocated_bytes.get(d, 0))
            for d in sorted(set(a.allocated_bytes) | set(b.allocated_bytes))
        },
        gathers=count_changes(gather_counts(a), gather_counts(b)),
    )


def describe_diff(change: TraceDiff) -> list[str]:
    """``+2 aten::clone`` style lines; "no change" when nothing but times moved."""
    lines = []
    for title, rows in (
        ("kernels", change.kernels),
        ("CPU ops", change.cpu_ops),
        ("Memcpy", change.memcpy),
        ("copies", change.copies),
        ("gathers", change.gathers),
    ):
        for name, before, after in rows:
            delta = after - before
            state = " (added)" if not before else " (removed)" if not after else ""
            lines.append(f"  {title}: {delta:+g} {name[:120]}{state}  [{before:g} -> {after:g}]")
    for device, (before, after) in change.allocated_bytes.items():
        if before != after:
            lines.append(
                f"  allocated on {device}: {format_bytes(before)} -> {format_bytes(after)}"
            )
    if not lines:
        lines.append("  no change in kernels, ops, memcpy, copies, gathers or memory")
    (dev_a, dev_b), (win_a, win_b) = change.device_time_us, change.window_us
    if dev_a or dev_b:
        lines.append(f"  device time: {dev_a:.1f} -> {dev_b:.1f} us")
    lines.append(f"  CPU window: {win_a:.1f} -> {win_b:.1f} us")
    return lines
