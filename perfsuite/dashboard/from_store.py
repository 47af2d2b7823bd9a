"""The dashboard's model from the history store: series with their points, epochs and change points,
the fastest implementation per case and testbed, and the post's findings as checks.

Measures: ``time`` is the store's ``time_s``, every round on the run's timer (the host clock, or the device
clock when the suite timed with one); ``wall`` is ``wall_s``, each run's median synchronized host time, which
the store has only when a device clock timed the rounds (so wall and device time are both shown then).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

from perfsuite.dashboard.findings import case_dtype, checks_from, fastest_ratio, roofline_fraction
from perfsuite.dashboard.model import (
    OPEN,
    UNCONFIRMED,
    ChangePoint,
    Commit,
    Dashboard,
    Epoch,
    Fastest,
    Finding,
    Point,
    Series,
    Testbed,
    median_interval_s,
    quartiles_s,
)

from perfsuite.history.records import Testbed as HistoryTestbed

MEASURES = {"time_s": "time", "wall_s": "wall"}  # store measure -> the dashboard's name


def _point(p: Any, copies: dict[str, float]) -> Point | None:
    values = p.values or p.all_values
    if not values or p.sha is None:
        return None
    q1, median, q3 = quartiles_s(values)
    copy = copies.get(p.sha)
    return Point(
        p.sha,
        median,
        q1,
        q3,
        len(values),
        bool(p.contended),
        p.structure_hash or "",
        None if copy is None else int(round(copy)),
        (p.state or "contended") if p.contended else "",
    )


def _epoch_label(changed: dict[str, tuple[Any, Any]]) -> str:
    return (
        ", ".join(f"{field} {before} -> {after}" for field, (before, after) in changed.items())
        or "software changed"
    )


def _change_points(judgements: list[Any]) -> list[ChangePoint]:
    """A series' change points from its judgements (``history.judging.judge``: the time series' own and
    the same benchmark's score-copy one): every finding (open, recovered, accepted) and every
    unconfirmed step between separate runs; findings at the same two commits are one change point
    (a count's size first in the cause). An unconfirmed time step at a count's or the structure's
    finding gives it its ratio only when it moved the same way (``_timed``): a new user saw a copy added
    at a commit listed as "faster", by the noise of a separate run at the same commit."""
    found: dict[tuple[str, str], ChangePoint] = {}
    for f in (f for judgement in judgements for f in judgement.findings):
        state = f.status + (f" at {f.closed_at[:10]}" if f.closed_at else "")
        note = state + (f": {f.reason}" if f.reason else "")
        size = "" if f.kind == "timing" else f.size
        ratio = f.ratio if f.ratio is not None else 1.0
        low, high = f.interval if f.interval else (ratio, ratio)
        cause = "; ".join(f.cause)
        change = ChangePoint(
            f.last_good,
            f.first_bad,
            ratio,
            low,
            high,
            "; ".join(x for x in (f"confirmed by {f.evidence}", cause) if x),
            open=f.open,
            size=size,
            worse=f.worse,
            status=f.status,
            note=note,
            finding=f.id,
        )
        old = found.get((f.last_good, f.first_bad))
        if old is not None:
            change = _merged(old, change)
        found[(f.last_good, f.first_bad)] = change
    for u in (u for judgement in judgements for u in judgement.suspects):
        step = ChangePoint(
            u.last_good,
            u.first_bad,
            u.ratio,
            u.interval[0],
            u.interval[1],
            "",
            open=False,
            worse=u.worse,
            status=UNCONFIRMED,
            note=f"separate runs: {u.why}; to confirm it: {u.command}",
        )
        old = found.setdefault((u.last_good, u.first_bad), step)
        if old is not step and old.size and u.worse == old.regression:  # a count's or structure's
            found[(u.last_good, u.first_bad)] = _timed(old, step)
    return list(found.values())


def _timed(finding: ChangePoint, step: ChangePoint) -> ChangePoint:
    """A count's or the structure's ``finding`` drawn with the ratio of an unconfirmed time ``step`` at
    the same commits that moved the same way (what the change cost, as measured): the finding's size
    first in the cause; its state, id and note kept."""
    cause = "; ".join(dict.fromkeys(c for c in (finding.size, *finding.cause.split("; ")) if c))
    return dataclasses.replace(
        finding,
        ratio=step.ratio,
        ratio_low=step.ratio_low,
        ratio_high=step.ratio_high,
        size="",
        cause=cause,
        worse=finding.regression,
    )


def _merged(one: ChangePoint, other: ChangePoint) -> ChangePoint:
    """Two findings at the same two commits (a time step and a count's or the structure's) as one change
    point: the time step's ratio, the other's size first in the cause, open while either is."""
    timing, counted = (one, other) if not one.size else (other, one)
    causes = [
        counted.size if timing is not counted else "",
        *timing.cause.split("; "),
        *counted.cause.split("; "),
    ]
    return dataclasses.replace(
        timing,
        cause="; ".join(dict.fromkeys(c for c in causes if c)),
        open=one.open or other.open,
        worse=bool(one.regression or other.regression),
        status=OPEN if one.open or other.open else timing.status,
    )


def _findings_notes(
    judgements: list[Any], shown: set[tuple[str, str]], known: set[str]
) -> list[Finding]:
    """A note for each open finding whose benchmark the dashboard does not chart (``shown``: its
    (benchmark, testbed) pairs) or whose commits are not among the dashboard's (``known``)."""
    notes = []
    for judgement in judgements:
        where = (judgement.series.key.benchmark, judgement.series.key.testbed)
        for f in judgement.findings:
            if f.open and (where not in shown or not {f.last_good, f.first_bad} <= known):
                notes.append(
                    Finding(
                        "bad" if f.worse else "info",
                        f"perfsuite history detect: {f.benchmark} {f.measure} {f.last_good[:10]} -> "
                        f"{f.first_bad[:10]}: {f.size} ({f.evidence})"
                        + (f": {'; '.join(f.cause)}" if f.cause else ""),
                    )
                )
    return notes


# (variant, case id, mode, testbed fingerprint, sha) -> (fraction of the roof, which roof), or None
RoofOf = Callable[[str, str, str, str, str], "tuple[float, str] | None"]


def _fastest(series: list[Series], roof_of: RoofOf) -> list[Fastest]:
    """Per case, mode and testbed (``time``): the fastest variant at the newest commit two or more share,
    and how far it is from the roofline there (``roof_of``)."""
    groups: dict[tuple[str, str, str], list[Series]] = collections.defaultdict(list)
    for s in series:
        if s.measure == "time" and s.points:
            groups[(s.case, s.mode, s.testbed)].append(s)
    found = []
    for (case, mode, testbed), members in sorted(groups.items()):
        at: dict[str, dict[str, Point]] = collections.defaultdict(dict)
        order: dict[str, int] = {}
        for s in members:
            for i, p in enumerate(s.points):
                if not p.contended:
                    at[p.commit][s.variant] = p
                    order[p.commit] = max(order.get(p.commit, 0), i)
        shared = [c for c in at if len(at[c]) >= 2]
        if not shared:
            continue
        commit = max(shared, key=lambda c: order[c])
        ranked = sorted(at[commit].items(), key=lambda item: item[1].median_s)
        (best, p0), (second, p1) = ranked[0], ranked[1]
        ratio = fastest_ratio(
            (p0.median_s, *median_interval_s(p0)), (p1.median_s, *median_interval_s(p1))
        )
        roof = roof_of(best, case, mode, testbed, commit)
        found.append(
            Fastest(
                case,
                mode,
                testbed,
                best,
                p0.median_s,
                second,
                *(ratio or (None, None, None)),
                *(roof or (None, "")),
            )
        )
    return found


def _roof_of(store: Any) -> RoofOf:
    """``RoofOf`` read from ``store``: the measured peaks and the rate of the run at that commit."""
    from perfsuite.history.importing import benchmark_name
    from perfsuite.history.query import SeriesKey

    def roof(variant: str, case: str, mode: str, testbed: str, sha: str):
        key = SeriesKey(benchmark_name(variant, case, mode), "time_s", testbed)
        facts = store.roofline_facts(key, sha)
        if facts is None:
            return None
        return roofline_fraction(
            facts.tflops, facts.flop, facts.bytes_moved, case_dtype(case), facts.peaks
        )

    return roof


def dashboard_from_store(
    store: Any,
    title: str = "perfsuite dashboard",
    repo_url: str = "",
    commit_order: list[str] | None = None,
    branch: str | None = None,
    merged_at: dict[str, str] | None = None,
) -> Dashboard:
    """Read every series of ``store`` (a ``perfsuite.history.Store``) into a ``Dashboard``.

    ``commit_order``: shas oldest first (a first-parent history, ``cli.history.commit_order``) that the
    series follow, points of other commits left out; ``branch``: only runs recorded on that branch
    (``query.points``); ``merged_at``: pull request gates' heads -> their merge commits
    (``capture.merged_at``). Change points are the series' findings and unconfirmed steps
    (``history.judging.judge``, what ``perfsuite history detect`` reads)."""
    from perfsuite.history.judging import judge

    order = {"commit_order": commit_order, "branch": branch}
    commits: dict[str, tuple] = {}
    series: list[Series] = []
    testbeds: dict[str, str] = {}
    newest: dict[tuple[str, str, str], tuple] = {}
    copies_of: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    listed = store.list_series()
    judged = judge(
        store,
        [s for s in listed if s.key.measure in (*MEASURES, "score_copies")],
        commit_order,
        branch,
        merged_at=merged_at,
    )
    of_benchmark: dict[tuple[str, str, str], list[Any]] = collections.defaultdict(list)
    for j in judged:
        key = j.series.key
        shown_as = "wall_s" if key.measure == "wall_s" else "time_s"
        of_benchmark[(key.benchmark, key.testbed, shown_as)].append(j)
    for s in listed:
        if s.key.measure == "score_copies":
            for p in store.points(s.key, **order):
                if p.sha is not None and p.median is not None and not p.dirty:
                    copies_of[(s.key.benchmark, s.key.testbed)][p.sha] = p.median
    for s in listed:
        if s.key.measure not in MEASURES or s.variant is None:
            continue
        # a point of an uncommitted tree is not a commit of the history (``history show`` lists it)
        found = [p for p in store.points(s.key, **order) if not p.dirty]
        copies = copies_of.get((s.key.benchmark, s.key.testbed), {})
        points = [pt for pt in (_point(p, copies) for p in found) if pt is not None]
        for p in found:
            if p.sha is not None:
                commits.setdefault(
                    p.sha,
                    (
                        p.position if p.position is not None else 1 << 60,
                        p.commit_time or 0.0,
                        p.subject or "",
                    ),
                )
        if not points:
            continue
        shas = [p.commit for p in points]
        epochs = [
            Epoch(found[e.start].sha, _epoch_label(e.changed))
            for e in _epochs(found)
            if e.changed and found[e.start].sha in shas
        ]
        testbeds.setdefault(s.key.testbed, _testbed_label(s.testbed_spec))
        series.append(
            Series(
                s.key.id + ("" if s.key.measure == "time_s" else "-wall"),
                s.variant,
                s.case_id,
                s.mode,
                case_dtype(s.case_id),
                MEASURES[s.key.measure],
                s.key.testbed,
                points,
                _change_points(
                    of_benchmark.get((s.key.benchmark, s.key.testbed, s.key.measure), [])
                ),
                epochs,
            )
        )
        last = found[-1]
        if s.key.measure == "time_s":
            newest[(s.variant, s.case_id, s.key.testbed, str(last.software.get("torch")))] = (
                copies.get(last.sha),
                last.structure,
            )
    charted = {
        (s.key.benchmark, s.key.testbed) for s in listed if s.key.measure in MEASURES and s.variant
    }
    notes = _findings_notes(judged, charted, set(commits))
    ordered = sorted(commits.items(), key=lambda item: (item[1][0], item[1][1]))
    return Dashboard(
        title,
        [Commit(sha, _iso(t), subject) for sha, (_, t, subject) in ordered],
        series,
        [Testbed(k, v) for k, v in testbeds.items()],
        _fastest(series, _roof_of(store)),
        checks_from(
            (v, case, tb, torch, c, st) for (v, case, tb, torch), (c, st) in sorted(newest.items())
        ),
        repo_url,
        notes,
    )


def _epochs(found: list[Any]) -> list[Any]:
    from perfsuite.history.query import epochs

    return epochs(found)


def _iso(unix_s: float) -> str:
    import datetime

    if not unix_s:
        return ""
    return datetime.datetime.fromtimestamp(unix_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _testbed_label(spec: dict[str, Any]) -> str:
    fields = ("device_names", "device_count", "cpu_model", "memory_bytes", "num_threads", "host")
    return HistoryTestbed(**{k: spec[k] for k in fields if spec.get(k) is not None}).label()
