"""One saved run as a single self-contained HTML page, findings first (``perfsuite report --html``): what
went wrong or is worth knowing, the fastest implementation per case, the post's findings as checks, then
per case and mode the implementations' medians with error bars (the dashboard's renderer), the matplotlib
plots, and the full table."""

from __future__ import annotations

import base64
import collections
from pathlib import Path

from perfsuite.dashboard.findings import case_dtype, checks_from, fastest_ratio, roofline_fraction
from perfsuite.dashboard.model import Dashboard, Fastest, Finding, Group, notch_interval_s, to_json
from perfsuite.dashboard.site import inline_page
from perfsuite.report.results import HEADER, BenchmarkResult, table_row
from perfsuite.report.saved import SavedRun, machine_line


def median_interval_s(result: BenchmarkResult) -> tuple[float, float] | None:
    """``model.notch_interval_s`` of a result's median; None without a median, an IQR or rounds."""
    if result.median_s is None or result.iqr_s is None or not result.rounds:
        return None
    return notch_interval_s(result.median_s, result.iqr_s, result.rounds)


def _timed(run: SavedRun) -> dict[tuple[str, str], list[BenchmarkResult]]:
    groups: dict[tuple[str, str], list[BenchmarkResult]] = collections.defaultdict(list)
    for r in run.results:
        if r.median_s is not None:
            groups[(r.case_id, r.mode)].append(r)
    return {k: sorted(v, key=lambda r: r.median_s) for k, v in sorted(groups.items())}


def _notes(run: SavedRun) -> list[Finding]:
    notes = []
    if run.incomplete:
        notes.append(Finding("bad", f"the run is partial: {run.incomplete}"))
    for r in run.results:
        if r.correct is False:
            notes.append(
                Finding(
                    "bad",
                    f"{r.variant} on {r.case_id} ({r.mode}): wrong result, max abs error "
                    f"{r.max_abs_error:.3g}"
                    if r.max_abs_error is not None
                    else f"{r.variant} on {r.case_id} ({r.mode}): wrong result",
                )
            )
    copying = sorted(
        {r.variant for r in run.results if r.mode == "forward" and r.score_copies_per_step}
    )
    if copying:
        notes.append(Finding("warn", "copy the score matrix in the forward: " + ", ".join(copying)))
    contended = [r for r in run.results if r.contended]
    if contended:
        notes.append(
            Finding(
                "warn",
                f"{len(contended)} timing(s) contended (another process took the CPU): "
                "treat their times with care",
            )
        )
    if run.skipped:
        notes.append(
            Finding("info", f"{len(run.skipped)} benchmark(s) skipped (listed under All results)")
        )
    if not notes:
        notes.append(Finding("info", f"{len(run.results)} benchmarks: all correct, none contended"))
    return notes


def _fastest(timed: dict, peaks: dict | None, device: str) -> list[Fastest]:
    """The fastest variant per (case, mode) and its runner-up, among the results not known to be
    wrong: a variant that failed the float64 check is never "fastest" (it is a note of its own)."""
    found = []
    for (case, mode), timed_here in timed.items():
        ranked = [r for r in timed_here if r.correct is not False]
        if not ranked:
            continue
        best = ranked[0]
        roof = roofline_fraction(
            best.achieved_tflops, best.flop, best.bytes_moved, case_dtype(best.case_id), peaks
        )
        ratio = None
        if len(ranked) > 1:  # without a spread in the run: the ratio alone
            i0, i1 = median_interval_s(best), median_interval_s(ranked[1])
            ratio = (
                fastest_ratio((best.median_s, *i0), (ranked[1].median_s, *i1))
                if i0 and i1
                else (ranked[1].median_s / best.median_s, None, None)
            )
        found.append(
            Fastest(
                case,
                mode,
                device,
                best.variant,
                best.median_s,
                ranked[1].variant if len(ranked) > 1 else "",
                *(ratio or (None, None, None)),
                roof[0] if roof else None,
                roof[1] if roof else "",
            )
        )
    return found


def _groups(timed: dict) -> list[Group]:
    groups = []
    for (case, mode), ranked in timed.items():
        intervals = [median_interval_s(r) for r in ranked]
        groups.append(
            Group(
                f"{case} \u00b7 {mode}",
                [r.variant for r in ranked],
                [r.median_s for r in ranked],
                [i[0] if i else None for i in intervals],
                [i[1] if i else None for i in intervals],
                [r.rounds for r in ranked],
            )
        )
    return groups


def run_dashboard(run: SavedRun) -> Dashboard:
    """The single run as the dashboard's model (no history: notes, fastest, checks, groups, the table)."""
    device = next((r.device for r in run.results), "cpu")
    torch = str(run.machine.get("torch_version", "?"))
    timed = _timed(run)
    checks = checks_from(
        (r.variant, r.case_id, device, torch, r.score_copies_per_step, None)
        for r in run.results
        if r.mode == "forward"
    )
    detail = {
        "header": list(HEADER),
        "rows": [table_row(r) for r in run.results],
        "skipped": [f"{s.variant} on {s.case_id}: {s.reason}" for s in run.skipped],
    }
    return Dashboard(
        "perfsuite: attention at a glance",
        [],
        [],
        fastest=_fastest(timed, run.peaks, device),
        checks=checks,
        notes=_notes(run),
        groups=_groups(timed),
        subtitle=f"{machine_line(run)} \u00b7 source: {run.source.name}",
        detail=detail,
    )


def html_report(run: SavedRun, plots: list[Path] = ()) -> str:
    """The page: one HTML file, every resource inlined (plots as data URIs), no network request."""
    page = inline_page(to_json(run_dashboard(run)))
    images = "".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        f"<figcaption>{p.stem}</figcaption></figure>"
        for p in plots
        if p.suffix == ".png"
    )
    if images:
        page = page.replace(
            "<footer>", f"<section id='plots'><h2>Plots</h2>{images}</section><footer>"
        )
    return page
