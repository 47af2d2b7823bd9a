"""The pytest plugin: options, ini keys, parametrization, fixtures and the end-of-run table.

Installed with perfsuite, it loads through its ``pytest11`` entry point.
Tests that take the ``variant`` and ``case`` arguments are parametrized over every
selected variant x case, with ids such as ``naive-b8h16s1024d64-bf16-causal-cuda``; tests that
also take ``mode`` over every selected mode too (``...-cuda-forward_backward``). Compiled
variants run on ``perfsuite_compiled_cases`` when it is set, and a test marked
``perfsuite_only("compiled")`` only sees variants whose ``Variant.compiled`` is true
(``perfsuite_only(predicate)`` takes any ``Variant -> bool``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from pytest_benchmark.session import PerformanceRegression

from perfsuite.measure import machine

from perfsuite.suite import settings
from perfsuite.attention.cost_model import mode_bytes, mode_flop
from perfsuite.measure.evidence import Evidence, PreparedCase, VariantUnsupported, gather_evidence, prepare_case
from perfsuite.gate.compare import (UNPAIRED_METHOD, BaselineError, check_compatible, compare_runs, gate_failed,
                               judged_nothing, load_benchmark_file, markdown)
from perfsuite.gate.fingerprint import fingerprint
from perfsuite.gate.stats import SEPARATE_RUNS_MIN_EFFECT, GateSettings
from perfsuite.storage import write_text_atomic
from perfsuite.measure.peaks import measured_peaks
from perfsuite.report.results import BenchmarkResult, SkippedResult, text_table, write_run
from perfsuite.variants import get_variant
from perfsuite.variants.user import load_entry_point_variants, load_variant_spec

RUN_KEY = pytest.StashKey["SuiteRun"]()


class SuiteRun:
    """State of one pytest run: settings, evidence per (variant, case), recorded results."""

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

    def cases_for(self, variant) -> tuple:
        """The cases ``variant`` runs: ``perfsuite_compiled_cases`` for compiled variants when set."""
        compiled = self.settings.compiled_cases
        return compiled if variant.compiled and compiled is not None else self.settings.cases


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


def _raw_settings(config: pytest.Config) -> settings.RawSettings:
    raw: settings.RawSettings = {}
    for name, spec in settings.SETTINGS.items():
        option = config.getoption(spec.option.lstrip("-").replace("-", "_")) if spec.option else None
        ini = config.getini(spec.ini_key)
        if option is not None:
            raw[name] = settings.RawValue(option, f"option {spec.option}={option!r}", "option")
        elif ini:
            where = "-o" if any(o.startswith(f"{spec.ini_key}=") for o in config.getoption("override_ini") or []) else config.inipath
            raw[name] = settings.RawValue(ini, f"ini key {spec.ini_key}={ini!r} from {where}", "ini")
        else:
            raw[name] = settings.RawValue(spec.default, f"built-in default {spec.ini_key}={spec.default!r}", "default")
    return raw


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfsuite", "attention benchmark suite")
    group.addoption("--perfsuite-variant", action="append", default=[], metavar="MODULE:FUNCTION",
                    help="add your own attention function as a variant (repeatable); installed packages can "
                         "also declare them in the entry point group perfsuite.variants")
    group.addoption("--perfsuite-gate", action="store_true",
                    help="with --benchmark-compare: judge each benchmark with perfsuite's statistics and "
                         "fingerprints (needs per-round data: --benchmark-save-data in both runs)")
    group.addoption("--perfsuite-fail-on-structure", action="store_true",
                    help="with --perfsuite-gate: any structural change (ops, kernels, copies, bytes, backend) fails")
    group.addoption("--perfsuite-gate-force", action="store_true",
                    help="with --perfsuite-gate: compare with a baseline from other hardware or torch anyway")
    for spec in settings.SETTINGS.values():
        parser.addini(spec.ini_key, spec.help, default="")
        if spec.option:
            group.addoption(spec.option, default=None, help=f"{spec.help} (ini: {spec.ini_key})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perfsuite_only(flag_or_predicate): parametrize only over variants whose "
                                       "Variant.<flag> is true, or for which predicate(variant) is true")
    try:
        load_entry_point_variants()
        for spec in config.getoption("perfsuite_variant"):
            load_variant_spec(spec)
    except ValueError as exc:
        raise pytest.UsageError(f"perfsuite: option --perfsuite-variant / entry points: {exc}") from None
    try:
        resolved = settings.resolve(_raw_settings(config), torch.cuda.is_available())
    except settings.SettingsError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    config.stash[RUN_KEY] = SuiteRun(resolved)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """With --perfsuite-gate, the baseline --benchmark-compare will load must exist and be whole."""
    config = session.config
    if config.getoption("perfsuite_gate"):
        check_gate_baseline(config)


def check_gate_baseline(config: pytest.Config) -> None:
    """UsageError when there is nothing to compare with, or the baseline file is corrupt: pytest-benchmark
    would skip a corrupt newest file and compare with an older one."""
    benchmarks = getattr(config, "_benchmarksession", None)
    compare = config.getoption("benchmark_compare", None)
    if benchmarks is None or not compare:
        raise pytest.UsageError("perfsuite: --perfsuite-gate judges against a saved run: add --benchmark-compare[=NUM]")
    files = benchmarks.storage.query("[0-9][0-9][0-9][0-9]_" if compare is True else compare)
    if not files:
        raise pytest.UsageError(f"perfsuite: no saved run matching {compare!r} in {benchmarks.storage}")
    chosen = files[-1]
    try:
        load_benchmark_file(chosen)
    except BaselineError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = config.stash[RUN_KEY].settings
    notes = []
    if any(c.mask == "causal" and c.seq_len_q != c.seq_len_kv for c in run.cases):
        notes.append("perfsuite: note: 'causal' is top-left; with seq_len_q != seq_len_kv (decode, prefill with a "
                     "cache) you likely want --perfsuite-masks causal_br")
    return notes + [
        f"perfsuite: seed={run.seed} devices={','.join(run.devices)} torch={torch.__version__} "
        f"threads={torch.get_num_threads()}",
        f"perfsuite: variants={','.join(run.variants)} modes={','.join(run.modes)}",
        f"perfsuite: cases from {run.cases_from}",
        f"perfsuite: cases={' '.join(c.id for c in run.cases)}",
        *compiled_header(run),
        f"perfsuite: traces -> {run.traces_dir}, table -> {run.results_dir / 'table.md'}",
    ]


def compiled_header(run: settings.SuiteSettings) -> list[str]:
    """One header line when compiled variants run on their own cases."""
    compiled = [v for v in run.variants if get_variant(v).compiled]
    if not compiled or run.compiled_cases is None:
        return []
    return [f"perfsuite: compiled variants ({', '.join(compiled)}) run only on perfsuite_compiled_cases="
            f"{' '.join(c.id for c in run.compiled_cases)} (each compiles per case; set it empty for every case)"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not {"variant", "case"} <= set(metafunc.fixturenames):
        return
    run = metafunc.config.stash[RUN_KEY]
    variants = [get_variant(v) for v in run.settings.variants]
    only = metafunc.definition.get_closest_marker("perfsuite_only")
    if only:
        wanted = only.args[0]
        variants = [v for v in variants if (wanted(v) if callable(wanted) else getattr(v, wanted))]
    pairs = [(v, c) for v in variants for c in run.cases_for(v)]
    names: tuple[str, ...] = ("variant", "case")
    params = [pytest.param(v, c, id=f"{v.name}-{c.id}") for v, c in pairs]
    if "mode" in metafunc.fixturenames:
        names += ("mode",)
        params = [pytest.param(v, c, m, id=f"{v.name}-{c.id}-{m}") for v, c in pairs for m in run.settings.modes]
    if not params:
        wanted = only.args[0] if only else "runnable"
        what = (wanted.__doc__ or wanted.__name__) if callable(wanted) else wanted
        skip = pytest.mark.skip(reason=f"no selected variant qualifies: {what} (--perfsuite-variants)")
        params = [pytest.param(*[None] * len(names), marks=skip, id="no-such-variant")]
    metafunc.parametrize(names, params)


@pytest.fixture
def perfsuite_run(request: pytest.FixtureRequest) -> SuiteRun:
    """The run's ``SuiteRun`` (settings, evidence cache, results)."""
    return request.config.stash[RUN_KEY]


@pytest.fixture
def attention_evidence(perfsuite_run: SuiteRun, variant, case) -> Evidence:
    """Forward evidence for this test's variant and case; skips with the reason when it cannot run."""
    return perfsuite_run.evidence(variant, case)


@pytest.fixture
def mode_evidence(perfsuite_run: SuiteRun, variant, case, mode) -> Evidence:
    """Evidence for this test's variant, case and mode; skips with the reason when it cannot run."""
    return perfsuite_run.evidence(variant, case, mode)


def compile_info(evidence: Evidence) -> dict[str, object] | None:
    """torch.compile facts of a compiled variant's evidence (None for eager variants)."""
    if not evidence.variant.compiled:
        return None
    first = evidence.compile_first_call
    return {"first_call_s": evidence.first_call_s, "graphs_compiled": first.graphs_compiled,
            "graph_breaks": first.graph_breaks,
            "graphs_compiled_while_profiled": evidence.compile_while_profiled.graphs_compiled}


def benchmark_extra_info(evidence: Evidence) -> dict[str, object]:
    """The facts stored with each saved benchmark (units in the key names; counts per timed step)."""
    case, first = evidence.case, evidence.steps[0]
    read, written = mode_bytes(case, evidence.mode)
    lane = "device" if case.device == "cuda" else "cpu"
    return {
        "schema_version": 1,
        "variant": evidence.variant.name,
        "case": case.id,
        "mode": evidence.mode,
        "case_fields": dataclasses.asdict(case),
        "sdpa_backend": evidence.variant.sdpa_backend,
        "flop": mode_flop(case, evidence.mode),
        "bytes_read": read,
        "bytes_written": written,
        "cpu_ops_per_forward": first.cpu_op_count,
        "kernels_per_forward": first.kernel_count,
        "score_copies_per_forward": evidence.score_copies(lane)[0],
        "memcpy_per_forward": first.memcpy_counts,
        "allocated_bytes_per_forward": first.allocated_bytes.get(case.device, 0),
        "peak_memory_bytes": first.peak_bytes.get(case.device, 0),
        "max_abs_error": evidence.comparison.max_abs_error if evidence.comparison else None,
        "correct": evidence.comparison.failure is None if evidence.comparison else None,
        "not_compared": evidence.not_compared,
        "compile": compile_info(evidence),
        "saved_for_backward": dataclasses.asdict(evidence.saved_for_backward) if evidence.saved_for_backward else None,
        "sdpa_backends_ran": first.sdpa_backends,
        "fingerprint": fingerprint(first, case.device),
        "trace_file": str(evidence.trace_path),
    }


def record_result(run: SuiteRun, evidence: Evidence, median_s: float | None, rounds: int | None,
                  iqr_s: float | None = None) -> BenchmarkResult:
    """Store the table row of a finished benchmark."""
    case, first = evidence.case, evidence.steps[0]
    on_cuda = case.device == "cuda"
    comparison, saved = evidence.comparison, evidence.saved_for_backward
    result = BenchmarkResult(
        variant=evidence.variant.name,
        case_id=case.id,
        device=case.device,
        flop=mode_flop(case, evidence.mode),
        bytes_moved=sum(mode_bytes(case, evidence.mode)),
        median_s=median_s,
        rounds=rounds,
        work_per_forward=first.kernel_count if on_cuda else first.cpu_op_count,
        work_unit="kernels" if on_cuda else "ops",
        score_copies_per_forward=evidence.score_copies("device" if on_cuda else "cpu")[0],
        allocated_bytes=first.allocated_bytes.get(case.device, 0),
        peak_bytes=first.peak_bytes.get(case.device, 0),
        max_abs_error=comparison.max_abs_error if comparison else None,
        correct=comparison.failure is None if comparison else None,
        mode=evidence.mode,
        compile_s=evidence.first_call_s if evidence.variant.compiled else None,
        saved_for_backward_bytes=saved.bytes if saved else None,
        saved_score_matrices=saved.score_sized if saved else None,
        iqr_s=iqr_s,
    )
    run.results[(result.variant, result.case_id, result.mode)] = result
    return result


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["perfsuite"] = config.stash[RUN_KEY].machine_info()


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    """Store the measured peaks with the saved baseline (outside machine_info, which is compared)."""
    peaks = config.stash[RUN_KEY].peaks()
    if peaks:
        output_json["perfsuite_peaks"] = peaks


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark) -> None:
    """Say plainly when the baseline came from other hardware or another torch; keep it for the gate."""
    config.stash[RUN_KEY].baseline = compared_benchmark
    ours = machine_info.get("perfsuite", {})
    theirs = compared_benchmark.get("machine_info", {}).get("perfsuite", {})
    for key in ("device_names", "torch_version", "cuda_version", "cudnn_version", "num_threads"):
        if ours.get(key) != theirs.get(key):
            benchmarksession.logger.warning(
                f"perfsuite: baseline {key} is {theirs.get(key)!r}, this run has {ours.get(key)!r}; "
                "timings from different hardware or software are not comparable"
            )


def group_skips(skipped: list[SkippedResult]) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(variant, reason) -> (case ids, modes), so one reason is printed once."""
    groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for skip in skipped:
        case_ids, modes = groups.setdefault((skip.variant, skip.reason), ([], []))
        case_ids += [] if skip.case_id in case_ids else [skip.case_id]
        modes += [] if skip.mode in modes else [skip.mode]
    return groups


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write table.md and run.json before any summary hook can fail."""
    run = session.config.stash[RUN_KEY]
    if run.results or run.skipped:
        info = dict(run.machine_info(), peaks=run.peaks())
        run.written = write_run(Path(run.settings.results_dir), list(run.results.values()), list(run.skipped.values()), info)


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config):
    """Print the table after pytest-benchmark's; a regression it finds fails the run without a traceback."""
    try:
        yield
    except PerformanceRegression:
        terminalreporter.write_line(
            "perfsuite: performance regressed beyond --benchmark-compare-fail (see 'Performance has regressed' above)",
            red=True,
        )
        terminalreporter._session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        print_table(terminalreporter, config.stash[RUN_KEY])
        if config.getoption("perfsuite_gate"):
            run_gate(terminalreporter, config)


def run_gate(terminalreporter, config: pytest.Config) -> None:
    """perfsuite's verdicts against the --benchmark-compare baseline; a regression fails the run."""
    run = config.stash[RUN_KEY]
    terminalreporter.section("perfsuite: regression gate")
    if run.baseline is None:
        terminalreporter.write_line("pytest-benchmark loaded no baseline to judge against", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    session = config._benchmarksession
    head = {"machine_info": {"perfsuite": run.machine_info()},
            "benchmarks": [b.as_dict(include_data=True) for b in session.benchmarks]}
    try:
        check_compatible(run.baseline, head, "the baseline", "this run", config.getoption("perfsuite_gate_force"))
    except BaselineError as exc:
        terminalreporter.write_line(f"perfsuite: {exc}", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    settings = GateSettings(min_effect=SEPARATE_RUNS_MIN_EFFECT)
    comparisons = compare_runs(run.baseline, head, settings)
    if judged_nothing(comparisons):
        terminalreporter.write_line("perfsuite: the gate judged nothing: no benchmark of this run is in the baseline", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.USAGE_ERROR
    report = markdown(comparisons, settings, "perfsuite gate: baseline -> this run", UNPAIRED_METHOD)
    terminalreporter.write_line(report)
    write_text_atomic(Path(run.settings.results_dir) / "gate.md", report)
    if gate_failed(comparisons, config.getoption("perfsuite_fail_on_structure")):
        terminalreporter.write_line("perfsuite: the gate found a regression", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.TESTS_FAILED


def print_table(terminalreporter, run: SuiteRun) -> None:
    if not run.written:
        return
    results, skipped = list(run.results.values()), list(run.skipped.values())
    table_path, run_path = run.written
    terminalreporter.section("perfsuite: attention at a glance")
    terminalreporter.write_line(text_table(results))
    for (variant, reason), (case_ids, modes) in group_skips(skipped).items():
        shown = ", ".join(case_ids[:3]) + (f", and {len(case_ids) - 3} more in table.md" if len(case_ids) > 3 else "")
        terminalreporter.write_line(f"skipped {variant} on {len(case_ids)} case(s) ({shown}) "
                                    f"in mode(s) {', '.join(modes)}: {reason}")
    terminalreporter.write_line(f"table: {table_path}   run: {run_path}   traces: {run.settings.traces_dir}")
    if all(r.median_s is None for r in results):
        terminalreporter.write_line("timing was disabled in this run; the timed run is: pytest -c benchmarks.ini")


__all__ = ["SuiteRun"]
