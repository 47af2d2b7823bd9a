"""``perfsuite report RUN``: the table as Markdown/HTML and the plots, from a saved run (a file's path,
or a saved run's number such as ``0001``, as ``perfsuite compare`` takes it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.dashboard.run_page import html_report
from perfsuite.report.saved import load_run, markdown_report
from perfsuite.storage import write_text_atomic


def run_report(args: argparse.Namespace) -> int:
    from perfsuite.suite.command_config import saved_run_paths

    [path] = saved_run_paths([args.run])
    run = load_run(path)  # ReportError, UsageError: printed by the CLI as one line, exit 2
    plots: list[Path] = []
    if args.plots:
        from perfsuite.report.plots import all_plots

        plots = all_plots(run, Path(args.plots))
        for path in plots:
            print(f"wrote {path}", file=sys.stderr)
        names = {p.stem for p in plots}
        if "scaling" not in names:
            print(
                "no scaling plot: it needs cases that differ only in seq_len (e.g. --perfsuite-shapes "
                '"1x8x256x64 1x8x1024x64")',
                file=sys.stderr,
            )
        if "roofline" not in names:
            print(
                "no roofline: the run has no measured peaks (timed runs measure them)",
                file=sys.stderr,
            )
    pngs = [p for p in plots if p.suffix == ".png"]
    if args.markdown:
        relative = [
            p.relative_to(Path(args.markdown).parent).as_posix()
            if p.is_relative_to(Path(args.markdown).parent)
            else str(p)
            for p in pngs
        ]
        write_text_atomic(args.markdown, markdown_report(run, relative))
        print(f"wrote {args.markdown}", file=sys.stderr)
    if args.html:
        write_text_atomic(args.html, html_report(run, pngs))
        print(f"wrote {args.html}", file=sys.stderr)
    if not (args.markdown or args.html or args.plots):
        print(markdown_report(run), end="")
    return 0
