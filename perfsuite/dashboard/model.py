"""The dashboard's data model: what the site shows, independent of where it came from (the history
store, a single saved run, a synthetic store in the scale check).

Times are seconds in the model and microseconds (4 significant digits) in the embedded JSON, which is
columnar (one array per field per series, commits shared in one table) so that 200 series of 1,000 points
stay a few megabytes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Commit:
    """One commit of the first-parent history; ``date``: ISO 8601 commit time."""

    sha: str
    date: str = ""
    subject: str = ""


@dataclasses.dataclass(frozen=True)
class Point:
    """One commit's pooled runs of a series: median and quartiles (seconds) of the raw rounds,
    ``rounds`` the number of rounds, ``contended`` when the point is set aside (shown apart, not used,
    never the fastest): another process took the CPU in its window, or ``state`` says why
    (``partial run``, ``failed correctness``, ``single A/B pair``, ...); ``structure``: the
    structural fingerprint's id, ``copies``: score-sized copies."""

    commit: str
    median_s: float
    q1_s: float
    q3_s: float
    rounds: int
    contended: bool = False
    structure: str = ""
    copies: int | None = None
    state: str = ""


# a change point's state (``history.findings``): a finding open, recovered, accepted or the recovery of
# another; or a step between separate runs that nothing confirmed (drawn, never listed under Findings)
OPEN, RECOVERED, ACCEPTED, UNCONFIRMED = "open", "recovered", "accepted", "unconfirmed"


@dataclasses.dataclass(frozen=True)
class ChangePoint:
    """A step in a series between ``last_good`` and ``first_bad`` (commit shas); ``ratio`` new/old median
    with its interval ``ratio_low``..``ratio_high``; ``cause``: the structural diff at that commit, if any;
    ``open``: the series is still at that level (an open regression is one ``perfsuite history detect``
    confirms at the newest commit); ``size``: the step in words when a ratio does not say it (a count:
    ``0 -> 1 score copies``); ``worse``: whether it is a regression, when the ratio does not say (None:
    a ratio above 1 is one); ``status``: ``open``, ``recovered``, ``accepted`` or ``unconfirmed``;
    ``note``: the state in words (who closed it and why; for an unconfirmed step why and the
    ``perfsuite ab`` command that would confirm it); ``finding``: the finding's id (``history accept``)."""

    last_good: str
    first_bad: str
    ratio: float
    ratio_low: float
    ratio_high: float
    cause: str = ""
    open: bool = True
    size: str = ""
    worse: bool | None = None
    status: str = OPEN
    note: str = ""
    finding: str = ""

    @property
    def regression(self) -> bool:
        return self.ratio > 1.0 if self.worse is None else self.worse


@dataclasses.dataclass(frozen=True)
class Epoch:
    """From ``commit`` on, the series runs on other software (``label``: ``torch 2.12.0 -> 2.13.0``)."""

    commit: str
    label: str


@dataclasses.dataclass(frozen=True)
class Series:
    """(benchmark, measure, testbed): ``measure`` is ``wall`` or ``device``; points in commit order."""

    id: str
    variant: str
    case: str
    mode: str
    dtype: str
    measure: str
    testbed: str
    points: list[Point]
    change_points: list[ChangePoint] = dataclasses.field(default_factory=list)
    epochs: list[Epoch] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Fastest:
    """Per case, mode and testbed: the fastest implementation at the newest commit, its median and the ratio
    (with interval) of the runner-up to it; ``roofline``: fraction of the measured roof it reaches."""

    case: str
    mode: str
    testbed: str
    variant: str
    median_s: float
    runner_up: str = ""
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    roofline: float | None = None
    roof: str = ""


@dataclasses.dataclass(frozen=True)
class Check:
    """One of the post's findings, checked live: ``ok`` when what was observed is what the post says."""

    finding: str
    variant: str
    testbed: str
    torch: str
    expected: str
    observed: str
    ok: bool


@dataclasses.dataclass(frozen=True)
class Testbed:
    """A testbed's fingerprint and the words people know it by (``NVIDIA H100 80GB, driver 570``)."""

    id: str
    label: str


@dataclasses.dataclass(frozen=True)
class Finding:
    """A line of the findings that is not a change point (``level``: ``bad``, ``warn`` or ``info``)."""

    level: str
    text: str


@dataclasses.dataclass(frozen=True)
class Group:
    """One chart of a single run: the implementations of a case and mode side by side, medians (seconds)
    with the 95% interval of each median (``low_s``/``high_s``, None when the run kept no spread)."""

    title: str
    labels: list[str]
    median_s: list[float]
    low_s: list[float | None]
    high_s: list[float | None]
    rounds: list[int | None]


@dataclasses.dataclass
class Dashboard:
    """Everything the site shows; ``repo_url`` (``https://github.com/ORG/REPO``) links the commits."""

    title: str
    commits: list[Commit]
    series: list[Series]
    testbeds: list[Testbed] = dataclasses.field(default_factory=list)
    fastest: list[Fastest] = dataclasses.field(default_factory=list)
    checks: list[Check] = dataclasses.field(default_factory=list)
    repo_url: str = ""
    notes: list[Finding] = dataclasses.field(default_factory=list)
    groups: list[Group] = dataclasses.field(default_factory=list)
    subtitle: str = ""
    detail: dict[str, Any] | None = (
        None  # a single run's table: {"header": [...], "rows": [[...]], "skipped": [...]}
    )


def quartiles_s(rounds_s: list[float] | np.ndarray) -> tuple[float, float, float]:
    """(q1, median, q3) in seconds of the raw rounds (numpy's linear interpolation); ``ValueError`` when empty."""
    values = np.asarray(rounds_s, dtype=float)
    if values.size == 0:
        raise ValueError("a point needs at least one round")
    q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
    return float(q1), float(median), float(q3)


def point_from_rounds(
    commit: str,
    rounds_s: list[float],
    contended: bool = False,
    structure: str = "",
    copies: int | None = None,
) -> Point:
    """A point from one commit's pooled raw rounds (seconds)."""
    q1, median, q3 = quartiles_s(rounds_s)
    return Point(commit, median, q1, q3, len(rounds_s), contended, structure, copies)


def notch_interval_s(median_s: float, iqr_s: float, rounds: int) -> tuple[float, float]:
    """An approximate 95% interval of a median: median +- 1.58 IQR / sqrt(rounds) (McGill, Tukey and
    Larsen 1978, the notch of a notched box plot). The site computes the same in JavaScript."""
    half = 1.58 * iqr_s / math.sqrt(max(rounds, 1))
    return median_s - half, median_s + half


def median_interval_s(point: Point) -> tuple[float, float]:
    """``notch_interval_s`` of a point's median."""
    return notch_interval_s(point.median_s, point.q3_s - point.q1_s, point.rounds)


def _us(seconds: float) -> float:
    """Seconds -> microseconds with 4 significant digits (the JSON's precision)."""
    if seconds == 0 or not math.isfinite(seconds):
        return 0.0
    us = seconds * 1e6
    return float(f"{us:.4g}")


def to_json(dashboard: Dashboard) -> dict[str, Any]:
    """The embedded JSON (schema 1): commits as one table, series columnar, times in microseconds.
    ``ValueError`` when a point names a commit that is not in ``dashboard.commits``."""
    index = {c.sha: i for i, c in enumerate(dashboard.commits)}

    def at(sha: str) -> int:
        if sha not in index:
            raise ValueError(f"commit {sha!r} is not in the dashboard's commit list")
        return index[sha]

    series = []
    for s in dashboard.series:
        structures = sorted({p.structure for p in s.points})
        series.append(
            {
                "id": s.id,
                "variant": s.variant,
                "case": s.case,
                "mode": s.mode,
                "dtype": s.dtype,
                "measure": s.measure,
                "testbed": s.testbed,
                "c": [at(p.commit) for p in s.points],
                "m": [_us(p.median_s) for p in s.points],
                "q1": [_us(p.q1_s) for p in s.points],
                "q3": [_us(p.q3_s) for p in s.points],
                "n": [p.rounds for p in s.points],
                "k": [i for i, p in enumerate(s.points) if p.contended],
                # why each point of ``k`` is set aside
                "kw": [p.state or "contended" for p in s.points if p.contended],
                "st": structures if len(structures) > 1 else [],
                "s": [structures.index(p.structure) for p in s.points]
                if len(structures) > 1
                else [],
                "cp": [p.copies for p in s.points] if any(p.copies for p in s.points) else [],
                "changes": [
                    {
                        "good": at(c.last_good),
                        "bad": at(c.first_bad),
                        "ratio": round(c.ratio, 4),
                        "lo": round(c.ratio_low, 4),
                        "hi": round(c.ratio_high, 4),
                        "cause": c.cause,
                        "open": c.open,
                        "size": c.size,
                        "worse": c.regression,
                        "status": c.status,
                        "note": c.note,
                        "finding": c.finding,
                    }
                    for c in s.change_points
                ],
                "epochs": [{"c": at(e.commit), "label": e.label} for e in s.epochs],
            }
        )
    return {
        "schema": 1,
        "title": dashboard.title,
        "subtitle": dashboard.subtitle,
        "detail": dashboard.detail,
        "repo_url": dashboard.repo_url.rstrip("/"),
        "commits": [[c.sha, c.date, c.subject] for c in dashboard.commits],
        "testbeds": {t.id: t.label for t in dashboard.testbeds},
        "series": series,
        "fastest": [
            {k: v for k, v in dataclasses.asdict(f).items() if k != "median_s"}
            | {"median_us": _us(f.median_s)}
            for f in dashboard.fastest
        ],
        "checks": [dataclasses.asdict(c) for c in dashboard.checks],
        "notes": [dataclasses.asdict(n) for n in dashboard.notes],
        "groups": [
            {
                "title": g.title,
                "labels": g.labels,
                "m": [_us(v) for v in g.median_s],
                "lo": [None if v is None else _us(v) for v in g.low_s],
                "hi": [None if v is None else _us(v) for v in g.high_s],
                "n": g.rounds,
            }
            for g in dashboard.groups
        ],
    }
