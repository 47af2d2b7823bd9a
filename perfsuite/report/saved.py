"""Reports from a saved run: load perfsuite's run.json or a pytest-benchmark JSON file, render
the results table as Markdown (the HTML page, findings first with charts, is ``perfsuite.dashboard.run_page``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from perfsuite.errors import ReportError
from perfsuite.storage import RUN_SCHEMA_VERSION, check_schema_version, read_json
from perfsuite.report.results import (
    BenchmarkResult,
    SkippedResult,
    markdown_table,
    result_from_benchmark,
)


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """Results, skips and machine facts (including measured peaks, when timed) of one run;
    ``incomplete``: why the run is partial (interrupted, crashed, stopped), None for a whole run."""

    source: Path
    results: list[BenchmarkResult]
    skipped: list[SkippedResult]
    machine: dict[str, Any]
    incomplete: str | None = None

    @property
    def peaks(self) -> dict[str, Any] | None:
        return self.machine.get("peaks")


_RESULT_FIELDS = [f.name for f in dataclasses.fields(BenchmarkResult)]


def _from_perfsuite(data: dict[str, Any], path: Path) -> SavedRun:
    check_schema_version(data["schema_version"], RUN_SCHEMA_VERSION, f"{path}", ReportError)
    results = [
        BenchmarkResult(**{k: r[k] for k in _RESULT_FIELDS if k in r}) for r in data["results"]
    ]
    skipped = [SkippedResult(**s) for s in data.get("skipped", [])]
    return SavedRun(
        path, results, skipped, data.get("machine", {}), _incomplete(data.get("incomplete"))
    )


def _incomplete(marker: Any) -> str | None:
    """``interrupted (KeyboardInterrupt): 5 of 20 benchmarks finished`` from a stored marker."""
    if not marker:
        return None
    if isinstance(marker, dict):
        return f"{marker.get('reason', 'incomplete')}: {marker.get('finished', '?')} of {marker.get('expected', '?')} benchmarks finished"
    return str(marker)


def _from_pytest_benchmark(data: dict[str, Any], path: Path) -> SavedRun:
    results = [
        result_from_benchmark(b["extra_info"], b["stats"])
        for b in data["benchmarks"]
        if "variant" in b.get("extra_info", {})
    ]  # others: benchmarks of some other suite
    machine = dict(
        data.get("machine_info", {}).get("perfsuite", {}), peaks=data.get("perfsuite_peaks")
    )
    return SavedRun(path, results, [], machine, _incomplete(data.get("perfsuite_incomplete")))


def load_run(path: str | Path) -> SavedRun:
    """Read a run; raises ``ReportError`` naming the file when it is not one."""
    path = Path(path)
    data = read_json(path, ReportError, "run file")
    try:
        if isinstance(data, dict) and "results" in data and "schema_version" in data:
            run = _from_perfsuite(data, path)
        elif isinstance(data, dict) and "benchmarks" in data:
            run = _from_pytest_benchmark(data, path)
        else:
            raise ReportError(
                f"{path}: neither a perfsuite run.json nor a pytest-benchmark JSON file"
            )
    except (KeyError, TypeError) as exc:
        raise ReportError(f"{path}: a run file with a missing or malformed field ({exc})") from None
    if not run.results:
        raise ReportError(f"{path}: holds no perfsuite results")
    return run


def platform_text(machine: dict[str, Any]) -> str:
    """``CUDA 12.8``, ``ROCm (HIP 6.4...)`` or ``CPU-only torch build`` from a run's machine facts."""
    if machine.get("hip_version"):
        return f"ROCm (HIP {machine['hip_version']})"
    if machine.get("cuda_version"):
        return f"CUDA {machine['cuda_version']}"
    return "CPU-only torch build (no CUDA or ROCm)"


def machine_line(run: SavedRun) -> str:
    """``torch 2.13.0, CUDA 12.8, 8 threads; cuda: NVIDIA H100``: the run's software and devices."""
    m = run.machine
    cuda = platform_text(m)
    names = ", ".join(f"{d}: {n}" for d, n in m.get("device_names", {}).items())
    return (
        f"torch {m.get('torch_version', '?')}, {cuda}, {m.get('num_threads', '?')} threads; {names}"
    )


def markdown_report(run: SavedRun, plot_names: list[str] = ()) -> str:
    """Markdown for a GitHub step summary or PR comment; ``plot_names`` are linked below the table."""
    lines = [
        "## perfsuite: attention at a glance",
        "",
        f"{machine_line(run)}  ",
        f"source: `{run.source.name}`",
        "",
    ]
    lines.append(markdown_table(run.results, run.skipped, incomplete=run.incomplete))
    lines += [f"![{name}]({name})" for name in plot_names]
    return "\n".join(lines) + "\n"
