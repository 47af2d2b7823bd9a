"""One pytest run of the attention suite: settings, evidence per (variant, case, mode), results,
the saved table and the gate. The plugin's hooks hand over to a ``SuiteSession``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from pytest_benchmark.session import BenchmarkSession

import errno
import json
import os
import time
import uuid

from perfsuite.attention.modes import Mode
from perfsuite.errors import BaselineError, IncomparableRuns, UsageError
from perfsuite.gate.baseline import INCOMPLETE_KEY, coverage_note, resolve_baseline
from perfsuite.gate.compare import BenchmarkKey
from perfsuite.gate.flow import GateOutcome, judge_saved_runs
from perfsuite.gate.stats import SEPARATE_RUNS_MIN_EFFECT, GateSettings
import perfsuite.history.capture as history_capture
import perfsuite.history.importing as history_importing
import perfsuite.history.recording as history_recording
from perfsuite.measure.speed_reference import reference_of, run_spread
from perfsuite.measure import conditions, gpu_state, machine
from perfsuite.measure.call_integrity import kept_memory_warning
from perfsuite.measure.cleanup import release_device_memory, release_exception_frames
from perfsuite.measure.evidence import Evidence, PreparedCase, gather_evidence, prepare_case
from perfsuite.measure.layout import layout_differences
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.peaks import measured_peaks
from perfsuite.report.results import (
    BenchmarkResult,
    CrashedResult,
    SkippedResult,
    contention_lines,
    result_from_benchmark,
    text_table,
    write_run,
)
from perfsuite.report.trace_manifest import TraceManifest
from perfsuite.storage import unwritable_directory_reason, write_text_atomic
from perfsuite.suite import generation, options, settings
from perfsuite.suite.reliability import (
    CrashProbes,
    FailureLedger,
    ALREADY_COPIED,
    OutputFailures,
    Progress,
    crash_message,
)
from perfsuite.suite.shards import Shard
from perfsuite.variants import get_variant
from perfsuite.variants.registry import inapplicable_reason, preload_variants, variant_names
from perfsuite.variants.user import loaded_user_variants


class SuiteSession:
    """State of one pytest run: settings, evidence per (variant, case, mode), recorded results."""

    def __init__(
        self,
        resolved: settings.SuiteSettings,
        variant_specs: tuple[str, ...] = (),
        shard: Shard | None = None,
    ):
        self.settings = resolved
        self.failures = FailureLedger()  # setup and evidence errors: in full once, then referenced
        self.output_failures = (
            OutputFailures()
        )  # the first check that found an output wrong, referenced after
        # the first check that counted an unexpected score copy, referenced by the other two
        self.copy_failures = OutputFailures(ALREADY_COPIED)
        self.probes = CrashProbes(
            resolved.isolate, resolved.seed, variant_specs, call_limit_s=resolved.call_limit_s
        )
        self.crashed: dict[tuple[str, str, str], CrashedResult] = {}
        self.progress = Progress()
        self.timed = False  # set at session start: results are written as they come in timed runs
        self.runs_suite = False  # set at collection: this run holds the attention suite's tests
        self.pytest_session: pytest.Session | None = None
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        # the history store's identity of this run (saved in its file); a fleet's shard gets its idempotent one
        self.run_uid = os.environ.get("PERFSUITE_RUN_ID") or uuid.uuid4().hex
        self.saved_json: dict | None = (
            None  # what pytest-benchmark saved, recorded after the session
        )
        self.history_line: str | None = None
        self.traces = TraceManifest(resolved.traces_dir, self.run_id)
        self.baseline_path: Path | None = None  # the file --benchmark-compare will load, checked
        self._layouts: list[
            tuple[str, str, str, str]
        ] = []  # (variant, case, mode, output layout), no tensors
        self._prepared: dict[tuple[str, str], PreparedCase | Exception] = {}
        self._evidence: dict[tuple[str, str, str], Evidence | Exception] = {}
        self.results: dict[tuple[str, str, str], BenchmarkResult] = {}
        self.speed_references: dict[tuple[str, str, str], float] = {}  # ms, per timed CPU benchmark
        self.skipped: dict[tuple[str, str, str], SkippedResult] = {}
        # (built-in variant, case id) -> why in short: the built-in is not for that case at all
        self.inapplicable: dict[tuple[str, str], str] = {}
        self.not_generated = generation.NotGenerated()
        self.written: tuple[Path, Path] | None = None  # (table.md, run.json) once written
        self._machine: dict | None = None
        self._peaks: dict | None = None
        self.baseline: dict | None = None  # the run --benchmark-compare loaded
        self.shard = shard  # of a sharded run (suite.shards), stored as "INDEX/COUNT"
        self.shard_note: str | None = None  # what the shard kept, for the collection's summary
        # process conditions applied after start (measure.conditions)
        self.applied_conditions: list[str] = []
        self.disk_full: str | None = (
            None  # why the run stopped: no space left in the results folder
        )
        self._gpu_state: dict | None = None

    @classmethod
    def from_config(cls, config: pytest.Config) -> SuiteSession:
        """The run's session from pytest's options and ini keys (``suite.options``): users' variants
        loaded, settings resolved, the shard read; in a run that is perfsuite's
        (``options.uses_perfsuite``), the process conditions of timed runs applied.

        Raises:
            ConfigError: a variant that cannot be loaded, or an invalid setting or shard, named with
                the option, ini key or entry point it came from.
        """
        specs = options.load_user_variants(config)
        resolved = settings.resolve(
            options.raw_settings(config), torch.cuda.is_available(), loaded_user_variants()
        )
        suite = cls(resolved, specs, options.shard(config))
        if options.uses_perfsuite(config):  # another repository's plain pytest: left as it is
            suite.applied_conditions = conditions.apply_in_process()
        return suite

    # -- measuring ---------------------------------------------------------------------------
    def machine_info(self) -> dict:
        """Versions and devices (the same at the start and the end of a run)."""
        if self._machine is None:
            self._machine = machine.torch_machine_info(list(self.settings.devices))
        return self._machine

    def gpu_state(self) -> dict:
        """The GPU's identity and state (``measure.gpu_state``), read once, after the first timing that needs it."""
        if self._gpu_state is None:
            self._gpu_state = gpu_state.gpu_state(list(self.settings.devices))
        return self._gpu_state

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
        """Inputs and per-case setup, once per (variant, case) for every mode.

        Its error is raised in full by the first test that needs it and referenced in one line
        by the others (``FailureLedger``); a refusal by torch is re-raised as is (a skip)."""
        key = (variant.name, case.id)
        if key not in self._prepared:
            limit_s = self.settings.call_limit_s(case.device)
            self._prepared[key] = _capture(
                lambda: prepare_case(variant, case, self.settings.seed, limit_s)
            )
        found = self._prepared[key]
        if isinstance(found, Exception) and not isinstance(found, VariantUnsupported):
            self.failures.report(
                key, self.progress.running, f"per-case setup of {variant.name} on {case.id}", found
            )
        return _unwrap(found)

    def evidence(self, variant, case, mode: str = Mode.FORWARD) -> Evidence:
        """Gather evidence once per (variant, case, mode); its skip for every test, its error in full once.

        A variant that ``--perfsuite-isolate`` names has each (case, mode) probed in a child process
        first; a pair that crashed the child fails here, naming variant, case, mode and signal.
        """
        key = (variant.name, case.id, mode)
        crash = self.probes.crash(variant.name, case.id, mode, lambda: self._pairs_of(variant))
        if crash is not None:
            self.crashed[key] = CrashedResult(variant.name, case.id, mode, crash.detail)
            pytest.fail(crash_message(variant.name, crash), pytrace=False)
        if key not in self._evidence:
            try:
                prepared = self.prepared(
                    variant, case
                )  # a setup error: in full once, then referenced
            except VariantUnsupported as exc:
                self._evidence[key] = exc
            else:
                self._evidence[key] = _capture(
                    lambda: gather_evidence(
                        variant,
                        case,
                        self.settings.seed,
                        self.settings.traces_dir,
                        mode,
                        prepared,
                        self.settings.call_limit_s(case.device),
                        self.settings.determinism_runs,
                    )
                )
            found = self._evidence[key]
            if isinstance(found, OSError):  # a trace that could not be written
                self.stop_if_disk_full(found, Path(self.settings.traces_dir))
            if isinstance(found, Evidence):
                self._layouts.append(found.layout_record)
                self.traces.add(found.trace_path)
        found = self._evidence[key]
        if isinstance(found, VariantUnsupported):
            self.skipped[key] = SkippedResult(variant.name, case.id, str(found), mode)
            pytest.skip(f"variant {variant.name} cannot run case {case.id} in mode {mode}: {found}")
        if isinstance(found, Exception):
            self.failures.report(
                key, self.progress.running, f"{variant.name} on {case.id} in mode {mode}", found
            )
        return found

    def _pairs_of(self, variant) -> list[tuple[str, str]]:
        return [(c.id, m) for c in self.cases_for(variant) for m in self.settings.modes]

    def record(self, info: dict[str, Any], stats: dict[str, Any] | None) -> BenchmarkResult:
        """Store the table row of a finished benchmark, read from its ``extra_info`` and stats; in a
        timed run, write table.md and run.json at once (marked partial until the run ends)."""
        result = result_from_benchmark(info, stats)
        self.results[(result.variant, result.case_id, result.mode)] = result
        if stats and (reference := reference_of(info)) is not None:
            self.speed_references[(result.variant, result.case_id, result.mode)] = reference
        self.progress.finished += 1
        if self.timed:
            self.write_outputs(final=False)
        return result

    def release(self, variant_name: str, case) -> None:
        """Forget a finished (variant, case) pair's inputs, steps and outputs, and on CUDA give its
        memory back, so the next pair's allocations and peaks are its own (the table keeps its rows)."""
        self._prepared.pop((variant_name, case.id), None)
        for key in [k for k in self._evidence if k[:2] == (variant_name, case.id)]:
            del self._evidence[key]
        release_device_memory(case.device)

    # -- progress ----------------------------------------------------------------------------
    def start(self, pytest_session: pytest.Session, timed: bool) -> None:
        """At session start: keep pytest's session (to see -x / --maxfail stops). The trace manifest
        lists this run from its first trace on (a run that writes none, ``--co``, is not listed)."""
        self.pytest_session, self.timed = pytest_session, timed

    def check_outputs(self, benchmark_storage: Path | None) -> None:
        """Before the first test: every folder this run writes into can be written (the results and
        traces folders, and pytest-benchmark's storage when it saves). Raises ``UsageError`` naming
        each one that cannot, so a run never finds out after timing everything."""
        folders = [
            ("--perfsuite-results", Path(self.settings.results_dir)),
            ("--perfsuite-traces", Path(self.settings.traces_dir)),
        ]
        if benchmark_storage is not None:
            folders.append(("--benchmark-storage", benchmark_storage))
        problems = [
            f"{option} {reason}"
            for option, folder in folders
            if (reason := unwritable_directory_reason(folder))
        ]
        if problems:
            raise UsageError(
                "output folders cannot be written: "
                + "; ".join(problems)
                + ". Choose another folder with the option named"
            )

    def mark_previous_run_superseded(self) -> None:
        """A run.json left by an earlier run is marked ``superseded`` as this run starts (its results
        kept), so a run that dies before writing its own never leaves the old one saying complete."""
        path = Path(self.settings.results_dir) / "run.json"
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(previous, dict) and not previous.get("superseded"):
            previous.update(
                complete=False,
                superseded=f"by run {self.run_id}, started after it (it may have died "
                "before writing its own results)",
            )
            write_text_atomic(path, json.dumps(previous, indent=2, sort_keys=True) + "\n")

    def expect(self, benchmarks: int) -> None:
        """The number of benchmark tests collected (what a whole run finishes)."""
        self.progress.expected = benchmarks

    def test_started(self, nodeid: str, benchmark: bool) -> None:
        """Note the running test; in a timed run, each test's start (of any kind) is written to
        run.json, so a process that dies there leaves it named."""
        self.progress.running = nodeid
        if self.timed and self.runs_suite:  # another suite's tests: perfsuite writes nothing
            self.write_outputs(final=False, started=True)

    def interrupted(self, benchmarks: BenchmarkSession | None = None) -> None:
        """Note an interrupted run (before pytest-benchmark saves: its marker goes into the saved
        file). ``benchmarks``: pytest-benchmark's session, or None; a benchmark stopped before its
        first round has no data, which pytest-benchmark cannot save, so it is dropped."""
        self.progress.interrupted = True
        if benchmarks is not None:
            benchmarks.benchmarks[:] = [bench for bench in benchmarks.benchmarks if bench]

    def finished(self, config: pytest.Config) -> None:
        """After the session (pytest-benchmark has saved): write table.md and run.json, and record the
        run in the history store when no terminal summary recorded it."""
        self.write_outputs()
        self.record_history(config)

    def incomplete(self) -> dict[str, Any] | None:
        """Why this run's results are partial (interrupted, stopped early), as stored; None when whole."""
        session = self.pytest_session
        if (
            session is not None
            and not self.progress.stopped
            and (session.shouldstop or session.shouldfail)
        ):
            self.progress.stopped = f"stopped early ({session.shouldstop or session.shouldfail})"
        found = self.progress.incomplete()
        return found.to_dict() if found else None

    def update_saved_json(self, output_json: dict) -> None:
        """What perfsuite adds to the saved pytest-benchmark file: peaks, and the partial-run marker."""
        peaks = self.peaks()
        if peaks:
            output_json["perfsuite_peaks"] = peaks
        incomplete = self.incomplete()
        if incomplete:
            output_json[INCOMPLETE_KEY] = incomplete
        # outside machine_info (compared between runs): the GPU's clocks and temperature vary from run to run
        output_json["perfsuite_gpu_state"] = self.gpu_state()
        if self.shard:
            output_json["perfsuite_shard"] = str(self.shard)
        if self.timed:  # what the history store needs to know of the run (capture.saved_run_facts)
            output_json.update(self._history_facts(), perfsuite_run_uid=self.run_uid)
            if os.environ.get(
                "PERFSUITE_FLEET_ID"
            ):  # the shards of one fleet run share a run group
                output_json["perfsuite_run_group"] = os.environ["PERFSUITE_FLEET_ID"]
            self.saved_json = output_json

    @staticmethod
    def history_labels(saved: dict) -> dict[str, Any] | None:
        """Labels recorded with the run: its shard and the GPU's state (``measure.gpu_state``)."""
        labels = {
            "shard": saved.get("perfsuite_shard"),
            "gpu_state": saved.get("perfsuite_gpu_state"),
        }
        return {k: v for k, v in labels.items() if v is not None} or None

    def _history_facts(self) -> dict[str, Any]:
        if not hasattr(self, "_facts"):
            root = self.pytest_session.config.rootpath if self.pytest_session else Path.cwd()
            self._facts = history_capture.saved_run_facts(self.machine_info(), root)
        return self._facts

    def record_history(self, config: pytest.Config) -> None:
        """Record the saved run in the history store (after timing and saving; an error is a warning)."""
        saved, self.saved_json = self.saved_json, None  # once, whichever hook comes first
        if saved is None or history_recording.disabled(config.getini("perfsuite_history")):
            return
        partial = self.incomplete() is not None  # recorded all the same: labelled, see importing
        source = os.environ.get("PERFSUITE_HISTORY_SOURCE", "plugin")
        try:
            run = history_importing.run_from_benchmark_json(
                saved,
                source=source,
                labels=self.history_labels(saved),
                repository=str(config.rootpath),
                recorded_at=time.time(),
            )
        except Exception as exc:  # never fail a run for the history
            self.history_line = (
                f"perfsuite: warning: the run was not recorded in the history store ({exc})"
            )
            return
        recorded = history_recording.record_runs(
            [run],
            config.getoption("perfsuite_history_url"),
            config.getini("perfsuite_history_url") or None,
            config.rootpath,
        )
        self.history_line = recorded.line() + (
            " (a partial run: the benchmarks that finished)" if partial and recorded.added else ""
        )

    # -- parametrization ---------------------------------------------------------------------
    def cases_for(self, variant) -> tuple:
        """The cases ``variant`` runs: its model's case sets' cases when it is bound to them
        (``Variant.case_sets``, ``SuiteSettings.variant_cases``), else ``perfsuite_compiled_cases`` for
        compiled variants when set, else ``perfsuite_adapter_cases`` for variants that wrap a library
        when set, else every case. A compiled adapter (``hf_flex_attention``) runs on the cases both
        lists share, if any."""
        if variant.name in self.settings.variant_cases:
            return self.settings.variant_cases[variant.name]
        compiled, adapter = self.settings.compiled_cases, self.settings.adapter_cases
        if variant.compiled and compiled is not None:
            shared = tuple(c for c in compiled if variant.wraps and adapter and c in adapter)
            return shared or compiled
        return adapter if variant.wraps and adapter is not None else self.settings.cases

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize a test taking ``variant`` and ``case`` (and ``mode``) over the selection.

        The first call imports the selected variants' libraries (``Variant.preload``): during
        collection, before any test compiles anything, and only in runs that collect the suite.
        Combinations whose skip is certain are not generated, only counted
        (``generation.combinations``, ``self.not_generated``).
        """
        preload_variants(self.settings.variants)
        variants = [get_variant(v) for v in self.settings.variants]
        only = metafunc.definition.get_closest_marker("perfsuite_only")
        if only:
            wanted = only.args[0]
            variants = [
                v for v in variants if (wanted(v) if callable(wanted) else getattr(v, wanted))
            ]
        pairs = [(v, c) for v in variants for c in self.cases_for(v)]
        modes = self.settings.modes if "mode" in metafunc.fixturenames else None
        left_out = generation.NotGenerated()
        names, params = generation.combinations(metafunc.definition, pairs, modes, left_out)
        self.not_generated.merge(left_out)
        for (variant, case_id, mode), reason in left_out.unrunnable.items():
            self.skipped[(variant, case_id, mode)] = SkippedResult(variant, case_id, reason, mode)
        self.inapplicable.update(inapplicable_builtins(pairs, loaded_user_variants()))
        if not params:
            wanted = only.args[0] if only else "runnable"
            what = (wanted.__doc__ or wanted.__name__) if callable(wanted) else wanted
            selected = ", ".join(self.settings.variants)
            reason = (
                "not generated: the skip of each combination is certain ("
                + "; ".join(f"{n} x {why}" for why, n in left_out.counts.most_common(2))
                + ")"
                if left_out.total
                else f"no selected variant qualifies: {what} (selected: {selected})"
            )
            skip = pytest.mark.skip(reason=reason)
            params = [pytest.param(*[None] * len(names), marks=skip, id="no-such-variant")]
        metafunc.parametrize(names, params)

    # -- baselines and the gate --------------------------------------------------------------
    def check_compare(self, benchmarks, compare, gate: bool) -> None:
        """Check every ``--benchmark-compare`` use before any test runs (``gate.baseline``).

        ``benchmarks``: pytest-benchmark's session (or None); ``compare``: the option's value.
        Raises ``BaselineError``: ``--perfsuite-gate`` without ``--benchmark-compare``, a value that
        is a test path, no saved run to compare with, or a newest one that is corrupt, truncated
        or from an incomplete run.
        """
        if not compare:
            if gate:
                raise BaselineError(
                    "--perfsuite-gate judges against a saved run: add --benchmark-compare[=NUM]",
                    "--perfsuite-gate",
                )
            return
        if benchmarks is None:
            raise BaselineError(
                "--benchmark-compare needs pytest-benchmark's session (is -p no:benchmark set?)"
            )
        self.baseline_path, _ = resolve_baseline(benchmarks.storage, compare)

    def baseline_differences(self, baseline: dict) -> list[str]:
        """Keep the baseline pytest-benchmark loaded; lines for each ``machine.MUST_MATCH`` difference."""
        self.baseline = baseline
        theirs = baseline.get("machine_info", {}).get("perfsuite", {})
        return machine.machine_differences(theirs, self.machine_info(), "the baseline", "this run")

    def baseline_coverage(self) -> str | None:
        """A note when the compared baseline holds only some of this run's benchmarks."""
        if self.baseline is None or not self.results:
            return None
        keys = [str(BenchmarkKey(r.variant, r.case_id, r.mode)) for r in self.results.values()]
        name = self.baseline_path.name if self.baseline_path else "(loaded)"
        return coverage_note(self.baseline, keys, name)

    def gate(
        self, head_benchmarks: list[dict], force: bool, fail_on_structure: bool
    ) -> GateOutcome:
        """Judge this run against the loaded baseline (separate runs; see ``gate.flow``).

        Raises:
            IncomparableRuns: the baseline is from other hardware/software and ``force`` is false.
            BaselineError: no baseline was loaded, or an entry of it is malformed.
        """
        if self.baseline is None:
            raise BaselineError("pytest-benchmark loaded no baseline to judge against")
        head = {"machine_info": {"perfsuite": self.machine_info()}, "benchmarks": head_benchmarks}
        outcome = judge_saved_runs(
            self.baseline,
            head,
            "the baseline",
            "this run",
            GateSettings(min_effect=SEPARATE_RUNS_MIN_EFFECT),
            force,
            fail_on_structure,
            "perfsuite gate: baseline -> this run",
        )
        write_text_atomic(Path(self.settings.results_dir) / "gate.md", outcome.report_md)
        return outcome

    # -- output ------------------------------------------------------------------------------
    def write_outputs(self, final: bool = True, started: bool = False) -> None:
        """Write table.md and run.json (atomically) when anything ran or crashed.

        Mid-run (``final=False``, a timed run after each benchmark) they are marked partial with the
        running test named; at the end, partial only when the run was interrupted or stopped early,
        and the trace manifest records how the run ended.
        """
        if self.disk_full:
            return  # said once and the run stopped: nothing more can be written there
        try:
            self._write_outputs(final, started)
        except OSError as exc:
            self.stop_if_disk_full(exc, Path(self.settings.results_dir))
            raise

    def _write_outputs(self, final: bool, started: bool) -> None:
        if self.results or self.skipped or self.crashed or started:
            incomplete = self.incomplete()
            if not final and incomplete is None:
                incomplete = {
                    "reason": "in progress (a run that died here, crashed or killed, leaves this)",
                    "finished": self.progress.finished,
                    "expected": self.progress.expected,
                }
            info = dict(
                self.machine_info(),
                peaks=self.peaks() if final else None,
                gpu_state=self.gpu_state() if final else None,
                shard=str(self.shard) if self.shard else None,
            )
            self.written = write_run(
                Path(self.settings.results_dir),
                list(self.results.values()),
                list(self.skipped.values()),
                info,
                list(self.crashed.values()),
                incomplete,
                None if final else self.progress.running,
            )
        if final:
            incomplete = self.incomplete()
            self.traces.finish(
                "complete"
                if incomplete is None
                else "interrupted"
                if self.progress.interrupted
                else "stopped early"
            )

    def stop_if_disk_full(self, exc: BaseException, folder: Path) -> None:
        """A write that failed because the disk (or the user's quota) is full stops the run with one
        line naming the folder (``pytest.exit``); what was written before stays. Other errors return."""
        found: BaseException | None = exc
        while found is not None and not (
            isinstance(found, OSError) and found.errno in (errno.ENOSPC, errno.EDQUOT)
        ):
            found = found.__cause__ or found.__context__
        if found is None:
            return
        self.disk_full = (
            f"perfsuite: no space left to write into {folder} ({found.strerror}); the run stopped "
            "here. The files written before are whole; free space (or choose another folder with "
            "--perfsuite-results) and run again"
        )
        self.progress.stopped = "stopped: the results disk is full"
        pytest.exit(self.disk_full, returncode=pytest.ExitCode.INTERRUPTED)

    def table_lines(self) -> list[str]:
        """The end-of-run table, grouped skip reasons, crashes, setup failures, output layouts that
        differ between variants, and where the files are; [] before writing."""
        if not self.written:
            return []
        results = list(self.results.values())
        incomplete = self.incomplete()
        lines = []
        if incomplete:
            lines.append(
                f"perfsuite: this run is partial ({incomplete['reason']}: {incomplete['finished']} of "
                f"{incomplete['expected']} benchmarks finished); its saved files say so"
            )
        lines.append(text_table(results))
        builtins = set(variant_names()) - set(loaded_user_variants())
        every_builtin = builtins <= set(self.settings.variants)
        lines += skip_lines(list(self.skipped.values()), self.inapplicable if every_builtin else {})
        for crash in self.crashed.values():
            lines.append(
                f"crashed {crash.variant} on {crash.case_id} in mode {crash.mode} (isolated child): "
                f"{crash.detail.splitlines()[0]}"
            )
        for key, failure in self.failures.failures().items():
            lines.append(f"failed {' / '.join(key)}: {failure}")
        for difference in layout_differences(self._layouts):
            lines.append(f"output layouts differ: {difference}")
        table_path, run_path = self.written
        lines.append(
            f"table: {table_path}   run: {run_path}   traces: {self.settings.traces_dir} "
            f"(this run's are listed in manifest.json)"
        )
        if all(r.median_s is None for r in results):
            lines.append(
                "timing was disabled in this run; the timed run is `perfsuite run` "
                "(in perfsuite's own checkout: pytest -c benchmarks.ini)"
            )
        lines += contention_warning(results)
        lines += kept_memory_warnings(results)
        spread = run_spread(list(self.speed_references.values()))
        lines += [f"perfsuite: note: {spread}"] if spread else []
        return lines


def contention_warning(results: list[BenchmarkResult]) -> list[str]:
    """The run's last lines when other processes disturbed timings: each contended benchmark and why."""
    flagged = contention_lines(
        results, prefix="perfsuite:   ", brief=True
    )  # full reasons: run.json, the report
    if not flagged:
        return []
    return [
        f"perfsuite: WARNING: {len(flagged)} of {sum(r.median_s is not None for r in results)} timings are not "
        "trustworthy: other processes, or the hypervisor (CPU steal), took the CPU while they ran (timing column "
        "CONTENDED; why, in short, follows; in full in run.json and the report):"
    ] + flagged


def kept_memory_warnings(results: list[BenchmarkResult]) -> list[str]:
    """One warning line per benchmark whose variant kept memory across calls, with bytes per call."""
    return [
        "perfsuite: WARNING: "
        + kept_memory_warning(r.variant, r.case_id, r.mode, r.kept_bytes_per_call)
        for r in results
        if r.kept_bytes_per_call
    ]


def inapplicable_builtins(pairs, users) -> dict[tuple[str, str], str]:
    """``(variant, case id) -> why in short`` for each built-in (not in ``users``) of the ``(Variant,
    AttentionCase)`` ``pairs`` that is not for that case at all (``inapplicable_reason``):
    ``"run on cuda only"``, or ``"are for other case forms, ..."``."""
    found = {}
    for variant, case in pairs:
        if variant.name not in users and inapplicable_reason(variant, case):
            found[(variant.name, case.id)] = (
                f"run on {', '.join(variant.devices or ())} only"
                if variant.device_unsupported(case.device)
                else "are for other case forms, such as score modifications and layouts"
            )
    return found


def skip_lines(skipped: list[SkippedResult], inapplicable: dict[tuple[str, str], str]) -> list[str]:
    """The end-of-run skip lines: ``skipped <variant> on N case(s) ... : <reason>``, one per variant and
    reason, except for built-ins that are not for a case at all (``inapplicable``: ``(variant, case
    id) -> why in short``, such as ``"run on cuda only"``; given when every built-in was selected, not
    named one by one). Those are one line of counts, since a run of every built-in on the CPU or on
    plain cases always has them; table.md and run.json keep each with its full reason."""
    lines = []
    shown = [s for s in skipped if (s.variant, s.case_id) not in inapplicable]
    for (variant, reason), (case_ids, modes) in group_skips(shown).items():
        more = f", and {len(case_ids) - 3} more in table.md" if len(case_ids) > 3 else ""
        lines.append(
            f"skipped {variant} on {len(case_ids)} case(s) ({', '.join(case_ids[:3])}{more}) "
            f"in mode(s) {', '.join(modes)}: {reason}"
        )
    left_out = {(s.variant, s.case_id) for s in skipped} & set(inapplicable)
    by_why: dict[str, set[str]] = {}
    for variant, case_id in sorted(left_out):
        by_why.setdefault(inapplicable[(variant, case_id)], set()).add(variant)
    if by_why:
        variants = set().union(*by_why.values())
        counts = "; ".join(
            f"{len(names)} {why}" for why, names in sorted(by_why.items(), key=lambda i: -len(i[1]))
        )
        lines.append(
            f"perfsuite: {len(variants)} built-in(s) do not apply to these cases and were left out "
            f"({counts}); table.md names each with its reason"
        )
    return lines


def group_skips(skipped: list[SkippedResult]) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(variant, reason) -> (case ids, modes), so one reason is printed once."""
    groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for skip in skipped:
        case_ids, modes = groups.setdefault((skip.variant, skip.reason), ([], []))
        case_ids += [] if skip.case_id in case_ids else [skip.case_id]
        modes += [] if skip.mode in modes else [skip.mode]
    return groups


def _capture(make):
    """``make()``, or the exception it raised (cached so every test of the pair sees it), its
    frames' locals released so a cached error holds no inputs or float64 graphs."""
    try:
        return make()
    except Exception as exc:
        return release_exception_frames(exc)


def _unwrap(found):
    if isinstance(found, Exception):
        raise found
    return found


__all__ = ["SuiteSession", "IncomparableRuns"]
