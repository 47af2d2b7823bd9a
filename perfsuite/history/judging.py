"""What ``perfsuite history detect`` concludes for each series, read from a store: one place that both
``history detect`` and ``perfsuite dashboard`` use, so the dashboard's open regressions are exactly the
ones ``detect`` confirms (``changepoints.check_newest`` on the newest points of each series, with the
series' interleaved gates)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

# what ``detect`` judges by default: the times and the score-copy counts (exact, so judged even when
# every time is contended)
DEFAULT_MEASURES = ("time_s", "score_copies")


@dataclasses.dataclass(frozen=True)
class Judgement:
    """``detect``'s answer for one series: ``regression`` (a confirmed regression at the newest commit),
    ``judged`` (False: nothing could judge it), ``reason`` in words, ``last_good``/``first_bad`` the
    step's commits (shas, a regression only), ``structure`` the structural diff between them."""

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
) -> list[Judgement]:
    """``check_newest`` on each series of ``chosen`` (``query.Series`` of ``store``, a ``history.Store``),
    reading only the newest ``window + confirm`` usable points of each (``commit_order``/``branch`` as
    ``query.points``). Defaults are ``history detect``'s."""
    from perfsuite.history.changepoints import check_newest
    from perfsuite.history.query import COUNTED
    from perfsuite.trace.structure import diff_fingerprints

    found = []
    for series in chosen:
        points = store.points(
            series.key, branch=branch, commit_order=commit_order, newest=window + confirm
        )
        verdict = check_newest(
            points,
            series.key.measure,
            window=window,
            confirm=confirm,
            k=k,
            min_effect=min_effect,
            pairs=store.pairs(series),
        )
        good, bad = (verdict.last_good, verdict.first_bad) if verdict.regression else (None, None)
        cause = (
            diff_fingerprints(good.structure, bad.structure)
            if good and bad and good.structure and bad.structure
            else []
        )
        found.append(
            Judgement(
                series,
                points[-1].sha if points else None,
                verdict.regression,
                verdict.judged,
                tuple(verdict.ratios),
                verdict.limit,
                verdict.reason,
                good.sha if good else None,
                bad.sha if bad else None,
                tuple(cause),
                (good.median if good else None, bad.median if bad else None)
                if series.key.measure in COUNTED and bad
                else None,
            )
        )
    return found
