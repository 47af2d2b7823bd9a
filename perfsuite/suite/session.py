"""One pytest run of the attention suite: settings, evidence per (variant, case, mode), results,
the saved table and the gate. The plugin's hooks hand over to a ``SuiteSession``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfsuite.errors import BaselineError, IncomparableRuns
from perfsuite.gate.compare import load_benchmark_file
from perfsuite.gate.flow import GateOutcome, judge_saved_runs
from perfsuite.gate.stats import SEPARATE_RUNS_MIN_EFFECT, GateSettings
from perfsuite.measure import machine
from perfsuite.measure.evidence import Evidence, PreparedCase, VariantUnsupported, gather_evidence, prepare_case
from perfsuite.measure.peaks import measured_peaks
from perfsuite.report.results import BenchmarkResult, SkippedResult, result_from_benchmark, text_table, write_run
from perfsuite.storage import write_text_atomic
from perfsuite.suite import settings
from perfsuite.variants import get_variant


class SuiteSession:
    """State of one pytest run: settings, evidence per (variant, case, mode), recorded results."""

    def __init__(self, resolved: settings.SuiteSettings):
        self.settings = resolved
        self._prepared: dict[tuple[str, str], PreparedCase | Exception] = {}
        self._evidence: dict[tuple[str, str, str], Evidence | Exception] = {}
        self.results: dict[tuple[str, str, str], BenchmarkResult] = {}
        self.skipped: dict[tuple[str, str, str], SkippedResult] = {}
        self.written: tuple[Path, Path] | None = None  # (table.md, run.json) once written
        self._machine: dict | None = None
        self._peaks: dict | None = None
        self.baseline: dict | None = None  # the run --benchmark-compare loaded

    # -- measuring ---------------------------------------------------------------------------
    def machine_info(self) -> dict:
        """Versions and devices (the same at the start and the end of a run)."""
        if self._machine is None:
            self._machine = machine.torch_machine_info(list(self.settings.devices))
        return self._machine

    def peaks(self) -> dict | None:
        """Measured peaks after a timed run (measured once per machine, cached), else None."""
        timed = [r for r in self.results.values() if r.median_s]
        if not timed:
            return None
        if self._peaks is None:
            dtypes = sorted({c.dtype for c in self.settings.cases})
            cache = Path(self.settings.results_dir) / "peaks.json"
            self._peaks = measured_peaks(sorted({r.device for r in timed})[0], dtypes, cache)
        return self._peaks

    def prepared(self, variant, case) -> PreparedCase:
        """Inputs and per-case setup, once per (variant, case) for every mode (raises its cached error)."""
        key = (variant.name, case.id)
        if key not in self._prepared:
            self._prepared[key] = _capture(lambda: prepare_case(variant, case, self.settings.seed))
        return _unwrap(self._prepared[key])

    def evidence(self, variant, case, mode: str = "forward") -> Evidence:
        """Gather evidence once per (variant, case, mode); re-raise its skip or error for every test."""
        key = (variant.name, case.id, mode)
        if key not in self._evidence:
            self._evidence[key] = _capture(lambda: gather_evidence(
                variant, case, self.settings.seed, self.settings.traces_dir, mode, self.prepared(variant, case)))
        found = self._evidence[key]
        if isinstance(found, VariantUnsupported):
            self.skipped[key] = SkippedResult(variant.name, case.id, str(found), mode)
            pytest.skip(f"variant {variant.name} cannot run case {case.id} in mode {mode}: {found}")
        return _unwrap(found)

    def record(self, info: dict[str, Any], stats: dict[str, Any] | None) -> BenchmarkResult:
        """Store the table row of a finished benchmark, read from its ``extra_info`` and stats."""
        result = result_from_benchmark(info, stats)
        self.results[(result.variant, result.case_id, result.mode)] = result
        return result

    # -- parametrization ---------------------------------------------------------------------
    def cases_for(self, variant) -> tuple:
        """The cases ``variant`` runs: ``perfsuite_compiled_cases`` for compiled variants when set."""
        compiled = self.settings.compiled_cases
        return compiled if variant.compiled and compiled is not None else self.settings.cases

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize a test taking ``variant`` and ``case`` (and ``mode``) over the selection."""
        variants = [get_variant(v) for v in self.settings.variants]
        only = metafunc.definition.get_closest_marker("perfsuite_only")
        if only:
            wanted = only.args[0]
            variants = [v for v in variants if (wanted(v) if callable(wanted) else getattr(v, wanted))]
        pairs = [(v, c) for v in variants for c in self.cases_for(v)]
        names: tuple[str, ...] = ("variant", "case")
        params = [pytest.param(v, c, id=f"{v.name}-{c.id}") for v, c in pairs]
        if "mode" in metafunc.fixturenames:
            names += ("mode",)
            params = [pytest.param(v, c, m, id=f"{v.name}-{c.id}-{m}") for v, c in pairs for m in self.settings.modes]
        if not params:
            wanted = only.args[0] if only else "runnable"
            what = (wanted.__doc__ or wanted.__name__) if callable(wanted) else wanted
            skip = pytest.mark.skip(reason=f"no selected variant qualifies: {what} (--perfsuite-variants)")
            params = [pytest.param(*[None] * len(names), marks=skip, id="no-such-variant")]
        metafunc.parametrize(names, params)

    # -- baselines and the gate --------------------------------------------------------------
    def baseline_differences(self, baseline: dict) -> list[str]:
        """Keep the baseline pytest-benchmark loaded; lines for each ``machine.MUST_MATCH`` difference."""
        self.baseline = baseline
        theirs = baseline.get("machine_info", {}).get("perfsuite", {})
        return machine.machine_differences(theirs, self.machine_info(), "the baseline", "this run")

    def gate(self, head_benchmarks: list[dict], force: bool, fail_on_structure: bool) -> GateOutcome:
        """Judge this run against the loaded baseline (separate runs; see ``gate.flow``).

        Raises:
            IncomparableRuns: the baseline is from other hardware/software and ``force`` is false.
            BaselineError: no baseline was loaded, or an entry of it is malformed.
        """
        if self.baseline is None:
            raise BaselineError("pytest-benchmark loaded no baseline to judge against")
        head = {"machine_info": {"perfsuite": self.machine_info()}, "benchmarks": head_benchmarks}
        outcome = judge_saved_runs(self.baseline, head, "the baseline", "this run",
                                   GateSettings(min_effect=SEPARATE_RUNS_MIN_EFFECT), force, fail_on_structure,
                                   "perfsuite gate: baseline -> this run")
        write_text_atomic(Path(self.settings.results_dir) / "gate.md", outcome.report_md)
        return outcome

    # -- output ------------------------------------------------------------------------------
    def write_outputs(self) -> None:
        """Write table.md and run.json (atomically) when anything ran."""
        if self.results or self.skipped:
            info = dict(self.machine_info(), peaks=self.peaks())
            self.written = write_run(Path(self.settings.results_dir), list(self.results.values()),
                                     list(self.skipped.values()), info)

    def table_lines(self) -> list[str]:
        """The end-of-run table, grouped skip reasons and where the files are; [] before writing."""
        if not self.written:
            return []
        results = list(self.results.values())
        lines = [text_table(results)]
        for (variant, reason), (case_ids, modes) in group_skips(list(self.skipped.values())).items():
            more = f", and {len(case_ids) - 3} more in table.md" if len(case_ids) > 3 else ""
            lines.append(f"skipped {variant} on {len(case_ids)} case(s) ({', '.join(case_ids[:3])}{more}) "
                         f"in mode(s) {', '.join(modes)}: {reason}")
        table_path, run_path = self.written
        lines.append(f"table: {table_path}   run: {run_path}   traces: {self.settings.traces_dir}")
        if all(r.median_s is None for r in results):
            lines.append("timing was disabled in this run; the timed run is: pytest -c benchmarks.ini")
        return lines


def group_skips(skipped: list[SkippedResult]) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(variant, reason) -> (case ids, modes), so one reason is printed once."""
    groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for skip in skipped:
        case_ids, modes = groups.setdefault((skip.variant, skip.reason), ([], []))
        case_ids += [] if skip.case_id in case_ids else [skip.case_id]
        modes += [] if skip.mode in modes else [skip.mode]
    return groups


def check_gate_baseline(benchmarks, compare) -> None:
    """``BaselineError`` when there is nothing to compare with, or the baseline file is corrupt:
    pytest-benchmark would skip a corrupt newest file and compare with an older one.

    ``benchmarks``: pytest-benchmark's session (or None); ``compare``: the ``--benchmark-compare`` value.
    """
    if benchmarks is None or not compare:
        raise BaselineError("--perfsuite-gate judges against a saved run: add --benchmark-compare[=NUM]",
                            "--perfsuite-gate")
    files = benchmarks.storage.query("[0-9][0-9][0-9][0-9]_" if compare is True else compare)
    if not files:
        raise BaselineError(f"no saved run matching {compare!r} in {benchmarks.storage}", str(benchmarks.storage))
    load_benchmark_file(files[-1])


def _capture(make):
    """``make()``, or the exception it raised (cached so every test of the pair sees it)."""
    try:
        return make()
    except Exception as exc:
        return exc


def _unwrap(found):
    if isinstance(found, Exception):
        raise found
    return found


__all__ = ["SuiteSession", "IncomparableRuns"]
