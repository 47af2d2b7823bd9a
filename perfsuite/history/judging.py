"""What ``perfsuite history detect`` concludes for each series, read from a store: one place that
``history detect``, ``history show`` and ``perfsuite dashboard`` use, so the dashboard's open
regressions are exactly the ones ``detect`` confirms (each series' findings and their state,
``history.findings``; ``changepoints.check_newest`` on the newest points for whether the newest
commit could be judged)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

# what ``detect`` judges by default: the times and the score-copy counts (exact, so judged even when
# every time is contended)
DEFAULT_MEASURES = ("time_s", "score_copies")


@dataclasses.dataclass(frozen=True)
class Judgement:
    """``detect``'s answer for one series: ``regression`` (a confirmed regression still open: an
    open finding that is worse), ``judged`` (False: nothing could judge it), ``reason`` in words,
    ``last_good``/``first_bad`` the newest open regression's commits (shas), ``structure`` its cause."""

    series: Any  # query.Series
    newest: str | None
    regression: bool
    judged: bool
    ratios: tuple[float, ...]
    limit: float | None
    reason: str
    last_good: str | None
    first_bad: str | None
    structure: tuple[str, ...]
    # the counts before and after the step of a counted measure (``query.COUNTED``), else None
    counts: tuple[float | None, float | None] | None = None
    # every finding of the series (``history.findings.Finding``: open, recovered, accepted), oldest first
    findings: tuple[Any, ...] = ()
    # its steps between separate runs that nothing confirmed (``history.findings.Suspect``)
    suspects: tuple[Any, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The ``history detect --json`` record."""
        return {
            "series": self.series.key.id,
            "benchmark": self.series.key.benchmark,
            "measure": self.series.key.measure,
            "newest": self.newest,
            "regression": self.regression,
            "judged": self.judged,
            "ratios": list(self.ratios),
            "limit": self.limit,
            "reason": self.reason,
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "structure": list(self.structure),
            "findings": [f.as_json() for f in self.findings],
            "unconfirmed": [u.as_json() for u in self.suspects],
        }


def judge(
    store: Any,
    chosen: Sequence[Any],
    commit_order: Sequence[str] | None = None,
    branch: str | None = None,
    window: int = 20,
    confirm: int = 2,
    k: float = 4.0,
    min_effect: float = 0.05,
    merged_at: Mapping[str, str] | None = None,
) -> list[Judgement]:
    """The state of each series of ``chosen`` (``query.Series`` of ``store``, a ``history.Store``):
    its findings (``history.findings.series_findings``: gates, the change-point rule, exact counts,
    structure, accepted ones) over every point (``commit_order``/``branch`` as ``query.points``), and
    ``check_newest`` on the newest ``window + confirm`` points for whether the newest commit could be
    judged. A series is a regression while one of its findings that is worse is open. A structure
    finding of a ``time_s`` series that a score-copy finding of the same benchmark already names
    (same commits) is left to that one. ``merged_at``: ``capture.merged_at`` for pull request gates.
    Defaults are ``history detect``'s."""
    from perfsuite.history.changepoints import check_newest
    from perfsuite.history.findings import series_findings
    from perfsuite.history.query import COUNTED

    accepted = store.acceptances()
    states = []
    for series in chosen:
        points = store.points(series.key, branch=branch, commit_order=commit_order)
        pairs = store.pairs(series)
        found, suspects = series_findings(
            series.key,
            points,
            pairs,
            store.gate_structures(series) if series.key.measure == "time_s" else (),
            merged_at,
            accepted,
            confirm=confirm,
            k=k,
            min_effect=min_effect,
        )
        verdict = check_newest(
            points[-(window + confirm) * 4 :],
            series.key.measure,
            window=window,
            confirm=confirm,
            k=k,
            min_effect=min_effect,
            pairs=pairs,
        )
        states.append((series, points, found, suspects, verdict))
    counts = [(s, found) for s, _, found, _, _ in states if s.key.measure in COUNTED]
    counts += _unchosen_counts(store, chosen, counts, branch, commit_order, accepted)
    counted = {
        (s.key.benchmark, s.key.testbed, f.last_good, f.first_bad)
        for s, found in counts
        for f in found
    }
    judged = []
    for series, points, found, suspects, verdict in states:
        if series.key.measure == "time_s":
            found = [
                f
                for f in found
                if f.kind != "structure"
                or (series.key.benchmark, series.key.testbed, f.last_good, f.first_bad)
                not in counted
            ]
        judged.append(_judgement(series, points, found, suspects, verdict))
    return judged


def _unchosen_counts(
    store: Any,
    chosen: Sequence[Any],
    counts: list[tuple[Any, list]],
    branch: str | None,
    commit_order: Sequence[str] | None,
    accepted: Mapping[str, Any],
) -> list[tuple[Any, list]]:
    """(series, findings) of the count series (``query.COUNTED``) of each chosen ``time_s`` series'
    benchmark that ``counts`` lacks: a time series shown alone (``history show``) leaves to its count the
    structure the count names, as ``detect`` does."""
    from perfsuite.history.findings import series_findings
    from perfsuite.history.query import COUNTED

    wanted = {(s.key.benchmark, s.key.testbed) for s in chosen if s.key.measure == "time_s"}
    wanted -= {(s.key.benchmark, s.key.testbed) for s, _ in counts}
    found = []
    for measure in sorted(COUNTED) if wanted else ():
        for series in store.list_series(measure=measure):
            if (series.key.benchmark, series.key.testbed) in wanted:
                points = store.points(series.key, branch=branch, commit_order=commit_order)
                found.append((series, series_findings(series.key, points, accepted=accepted)[0]))
    return found


def _judgement(
    series: Any, points: Sequence[Any], found: list, suspects: list, verdict: Any
) -> Judgement:
    """One series' ``Judgement`` from its findings, suspects and ``check_newest``'s verdict."""
    from perfsuite.trace.structure import diff_fingerprints

    bad = [f for f in found if f.open and f.worse]
    newest = bad[-1] if bad else None
    if (
        newest is not None
        and verdict.regression
        and verdict.first_bad is not None
        and (verdict.first_bad.sha == newest.first_bad)
    ):
        reason = verdict.reason  # the newest points confirm the same step: their words
    elif newest is not None:
        reason = (
            f"{len(bad)} open regression(s); newest {newest.last_good[:10]} -> {newest.first_bad[:10]}: "
            f"{newest.size} ({newest.evidence})"
        )
    elif verdict.regression and (closed := _closed_at(found, verdict)) is not None:
        # the newest points step where a finding was accepted (or recovered): its state, not "unconfirmed"
        reason = f"{closed.status}: {closed.reason}; {verdict.reason}"
    elif verdict.regression:
        # the newest points stepped, but nothing confirmed the step: a suspect, never a regression
        reason = f"unconfirmed: {verdict.reason}" + (
            f"; to confirm it: {suspects[-1].command}" if suspects else ""
        )
    else:
        reason = verdict.reason
    cause: tuple[str, ...] = ()
    if newest is not None:
        cause = newest.cause
        if not cause and newest.kind != "structure":
            where = {p.sha: p for p in points}
            good, first = where.get(newest.last_good), where.get(newest.first_bad)
            if good and first and good.structure and first.structure:
                cause = tuple(diff_fingerprints(good.structure, first.structure))
    return Judgement(
        series,
        points[-1].sha if points else None,
        newest is not None,
        verdict.judged or newest is not None,
        tuple(verdict.ratios) if newest is None else ((newest.ratio,) if newest.ratio else ()),
        verdict.limit,
        reason,
        newest.last_good if newest else None,
        newest.first_bad if newest else None,
        cause,
        newest.counts if newest else None,
        tuple(found),
        tuple(suspects),
    )


def _closed_at(found: list, verdict: Any) -> Any:
    """The closed regression (accepted or recovered) whose first bad commit is the step the newest
    points show (``verdict.first_bad``), or None."""
    if verdict.first_bad is None:
        return None
    return next(
        (f for f in found if f.worse and not f.open and f.first_bad == verdict.first_bad.sha), None
    )
