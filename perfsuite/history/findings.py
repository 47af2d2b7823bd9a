"""A finding's life: what a series' history shows, each change with its evidence, its cause and its state.

A finding is a change of one series between two consecutive main-line commits (``last_good`` ->
``first_bad``) that something could confirm:

- ``interleaved gate``: a decisive ``perfsuite ab`` run between the two commits (``query.pairs``);
- ``change-point rule``: a step between separate runs that clears the noise limit learned from the
  series' own clean history (``weigh_separate_runs``), not explained by the speed reference;
- ``exact count``: a step of a counted measure (``query.COUNTED``: score copies), exact whatever the load;
- ``structure``: the structural fingerprints (``trace.structure``) of two consecutive commits differ,
  whether or not timing moved; a pull request's gate (an A/B run whose head is off the main line)
  whose structure added work is linked to the main-line commit that merged it (``merged_at``).

A step between separate runs that does not clear the limit is a ``Suspect`` ("unconfirmed"): drawn,
never a finding, with the one ``perfsuite ab`` command that would confirm it.

A finding stays ``open`` across later commits until a later measurement of the same series shows it
``recovered`` (a later confirmed step back by at least half of it, a gate from its last good commit to a
later one that finds no change, or the structure of its last good commit again), or someone marks it
``accepted`` (``perfsuite history accept``, the reason kept in the store). A step that is not a regression
and recovers an earlier finding is that finding's ``recovery`` (closed; it names the finding it closes),
not an open finding of its own. ``history detect``,
``history show`` and the dashboard read this one state (``history.judging``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfsuite.history.changepoints import (
    GATE,
    MAD_TO_SD,
    MIN_POINTS,
    ChangePoint,
    count_step,
    detect,
    point_value,
    usable,
)
from perfsuite.history.query import COUNTED, MEASURES, Pair, Point, epochs
from perfsuite.history.records import stable_hash
from perfsuite.measure.speed_reference import SPEED_LIMIT
from perfsuite.trace.structure import added_work, adds_work, diff_fingerprints

# clean points before a separate-run step, from which the series' noise is learned: with fewer, a
# 5-25% change of machine speed between separate runs (docs/explanation/change-points.md) cannot be
# told from a change of the code (the robust spread of three values is not an estimate of anything)
MIN_HISTORY = 4
CONFIRM = 2  # clean points after a separate-run step, each beyond the limit
K_NOISE = 4.0  # the limit in robust noise deviations of the series' clean points
MIN_EFFECT = 0.05  # and never below 5%
RECOVERED_SHARE = 0.5  # a later step back by at least half of a finding's step recovers it

CHANGE_POINT_RULE = "change-point rule"
EXACT_COUNT = "exact count"
STRUCTURE = "structure"
PR_GATE = "pull request gate"

OPEN, RECOVERED, ACCEPTED, RECOVERY = "open", "recovered", "accepted", "recovery"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One confirmed change of a series between the main-line commits ``last_good`` -> ``first_bad``.

    ``kind``: ``timing``, ``count`` or ``structure``; ``worse``: a regression (slower, more copies,
    more work); ``size`` in words (``x1.068 [1.041, 1.097]``, ``0 -> 1 score copies``, ``+2 gather
    ops``); ``ratio``/``interval`` after / before (None for structure); ``evidence`` what confirmed it
    (``changepoints.GATE``, ``CHANGE_POINT_RULE``, ``EXACT_COUNT``, ``STRUCTURE``, ``PR_GATE``);
    ``cause`` the structural diff lines; ``status`` ``open``, ``recovered``, ``accepted`` or ``recovery``
    (the step that recovered an earlier finding: ``reason`` names it), ``closed_at`` the commit that
    recovered it, ``reason`` why it is closed; ``pr_gate`` the head of
    the pull request gate that failed on this structure."""

    id: str
    series: str
    benchmark: str
    measure: str
    kind: str
    last_good: str
    first_bad: str
    worse: bool
    size: str
    ratio: float | None
    interval: tuple[float, float] | None
    evidence: str
    cause: tuple[str, ...]
    status: str = OPEN
    closed_at: str | None = None
    reason: str = ""
    pr_gate: str | None = None
    counts: tuple[float | None, float | None] | None = None

    @property
    def open(self) -> bool:
        return self.status == OPEN

    def describe(self, cause_shown: bool = False) -> str:
        """``REGRESSION a1b2c3d4e5 -> f6e7d8c9b0: x1.068 [1.041, 1.097] slower (interleaved gate);
        structure unchanged [open]`` (``cause_shown``: the cause was just printed, ``structure as above``)."""
        word = {"timing": ("slower", "faster"), "count": ("worse", "better")}.get(
            self.kind,
            ("adds work", ""),  # a structure change without added work says so in its size
        )[0 if self.worse else 1]
        if self.kind == "timing" and MEASURES[self.measure][2] is False:
            word = "worse" if self.worse else "better"
        state = self.status + (f" at {self.closed_at[:10]}" if self.closed_at else "")
        state += f": {self.reason}" if self.reason else ""
        return (
            f"{'REGRESSION' if self.worse else 'change':<10} {self.last_good[:10]} -> {self.first_bad[:10]}: "
            f"{self.size}{' ' + word if word else ''} ({self.evidence}); "
            + (
                "structure as above"
                if cause_shown and self.cause
                else "; ".join(self.cause) or "structure unchanged"
            )
            + f" [{state}]"
        )

    def as_json(self) -> dict[str, Any]:
        """The JSON record (``history detect --json`` and ``show --json``)."""
        found = dataclasses.asdict(self)
        found["cause"] = list(self.cause)
        found["interval"] = list(self.interval) if self.interval else None
        found["counts"] = list(self.counts) if self.counts else None
        return found


@dataclasses.dataclass(frozen=True)
class Suspect:
    """A step between separate runs that could not be confirmed (``why``): drawn as "unconfirmed",
    never a finding; ``command`` the interleaved gate that would confirm or dismiss it."""

    series: str
    benchmark: str
    measure: str
    last_good: str
    first_bad: str
    ratio: float
    interval: tuple[float, float]
    worse: bool
    why: str
    command: str

    def describe(self) -> str:
        return (
            f"unconfirmed {self.last_good[:10]} -> {self.first_bad[:10]}: x{self.ratio:.3f} between "
            f"separate runs: {self.why}; to confirm it: {self.command}"
        )

    def as_json(self) -> dict[str, Any]:
        found = dataclasses.asdict(self)
        found["interval"] = list(self.interval)
        return found


def confirm_command(benchmark: str, last_good: str, first_bad: str) -> str:
    """The ``perfsuite ab`` command that times ``last_good`` and ``first_bad`` interleaved on
    ``benchmark`` (``variant/case/mode``) and records the gate in the store."""
    parts = benchmark.split("/")
    only = (
        f" --variants {parts[0]} --cases {parts[1]} --modes {parts[2]}" if len(parts) == 3 else ""
    )
    return f"perfsuite ab --base-ref {last_good[:12]} --head-ref {first_bad[:12]}{only}"


def finding_id(series: str, kind: str, last_good: str, first_bad: str) -> str:
    """A finding's short stable id (what ``perfsuite history accept`` takes)."""
    return stable_hash([series, kind, last_good, first_bad], 10)


def _robust_noise(points: Sequence[Point], bounds: Sequence[int]) -> tuple[float, int]:
    """(robust standard deviation of the log point values about their segment's median, how many
    values it rests on): the clean ``points`` of one epoch cut at ``bounds`` (indices into them);
    segments of fewer than ``changepoints.MIN_POINTS`` points say nothing of the noise and are left out."""
    residuals: list[float] = []
    cuts = [0, *sorted(b for b in bounds if 0 < b < len(points)), len(points)]
    for start, end in zip(cuts, cuts[1:]):
        values = [point_value(p) for p in points[start:end]]
        if len(values) >= MIN_POINTS:
            center = statistics.median(values)
            residuals.extend(v - center for v in values)
    if not residuals:
        return 0.0, 0
    return float(MAD_TO_SD * np.median(np.abs(residuals))), len(residuals)


def weigh_separate_runs(
    points: Sequence[Point],
    change: ChangePoint,
    changes: Sequence[ChangePoint],
    confirm: int = CONFIRM,
    k: float = K_NOISE,
    min_effect: float = MIN_EFFECT,
) -> str | None:
    """None when the separate-run ``change`` (one of ``changes``, ``changepoints.detect``'s on
    ``points``) is confirmed, else why not, in words.

    Confirmed when, inside its epoch and between the neighbouring change points: ``MIN_HISTORY`` or
    more clean points before it (contended and uncommitted points never serve as baseline) and
    ``confirm`` or more after it; each of the first ``confirm`` after it beyond the limit
    ``max(min_effect, exp(k * noise) - 1)`` from the median before it, ``noise`` the robust
    spread of the epoch's clean points about their segments' medians (``_robust_noise``); and the
    speed reference beside the runs (``measure.speed_reference``) moved less than ``SPEED_LIMIT`` and
    does not explain the step."""
    good, bad = points.index(change.last_good), change.index
    epoch = next(e for e in epochs(points) if e.start <= bad <= e.end)
    others = sorted(
        points.index(c.first_bad)
        for c in changes
        if c is not change and epoch.start <= c.index <= epoch.end
    )
    start = max([epoch.start, *[i for i in others if i <= good]])
    end = min([epoch.end + 1, *[i for i in others if i > bad]])
    before = [p for p in points[start : good + 1] if usable(p)]
    after = [p for p in points[bad:end] if usable(p)]
    if len(before) < MIN_HISTORY:
        since = (
            f"since the step at {points[start].short_sha}"
            if start > epoch.start
            else "in its epoch"
        )
        return (
            f"{len(before)} clean point(s) before it {since}; {MIN_HISTORY} are needed to learn this "
            "series' noise between separate runs"
        )
    if len(after) < confirm:
        return f"{len(after)} clean point(s) from it on; {confirm} must show it"
    clean = [p for p in points[epoch.start : epoch.end + 1] if usable(p)]
    cuts = [clean.index(p) for p in (c.first_bad for c in changes) if p in clean]
    noise, _ = _robust_noise(clean, cuts)
    limit = max(math.log1p(min_effect), k * noise)
    center = statistics.median(point_value(p) for p in before)
    sign = 1.0 if (change.ratio > 1) else -1.0
    steps = [sign * (point_value(p) - center) for p in after[:confirm]]
    if min(steps) <= limit:
        return (
            f"x{change.ratio:.3f} is within this series' noise limit between separate runs "
            f"(x{math.exp(limit):.3f}, from {len(clean)} clean points)"
        )
    references = lambda side: [p.speed_reference_ms for p in side if p.speed_reference_ms]
    ref_before, ref_after = references(before), references(after)
    if ref_before and ref_after:
        machine = math.log(statistics.median(ref_after) / statistics.median(ref_before))
        if (
            abs(machine) > math.log1p(SPEED_LIMIT)
            or sign * (math.log(change.ratio) - machine) <= limit
        ):
            return (
                f"the speed reference beside the runs moved x{math.exp(machine):.3f}: the machine's "
                "speed, not the code, may explain it"
            )
    return None


def _timing_finding(key: Any, change: ChangePoint, evidence: str) -> Finding:
    counted = change.measure in COUNTED
    kind = "count" if counted else "timing"
    counts = (change.last_good.median, change.first_bad.median) if counted else None
    return Finding(
        finding_id(key.id, kind, change.last_good.sha, change.first_bad.sha),
        key.id,
        key.benchmark,
        key.measure,
        kind,
        change.last_good.sha,
        change.first_bad.sha,
        change.worse,
        count_step(*counts, change.measure) if counts else change.size(),
        None if counted else change.ratio,
        None if counted else change.interval,
        evidence,
        change.structure,
        counts=counts,
    )


def _structure_findings(key: Any, points: Sequence[Point]) -> list[tuple[int, int, Finding]]:
    """(index before, index after, finding) of every structural change between consecutive points
    that carry a fingerprint (committed trees only; a contended point's structure is counted, not timed)."""
    found = []
    shaped = [
        i
        for i, p in enumerate(points)
        if p.structure and p.structure_hash and not p.dirty and p.sha
    ]
    for a, b in zip(shaped, shaped[1:]):
        before, after = points[a], points[b]
        if before.structure_hash == after.structure_hash:
            continue
        lines = tuple(diff_fingerprints(before.structure, after.structure))
        work = added_work(before.structure, after.structure)
        found.append(
            (
                a,
                b,
                Finding(
                    finding_id(key.id, "structure", before.sha, after.sha),
                    key.id,
                    key.benchmark,
                    key.measure,
                    "structure",
                    before.sha,
                    after.sha,
                    bool(work),
                    "; ".join(work) or "structure changed, no added work",
                    None,
                    None,
                    STRUCTURE,
                    lines,
                ),
            )
        )
    return found


def _recovery(
    finding: Finding,
    at: int,
    points: Sequence[Point],
    later: Sequence[tuple[int, Finding]],
    pairs: Sequence[Pair],
) -> tuple[str, str, str | None] | None:
    """(commit, reason, the id of the later finding that is the recovery, if one is) of the first later
    measurement of the series that shows ``finding`` (whose first bad commit is ``points[at]``)
    recovered, or None."""
    where = {p.sha: i for i, p in enumerate(points)}
    found: list[tuple[int, str, str | None]] = []
    if finding.kind == "structure":
        before = (
            points[where[finding.last_good]].structure_hash if finding.last_good in where else None
        )
        for i in range(at + 1, len(points)):
            if before and points[i].structure_hash == before and not points[i].dirty:
                back = [
                    o.id for _, o in later if o.kind == "structure" and o.first_bad == points[i].sha
                ]
                found.append(
                    (
                        i,
                        f"the structure of {finding.last_good[:10]} again",
                        back[0] if back else None,
                    )
                )
                break
    else:
        size = abs(math.log(finding.ratio)) if finding.ratio else None
        for index, other in later:
            if other.kind != finding.kind or other.worse == finding.worse or index <= at:
                continue
            if finding.counts and other.counts:
                back = (
                    other.counts[1] is not None
                    and finding.counts[0] is not None
                    and ((other.counts[1] <= finding.counts[0]) == finding.worse)
                )
            else:
                back = (
                    size is not None
                    and other.ratio is not None
                    and abs(math.log(other.ratio)) >= RECOVERED_SHARE * size
                )
            if back:
                found.append((index, f"back by {other.size} ({other.evidence})", other.id))
        for pair in pairs:
            ends = {pair.base_sha, pair.head_sha}
            if finding.last_good not in ends or finding.kind != "timing":
                continue
            other = (ends - {finding.last_good}).pop() if len(ends) == 2 else None
            if other not in where or where[other] <= at:
                continue
            ratio = pair.ratio if pair.base_sha == finding.last_good else 1 / pair.ratio
            still = pair.decisive and ((ratio > 1) == ((finding.ratio or 1) > 1))
            if pair.verdict == "no change" or (pair.decisive and not still):
                found.append(
                    (
                        where[other],
                        f"an interleaved gate against {finding.last_good[:10]} says {pair.verdict}",
                        None,
                    )
                )
    if not found:
        return None
    index, why, by = min(found, key=lambda item: item[0])
    return points[index].sha, why, by


def series_findings(
    key: Any,
    points: Sequence[Point],
    pairs: Sequence[Pair] = (),
    gates: Sequence[Any] = (),
    merged_at: Mapping[str, str] | None = None,
    accepted: Mapping[str, Any] | None = None,
    confirm: int = CONFIRM,
    k: float = K_NOISE,
    min_effect: float = MIN_EFFECT,
) -> tuple[list[Finding], list[Suspect]]:
    """The findings and the unconfirmed steps of one series (``key``: a ``query.SeriesKey``) over its
    ``points`` (``query.points``, main-line order), oldest first.

    ``pairs``: its interleaved gates (``query.pairs``); ``gates``: its A/B runs' structures
    (``query.gate_structures``), with ``merged_at`` (a pull request gate's head sha -> the main-line
    commit that merged it, ``capture.merged_at``) linking a pull request's structural FAIL to its
    merge; ``accepted``: ``query.acceptances``. Structure findings are made on ``time_s`` series only
    (the other measures of a benchmark share its fingerprints). ``confirm``, ``k``, ``min_effect``:
    ``weigh_separate_runs``'s."""
    measure = key.measure
    changes = [
        c for c in detect(points, measure, pairs=pairs) if c.last_good.sha and c.first_bad.sha
    ]
    placed: list[tuple[int, Finding]] = []
    suspects: list[Suspect] = []
    for change in changes:
        if measure in COUNTED:
            placed.append((change.index, _timing_finding(key, change, EXACT_COUNT)))
            continue
        if change.evidence == GATE:
            placed.append((change.index, _timing_finding(key, change, GATE)))
            continue
        why = weigh_separate_runs(points, change, changes, confirm, k, min_effect)
        if why is None:
            placed.append((change.index, _timing_finding(key, change, CHANGE_POINT_RULE)))
        else:
            suspects.append(
                Suspect(
                    key.id,
                    key.benchmark,
                    measure,
                    change.last_good.sha,
                    change.first_bad.sha,
                    change.ratio,
                    change.interval,
                    change.worse,
                    why,
                    confirm_command(key.benchmark, change.last_good.sha, change.first_bad.sha),
                )
            )
    if measure == "time_s":
        timed = {(f.last_good, f.first_bad) for _, f in placed}
        placed.extend(
            (b, f)
            for _, b, f in _structure_findings(key, points)
            if (f.last_good, f.first_bad) not in timed
        )
        placed = _link_pull_requests(key, points, placed, gates, merged_at or {})
    placed.sort(key=lambda item: item[0])
    where = {p.sha: i for i, p in enumerate(points)}
    found, closes = (
        [],
        {},
    )  # a recovery's id -> (id, last good, first bad) of the finding it recovered
    for index, finding in placed:
        at = where.get(finding.first_bad, index)
        recovered = _recovery(finding, at, points, placed, pairs)
        acceptance = (accepted or {}).get(finding.id)
        if recovered:
            finding = dataclasses.replace(
                finding, status=RECOVERED, closed_at=recovered[0], reason=recovered[1]
            )
            if recovered[2]:
                closes.setdefault(recovered[2], (finding.id, finding.last_good, finding.first_bad))
        elif acceptance is not None:
            finding = dataclasses.replace(finding, status=ACCEPTED, reason=acceptance.reason)
        found.append(finding)
    return [_as_recovery(f, closes) for f in found], suspects


def _as_recovery(finding: Finding, closes: Mapping[str, tuple[str, str, str]]) -> Finding:
    """``finding`` as the ``recovery`` of the finding it closes, when it is an open step that is not a
    regression and recovered an earlier finding (``closes``: its id -> the closed one's id and
    commits, which its reason names); else as is."""
    if finding.id not in closes or finding.worse or not finding.open:
        return finding
    closed = closes[finding.id]
    return dataclasses.replace(
        finding,
        status=RECOVERY,
        reason=f"closes {closed[0][:10]}, {closed[1][:10]} -> {closed[2][:10]}",
    )


def _link_pull_requests(
    key: Any,
    points: Sequence[Point],
    placed: list[tuple[int, Finding]],
    gates: Sequence[Any],
    merged_at: Mapping[str, str],
) -> list[tuple[int, Finding]]:
    """``placed`` with each pull request gate whose structure added work (a structural FAIL) linked to
    the finding at the commit that merged it (``pr_gate``, a cause line), or a finding of its own there
    when the series has none at that commit."""
    where = {p.sha: i for i, p in enumerate(points)}
    placed = list(placed)
    for gate in gates:
        merge = merged_at.get(gate.head_sha)
        if gate.head_sha in where or merge is None or merge not in where:
            continue
        if not adds_work(gate.base_structure, gate.head_structure):
            continue
        line = f"its pull request gate FAILED on this structure at {gate.head_sha[:10]} (against {gate.base_sha[:10]})"
        at = [n for n, (_, f) in enumerate(placed) if f.first_bad == merge]
        if at:
            index, finding = placed[at[0]]
            if finding.pr_gate is None:
                placed[at[0]] = (
                    index,
                    dataclasses.replace(
                        finding, pr_gate=gate.head_sha, cause=(*finding.cause, line)
                    ),
                )
            continue
        work = added_work(gate.base_structure, gate.head_structure)
        previous = max(where[merge] - 1, 0)
        before = points[previous].sha if where[merge] > 0 else gate.base_sha
        placed.append(
            (
                where[merge],
                Finding(
                    finding_id(key.id, "structure", before, merge),
                    key.id,
                    key.benchmark,
                    key.measure,
                    "structure",
                    before,
                    merge,
                    True,
                    "; ".join(work),
                    None,
                    None,
                    PR_GATE,
                    (*diff_fingerprints(gate.base_structure, gate.head_structure), line),
                    pr_gate=gate.head_sha,
                ),
            )
        )
    return placed
