"""perfsuite history: the performance history store from the command line.

  perfsuite history record [RUN.json ...]       record saved runs (default: the newest under .benchmarks/)
  perfsuite history import PATH ...             pytest-benchmark / ab --json files or folders of them (idempotent)
  perfsuite history list [--variant V ...]      the series, with a sparkline each
  perfsuite history show SERIES [--json]        points, epochs and change points of a series (id or benchmark)
  perfsuite history detect [SERIES ...]         exit 1 while a confirmed regression is open
  perfsuite history accept SERIES|FINDING --reason TEXT   mark open findings accepted (the reason is kept)
  perfsuite history export [--format csv|json]  every point with its raw values

The store: --store URL, else $PERFSUITE_HISTORY_URL, else the ini key perfsuite_history_url, else
.perfsuite/history.sqlite at the repository root.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
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
        "detect",
        help="exit 1 while a confirmed regression is open (a gate's, the change-point rule's, an "
        "exact count's or a structural one), until a later measurement shows it recovered or it is accepted",
    )
    detect.add_argument(
        "series", nargs="*", help="series ids or benchmarks (default: every series)"
    )
    detect.add_argument(
        "--window",
        type=_at_least(1, int),
        default=20,
        help="baseline points before the newest (default 20)",
    )
    detect.add_argument(
        "--confirm",
        type=_at_least(1, int),
        default=2,
        help="newest points that must all break the limit (default 2; 1 judges the newest alone; "
        "score copies are exact counts, judged on the newest alone)",
    )
    detect.add_argument(
        "--k",
        type=_at_least(0, float),
        default=4.0,
        help="the limit in robust noise deviations (default 4)",
    )
    detect.add_argument(
        "--min-effect",
        type=_at_least(0, float),
        default=0.05,
        help="the smallest step reported (default 0.05: 5%%)",
    )
    accept = actions.add_parser(
        "accept",
        help="mark a series' open findings, or one finding (its id), accepted, with the reason",
    )
    accept.add_argument(
        "target",
        help="a finding id (from detect or show), a series id (prefix) or a benchmark (its time and "
        "score-copy findings, unless --measure)",
    )
    accept.add_argument("--reason", required=True, help="why it is accepted (kept in the store)")
    export = actions.add_parser("export", help="every point with its raw values, as CSV or JSON")
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("--output", type=Path, help="write here instead of standard output")
    for sub in (record, imported, listed, shown, detect, accept, export):
        # before or after the action, as the dashboard takes it (a new user wrote it after `show`)
        sub.add_argument(
            "--store",
            default=argparse.SUPPRESS,
            help="the store's URL or SQLite path (as `history --store`)",
        )
    for sub in (listed, shown, detect, export, accept):
        sub.add_argument(
            "--measure",
            help="time_s (default for show; detect judges time_s and score_copies), wall_s, device_s, "
            "tflops, gbps, score_copies",
        )
        sub.add_argument(
            "--branch",
            help="only runs recorded on this branch, in their recorded first-parent positions "
            "(default: the default branch's first-parent history, see --rev)",
        )
        sub.add_argument(
            "--rev",
            help="only commits on this git revision's first-parent history (git rev-list --first-parent, "
            "in the current repository), in that order (default: the default branch, origin/HEAD "
            "or main or master: a pull request's commits and A/B heads are left out)",
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


def _at_least(low: float, kind: type):
    """An argparse type: a finite ``kind`` (int or float) of at least ``low``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: not {'an integer' if kind is int else 'a number'}"
            ) from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of at least {low}")
        return value

    return parse


def commit_order(store, rev: str | None, branch: str | None, command: str) -> list[str] | None:
    """The commits a history command follows, oldest first (``query.points(commit_order=...)``).

    ``rev``: its first-parent history (``UsageError`` naming a revision git does not know here);
    ``branch``: None (the runs recorded on that branch, in their stored first-parent positions); else
    the first-parent history of the default branch here (``capture.main_line``), so a pull request's
    commits and A/B heads never sit among the main line's points. Outside git, or when none of the
    store's commits is on that line (a store of another repository), None with a note on stderr."""
    from perfsuite.history.capture import first_parent_order, main_line

    if rev:
        order = first_parent_order(Path.cwd(), rev)
        if not order:
            raise UsageError(
                f"--rev {rev!r}: not a revision of a git repository here ({Path.cwd()})"
            )
        return order
    if branch:
        return None
    found = main_line(Path.cwd())
    stored = store.commit_shas()
    if found is not None and stored & set(found[1]):
        return found[1]
    if stored:
        where = (
            f"none of the store's commits is on {found[0]}'s first-parent history here"
            if found
            else "not in a git repository"
        )
        print(
            f"perfsuite {command}: {where}: every recorded commit is shown in its stored "
            "first-parent position (branch commits included); give --rev REV or --branch NAME",
            file=sys.stderr,
        )
    return None


def _commit_order(args: argparse.Namespace, store) -> list[str] | None:
    return commit_order(store, getattr(args, "rev", None), getattr(args, "branch", None), "history")


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
    from perfsuite.history.store import shown

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
        f"({shown(store.url).removeprefix('sqlite:///')})"
        + (" (exit 2: a skipped file is a run not recorded)" if refused else "")
    )
    return 2 if refused else 0


def _series(args: argparse.Namespace, store, name: str, default_measure: str | None = "time_s"):
    """The series ``name`` (an id prefix, else a benchmark's series of ``--measure``, else of
    ``default_measure``; None: of every measure); ``UsageError`` naming known benchmarks when none."""
    from perfsuite.history import query

    found = store.read(lambda c: query.find_series(c, name))
    measure = args.measure or default_measure
    if measure and not any(s.key.id.startswith(name) for s in found):
        found = [s for s in found if s.key.measure == measure]
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

    with _store(args) as store:
        order = _commit_order(args, store)
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
        clean = [
            p for p in points if not p.dirty
        ]  # a run of uncommitted changes is no commit's point
        last = format_value(clean[-1].median, series.key.measure) if clean else "-"
        dirty = len(points) - len(clean)
        aside = f" ({dirty} from uncommitted trees, not counted)" if dirty else ""
        print(
            f"{series_heading(series)}\n    {sparkline([p.median for p in clean][-40:])}  {len(clean)} point(s), "
            f"last {last}{aside}"
        )
    return 0


def merged_at(store, order: list[str] | None, chosen: list) -> dict[str, str]:
    """Pull request gates' heads (A/B runs whose head is off the main line ``order``) -> the main-line
    commit that merged each (``capture.merged_at``, read from git here); empty outside git."""
    from perfsuite.history.capture import merged_at as merges

    if not order:
        return {}
    heads = {
        g.head_sha for s in chosen if s.key.measure == "time_s" for g in store.gate_structures(s)
    }
    return merges(Path.cwd(), sorted(heads), order) if heads else {}


def finding_lines(judgement, cause_shown: tuple[str, ...] = ()) -> list[str]:
    """The findings and unconfirmed steps of one judged series, one line each (``show``, ``detect``);
    a finding whose cause is ``cause_shown`` (printed just above) refers to it."""
    lines = [
        f"  {f.id}  {f.describe(bool(cause_shown) and tuple(f.cause) == tuple(cause_shown))}"
        for f in judgement.findings
    ]
    lines += [f"  {s.describe()}" for s in judgement.suspects]
    return lines


def run_show(args: argparse.Namespace) -> int:
    from perfsuite.history.changepoints import detect
    from perfsuite.history.judging import judge
    from perfsuite.history.query import epochs
    from perfsuite.history.render import show_json, show_lines

    documents, texts = [], []
    with _store(args) as store:
        order = _commit_order(args, store)
        chosen = _series(args, store, args.series)
        states = judge(store, chosen, order, args.branch, merged_at=merged_at(store, order, chosen))
        for series, state in zip(chosen, states):
            points = store.points(series.key, branch=args.branch, commit_order=order)
            changes = detect(points, series.key.measure, pairs=store.pairs(series))
            found = epochs(points)
            document = show_json(series, points, found, changes)
            document["findings"] = [f.as_json() for f in state.findings]
            document["unconfirmed"] = [s.as_json() for s in state.suspects]
            documents.append(document)
            lines = show_lines(series, points, found, changes)
            # a step between separate runs that nothing confirmed is marked where it is listed
            suspected = {(u.last_good, u.first_bad) for u in state.suspects}
            for change in changes:
                if (change.last_good.sha, change.first_bad.sha) in suspected:
                    lines = [
                        f"{line}  [unconfirmed]"
                        if line.startswith(f"  {change.describe()}")
                        else line
                        for line in lines
                    ]
            lines.append(
                "findings (id, last good -> first bad, state):"
                if state.findings or state.suspects
                else "no findings"
            )
            lines += finding_lines(state)
            texts.append("\n".join(lines))
    print(json.dumps(documents, indent=1) if args.json else "\n\n".join(texts))
    return 0


def run_accept(args: argparse.Namespace) -> int:
    """Mark open findings accepted: the one whose id is ``args.target``, else every open finding of
    the series it names; ``UsageError`` when nothing open matches."""
    import getpass
    import time

    from perfsuite.history.judging import DEFAULT_MEASURES, judge

    with _store(args) as store:
        order = _commit_order(args, store)
        every = [s for m in DEFAULT_MEASURES for s in store.list_series(measure=m)]
        states = judge(store, every, order, args.branch, merged_at=merged_at(store, order, every))
        findings = [(j, f) for j in states for f in j.findings if f.open]
        chosen = [(j, f) for j, f in findings if f.id == args.target]
        closed = [f for j in states for f in j.findings if f.id == args.target and not f.open]
        if closed:  # a finding's id, not a series': say why it cannot be accepted
            f = closed[0]
            raise UsageError(
                f"{args.target!r}: this finding is {f.status}"
                + (f" at {f.closed_at[:10]}" if f.closed_at else "")
                + (f" ({f.reason})" if f.reason else "")
                + "; only an open finding can be accepted (--rev names an older commit to judge at)"
            )
        if not chosen:  # a series, or a benchmark: all its measures' findings unless --measure
            named = {s.key.id for s in _series(args, store, args.target, default_measure=None)}
            chosen = [(j, f) for j, f in findings if j.series.key.id in named]
        if not chosen:
            raise UsageError(
                f"{args.target!r}: no open finding has this id or is of this series"
                + (
                    f"; open findings: {', '.join(f.id for _, f in findings[:8])}"
                    if findings
                    else " (none is open)"
                )
            )
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = None
        now = time.time()
        store.accept(
            [
                {
                    "finding": f.id,
                    "series": f.series,
                    "benchmark": f.benchmark,
                    "last_good": f.last_good,
                    "first_bad": f.first_bad,
                    "reason": args.reason,
                    "accepted_at": now,
                    "accepted_by": user,
                }
                for _, f in chosen
            ]
        )
    for _, f in chosen:
        print(
            f"accepted {f.id}  {f.benchmark} {f.measure}: {f.last_good[:10]} -> {f.first_bad[:10]} {f.size}"
        )
    print(f"perfsuite history accept: {len(chosen)} finding(s) accepted: {args.reason}")
    return 0


def run_detect(args: argparse.Namespace) -> int:
    from perfsuite.history.judging import DEFAULT_MEASURES, judge

    measures = [args.measure] if args.measure else list(DEFAULT_MEASURES)
    with _store(args) as store:
        order = _commit_order(args, store)
        chosen = (
            [s for name in args.series for s in _series(args, store, name)]
            if args.series
            else [s for measure in measures for s in store.list_series(measure=measure)]
        )
        judged_series = judge(
            store,
            chosen,
            order,
            args.branch,
            window=args.window,
            confirm=args.confirm,
            k=args.k,
            min_effect=args.min_effect,
            merged_at=merged_at(store, order, chosen),
        )
    results = [j.as_json() for j in judged_series]
    regressions = sum(j.regression for j in judged_series)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for judgement, found in zip(judged_series, results):
            word = (
                "REGRESSION" if found["regression"] else "ok" if found["judged"] else "not judged"
            )
            line = f"{word:<10} {found['series']}  {found['benchmark']} {found['measure']}: {found['reason']}"
            if found["regression"]:
                line += (
                    f"\n           last good {(found['last_good'] or '-')[:10]}, first bad "
                    f"{(found['first_bad'] or '-')[:10]}, newest {(found['newest'] or '-')[:10]}; "
                    + ("; ".join(found["structure"]) or "structure unchanged")
                )
            shown = [f for f in judgement.findings if f.open]
            extra = dataclasses.replace(judgement, findings=tuple(shown))
            above = tuple(found["structure"]) if found["regression"] else ()
            print("\n".join([line, *finding_lines(extra, above)]))
    judged = sum(found["judged"] for found in results)
    print(
        f"perfsuite history detect: {regressions} confirmed regression(s) open; "
        f"{judged} of {len(results)} series judged"
        + ("" if judged else ": nothing judged (exit 2)"),
        file=sys.stderr if args.json else sys.stdout,
    )
    return 1 if regressions else 0 if judged else 2


def run_export(args: argparse.Namespace) -> int:
    with _store(args) as store:
        order = _commit_order(args, store)
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
        "state",
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
            "state": p.state,
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
    """Dispatch ``perfsuite history ACTION``; exit 1 only from ``detect`` (an open confirmed regression);
    exit 2 from ``detect`` when it judged no series, from ``record``/``import`` when a file was skipped."""
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
    return {
        "list": run_list,
        "show": run_show,
        "detect": run_detect,
        "export": run_export,
        "accept": run_accept,
    }[args.action](args)
