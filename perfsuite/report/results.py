"""Per-benchmark results and the end-of-run table (the post's "at a glance" table)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from perfsuite.storage import write_text_atomic
from perfsuite.units import format_bytes

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class BenchmarkResult:
    """What one variant did on one case in one mode (``perfsuite.attention.modes``).

    ``median_s`` is None when timing was disabled (the default ``pytest`` run) or the
    benchmark did not run; ``work_per_forward`` counts CPU ops on the CPU and device
    kernels on CUDA (``work_unit`` says which). Counts and bytes are per timed step (one
    forward, backward or both, as ``mode`` says); ``flop`` is the mode's FLOP
    (``cost_model.mode_flop``). ``max_abs_error``/``correct`` are None when the outputs could
    not be compared (NaN gradients of a NaN-row variant). ``compile_s``: wall time of the
    first call of a compiled variant in this mode (compilation included), else None.
    ``saved_for_backward_bytes``/``saved_score_matrices``: what one forward saved for backward
    (``perfsuite.measure.saved_tensors``), in forward_backward mode only, else None. ``iqr_s``: the
    interquartile range of the rounds (pytest-benchmark's ``iqr``), the spread behind the median.
    ``timer``: the clock of ``median_s`` (``host``, ``cuda_event``, ``kernel``); with a device clock
    ``wall_median_s``/``device_median_s`` are the medians of each round's synchronized host time and
    device time (``perfsuite.measure.device_timing``), else None.
    """

    variant: str
    case_id: str
    device: str
    flop: int
    bytes_moved: int
    median_s: float | None
    rounds: int | None
    work_per_forward: int
    work_unit: str
    score_copies_per_forward: int
    allocated_bytes: int
    peak_bytes: int
    max_abs_error: float | None
    correct: bool | None
    mode: str = "forward"
    compile_s: float | None = None
    saved_for_backward_bytes: int | None = None
    saved_score_matrices: int | None = None
    iqr_s: float | None = None
    timer: str = "host"
    wall_median_s: float | None = None
    device_median_s: float | None = None

    @property
    def host_overhead_s(self) -> float | None:
        """Wall minus device median: launch and host overhead per step (device clocks only)."""
        if self.wall_median_s is None or self.device_median_s is None:
            return None
        return self.wall_median_s - self.device_median_s

    @property
    def achieved_tflops(self) -> float | None:
        """FLOP / median seconds / 1e12; None without a timing."""
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
    mode: str = "forward"


def table_row(result: BenchmarkResult) -> list[str]:
    median = f"{result.median_s * 1e3:.3f}" if result.median_s else "not timed"
    spread = f"{100 * result.iqr_s / result.median_s:.0f}%" if result.median_s and result.iqr_s is not None else "-"
    tflops = f"{result.achieved_tflops:.3g}" if result.achieved_tflops else "-"
    if result.max_abs_error is None:
        error = "not compared"
    else:
        error = f"{result.max_abs_error:.1e}" + ("" if result.correct else " FAIL")
    return [
        result.variant,
        result.mode,
        result.case_id,
        median,
        spread,
        f"{result.compile_s:.1f}" if result.compile_s is not None else "-",
        tflops,
        f"{result.work_per_forward} {result.work_unit}",
        str(result.score_copies_per_forward),
        format_bytes(result.allocated_bytes),
        format_bytes(result.peak_bytes),
        _saved(result),
        error,
    ]


def _saved(result: BenchmarkResult) -> str:
    if result.saved_for_backward_bytes is None:
        return "-"
    scores = result.saved_score_matrices
    return f"{format_bytes(result.saved_for_backward_bytes)} ({scores} score{'s' if scores != 1 else ''})"


HEADER = ["variant", "mode", "case", "median ms", "IQR / median", "compile s", "TFLOP/s", "ops or kernels / step",
          "score copies / step", "allocated / step", "peak memory", "saved for bwd", "max abs error"]


DEVICE_HEADER = ["timer", "wall ms", "device ms", "wall - device ms"]


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else "-"


def device_columns(result: BenchmarkResult) -> list[str]:
    """Timer, wall, device and their difference (launch/host overhead) in ms; ``-`` when not measured."""
    return [result.timer, _ms(result.wall_median_s), _ms(result.device_median_s), _ms(result.host_overhead_s)]


def _rows(results: list[BenchmarkResult]) -> tuple[list[str], list[list[str]]]:
    """Header and rows; the device-time columns only when some row was timed on a device clock."""
    if any(r.device_median_s is not None for r in results):
        return HEADER + DEVICE_HEADER, [table_row(r) + device_columns(r) for r in results]
    return HEADER, [table_row(r) for r in results]


def markdown_table(results: list[BenchmarkResult], skipped: list[SkippedResult]) -> str:
    """The run's table in GitHub Markdown, skipped variants listed under it with reasons."""
    header, body = _rows(results)
    rows = [header, ["---"] * len(header)] + body
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    if skipped:
        lines += ["", "Skipped (cannot run here):"]
        lines += [f"- `{s.variant}` on `{s.case_id}` ({s.mode}): {s.reason}" for s in skipped]
    return "\n".join(lines) + "\n"


def text_table(results: list[BenchmarkResult]) -> str:
    """The same table aligned in columns for the terminal."""
    header, body = _rows(results)
    rows = [header] + body
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    fmt = lambda row: "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
    return "\n".join([fmt(rows[0]), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows[1:]])


def write_run(directory: Path, results: list[BenchmarkResult], skipped: list[SkippedResult], machine: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``table.md`` and ``run.json`` (schema ``SCHEMA_VERSION``) into ``directory`` atomically."""
    table = write_text_atomic(directory / "table.md", markdown_table(results, skipped))
    payload = {
        "schema_version": SCHEMA_VERSION,
        "machine": machine,
        "results": [
            dataclasses.asdict(r) | {"achieved_tflops": r.achieved_tflops, "achieved_gbps": r.achieved_gbps}
            for r in results
        ],
        "skipped": [dataclasses.asdict(s) for s in skipped],
    }
    run = write_text_atomic(directory / "run.json", json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return table, run
