"""Command line: `perfsuite trace FILE_OR_DIR` prints what each annotated window did.

Exit codes: 0 success; 2 bad arguments, an unreadable trace, or no window of that name
(the message names the file).
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


def describe(summary: WindowSummary, top: int, has_device: bool) -> list[str]:
    """Readable lines for one window: ops, kernels, copies, launches, memory."""
    device = f", {summary.kernel_count} device kernels ({summary.device_time_us:.1f} us on device)" if has_device else ""
    lines = [f"  {summary.annotation}: {summary.cpu_op_count} CPU ops{device}, window {summary.duration_us:.1f} us"]
    for name, count in sorted(summary.kernels.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    kernel x{count}: {name[:140]}")
    for kind, count in sorted(summary.memcpy_counts.items()):
        lines.append(f"    Memcpy {kind} x{count}, {format_bytes(summary.memcpy_bytes.get(kind, 0))}")
    for copy in summary.copies:
        what = f"dtype conversion {' <- '.join(copy.types)}" if copy.dtype_conversion else "copy"
        shape = list(copy.shape) if copy.shape is not None else "?"
        lines.append(f"    {copy.lane} {what}: {copy.kind} of {shape}")
    if summary.launch_calls:
        calls = ", ".join(f"{name} x{n}" for name, n in sorted(summary.launch_calls.items()))
        lines.append(f"    launch API: {calls}")
    for device, size in sorted(summary.allocated_bytes.items()):
        lines.append(f"    allocated on {device}: {format_bytes(size)}, peak {format_bytes(summary.peak_bytes.get(device, 0))}")
    return lines


def load_index(path: Path, in_folder: bool) -> TraceIndex | None:
    """The trace's index; in a folder a non-trace file is reported and passed over."""
    try:
        return TraceIndex(load_trace(path))
    except TraceError as exc:
        if not in_folder:
            raise
        print(f"perfsuite trace: skipping {exc}", file=sys.stderr)
        return None


def print_file(path: Path, index: TraceIndex, args: argparse.Namespace) -> bool:
    """Print one trace's windows; False when the annotation names no window in it."""
    windows = index.windows(args.annotation) if args.annotation else [index.whole_trace()]
    if not windows:
        seen = ", ".join(index.annotation_names()[:12]) or "none"
        print(f"perfsuite trace: {path}: no window named {args.annotation!r}; annotations in it: {seen}", file=sys.stderr)
        return False
    shown = windows[:1] if args.first else windows
    print(f"{path.name}: {len(windows)} window(s) named {args.annotation or 'whole trace'}")
    for window in shown:
        print("\n".join(describe(index.summarize(window), args.top, bool(index.device_events))))
    return True


def run_trace(args: argparse.Namespace) -> int:
    target = Path(args.target)
    files = trace_files(target)
    if not files:
        print(f"perfsuite trace: no .json or .json.gz files in {target}", file=sys.stderr)
        return 2
    status, read = 0, 0
    for path in files:
        try:
            index = load_index(path, target.is_dir())
        except TraceError as exc:
            print(f"perfsuite trace: {exc}", file=sys.stderr)
            return 2
        if index is None:
            continue
        read += 1
        status = status if print_file(path, index, args) else 2
    if not read:
        print(f"perfsuite trace: no readable trace in {target}", file=sys.stderr)
        return 2
    return status


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perfsuite", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="summarise Kineto/Chrome trace files")
    trace.add_argument("target", help="a .json/.json.gz trace or a folder of them")
    trace.add_argument("--annotation", help="record_function name or ProfilerStep (default: whole trace)")
    trace.add_argument("--first", action="store_true", help="only the first window of each file")
    trace.add_argument("--top", type=positive_int, default=8, help="kernels to list per window (default 8)")
    args = parser.parse_args(argv)
    return run_trace(args)


if __name__ == "__main__":
    sys.exit(main())
