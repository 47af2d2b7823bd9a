"""Per-benchmark results and the end-of-run table (the post's "at a glance" table)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping

from perfsuite.attention.modes import Mode
from perfsuite.errors import ReportError
from perfsuite.storage import (
    EXTRA_INFO_SCHEMA_VERSION,
    RUN_SCHEMA_VERSION,
    check_schema_version,
    write_text_atomic,
)
from perfsuite.units import format_bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchmarkResult:
    """What one variant did on one case in one mode (``perfsuite.attention.modes``).

    ``median_s`` is None when timing was disabled (the default ``pytest`` run) or the
    benchmark did not run; ``work_per_step`` counts CPU ops on the CPU and device
    kernels on CUDA (``work_unit`` says which). Counts and bytes are per timed step (one
    forward, backward or both, as ``mode`` says); ``flop`` is the mode's FLOP
    (``cost_model.mode_flop``). ``max_abs_error``/``correct`` are None when the outputs could
    not be compared (NaN gradients of a NaN-row variant). ``compile_s``: wall time of the
    first call of a compiled variant in this mode (compilation included), else None.
    ``saved_for_backward_bytes``/``saved_score_matrices``: what one forward saved for backward
    (``perfsuite.measure.saved_tensors``), in forward_backward mode only, else None. ``iqr_s``: the
    interquartile range of the rounds (pytest-benchmark's ``iqr``), the spread behind the median.
    ``score_written``/``score_copies``/``score_casts``/``score_mask_expansions``: score matrices
    written per step, and of them copies, casts and mask expansions (``measure.score_accounting``;
    floats, chunks count their fraction), None for runs saved before they were recorded.
    ``copies_by_kind``: every copy of a step by kind, ``{"score" | "K/V" | "cast" | "other": {"count": copies,
    "bytes": bytes written}}`` (``perfsuite.measure.copy_kinds``), None for runs saved before it was recorded.
    ``output_layout``: the output's layout (``contiguous``, ``dense as [B, Sq, H, D]``), None when unknown.
    ``timer``: the setting behind ``median_s`` (``host``, ``cuda_event``, ``kernel``); ``clock``: what
    ``median_s`` measures (``cuda_graph``, ``blocked_event``, ``kernel``, ``host``; None in runs saved
    before it was recorded). With a device timer (``perfsuite.measure.device_timing``):
    ``device_median_s`` the row's device median; ``event_median_s`` the graph-replay or blocked-event
    median, ``kernel_median_s`` the merged kernel time, ``dispatch_median_s`` the host seconds to
    dispatch one eager call, each measured on its own; ``rel_spread`` the half-width of the median's
    95% interval / median; ``timing_notes`` what the row must say (not converged, throttled, a
    different kernel set, the GPU idle in the interval). ``wall_median_s``: synchronized host time per
    round, in runs saved before the blocked-event timer (None since).
    ``padding_flop``/``padding_bytes``: what a padded batch spends on its padding beyond ``flop``
    and ``bytes_moved`` (the sequences' own), ``kv_read_bytes``: key/value bytes its sequences hold
    (``perfsuite.attention.cost_model``); None for plain cases.
    ``contended``: other processes took the CPU while this benchmark was timed, so its timing is
    not trustworthy (``perfsuite.measure.contention``); None when not timed or not measured (older
    runs). ``contention_reasons``: why, in words; ``contention_brief``: the same in one short line
    (``ContentionEvidence.brief``; the first reason for runs saved before it).
    ``kept_bytes_per_call``: memory the variant kept across calls, per call (``measure.call_integrity``),
    None when it kept none. ``bitwise_reproducible``: for a variant declaring determinism, whether its
    reruns matched bitwise on this device; None when not declared.
    """

    variant: str
    case_id: str
    device: str
    flop: int
    bytes_moved: int
    median_s: float | None
    rounds: int | None
    work_per_step: int
    work_unit: str
    score_copies_per_step: int
    allocated_bytes: int
    peak_bytes: int
    max_abs_error: float | None
    correct: bool | None
    mode: str = Mode.FORWARD
    compile_s: float | None = None
    saved_for_backward_bytes: int | None = None
    saved_score_matrices: int | None = None
    iqr_s: float | None = None
    score_written: float | None = None
    score_copies: float | None = None
    score_casts: float | None = None
    score_mask_expansions: float | None = None
    copies_by_kind: Mapping[str, Mapping[str, int]] | None = None
    output_layout: str | None = None
    timer: str = "host"
    wall_median_s: float | None = None
    device_median_s: float | None = None
    clock: str | None = None
    event_median_s: float | None = None
    kernel_median_s: float | None = None
    dispatch_median_s: float | None = None
    rel_spread: float | None = None
    timing_notes: tuple[str, ...] = ()
    contended: bool | None = None
    contention_reasons: tuple[str, ...] = ()
    contention_brief: str = ""
    kept_bytes_per_call: int | None = None
    bitwise_reproducible: bool | None = None
    padding_flop: int | None = None
    padding_bytes: int | None = None
    kv_read_bytes: int | None = None

    @property
    def kv_read_gbps(self) -> float | None:
        """Key/value bytes the sequences hold (``cost_model.kv_read_bytes``) / median seconds / 1e9:
        a decode step's KV-cache read rate; None without a timing or for plain cases."""
        if not self.median_s or self.kv_read_bytes is None:
            return None
        return self.kv_read_bytes / self.median_s / 1e9

    @property
    def host_overhead_s(self) -> float | None:
        """Wall minus device median: launch and host overhead per step (device clocks only)."""
        if self.wall_median_s is None or self.device_median_s is None:
            return None
        return self.wall_median_s - self.device_median_s

    @property
    def achieved_tflops(self) -> float | None:
        """FLOP / median seconds / 1e12 (device seconds with a device timer); None without a timing."""
        return self.flop / self.median_s / 1e12 if self.median_s else None

    @property
    def achieved_gbps(self) -> float | None:
        """Minimum bytes moved (``cost_model.forward_bytes``) / median seconds / 1e9."""
        return self.bytes_moved / self.median_s / 1e9 if self.median_s else None


@dataclasses.dataclass(frozen=True)
class SkippedResult:
    """A variant that could not run a case in a mode, with torch's or the suite's reason."""

    variant: str
    case_id: str
    reason: str
    mode: str = Mode.FORWARD


@dataclasses.dataclass(frozen=True)
class CrashedResult:
    """A (variant, case, mode) whose first call crashed an isolated child process; never run in pytest's."""

    variant: str
    case_id: str
    mode: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of the results table: its header, the unit of its cells and how a cell is written."""

    header: str
    unit: str
    render: Callable[[BenchmarkResult], str]


def _median(r: BenchmarkResult) -> str:
    return f"{r.median_s * 1e3:.3f}" if r.median_s else "not timed"


def _spread(r: BenchmarkResult) -> str:
    return f"{100 * r.iqr_s / r.median_s:.0f}%" if r.median_s and r.iqr_s is not None else "-"


def _trust(r: BenchmarkResult) -> str:
    if r.contended is None:
        return "-"
    return "CONTENDED" if r.contended else "ok"


def _error(r: BenchmarkResult) -> str:
    if r.max_abs_error is None:
        return "not compared"
    return f"{r.max_abs_error:.1e}" + ("" if r.correct else " FAIL")


def _saved(r: BenchmarkResult) -> str:
    if r.saved_for_backward_bytes is None:
        return "-"
    scores = r.saved_score_matrices
    return (
        f"{format_bytes(r.saved_for_backward_bytes)} ({scores} score{'s' if scores != 1 else ''})"
    )


def _count(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.2f}"


def _scores(r: BenchmarkResult) -> str:
    """``5 (1 copy)``; casts and mask expansions added when any: ``6 (0 copies, 1.5 casts)``."""
    if r.score_written is None:
        return f"? ({r.score_copies_per_step} cop{'y' if r.score_copies_per_step == 1 else 'ies'})"
    parts = [f"{_count(r.score_copies or 0)} cop{'y' if r.score_copies == 1 else 'ies'}"]
    if r.score_casts:
        parts.append(f"{_count(r.score_casts)} cast{'' if r.score_casts == 1 else 's'}")
    if r.score_mask_expansions:
        parts.append(
            f"{_count(r.score_mask_expansions)} mask expansion{'' if r.score_mask_expansions == 1 else 's'}"
        )
    return f"{_count(r.score_written)} ({', '.join(parts)})"


# the kinds of ``measure.copy_kinds.COPY_KINDS`` always shown; "other" only when there is one
_COPY_KINDS_SHOWN = ("score", "K/V", "cast")


def _copies(r: BenchmarkResult) -> str:
    """``score 1 (2.0 MiB) · K/V 2 (32.5 MiB) · cast 0``: every copy per step by kind, with the bytes
    the copies of a kind wrote; ``other`` added when any; ``?`` for runs saved before it was recorded."""
    if r.copies_by_kind is None:
        return "?"
    cells = []
    for kind, found in r.copies_by_kind.items():
        count = found.get("count", 0)
        if kind not in _COPY_KINDS_SHOWN and not count:
            continue
        cells.append(
            f"{kind} {count}" + (f" ({format_bytes(found.get('bytes', 0))})" if count else "")
        )
    return " · ".join(cells)


def _allocated(r: BenchmarkResult) -> str:
    """Bytes allocated per step, and memory kept across calls when any (``+8.0 MiB KEPT/call``)."""
    kept = f" +{format_bytes(r.kept_bytes_per_call)} KEPT/call" if r.kept_bytes_per_call else ""
    return format_bytes(r.allocated_bytes) + kept


def _reproducible(r: BenchmarkResult) -> str:
    if r.bitwise_reproducible is None:
        return "-"
    return "yes" if r.bitwise_reproducible else "NO"


# The table, declared once: the terminal table, table.md and the HTML report derive from it.
COLUMNS = (
    Column("variant", "", lambda r: r.variant),
    Column("mode", "", lambda r: r.mode),
    Column("case", "", lambda r: r.case_id),
    Column("median ms", "ms", _median),
    Column("IQR / median", "%", _spread),
    Column("timing", "", _trust),
    Column("compile s", "s", lambda r: f"{r.compile_s:.1f}" if r.compile_s is not None else "-"),
    Column(
        "TFLOP/s", "TFLOP/s", lambda r: f"{r.achieved_tflops:.3g}" if r.achieved_tflops else "-"
    ),
    Column("ops or kernels / step", "count", lambda r: f"{r.work_per_step} {r.work_unit}"),
    Column("score writes / step (of which)", "score matrices", _scores),
    Column("copies / step by kind (bytes)", "copies, bytes", _copies),
    Column("allocated / step", "bytes", _allocated),
    Column("peak memory", "bytes", lambda r: format_bytes(r.peak_bytes)),
    Column("saved for bwd", "bytes", _saved),
    Column("max abs error", "", _error),
    Column("bitwise reproducible", "", _reproducible),
    Column("output", "", lambda r: r.output_layout or "-"),
)
HEADER = [c.header for c in COLUMNS]


def table_row(result: BenchmarkResult) -> list[str]:
    """The cells of one result, in ``COLUMNS`` order."""
    return [column.render(result) for column in COLUMNS]


def result_from_benchmark(
    info: Mapping[str, Any], stats: Mapping[str, Any] | None
) -> BenchmarkResult:
    """A ``BenchmarkResult`` from a benchmark's ``extra_info`` and pytest-benchmark stats.

    The one reader of the stored facts: the plugin builds each row through it from the
    ``extra_info`` it saves, and ``perfsuite report`` reads saved pytest-benchmark files with it.
    ``stats``: ``median``/``rounds``/``iqr`` in seconds, or None when timing was disabled.
    Raises ``ReportError`` for an ``extra_info`` of a newer ``schema_version`` than
    ``EXTRA_INFO_SCHEMA_VERSION`` (the version named), and ``KeyError`` for a missing field.
    """
    check_schema_version(
        info.get("schema_version"),
        EXTRA_INFO_SCHEMA_VERSION,
        f"benchmark {info.get('variant', '?')}/{info.get('case', '?')}",
        ReportError,
    )
    device = info["case_fields"]["device"]
    compile_info, saved = info.get("compile") or {}, info.get("saved_for_backward") or {}
    contention = info.get("contention") or {}
    scores = info.get("score_accounting") or {}
    stats = stats or {}
    return BenchmarkResult(
        variant=info["variant"],
        case_id=info["case"],
        device=device,
        mode=info["mode"],
        flop=info["flop"],
        bytes_moved=info["bytes_read"] + info["bytes_written"],
        median_s=stats.get("median"),
        rounds=stats.get("rounds"),
        iqr_s=stats.get("iqr"),
        work_per_step=info["kernels_per_step"] if device == "cuda" else info["cpu_ops_per_step"],
        work_unit="kernels" if device == "cuda" else "ops",
        score_copies_per_step=info["score_copies_per_step"],
        allocated_bytes=info["allocated_bytes_per_step"],
        peak_bytes=info["peak_memory_bytes"],
        max_abs_error=info["max_abs_error"],
        correct=info["correct"],
        compile_s=compile_info.get("first_call_s"),
        saved_for_backward_bytes=saved.get("bytes"),
        saved_score_matrices=saved.get("score_sized"),
        score_written=scores.get("written"),
        score_copies=scores.get("copies"),
        score_casts=scores.get("casts"),
        score_mask_expansions=scores.get("mask_expansions"),
        copies_by_kind=info.get("copies_by_kind"),
        output_layout=info.get("output_layout"),
        timer=info.get("timer", "host"),
        wall_median_s=info.get("wall_median_s"),
        device_median_s=info.get("device_median_s"),
        clock=info.get("clock"),
        event_median_s=info.get("event_median_s"),
        kernel_median_s=info.get("kernel_median_s"),
        dispatch_median_s=info.get("dispatch_median_s"),
        rel_spread=(info.get("sampling") or {}).get("rel_spread"),
        timing_notes=tuple(info.get("timing_notes") or ()),
        contended=contention.get("contended"),
        contention_reasons=tuple(contention.get("reasons", ())),
        contention_brief=contention.get("brief") or next(iter(contention.get("reasons") or ()), ""),
        kept_bytes_per_call=info.get("kept_bytes_per_call"),
        bitwise_reproducible=info.get("bitwise_reproducible"),
        padding_flop=(info.get("layout") or {}).get("padding_flop"),
        padding_bytes=(info.get("layout") or {}).get("padding_bytes"),
        kv_read_bytes=(info.get("layout") or {}).get("kv_read_bytes"),
    )


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else "-"


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


# Shown when some row was timed on a device clock: what the median measures, its interval's
# relative half-width, the graph (or blocked-event) time, the kernel time and the host dispatch per
# call, each measured apart, in ms; what the row must say; ``-`` when not measured.
DEVICE_COLUMNS = (
    Column("clock", "", lambda r: r.clock or r.timer),
    Column("± median", "%", lambda r: _pct(r.rel_spread)),
    Column("graph/event ms", "ms", lambda r: _ms(r.event_median_s)),
    Column("kernel ms", "ms", lambda r: _ms(r.kernel_median_s)),
    Column("dispatch ms", "ms", lambda r: _ms(r.dispatch_median_s)),
    Column("timing notes", "", lambda r: "; ".join(r.timing_notes) or "-"),
)
DEVICE_HEADER = [c.header for c in DEVICE_COLUMNS]


def _flop(value: int) -> str:
    """``1.5 GFLOP``, ``153 kFLOP``: FLOP with an SI prefix."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}FLOP"
    return f"{value} FLOP"


def _padding(r: BenchmarkResult) -> str:
    """``1.2 GFLOP (38%), 2.0 MiB (25%)``: padding's FLOP and bytes and their share of what the padded batch computes and moves."""
    if not r.padding_flop:
        return "-"
    flop_share = r.padding_flop / (r.padding_flop + r.flop)
    byte_share = (r.padding_bytes or 0) / ((r.padding_bytes or 0) + r.bytes_moved)
    return (
        f"{_flop(r.padding_flop)} ({flop_share:.0%}), "
        f"{format_bytes(r.padding_bytes or 0)} ({byte_share:.0%})"
    )


# Shown when some row is a layout case (perfsuite.attention.layouts): what padding costs beside the
# useful work (FLOP and bytes), and the KV-cache read rate (decode throughput against bandwidth).
LAYOUT_COLUMNS = (
    Column("padding FLOP, bytes (share)", "FLOP, bytes", _padding),
    Column(
        "KV read GB/s",
        "GB/s",
        lambda r: f"{r.kv_read_gbps:.2f}" if r.kv_read_gbps is not None else "-",
    ),
)
LAYOUT_HEADER = [c.header for c in LAYOUT_COLUMNS]


def device_columns(result: BenchmarkResult) -> list[str]:
    """The ``DEVICE_COLUMNS`` cells of one result."""
    return [column.render(result) for column in DEVICE_COLUMNS]


def _rows(results: list[BenchmarkResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows; the device-time columns only when some row was timed on a device clock, the
    layout columns (``LAYOUT_COLUMNS``) only when some row is a layout case."""
    header, cells = HEADER, [table_row(r) for r in results]
    if any(r.device_median_s is not None for r in results):
        header = header + DEVICE_HEADER
        cells = [row + device_columns(r) for row, r in zip(cells, results)]
    if any(r.kv_read_bytes is not None for r in results):
        header = header + LAYOUT_HEADER
        cells = [row + [c.render(r) for c in LAYOUT_COLUMNS] for row, r in zip(cells, results)]
    return header, cells


def markdown_table(
    results: list[BenchmarkResult],
    skipped: list[SkippedResult],
    crashed: list[CrashedResult] = (),
    incomplete: str | None = None,
) -> str:
    """The run's table in GitHub Markdown, skipped variants listed under it with reasons, crashed
    ones after them; ``incomplete`` (why the run is partial) heads it as ``**Partial run**: ...``."""
    header, body = _rows(results)
    rows = [header, ["---"] * len(header)] + body
    head = (
        [f"**Partial run**: {incomplete}. These rows are not the whole run.", ""]
        if incomplete
        else []
    )
    lines = head + ["| " + " | ".join(row) + " |" for row in rows]
    lines += contention_lines(
        results, prefix="- ", intro=["", "Timings not trustworthy (contended):"]
    )
    if skipped:
        lines += ["", "Skipped (cannot run here):"]
        lines += [f"- `{s.variant}` on `{s.case_id}` ({s.mode}): {s.reason}" for s in skipped]
    if crashed:
        lines += ["", "Crashed (the first call killed an isolated child process; not run here):"]
        lines += [
            f"- `{c.variant}` on `{c.case_id}` ({c.mode}): {c.detail.splitlines()[0]}"
            for c in crashed
        ]
    return "\n".join(lines) + "\n"


def contended_results(results: list[BenchmarkResult]) -> list[BenchmarkResult]:
    """The rows whose timings other processes disturbed (``contended`` is True)."""
    return [r for r in results if r.contended]


def contention_lines(
    results: list[BenchmarkResult], prefix: str = "", intro: list[str] = (), brief: bool = False
) -> list[str]:
    """One line per contended row naming it and why (``brief``: the short reason, for a terminal;
    else every reason in full, for the report); [] when none is."""
    flagged = contended_results(results)
    if not flagged:
        return []
    why = lambda r: (
        (r.contention_brief or "; ".join(r.contention_reasons))
        if brief
        else "; ".join(r.contention_reasons)
    )
    return list(intro) + [f"{prefix}{r.variant} {r.mode} {r.case_id}: {why(r)}" for r in flagged]


def text_table(results: list[BenchmarkResult]) -> str:
    """The same table aligned in columns for the terminal."""
    header, body = _rows(results)
    rows = [header] + body
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    fmt = lambda row: "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
    return "\n".join([fmt(rows[0]), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows[1:]])


def write_run(
    directory: Path,
    results: list[BenchmarkResult],
    skipped: list[SkippedResult],
    machine: dict[str, Any],
    crashed: list[CrashedResult] = (),
    incomplete: dict[str, Any] | None = None,
    running: str | None = None,
) -> tuple[Path, Path]:
    """Write ``table.md`` and ``run.json`` (schema ``RUN_SCHEMA_VERSION``) into ``directory`` atomically.

    ``incomplete``: why the run is partial (``{"reason", "finished", "expected"}``), or None for a
    whole run; ``run.json`` then has ``"complete": false`` and the table a ``**Partial run**`` line.
    ``running``: the test running when written mid-run (results are written as they come), so a
    process that dies leaves it named.
    """
    describe = None
    if incomplete:
        describe = f"{incomplete['reason']}: {incomplete['finished']} of {incomplete['expected']} benchmarks finished"
    table = write_text_atomic(
        directory / "table.md", markdown_table(results, skipped, list(crashed), describe)
    )
    payload = {
        "schema_version": RUN_SCHEMA_VERSION,
        "complete": incomplete is None,
        "incomplete": incomplete,
        "running": running,
        "machine": machine,
        "results": [
            dataclasses.asdict(r)
            | {"achieved_tflops": r.achieved_tflops, "achieved_gbps": r.achieved_gbps}
            for r in results
        ],
        "skipped": [dataclasses.asdict(s) for s in skipped],
        "crashed": [dataclasses.asdict(c) for c in crashed],
    }
    run = write_text_atomic(
        directory / "run.json", json.dumps(payload, indent=2, sort_keys=True) + "\n"
    )
    return table, run
