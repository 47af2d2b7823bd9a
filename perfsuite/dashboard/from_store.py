"""The dashboard's model from the history store: series with their points, epochs and change points,
the fastest implementation per case and testbed, and the post's findings as checks.

Measures: ``time`` is the store's ``time_s``, every round on the run's timer (the host clock, or the device
clock when the suite timed with one); ``wall`` is ``wall_s``, each run's median synchronized host time, which
the store has only when a device clock timed the rounds (so wall and device time are both shown then).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from perfsuite.dashboard.findings import case_dtype, checks_from, fastest_ratio, roofline_fraction
from perfsuite.dashboard.model import (
    ChangePoint,
    Commit,
    Dashboard,
    Epoch,
    Fastest,
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


def _change_points(measure: str, found: list[Any], pairs: list[Any]) -> list[ChangePoint]:
    """The store's change points of a series (``perfsuite.history.changepoints.detect``, judged by the
    series' interleaved gates ``pairs``); the newest one of a series is open (the series is still at its
    level), earlier ones were followed by another step."""
    from perfsuite.history.changepoints import GATE, detect

    steps = detect(found, measure, pairs=pairs)
    return [
        ChangePoint(
            c.last_good.sha,
            c.first_bad.sha,
            c.ratio,
            c.interval[0],
            c.interval[1],
            "; ".join((["interleaved gate"] if c.evidence == GATE else []) + list(c.structure)),
            open=i == len(steps) - 1,
        )
        for i, c in enumerate(steps)
        if c.last_good.sha and c.first_bad.sha
    ]


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
) -> Dashboard:
    """Read every series of ``store`` (a ``perfsuite.history.Store``) into a ``Dashboard``.

    ``commit_order``: shas oldest first (a first-parent history, ``cli.history.commit_order``) that the
    series follow, points of other commits left out; ``branch``: only runs recorded on that branch
    (``query.points``)."""
    order = {"commit_order": commit_order, "branch": branch}
    commits: dict[str, tuple] = {}
    series: list[Series] = []
    testbeds: dict[str, str] = {}
    newest: dict[tuple[str, str, str], tuple] = {}
    copies_of: dict[tuple[str, str], dict[str, float]] = collections.defaultdict(dict)
    listed = store.list_series()
    for s in listed:
        if s.key.measure == "score_copies":
            for p in store.points(s.key, **order):
                if p.sha is not None and p.median is not None:
                    copies_of[(s.key.benchmark, s.key.testbed)][p.sha] = p.median
    for s in listed:
        if s.key.measure not in MEASURES or s.variant is None:
            continue
        found = store.points(s.key, **order)
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
                _change_points(s.key.measure, found, store.pairs(s.key)),
                epochs,
            )
        )
        last = found[-1]
        if s.key.measure == "time_s":
            newest[(s.variant, s.case_id, s.key.testbed, str(last.software.get("torch")))] = (
                copies.get(last.sha),
                last.structure,
            )
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
