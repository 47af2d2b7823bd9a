"""Reading a store: series, their points in commit order, epochs, runs.

A series is (benchmark, measure, testbed fingerprint). A point is one commit of a series: the
runs of that commit with the same software pooled (their raw rounds together), ordered by the
commit's first-parent position (``Commit.position``), then commit time. Runs that are not clean
(contended, or in a ``records.ResultState``: a partial run, a failed correctness check, a single
or undecided A/B pair) are kept on the point (``all_values``) but left out of ``values``, the
sample the statistics use; a point with no clean run is ``contended`` (set aside), ``state`` says
why. An epoch is a stretch of points with one software fingerprint.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any
from collections.abc import Sequence

from sqlalchemy import Boolean, Connection, func, literal, select

import perfsuite.history.schema as schema
from perfsuite.history.records import EPOCH_FIELDS, ResultState, stable_hash

# measure -> (results column, unit, larger is worse). ``time_s`` uses every round (``rounds_s``).
MEASURES: dict[str, tuple[str, str, bool]] = {
    "time_s": ("median_s", "s", True),
    "wall_s": ("wall_median_s", "s", True),
    "device_s": ("device_median_s", "s", True),
    "tflops": ("tflops", "TFLOP/s", False),
    "gbps": ("gbps", "GB/s", False),
    "score_copies": ("score_copies", "copies", True),
}
# why a point of a tree with uncommitted changes (``Commit.dirty``) is set aside: it is not the commit's code
UNCOMMITTED = "uncommitted changes"
# Counted from the trace, not timed: another process's load cannot change them, so no point of theirs is
# contended (the run's contention flags apply to its timings).
COUNTED = frozenset({"score_copies"})


@dataclasses.dataclass(frozen=True)
class SeriesKey:
    """What a series is: ``benchmark`` (``variant/case_id/mode``), ``measure`` (a ``MEASURES`` key)
    and ``testbed`` (``Testbed.fingerprint``). ``id``: a short stable name for the command line."""

    benchmark: str
    measure: str
    testbed: str

    @property
    def id(self) -> str:
        return stable_hash([self.benchmark, self.measure, self.testbed], 10)


@dataclasses.dataclass(frozen=True)
class Series:
    """A series found by ``list_series``: its key, the benchmark's variant/case/mode, the testbed's
    spec, and how many runs and commits it has."""

    key: SeriesKey
    variant: str | None
    case_id: str | None
    mode: str | None
    testbed_spec: dict[str, Any]
    runs: int
    commits: int


@dataclasses.dataclass(frozen=True)
class Point:
    """One commit of a series (runs with the same software pooled). ``values``: the raw values of
    its clean runs (every round for ``time_s``, one per run otherwise); ``all_values`` with the
    others too; ``contended``: no clean run, the point is set aside (``state``: why, e.g.
    ``contended``, ``partial run``, ``failed correctness``); ``median`` of ``values`` (of
    ``all_values`` when set aside). ``structure``/``structure_hash``: the newest run's structural
    fingerprint. ``software``: versions, ``software_fingerprint`` the epoch it belongs to.
    ``speed_reference_ms``: the reference matmul's time beside the runs (``perfsuite.measure.speed_reference``)."""

    sha: str | None
    position: int | None
    commit_time: float | None
    branch: str | None
    subject: str | None
    dirty: bool
    run_uids: tuple[str, ...]
    values: tuple[float, ...]
    all_values: tuple[float, ...]
    contended: bool
    median: float | None
    software_fingerprint: str
    software: dict[str, Any]
    structure: dict[str, Any] | None
    structure_hash: str | None
    recorded_at: float
    speed_reference_ms: float | None = (
        None  # median over its used runs of the reference beside each (CPU)
    )
    state: str | None = None  # why the point is set aside (``ResultState`` values); None when used

    @property
    def short_sha(self) -> str:
        return (self.sha or "-")[:10] + ("+dirty" if self.dirty else "")


@dataclasses.dataclass(frozen=True)
class Epoch:
    """Points ``start``..``end`` (indices into the points, inclusive) share ``software``;
    ``changed``: ``{field: (before, after)}`` against the previous epoch (empty for the first)."""

    software_fingerprint: str
    software: dict[str, Any]
    start: int
    end: int
    changed: dict[str, tuple[Any, Any]]


def _measure(measure: str) -> tuple[str, str, bool]:
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r}: not one of {', '.join(MEASURES)}")
    return MEASURES[measure]


def list_series(
    connection: Connection,
    benchmark: str | None = None,
    variant: str | None = None,
    case: str | None = None,
    mode: str | None = None,
    testbed: str | None = None,
    measure: str | None = None,
) -> list[Series]:
    """Every series with data, filtered: ``benchmark``/``variant``/``case``/``mode`` match exactly,
    ``testbed`` is a fingerprint prefix, ``measure`` a ``MEASURES`` key. Sorted by benchmark, measure."""
    r, run, tb = schema.results, schema.runs, schema.testbeds
    measures = [measure] if measure else list(MEASURES)
    for m in measures:
        _measure(m)
    counts = [func.count(getattr(r.c, MEASURES[m][0])).label(m) for m in measures]
    query = (
        select(
            r.c.benchmark,
            r.c.variant,
            r.c.case_id,
            r.c.mode,
            run.c.testbed_id,
            func.count(func.distinct(run.c.id)).label("runs"),
            func.count(func.distinct(run.c.commit_sha)).label("commits"),
            *counts,
        )
        .join(run, run.c.id == r.c.run_id)
        .group_by(r.c.benchmark, r.c.variant, r.c.case_id, r.c.mode, run.c.testbed_id)
    )
    for column, value in (
        (r.c.benchmark, benchmark),
        (r.c.variant, variant),
        (r.c.case_id, case),
        (r.c.mode, mode),
    ):
        if value is not None:
            query = query.where(column == value)
    testbeds = {row.id: (row.fingerprint, row.spec) for row in connection.execute(select(tb))}
    found = []
    for row in connection.execute(query):
        fingerprint, spec = testbeds[row.testbed_id]
        if testbed and not fingerprint.startswith(testbed):
            continue
        for m in measures:
            if getattr(row, m):
                found.append(
                    Series(
                        SeriesKey(row.benchmark, m, fingerprint),
                        row.variant,
                        row.case_id,
                        row.mode,
                        spec,
                        row.runs,
                        row.commits,
                    )
                )
    return sorted(
        found, key=lambda s: (s.key.benchmark, list(MEASURES).index(s.key.measure), s.key.testbed)
    )


def find_series(connection: Connection, name: str) -> list[Series]:
    """Series whose id starts with ``name``, or whose benchmark equals or contains it (``time_s`` first)."""
    every = list_series(connection)
    exact = [s for s in every if s.key.id.startswith(name)] or [
        s for s in every if s.key.benchmark == name
    ]
    return exact or [s for s in every if name in s.key.benchmark]


def _light_query(key: SeriesKey, branch: str | None, include_dirty: bool):
    """The rows of ``key``'s series without their large JSON columns (``schema.SERIES_INDEX`` covers
    them on the results table), oldest recorded first."""
    r, run, tb, sw = schema.results, schema.runs, schema.testbeds, schema.software
    column = MEASURES[key.measure][0]
    query = (
        select(
            r.c.id,
            getattr(r.c, column).label("value"),
            (literal(False, Boolean) if key.measure in COUNTED else r.c.contended).label(
                "contended"
            ),
            run.c.uid,
            run.c.commit_sha,
            run.c.branch,
            run.c.commit_time,
            run.c.dirty,
            run.c.commit_position,
            run.c.subject,
            run.c.recorded_at,
            sw.c.fingerprint.label("software_fingerprint"),
            r.c.state,
        )
        .join(run, run.c.id == r.c.run_id)
        .join(tb, tb.c.id == run.c.testbed_id)
        .join(sw, sw.c.id == run.c.software_id)
        .where(r.c.benchmark == key.benchmark, tb.c.fingerprint == key.testbed)
        .order_by(run.c.recorded_at, run.c.id)
    )
    if branch is not None:
        query = query.where(run.c.branch == branch)
    if not include_dirty:
        query = query.where(run.c.dirty.is_(False))
    return query


def _ordered_groups(rows: Sequence[Any], commit_order: Sequence[str] | None) -> list[list[Any]]:
    """``rows`` (oldest recorded first) pooled into points (commit, dirty, software) and put in commit
    order; a point's first row is its first recorded."""
    groups: dict[tuple, list[Any]] = {}
    for row in rows:
        group = (row.commit_sha or row.uid, bool(row.dirty), row.software_fingerprint)
        groups.setdefault(group, []).append(row)
    members = list(groups.values())
    if commit_order is not None:
        rank = {sha: i for i, sha in enumerate(commit_order)}
        found = [g for g in members if g[-1].commit_sha in rank]
        # at one commit, a point of an uncommitted tree sorts before the committed one, so the
        # commit's clean point stays its newest (what ``check_newest`` judges)
        return sorted(
            found, key=lambda g: (rank[g[-1].commit_sha], not g[-1].dirty, g[0].recorded_at)
        )
    big = float("inf")

    def order(group: list[Any]) -> tuple:
        newest = group[-1]
        position, when = newest.commit_position, newest.commit_time
        return (
            big if position is None else position,
            big if when is None else when,
            not newest.dirty,
            group[0].recorded_at,
        )

    return sorted(members, key=order)


def _newest_groups(groups: list[list[Any]], newest: int) -> list[list[Any]]:
    """The tail of ``groups`` inside the newest epoch that holds ``newest`` usable points (fewer when
    the epoch has fewer): what ``changepoints.check_newest`` reads."""
    if not groups:
        return groups
    epoch = groups[-1][-1].software_fingerprint
    start, usable = len(groups), 0
    while start > 0 and usable < newest and groups[start - 1][-1].software_fingerprint == epoch:
        start -= 1
        group = groups[start]
        usable += not group[-1].dirty and any(not _set_aside(x) for x in group)
    return groups[start:]


def _by_id(
    connection: Connection, columns: Sequence[Any], ids: Sequence[int], chunk: int = 500
) -> dict[int, Any]:
    """Rows of ``columns`` (results columns) for result ``ids``, keyed by id."""
    r = schema.results
    found: dict[int, Any] = {}
    for start in range(0, len(ids), chunk):
        query = select(r.c.id, *columns).where(r.c.id.in_(ids[start : start + chunk]))
        found.update((row.id, row) for row in connection.execute(query))
    return found


def points(
    connection: Connection,
    series: SeriesKey | Series,
    branch: str | None = None,
    include_dirty: bool = True,
    commit_order: Sequence[str] | None = None,
    newest: int | None = None,
) -> list[Point]:
    """The points of ``series`` in first-parent commit order (``Commit.position``, then commit time,
    then when recorded). ``branch``: only runs recorded on it; ``include_dirty=False`` leaves out
    runs of uncommitted trees; ``commit_order``: shas oldest first (``git rev-list --first-parent
    --reverse``) to order by instead, points of other commits left out; ``newest``: only the newest
    points of the newest epoch, as many as hold that many usable points (``check_newest``'s window
    and confirmations), so a CI check reads a few points of a long series.

    Rows are read in two passes: commit, flags and value first, then the raw rounds, speed reference
    and structure of the points kept (the structure of each point's newest run only)."""
    key = series.key if isinstance(series, Series) else series
    _measure(key.measure)
    time_measure = key.measure == "time_s"
    query = _light_query(key, branch, include_dirty)
    light = [row for row in connection.execute(query) if time_measure or row.value is not None]
    groups = _ordered_groups(light, commit_order)
    if newest is not None:
        groups = _newest_groups(groups, newest)
    r, sw = schema.results, schema.software
    ids = [row.id for group in groups for row in group]
    columns = [r.c.speed_reference, *([r.c.rounds_s] if time_measure else [])]
    heavy = _by_id(connection, columns, ids)
    structures = _by_id(connection, [r.c.structure, r.c.structure_hash], [g[-1].id for g in groups])
    fingerprints = sorted({g[-1].software_fingerprint for g in groups})
    software = {
        row.fingerprint: row.spec
        for row in connection.execute(
            select(sw.c.fingerprint, sw.c.spec).where(sw.c.fingerprint.in_(fingerprints))
        )
    }
    built = []
    for group in groups:
        rows = [(row, heavy[row.id]) for row in group]
        rows = [(row, extra) for row, extra in rows if _values(row, extra)]
        if rows:
            built.append(_point(rows, structures[group[-1].id], software))
    return built


def _set_aside(row: Any) -> str | None:
    """Why a light row is not a clean sample, or None. A counted measure (``COUNTED``) reads
    ``contended`` as False: another process's load cannot change a count."""
    state = row.state
    if row.contended:
        return state or ResultState.CONTENDED
    return state if state and state != ResultState.CONTENDED else None


def _values(row: Any, heavy: Any) -> list[float]:
    """A row's raw values: every round for ``time_s`` (``heavy.rounds_s``), else the one value."""
    rounds = getattr(heavy, "rounds_s", None)
    if rounds:
        return [float(v) for v in rounds]
    return [] if row.value is None else [float(row.value)]


def _reference_ms(heavy: Any) -> float | None:
    found = heavy.speed_reference or {}
    before, after = found.get("before_ms"), found.get("after_ms")
    if (
        not isinstance(before, (int, float))
        or not isinstance(after, (int, float))
        or before <= 0
        or after <= 0
    ):
        return None
    return math.sqrt(before * after)


def _point(rows: list[tuple[Any, Any]], structure: Any, software: dict[str, Any]) -> Point:
    """A point from its (light row, heavy row) pairs, oldest recorded first. A point of an uncommitted
    tree (its runs are ``dirty``) has no clean value: set aside, ``state`` ``UNCOMMITTED``."""
    dirty = bool(rows[-1][0].dirty)
    clean = [
        v for row, heavy in rows if not dirty and not _set_aside(row) for v in _values(row, heavy)
    ]
    references = [
        ms
        for ms in (_reference_ms(heavy) for row, heavy in rows if not _set_aside(row) or not clean)
        if ms
    ]
    why = sorted(
        {str(_set_aside(row)) for row, _ in rows if _set_aside(row)}
        | ({UNCOMMITTED} if dirty else set())
    )
    every = [v for row, heavy in rows for v in _values(row, heavy)]
    newest = rows[-1][0]
    return Point(
        sha=newest.commit_sha,
        position=newest.commit_position,
        commit_time=newest.commit_time,
        branch=newest.branch,
        subject=newest.subject,
        dirty=bool(newest.dirty),
        run_uids=tuple(row.uid for row, _ in rows),
        values=tuple(clean),
        all_values=tuple(every),
        contended=not clean,
        median=statistics.median(clean or every),
        software_fingerprint=newest.software_fingerprint,
        software=dict(software.get(newest.software_fingerprint) or {}),
        structure=structure.structure,
        structure_hash=structure.structure_hash,
        recorded_at=min(row.recorded_at for row, _ in rows),
        speed_reference_ms=statistics.median(references) if references else None,
        state=None if clean else ", ".join(why),
    )


def epochs(found: Sequence[Point]) -> list[Epoch]:
    """Consecutive stretches of ``found`` with one software fingerprint (``records.EPOCH_FIELDS``)."""
    starts = [
        i
        for i in range(len(found))
        if i == 0 or found[i].software_fingerprint != found[i - 1].software_fingerprint
    ]
    result: list[Epoch] = []
    for number, start in enumerate(starts):
        end = starts[number + 1] - 1 if number + 1 < len(starts) else len(found) - 1
        point, before = found[start], result[-1].software if result else None
        changed = (
            {}
            if before is None
            else {
                f: (before.get(f), point.software.get(f))
                for f in EPOCH_FIELDS
                if before.get(f) != point.software.get(f)
            }
        )
        result.append(Epoch(point.software_fingerprint, point.software, start, end, changed))
    return result


def runs(
    connection: Connection,
    commit: str | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Stored runs, newest first, as dicts of the ``perfsuite_runs`` columns plus the testbed and
    software fingerprints and the benchmark count; ``commit`` a sha prefix."""
    run, tb, sw, r = schema.runs, schema.testbeds, schema.software, schema.results
    count = select(func.count(r.c.id)).where(r.c.run_id == run.c.id).scalar_subquery()
    query = (
        select(
            run,
            tb.c.fingerprint.label("testbed"),
            sw.c.fingerprint.label("software_fingerprint"),
            count.label("benchmarks"),
        )
        .join(tb, tb.c.id == run.c.testbed_id)
        .join(sw, sw.c.id == run.c.software_id)
        .order_by(run.c.recorded_at.desc(), run.c.id.desc())
    )
    if commit:
        query = query.where(run.c.commit_sha.like(f"{commit}%"))
    if source:
        query = query.where(run.c.source == source)
    if limit:
        query = query.limit(limit)
    return [dict(row._mapping) for row in connection.execute(query)]


def commit_shas(connection: Connection) -> set[str]:
    """The shas of every stored run's commit."""
    run = schema.runs
    query = select(run.c.commit_sha).where(run.c.commit_sha.is_not(None)).distinct()
    return {row.commit_sha for row in connection.execute(query)}


def _series_rows(key: SeriesKey, *columns: Any):
    """``select(columns)`` over the result rows of ``key``'s benchmark on ``key``'s testbed, joined to
    their runs."""
    r, run, tb = schema.results, schema.runs, schema.testbeds
    return (
        select(*columns)
        .join(run, run.c.id == r.c.run_id)
        .join(tb, tb.c.id == run.c.testbed_id)
        .where(r.c.benchmark == key.benchmark, tb.c.fingerprint == key.testbed)
    )


@dataclasses.dataclass(frozen=True)
class RooflineFacts:
    """What the roofline needs of one benchmark at one commit: the newest run's achieved ``tflops``
    (TFLOP/s at the median), ``flop`` and ``bytes_moved`` per step, and that run's measured ``peaks``."""

    tflops: float
    flop: int
    bytes_moved: int
    peaks: dict[str, Any]


def roofline_facts(connection: Connection, key: SeriesKey, sha: str) -> RooflineFacts | None:
    """``RooflineFacts`` of ``key``'s benchmark at commit ``sha`` on ``key``'s testbed, from the newest
    uncontended run there that has peaks and a rate; None when no run has them."""
    r, run = schema.results, schema.runs
    query = (
        _series_rows(key, r.c.tflops, r.c.flop, r.c.bytes_moved, run.c.peaks)
        .where(
            run.c.commit_sha == sha,
            r.c.tflops.is_not(None),
            r.c.flop.is_not(None),
            r.c.bytes_moved.is_not(None),
        )
        .order_by(r.c.contended.desc(), run.c.recorded_at)  # uncontended and newest last
    )
    found = [row for row in connection.execute(query) if isinstance(row.peaks, dict)]
    if not found:
        return None
    row = found[-1]
    return RooflineFacts(float(row.tflops), int(row.flop), int(row.bytes_moved), row.peaks)


# the verdicts of a gate that called its comparison (``Pair.decisive``, or no change)
DECIDED = frozenset({"slower", "faster", "no change"})


@dataclasses.dataclass(frozen=True)
class Pair:
    """One interleaved A/B gate (``perfsuite ab``) between two commits of a series: ``ratio`` is the
    gate's paired estimate of head time / base time, ``interval`` its interval at the gate's level,
    ``verdict`` the gate's word (``slower``, ``faster``, ``no change``, ``inconclusive...``).
    Base and head were timed in alternating blocks in one run, so a change of the machine's speed
    between separate runs does not enter the ratio."""

    base_sha: str
    head_sha: str
    ratio: float
    interval: tuple[float, float]
    verdict: str
    recorded_at: float

    @property
    def decisive(self) -> bool:
        """The gate called a change (``slower`` or ``faster``): its interval excludes 1 and the
        change is at least its minimum effect."""
        return self.verdict in ("slower", "faster")


def pairs(connection: Connection, key: SeriesKey) -> list[Pair]:
    """The ``Pair`` of every stored ``perfsuite ab`` run of ``key``'s benchmark on ``key``'s testbed
    whose two sides are commits of committed trees with a paired ratio from two or more clean block
    pairs (``time_s`` only; empty for other measures), oldest recorded first."""
    if key.measure != "time_s":
        return []
    r, run = schema.results, schema.runs
    heads = connection.execute(
        _series_rows(
            key, r.c.extra, r.c.state, run.c.commit_sha, run.c.run_group, run.c.recorded_at
        )
        .where(
            run.c.source == "ab-head",
            run.c.dirty.is_(False),
            run.c.commit_sha.is_not(None),
        )
        .order_by(run.c.recorded_at, run.c.id)
    ).all()
    # a side with every pair contended or a single clean pair has no paired estimate of its own, unless
    # the gate decided with it: its contended-pairs rule (``--contended-pairs shared``) keeps pairs
    # whose two blocks were both contended, as a steady load slows both sides and cancels in the ratio
    heads = [
        row
        for row in heads
        if row.state not in (ResultState.CONTENDED, ResultState.SINGLE_PAIR)
        or str((row.extra or {}).get("ab_verdict")) in DECIDED
    ]
    groups = sorted({row.run_group for row in heads if row.run_group})
    bases = {
        row.run_group: row.commit_sha
        for row in connection.execute(
            select(run.c.run_group, run.c.commit_sha).where(
                run.c.source == "ab-base",
                run.c.dirty.is_(False),
                run.c.commit_sha.is_not(None),
                run.c.run_group.in_(groups),
            )
        )
    }
    found = []
    for row in heads:
        ratio = (row.extra or {}).get("ab_ratio") or {}
        base = bases.get(row.run_group)
        if base and base != row.commit_sha and _finite(ratio, "ratio", "low", "high"):
            found.append(
                Pair(
                    base,
                    row.commit_sha,
                    float(ratio["ratio"]),
                    (float(ratio["low"]), float(ratio["high"])),
                    str((row.extra or {}).get("ab_verdict") or "inconclusive"),
                    float(row.recorded_at),
                )
            )
    return found


def _finite(found: dict[str, Any], *names: str) -> bool:
    return all(
        isinstance(found.get(n), (int, float)) and math.isfinite(found[n]) and found[n] > 0
        for n in names
    )


@dataclasses.dataclass(frozen=True)
class GateStructure:
    """The structural fingerprints of the two sides of one stored ``perfsuite ab`` run of a benchmark:
    ``base_sha``/``head_sha`` (a pull request's gate has its head off the main line), the
    fingerprints (``trace.structure.fingerprint``), ``recorded_at`` (unix seconds)."""

    base_sha: str
    head_sha: str
    base_structure: dict[str, Any]
    head_structure: dict[str, Any]
    recorded_at: float


def gate_structures(connection: Connection, key: SeriesKey) -> list[GateStructure]:
    """Every stored ``perfsuite ab`` run of ``key``'s benchmark on ``key``'s testbed whose two sides
    are committed commits with a structural fingerprint each, oldest recorded first."""
    r, run = schema.results, schema.runs
    rows = connection.execute(
        _series_rows(
            key, r.c.structure, run.c.commit_sha, run.c.run_group, run.c.recorded_at, run.c.source
        )
        .where(
            run.c.source.in_(["ab-base", "ab-head"]),
            run.c.dirty.is_(False),
            run.c.commit_sha.is_not(None),
            run.c.run_group.is_not(None),
        )
        .order_by(run.c.recorded_at, run.c.id)
    ).all()
    sides: dict[str, dict[str, Any]] = {}
    for row in rows:
        if isinstance(row.structure, dict):
            sides.setdefault(row.run_group, {})[row.source] = row
    found = []
    for group in sides.values():
        base, head = group.get("ab-base"), group.get("ab-head")
        if base is not None and head is not None and base.commit_sha != head.commit_sha:
            found.append(
                GateStructure(
                    base.commit_sha,
                    head.commit_sha,
                    base.structure,
                    head.structure,
                    float(head.recorded_at),
                )
            )
    return sorted(found, key=lambda g: g.recorded_at)


@dataclasses.dataclass(frozen=True)
class Acceptance:
    """A finding marked accepted (``perfsuite history accept``): ``finding`` its id, ``series`` the
    series id, ``reason`` as given, ``accepted_at`` unix seconds, ``accepted_by`` who (the OS user)."""

    finding: str
    series: str
    benchmark: str
    last_good: str | None
    first_bad: str | None
    reason: str
    accepted_at: float
    accepted_by: str | None


def acceptances(connection: Connection) -> dict[str, Acceptance]:
    """Every accepted finding by its id (the newest acceptance of a finding wins)."""
    a = schema.acceptances
    found = {}
    for row in connection.execute(select(a).order_by(a.c.accepted_at, a.c.id)):
        found[row.finding] = Acceptance(
            row.finding,
            row.series,
            row.benchmark,
            row.last_good,
            row.first_bad,
            row.reason,
            float(row.accepted_at),
            row.accepted_by,
        )
    return found


def aa_spreads(connection: Connection, testbed: str, newest: int) -> dict[str, list[float]]:
    """Per stored benchmark name, the standard deviations between worker pairs (log units,
    ``ab_between_pairs_sd``) of its newest ``newest`` A/A gates on the testbed whose fingerprint is
    ``testbed``, newest first: ``perfsuite ab`` runs whose two sides are one clean commit."""
    r, run, bed = schema.results, schema.runs, schema.testbeds
    heads = connection.execute(
        select(r.c.benchmark, r.c.extra, run.c.commit_sha, run.c.run_group)
        .join(run, r.c.run_id == run.c.id)
        .join(bed, run.c.testbed_id == bed.c.id)
        .where(
            run.c.source == "ab-head",
            run.c.dirty.is_(False),
            run.c.commit_sha.is_not(None),
            bed.c.fingerprint == testbed,
        )
        .order_by(run.c.recorded_at.desc(), run.c.id.desc())
    ).all()
    groups = sorted({row.run_group for row in heads if row.run_group})
    bases = {
        row.run_group: row.commit_sha
        for row in connection.execute(
            select(run.c.run_group, run.c.commit_sha).where(
                run.c.source == "ab-base", run.c.dirty.is_(False), run.c.run_group.in_(groups)
            )
        )
    }
    found: dict[str, list[float]] = {}
    for row in heads:
        sd = (row.extra or {}).get("ab_between_pairs_sd")
        aa = bases.get(row.run_group) == row.commit_sha
        if aa and _finite({"sd": sd}, "sd") and len(found.get(row.benchmark, ())) < newest:
            found.setdefault(row.benchmark, []).append(float(sd))
    return found
