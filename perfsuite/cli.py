"""Command line: ``perfsuite trace FILE_OR_DIR`` prints what each annotated window did.

Exit codes: 0 success, 2 bad arguments or an unreadable trace (the message names the file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.results import format_bytes
from perfsuite.trace_summary import TraceError, TraceIndex, WindowSummary, load_trace


def trace_files(target: Path) -> list[Path]:
    """``target`` itself, or the ``.json``/``.json.gz`` files in the folder, sorted."""
    if target.is_dir():
        return sorted(p for p in target.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [target]


def describe(summary: WindowSummary, top: int) -> list[str]:
    """Readable lines for one window: ops, kernels, copies, launches, memory."""
    lines = [f"  {summary.annotation}: {summary.cpu_op_count} CPU ops, {summary.kernel_count} device kernels "
             f"({summary.device_time_us:.1f} us on device), window {summary.duration_us:.1f} us"]
    for name, count in sorted(summary.kernels.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    kernel x{count}: {name[:140]}")
    for kind, count in sorted(summary.memcpy_counts.items()):
        lines.append(f"    Memcpy {kind} x{count}, {format_bytes(summary.memcpy_bytes.get(kind, 0))}")
    for copy in summary.copies:
        what = "dtype conversion" if copy.dtype_conversion else "copy"
        shape = list(copy.shape) if copy.shape is not None else "?"
        lines.append(f"    {copy.lane} {what}: {copy.kind} of {shape}")
    if summary.launch_calls:
        calls = ", ".join(f"{name} x{n}" for name, n in sorted(summary.launch_calls.items()))
        lines.append(f"    launch API: {calls}")
    for device, size in sorted(summary.allocated_bytes.items()):
        lines.append(f"    allocated on {device}: {format_bytes(size)}, peak {format_bytes(summary.peak_bytes.get(device, 0))}")
    return lines


def run_trace(args: argparse.Namespace) -> int:
    files = trace_files(Path(args.target))
    if not files:
        print(f"perfsuite trace: no .json or .json.gz files in {args.target}", file=sys.stderr)
        return 2
    for path in files:
        try:
            index = TraceIndex(load_trace(path))
        except TraceError as exc:
            print(f"perfsuite trace: {exc}", file=sys.stderr)
            return 2
        windows = index.windows(args.annotation) if args.annotation else [index.whole_trace()]
        if args.first:
            windows = windows[:1]
        print(f"{path.name}: {len(windows)} window(s) named {args.annotation or 'whole trace'}")
        for window in windows:
            print("\n".join(describe(index.summarize(window), args.top)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfsuite", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="summarise Kineto/Chrome trace files")
    trace.add_argument("target", help="a .json/.json.gz trace or a folder of them")
    trace.add_argument("--annotation", help="record_function name or ProfilerStep (default: whole trace)")
    trace.add_argument("--first", action="store_true", help="only the first window of each file")
    trace.add_argument("--top", type=int, default=8, help="kernels to list per window (default 8)")
    args = parser.parse_args(argv)
    return run_trace(args)


if __name__ == "__main__":
    sys.exit(main())
