"""Text and JSON renderings of series: a sparkline, a table of points with epochs and change points
marked, and the JSON ``perfsuite history show --json`` prints."""

from __future__ import annotations

import dataclasses
import math
import datetime
from typing import Any
from collections.abc import Sequence

from perfsuite.history.changepoints import ChangePoint, usable
from perfsuite.history.query import COUNTED, MEASURES, Epoch, Point, Series

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], marks: Sequence[int] = ()) -> str:
    """One character per value, scaled between the smallest and largest; ``·`` for None; a ``|``
    before each index in ``marks`` (change points)."""
    known = [v for v in values if v is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    span = high - low
    out = []
    for index, value in enumerate(values):
        if index in marks:
            out.append("|")
        if value is None:
            out.append("·")
        else:
            out.append(
                BARS[min(len(BARS) - 1, int((value - low) / span * len(BARS))) if span else 0]
            )
    return "".join(out)


def format_value(value: float | None, measure: str) -> str:
    """Seconds as ms or us; other measures with three significant figures."""
    if value is None:
        return "-"
    if MEASURES[measure][1] == "s":
        return f"{value * 1e3:.4g} ms" if value >= 1e-3 else f"{value * 1e6:.4g} us"
    unit = MEASURES[measure][1]
    if unit == "copies" and value == 1:
        unit = "copy"
    return f"{value:.4g} {unit}"


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def series_heading(series: Series) -> str:
    """``<id>  naive/b2h4s64d32-fp32-causal-cpu/forward  time_s  on AMD EPYC (2 threads) [d64438c0]``."""
    spec = series.testbed_spec
    cuda = (spec.get("device_names") or {}).get("cuda")
    machine = (
        f"{cuda} x{spec.get('device_count')}"
        if cuda
        else f"{spec.get('cpu_model') or 'cpu'} ({spec.get('num_threads')} threads)"
    )
    return f"{series.key.id}  {series.key.benchmark}  {series.key.measure}  on {machine} [{series.key.testbed[:8]}]"


def show_lines(
    series: Series,
    points: Sequence[Point],
    found_epochs: Sequence[Epoch],
    change_points: Sequence[ChangePoint],
) -> list[str]:
    """The ``perfsuite history show`` text: heading, sparkline, one line per point (``>>`` at a change
    point, why a point is not used (``(contended: ...)``, ``(partial run: ...)``, ``(failed correctness: ...)``,
    ``(uncommitted changes: ...)``), epochs, then each change point with its cause."""
    measure = series.key.measure
    marks = {c.index for c in change_points}
    lines = [
        series_heading(series),
        f"  {sparkline([p.median for p in points], sorted(marks))}   "
        f"({len(points)} point(s), oldest first; | marks a change point)",
        "",
    ]
    starts = {e.start: e for e in found_epochs}
    for index, point in enumerate(points):
        if index in starts and index > 0:
            changed = ", ".join(
                f"{k} {a} -> {b}" for k, a, b in ((k, *v) for k, v in starts[index].changed.items())
            )
            lines.append(f"  -- epoch: {changed or 'software changed'} --")
        flag = ">>" if index in marks else "  "
        note = (
            ""
            if usable(point)
            else (
                f" ({point.state or 'contended'}: shown, not used)"
                if point.contended
                else " (uncommitted changes: shown, not used)"
                if point.dirty
                else " (no values)"
            )
        )
        subject = (point.subject or "")[:40]
        lines.append(
            f"{flag} {point.short_sha:<16} {_when(point.commit_time)}  {format_value(point.median, measure):>12}"
            f"  n={len(point.values or point.all_values):<4} runs={len(point.run_uids)}  {subject}{note}"
        )
    if change_points:
        lines.append("")
        lines.append("change points (last good -> first bad):")
        for change in change_points:
            exact = math.isnan(change.p_value) or change.measure in COUNTED  # a count has no p
            evidence = "" if exact else f"  (p={change.p_value:.2g})"
            lines.append(f"  {change.describe()}{evidence}")
    else:
        lines.append("")
        lines.append("no change points")
    return lines


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def show_json(
    series: Series,
    points: Sequence[Point],
    found_epochs: Sequence[Epoch],
    change_points: Sequence[ChangePoint],
) -> dict[str, Any]:
    """The ``show --json`` document: the series, its points (raw values included), epochs, change points."""
    changes = [
        {
            "index": c.index,
            "last_good": c.last_good.sha,
            "first_bad": c.first_bad.sha,
            "ratio": c.ratio,
            "interval": list(c.interval),
            "worse": c.worse,
            "p_value": None if math.isnan(c.p_value) else c.p_value,
            "evidence": c.evidence,
            "structure": list(c.structure),
            "structure_adds_work": c.structure_adds_work,
        }
        for c in change_points
    ]
    return {
        "series": {
            "id": series.key.id,
            **_jsonable(series.key),
            "variant": series.variant,
            "case_id": series.case_id,
            "mode": series.mode,
            "testbed_spec": series.testbed_spec,
        },
        "points": [_jsonable(p) for p in points],
        "epochs": [_jsonable(e) for e in found_epochs],
        "change_points": changes,
    }
