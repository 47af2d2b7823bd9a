"""Commands:

  perfsuite trace FILE_OR_DIR [--annotation NAME] [--json]   what each window and the whole trace did
  perfsuite trace diff A B [--annotation NAME] [--json]      what changed from trace A to trace B
  perfsuite trace --rules                                    the kernel family rules
  perfsuite report RUN.json [--markdown F] [--html F] [--plots DIR]
  perfsuite compare BASE.json HEAD.json                      timing verdicts with intervals + structural diff
  perfsuite ab [--base-tree DIR] [--head-tree DIR]           A/B gate, base and head interleaved in one run
  perfsuite run [--check] [PYTEST ARGS]                      the attention suite in this directory (your repository)
  perfsuite init-ci                                          a GitHub workflow gating your pull requests
  perfsuite fleet local|slurm [--shards N] [PYTEST ARGS]     the timed suite over several GPUs, one shard each
  perfsuite verify --results DIR [--suite-exit N]            GPU verification report (scripts/gpu_suite.sh)
  perfsuite history record|import|list|show|detect|export   the performance history store (perfsuite history -h)
  perfsuite dashboard [--store URL] [--out DIR] [--repo-url URL]   the history dashboard (a static site)

Exit codes: 0 success; 1 a regression (compare, ab, history detect) or a failed check (verify); 2 bad arguments, an unreadable file,
or no window of that name (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from perfsuite.errors import PerfsuiteError, UsageError
from perfsuite.cli import dashboard as dashboard_command
from perfsuite.cli import fleet as fleet_command
from perfsuite.cli import init_ci
from perfsuite.cli import history as history_command
from perfsuite.cli import run as run_command
from perfsuite.cli.gate import add_commands, run_ab_command, run_compare
from perfsuite.cli.verify import add_command as add_verify_command, run_verify
from perfsuite.trace.kernel_families import (
    FLASH_FAMILY,
    flash_impl_rules_markdown,
    rules_markdown,
)
from perfsuite.trace.render import describe, describe_diff, diff
from perfsuite.trace.summary import TraceError, TraceIndex, WindowSummary, load_trace

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell shows for a command whose reader went away


def trace_files(target: Path) -> list[Path]:
    """``target`` itself, or the ``.json``/``.json.gz`` files in the folder, sorted."""
    if target.is_dir():
        return sorted(p for p in target.iterdir() if p.name.endswith((".json", ".json.gz")))
    return [target]


def load_index(path: Path, in_folder: bool) -> TraceIndex | None:
    """The trace's index; in a folder a non-trace file is reported and passed over."""
    try:
        return TraceIndex(load_trace(path))
    except TraceError as exc:
        if not in_folder:
            raise UsageError(str(exc)) from None
        print(f"perfsuite trace: skipping {exc}", file=sys.stderr)
        return None


def summaries(path: Path, index: TraceIndex, annotation: str | None) -> list[WindowSummary]:
    """Windows named ``annotation`` (or none), then the whole trace."""
    whole = index.summarize(index.whole_trace())
    if not annotation:
        return [whole]
    windows = index.windows(annotation)
    if not windows:
        seen = ", ".join(index.annotation_names()[:12]) or "none"
        raise UsageError(f"{path}: no window named {annotation!r}; annotations in it: {seen}")
    return [index.summarize(w) for w in windows] + [whole]


def print_trace(path: Path, index: TraceIndex, args: argparse.Namespace) -> dict:
    found = summaries(path, index, args.annotation)
    windows, whole = found[:-1], found[-1]
    shown = windows[:1] if args.first else windows
    if not args.json:
        print(
            f"{path.name}: {len(windows)} window(s) named {args.annotation}"
            if args.annotation
            else f"{path.name}:"
        )
        for summary in shown + [whole]:
            print("\n".join(describe(summary, args.top, bool(index.device_events))))
    return {
        "file": str(path),
        "windows": [s.to_dict() for s in shown],
        "whole_trace": whole.to_dict(),
    }


def run_trace(args: argparse.Namespace) -> int:
    if args.rules:
        print(rules_markdown())
        print(f"\nA {FLASH_FAMILY} kernel's implementation, first match wins:\n")
        print(flash_impl_rules_markdown())
        return 0
    if not args.targets:
        raise UsageError("give a trace file or folder (or: trace diff A B)")
    if args.targets[0] == "diff":
        return run_diff(args)
    if len(args.targets) != 1:
        raise UsageError(
            f"give one trace file or folder, got {len(args.targets)}: {' '.join(args.targets)}"
        )
    target = Path(args.targets[0])
    files = trace_files(target)
    if not files:
        raise UsageError(f"no .json or .json.gz files in {target}")
    reports, unmatched = [], 0
    for path in files:
        index = load_index(path, target.is_dir())
        if index is None:
            continue
        if target.is_dir() and args.annotation and not index.windows(args.annotation):
            unmatched += 1  # a folder mixes modes: perfsuite::forward in some files, perfsuite::backward in others
            continue
        reports.append(print_trace(path, index, args))
    if unmatched:
        print(
            f"perfsuite trace: {unmatched} file(s) in {target} have no window named {args.annotation!r}",
            file=sys.stderr,
        )
    if not reports:
        raise UsageError(
            f"no readable trace in {target}"
            + (f" with a window named {args.annotation!r}" if unmatched else "")
        )
    if args.json:
        print(json.dumps(reports, indent=2))
    return 0


def run_diff(args: argparse.Namespace) -> int:
    if len(args.targets) != 3:
        raise UsageError("trace diff takes two trace files: perfsuite trace diff A B")
    picked = []
    for name in args.targets[1:]:
        path = Path(name)
        if path.is_dir():
            raise UsageError(f"{path} is a folder; trace diff compares two trace files")
        found = summaries(path, load_index(path, in_folder=False), args.annotation)
        picked.append(found[0])  # the first window, or the whole trace
    change = diff(*picked)
    if args.json:
        print(json.dumps(change.to_dict(), indent=2))
    else:
        print(f"{args.targets[1]} -> {args.targets[2]} ({args.annotation or 'whole trace'}):")
        print("\n".join(describe_diff(change)))
    return 0


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _installed_version() -> str:
    """The installed distribution's version (``importlib.metadata``), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("perfsuite")
    except PackageNotFoundError:
        from perfsuite import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfsuite",
        description="perfsuite: attention traces and reports",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--version", action="version", version=f"perfsuite {_installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="summarise Kineto/Chrome trace files, or diff two")
    trace.add_argument(
        "targets", nargs="*", help="a .json/.json.gz trace or a folder of them; or: diff A B"
    )
    trace.add_argument(
        "--annotation", help="record_function name or ProfilerStep (default: whole trace only)"
    )
    trace.add_argument("--first", action="store_true", help="only the first window of each file")
    trace.add_argument(
        "--top", type=positive_int, default=8, help="kernels to list by device time (default 8)"
    )
    trace.add_argument("--json", action="store_true", help="print JSON instead of text")
    trace.add_argument(
        "--rules", action="store_true", help="print the kernel family rules and exit"
    )
    report = commands.add_parser(
        "report", help="the results table, as Markdown/HTML, and plots, from a saved run"
    )
    report.add_argument(
        "run",
        help="perfsuite run.json, a pytest-benchmark JSON file, or a saved run's number "
        "(0001: the one under .benchmarks/, as compare takes it)",
    )
    report.add_argument("--markdown", help="write the Markdown report here")
    report.add_argument("--html", help="write the self-contained HTML report here")
    report.add_argument("--plots", help="write the plots (PNG and SVG) into this folder")
    add_commands(commands)
    run_command.add_command(commands)
    init_ci.add_command(commands)
    fleet_command.add_command(commands)
    add_verify_command(commands)
    history_command.add_command(commands)
    dashboard_command.add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in ("run", "fleet"):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.pytest_args = unknown  # perfsuite run / fleet: everything it does not know goes to pytest
    try:
        if args.command == "trace":
            return run_trace(args)
        if args.command == "compare":
            return run_compare(args)
        if args.command == "ab":
            return run_ab_command(args)
        if args.command == "run":
            return run_command.run_suite(args)
        if args.command == "init-ci":
            return init_ci.run_init_ci(args)
        if args.command == "fleet":
            return fleet_command.run_fleet(args)
        if args.command == "verify":
            return run_verify(args)
        if args.command == "history":
            return history_command.run_history(args)
        if args.command == "dashboard":
            return dashboard_command.run_dashboard(args)
        from perfsuite.cli.report import run_report

        return run_report(args)
    except PerfsuiteError as exc:
        print(f"perfsuite {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of the output is gone (``| head``): stop quietly, as a process ended by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
