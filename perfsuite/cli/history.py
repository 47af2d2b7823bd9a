"""perfsuite history: the performance history store from the command line.

  perfsuite history record [RUN.json ...]       record saved runs (default: the newest under .benchmarks/)
  perfsuite history import PATH ...             pytest-benchmark / ab --json files or folders of them (idempotent)
  perfsuite history list [--variant V ...]      the series, with a sparkline each
  perfsuite history show SERIES [--json]        points, epochs and change points of a series (id or benchmark)
  perfsuite history detect [SERIES ...]         exit 1 when the newest commit is a confirmed regression
  perfsuite history export [--format csv|json]  every point with its raw values

The store: --store URL, else $PERFSUITE_HISTORY_URL, else the ini key perfsuite_history_url, else
.perfsuite/history.sqlite at the repository root.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

from perfsuite.errors import UsageError

SAVED_RUNS = Path(".benchmarks")


def add_command(commands) -> None:
    history = commands.add_parser(
        "history",
        help="the performance history: record, import, list, show, detect, export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    history.add_argument("--store", help="the store's URL or SQLite path (default: see above)")
    actions = history.add_subparsers(dest="action", required=True)
    record = actions.add_parser(
        "record", help="record saved runs (default: the newest under .benchmarks/)"
    )
    record.add_argument("files", nargs="*", type=Path)
    imported = actions.add_parser(
        "import", help="import pytest-benchmark JSON and ab --json files or folders"
    )
    imported.add_argument("paths", nargs="+", type=Path)
    listed = actions.add_parser("list", help="the series in the store")
    shown = actions.add_parser("show", help="points, epochs and change points of a series")
    shown.add_argument(
        "series", help="a series id (prefix) or a benchmark (variant/case/mode, or part of it)"
    )
    detect = actions.add_parser(
        "detect", help="exit 1 when the newest commit is a confirmed regression"
    )
    detect.add_argument(
        "series", nargs="*", help="series ids or benchmarks (default: every series)"
    )
    detect.add_argument(
        "--window", type=int, default=20, help="baseline points before the newest (default 20)"
    )
    detect.add_argument(
        "--confirm",
        type=int,
        default=2,
        help="newest points that must all break the limit (default 2; 1 judges the newest alone; "
        "score copies are exact counts, judged on the newest alone)",
    )
    detect.add_argument(
        "--k", type=float, default=4.0, help="the limit in robust noise deviations (default 4)"
    )
    detect.add_argument(
        "--min-effect",
        type=float,
        default=0.05,
        help="the smallest step reported (default 0.05: 5%%)",
    )
    export = actions.add_parser("export", help="every point with its raw values, as CSV or JSON")
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("--output", type=Path, help="write here instead of standard output")
    for sub in (listed, shown, detect, export):
        sub.add_argument(
            "--measure",
            help="time_s (default for show; detect judges time_s and score_copies), wall_s, device_s, "
            "tflops, gbps, score_copies",
        )
        sub.add_argument("--branch", help="only runs recorded on this branch")
        sub.add_argument(
            "--rev",
            help="only commits on this git revision's first-parent history (git rev-list --first-parent, "
            "in the current repository), in that order: a sibling branch's commits are left out",
        )
    for sub in (listed, export):
        for name in ("variant", "case", "mode", "testbed"):
            sub.add_argument(
                f"--{name}",
                help=f"only series of this {name}"
                + (" (fingerprint prefix)" if name == "testbed" else ""),
            )
    for sub in (listed, shown, detect):
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")


def _commit_order(args: argparse.Namespace) -> list[str] | None:
    """``--rev``'s first-parent shas, oldest first (None without it); ``SystemExit`` naming a bad revision."""
    if not getattr(args, "rev", None):
        return None
    from perfsuite.history.capture import first_parent_order

    order = first_parent_order(Path.cwd(), args.rev)
    if not order:
        raise SystemExit(
            f"perfsuite history: --rev {args.rev!r}: not a revision of a git repository here"
        )
    return order


def _store(args: argparse.Namespace, create: bool = False):
    from perfsuite.history import open_store
    from perfsuite.suite.runner import ini_value

    return open_store(
        args.store, " ".join(ini_value(Path.cwd(), "perfsuite_history_url")) or None, create=create
    )


def _json_files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.rglob("*.json")))
        elif path.exists():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return found


def _record_files(args: argparse.Namespace, files: list[Path]) -> int:
    from perfsuite.errors import HistoryError
    from perfsuite.history.importing import runs_from_file

    added = present = refused = 0
    with _store(args, create=True) as store:
        for path in files:
            try:
                runs = runs_from_file(path, Path.cwd())
            except HistoryError as exc:
                print(f"perfsuite history: skipped {exc}", file=sys.stderr)
                refused += 1
                continue
            for run in runs:
                if store.record(run):
                    added += 1
                else:
                    present += 1
    print(
        f"perfsuite history: {added} run(s) added, {present} already in the store, {refused} file(s) skipped "
        f"({store.url.removeprefix('sqlite:///')})"
    )
    return 0


def _series(args: argparse.Namespace, store, name: str):
    from perfsuite.history import query

    found = store.transaction(lambda c: query.find_series(c, name))
    if not any(s.key.id.startswith(name) for s in found):
        found = [s for s in found if s.key.measure == (args.measure or "time_s")]
    if not found:
        known = [s.key.benchmark for s in store.list_series(measure="time_s")]
        raise UsageError(
            f"series {name!r}: none in the store"
            + (
                f"; known benchmarks: {', '.join(known[:5])}{' ...' if len(known) > 5 else ''}"
                if known
                else " (it is empty)"
            )
        )
    return found


def _filtered_series(store, args: argparse.Namespace) -> list:
    """The series ``list`` and ``export`` show: the filters given on the command line."""
    return store.list_series(
        variant=args.variant,
        case=args.case,
        mode=args.mode,
        testbed=args.testbed,
        measure=args.measure,
    )


def run_list(args: argparse.Namespace) -> int:
    from perfsuite.history.render import format_value, series_heading, sparkline

    order = _commit_order(args)
    with _store(args) as store:
        found = _filtered_series(store, args)
        rows = []
        for series in found:
            points = store.points(series.key, branch=args.branch, commit_order=order)
            rows.append((series, points))
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": s.key.id,
                        "benchmark": s.key.benchmark,
                        "measure": s.key.measure,
                        "testbed": s.key.testbed,
                        "runs": s.runs,
                        "points": len(p),
                        "last": p[-1].median if p else None,
                    }
                    for s, p in rows
                ],
                indent=1,
            )
        )
        return 0
    if not rows:
        print("perfsuite history: no series (record a timed run, or import .benchmarks/)")
    for series, points in rows:
        last = format_value(points[-1].median, series.key.measure) if points else "-"
        print(
            f"{series_heading(series)}\n    {sparkline([p.median for p in points][-40:])}  {len(points)} point(s), "
            f"last {last}"
        )
    return 0


def run_show(args: argparse.Namespace) -> int:
    from perfsuite.history.changepoints import detect
    from perfsuite.history.query import epochs
    from perfsuite.history.render import show_json, show_lines

    documents, texts = [], []
    order = _commit_order(args)
    with _store(args) as store:
        for series in _series(args, store, args.series):
            points = store.points(series.key, branch=args.branch, commit_order=order)
            changes = detect(points, series.key.measure, pairs=store.pairs(series))
            found = epochs(points)
            documents.append(show_json(series, points, found, changes))
            texts.append("\n".join(show_lines(series, points, found, changes)))
    print(json.dumps(documents, indent=1) if args.json else "\n\n".join(texts))
    return 0


def run_detect(args: argparse.Namespace) -> int:
    from perfsuite.history.changepoints import check_newest, usable
    from perfsuite.trace.structure import diff_fingerprints

    # by default the times and the score-copy counts (exact, so judged even when every time is contended)
    measures = [args.measure] if args.measure else ["time_s", "score_copies"]
    results, regressions = [], 0
    order = _commit_order(args)
    with _store(args) as store:
        chosen = (
            [s for name in args.series for s in _series(args, store, name)]
            if args.series
            else [s for measure in measures for s in store.list_series(measure=measure)]
        )
        for series in chosen:
            points = store.points(
                series.key,
                branch=args.branch,
                commit_order=order,
                newest=args.window + args.confirm,  # what check_newest reads
            )
            verdict = check_newest(
                points,
                series.key.measure,
                window=args.window,
                confirm=args.confirm,
                k=args.k,
                min_effect=args.min_effect,
                pairs=store.pairs(series),
            )
            good = (
                [verdict.gate_base]
                if verdict.gate_base
                else [p for p in points[: -args.confirm] if usable(p)]
            )
            cause = (
                diff_fingerprints(good[-1].structure, points[-1].structure)
                if verdict.regression and good and good[-1].structure and points[-1].structure
                else []
            )
            regressions += verdict.regression
            results.append(
                {
                    "series": series.key.id,
                    "benchmark": series.key.benchmark,
                    "measure": series.key.measure,
                    "newest": points[-1].sha if points else None,
                    "regression": verdict.regression,
                    "judged": verdict.judged,
                    "ratios": list(verdict.ratios),
                    "limit": verdict.limit,
                    "reason": verdict.reason,
                    "last_good": good[-1].sha if verdict.regression and good else None,
                    "structure": cause,
                }
            )
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for found in results:
            word = (
                "REGRESSION" if found["regression"] else "ok" if found["judged"] else "not judged"
            )
            line = f"{word:<10} {found['series']}  {found['benchmark']} {found['measure']}: {found['reason']}"
            if found["regression"]:
                line += (
                    f"\n           last good {(found['last_good'] or '-')[:10]}, newest {(found['newest'] or '-')[:10]}; "
                    + ("; ".join(found["structure"]) or "structure unchanged")
                )
            print(line)
        unjudged = sum(not found["judged"] for found in results)
        print(
            f"perfsuite history detect: {regressions} confirmed regression(s) at the newest commit "
            f"in {len(results)} series" + (f" ({unjudged} not judged)" if unjudged else "")
        )
    return 1 if regressions else 0


def run_export(args: argparse.Namespace) -> int:
    order = _commit_order(args)
    with _store(args) as store:
        found = _filtered_series(store, args)
        rows = [
            (s, p)
            for s in found
            for p in store.points(s.key, branch=args.branch, commit_order=order)
        ]
    fields = [
        "series",
        "benchmark",
        "measure",
        "testbed",
        "sha",
        "position",
        "commit_time",
        "branch",
        "dirty",
        "contended",
        "median",
        "software_fingerprint",
        "values",
    ]
    records = [
        {
            "series": s.key.id,
            "benchmark": s.key.benchmark,
            "measure": s.key.measure,
            "testbed": s.key.testbed,
            "sha": p.sha,
            "position": p.position,
            "commit_time": p.commit_time,
            "branch": p.branch,
            "dirty": p.dirty,
            "contended": p.contended,
            "median": p.median,
            "software_fingerprint": p.software_fingerprint,
            "values": list(p.all_values),
        }
        for s, p in rows
    ]
    if args.format == "json":
        text = json.dumps(records, indent=1) + "\n"
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=fields)
        writer.writeheader()
        for record in records:
            writer.writerow({**record, "values": " ".join(repr(v) for v in record["values"])})
        text = buffer.getvalue()
    if args.output:
        from perfsuite.storage import write_text_atomic

        write_text_atomic(args.output, text)
        print(
            f"perfsuite history: {len(records)} point(s) written to {args.output}", file=sys.stderr
        )
    else:
        sys.stdout.write(text)
    return 0


def run_history(args: argparse.Namespace) -> int:
    """Dispatch ``perfsuite history ACTION``; exit 1 only from ``detect`` (a confirmed regression)."""
    if args.action == "record":
        files = (
            args.files or sorted(SAVED_RUNS.rglob("*.json"), key=lambda p: p.stat().st_mtime)[-1:]
        )
        if not files:
            raise UsageError(
                f"no saved run under {SAVED_RUNS}/ (run the timed suite first: perfsuite run)"
            )
        return _record_files(args, _json_files(files))
    if args.action == "import":
        return _record_files(args, _json_files(args.paths))
    return {"list": run_list, "show": run_show, "detect": run_detect, "export": run_export}[
        args.action
    ](args)
