"""The pytest plugin: hooks of a few lines that hand over to a ``SuiteSession``.

Installed with perfsuite, it loads through its ``pytest11`` entry point. Tests that take the
``variant`` and ``case`` arguments are parametrized over every selected variant x case, with ids
such as ``naive-b8h16s1024d64-bf16-causal-cuda``; tests that also take ``mode`` over every
selected mode too (``...-cuda-forward_backward``). Compiled variants run on
``perfsuite_compiled_cases`` when it is set, and a test marked ``perfsuite_only("compiled")``
only sees variants whose ``Variant.compiled`` is true (``perfsuite_only(predicate)`` takes any
``Variant -> bool``). Options: ``perfsuite.suite.options``; run state: ``perfsuite.suite.session``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pytest_benchmark.session import PerformanceRegression

from perfsuite.errors import ConfigError, PerfsuiteError
from perfsuite.measure import conditions
from perfsuite.measure.evidence import Evidence
from perfsuite.suite import options, settings, shards
from perfsuite.suite.session import SuiteSession
from perfsuite.variants import Variant, get_variant
from perfsuite.variants.user import (
    load_entry_point_variants,
    load_variant_spec,
    loaded_user_variants,
)

SESSION_KEY = pytest.StashKey[SuiteSession]()
APPLIED_CONDITIONS_KEY = pytest.StashKey[
    list
]()  # process conditions applied after start (measure.conditions)
SHARD_KEY = pytest.StashKey[object]()  # the run's shards.Shard, or None
SHARD_NOTE_KEY = pytest.StashKey[str]()  # what the shard kept, for the collection summary


def session_of(config: pytest.Config) -> SuiteSession:
    """The run's ``SuiteSession``."""
    return config.stash[SESSION_KEY]


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "perfsuite_only(flag_or_predicate): parametrize only over variants whose "
        "Variant.<flag> is true, or for which predicate(variant) is true",
    )
    config.addinivalue_line(
        "markers",
        "xdist_group(name): pytest-xdist's; set by perfsuite on every variant/case "
        "pair (declared here too for runs without pytest-xdist)",
    )
    try:
        load_entry_point_variants()
    except ValueError as exc:
        raise pytest.UsageError(
            f"perfsuite: installed entry points (group perfsuite.variants): {exc}"
        ) from None
    for spec, source in options.variant_specs(config):
        try:
            load_variant_spec(spec)
        except ValueError as exc:
            raise pytest.UsageError(f"perfsuite: {source}: {exc}") from None
    try:
        resolved = settings.resolve(
            options.raw_settings(config), torch.cuda.is_available(), loaded_user_variants()
        )
    except ConfigError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    try:
        config.stash[SHARD_KEY] = options.shard(config)
    except PerfsuiteError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    config.stash[SESSION_KEY] = SuiteSession(
        resolved, tuple(spec for spec, _ in options.variant_specs(config))
    )
    shard = config.stash[SHARD_KEY]
    config.stash[SESSION_KEY].shard = str(shard) if shard is not None else None
    if options.uses_perfsuite(config):  # another repository's plain pytest: left as it is
        config.stash[APPLIED_CONDITIONS_KEY] = conditions.apply_in_process()


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Every --benchmark-compare use (gate or not) must name a whole saved run; list this run's traces."""
    config = session.config
    benchmarks = getattr(config, "_benchmarksession", None)
    suite = session_of(config)
    try:
        suite.check_compare(
            benchmarks,
            config.getoption("benchmark_compare", None),
            config.getoption("perfsuite_gate"),
        )
    except PerfsuiteError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    suite.start(session, timed=benchmarks is not None and not benchmarks.disabled)


def _saving_storage(benchmarks) -> Path | None:
    """pytest-benchmark's storage folder when this run saves into it (``--benchmark-autosave``/``-save``)."""
    if benchmarks is None or benchmarks.disabled or not (benchmarks.save or benchmarks.autosave):
        return None
    path = getattr(benchmarks.storage, "path", None)
    return Path(path) if path is not None else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    session_of(item.config).test_started(
        item.nodeid, "benchmark" in getattr(item, "fixturenames", ())
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not options.uses_perfsuite(config):
        return []
    applied = config.stash.get(APPLIED_CONDITIONS_KEY, [])
    return options.header_lines(session_of(config).settings) + conditions.header_lines(
        applied=applied
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"variant", "case"} <= set(metafunc.fixturenames):
        session_of(metafunc.config).parametrize(metafunc)


def _pair(item) -> tuple | None:
    """(variant, case) of a suite test item, None for other tests."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    variant, case = params.get("variant"), params.get("case")
    return (variant.name, case) if variant is not None and case is not None else None


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: every shard splits the same selection
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list
) -> None:
    """Keep this run's shard (``--perfsuite-shard``), and run each (variant, case) pair's tests together,
    so its memory can be released after them."""
    shard = config.stash.get(SHARD_KEY, None)
    if shard is not None:
        durations, origin = shard_durations(config)
        keep = shards.split([shards.item_group(item) for item in items], shard, durations)
        dropped = [item for item, kept in zip(items, keep) if not kept]
        items[:] = [item for item, kept in zip(items, keep) if kept]
        config.hook.pytest_deselected(items=dropped)
        config.stash[SHARD_NOTE_KEY] = (
            f"perfsuite: shard {shard}: {len(items)} of {len(items) + len(dropped)} "
            f"tests, balanced by {origin}"
        )
    first_seen: dict[tuple, int] = {}
    for item in items:
        pair = _pair(item)
        if pair is not None:
            first_seen.setdefault((pair[0], pair[1].id), len(first_seen))
    items.sort(
        key=lambda item: (
            -1 if _pair(item) is None else first_seen[(_pair(item)[0], _pair(item)[1].id)]
        )
    )
    suite = session_of(config)
    suite.expect(sum(1 for item in items if "benchmark" in getattr(item, "fixturenames", ())))
    if config.option.collectonly or not any(_pair(item) is not None for item in items):
        return  # another suite's tests: perfsuite writes nothing, so checks nothing
    suite.runs_suite = True
    try:  # before the first test: one usage error, not a failure found after the timed run
        suite.check_outputs(_saving_storage(getattr(config, "_benchmarksession", None)))
    except PerfsuiteError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None
    suite.mark_previous_run_superseded()


def shard_durations(config: pytest.Config) -> tuple[dict[str, float], str]:
    """Known seconds per shard group (``shards.item_group``), and where they came from: the file a
    launcher names in ``PERFSUITE_SHARD_WEIGHTS``, else the history store (read only, never created),
    else none (every test weighs 1)."""
    import json
    import os

    from perfsuite.history import open_store
    from perfsuite.history.capture import commit_of

    none = {}, "test count (no durations known)"
    if os.environ.get(shards.WEIGHTS_VARIABLE):
        path = os.environ[shards.WEIGHTS_VARIABLE]
        try:
            given = {
                str(k): float(v) for k, v in json.loads(open(path, encoding="utf-8").read()).items()
            }
            return (given, f"durations in {path}") if given else none
        except (OSError, ValueError, AttributeError) as exc:
            raise pytest.UsageError(
                f"perfsuite: {shards.WEIGHTS_VARIABLE}={path}: not a JSON object of seconds "
                f"per group ({exc})"
            ) from None
    try:
        with open_store(
            config.getoption("perfsuite_history_url"),
            config.getini("perfsuite_history_url") or None,
            config.rootpath,
            create=False,
        ) as store:
            durations = shards.stored_durations(
                store,
                commit_of(config.rootpath).sha,
                int(config.getoption("benchmark_min_rounds", 5) or 5),
                float(config.getoption("benchmark_max_time", 1.0) or 1.0),
            )
    except Exception:  # no store yet, or one that cannot be read: shards still split, by test count
        return none
    return (durations, "durations from the history store") if durations else none


def pytest_runtest_teardown(item, nextitem) -> None:
    """After a pair's last test: drop its cached inputs and steps (``SuiteSession.release``)."""
    pair, following = _pair(item), _pair(nextitem) if nextitem is not None else None
    if pair is not None and (
        following is None or (following[0], following[1].id) != (pair[0], pair[1].id)
    ):
        session_of(item.config).release(pair[0], pair[1])


def pytest_collection_finish(session: pytest.Session) -> None:
    """Say what to do when perfsuite was configured but none of its suite's tests were collected."""
    suite_items = [item for item in session.items if "variant" in getattr(item, "fixturenames", ())]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    note = session.config.stash.get(SHARD_NOTE_KEY, None)
    if note and reporter:
        reporter.write_line(note)
    if not suite_items and reporter and options.asked_for_perfsuite(session.config):
        reporter.write_line(
            "perfsuite: no test of the attention suite was collected here. The suite ships with "
            "perfsuite: run `perfsuite run` (timed) or `perfsuite run --check` from your repository "
            "root, or `pytest --pyargs perfsuite.suite`.",
            yellow=True,
        )


@pytest.fixture
def perfsuite_run(request: pytest.FixtureRequest) -> SuiteSession:
    """The run's ``SuiteSession`` (settings, evidence cache, results)."""
    return session_of(request.config)


@pytest.fixture(scope="session")
def perfsuite_variants(request: pytest.FixtureRequest) -> list[Variant]:
    """The selected variants (``--perfsuite-variants``; users' own included), for tests of your own,
    e.g. hypothesis property tests (session-scoped, so ``@given`` tests may take it)."""
    return [get_variant(name) for name in session_of(request.config).settings.variants]


@pytest.fixture
def attention_evidence(perfsuite_run: SuiteSession, variant, case) -> Evidence:
    """Forward evidence for this test's variant and case; skips with the reason when it cannot run."""
    return perfsuite_run.evidence(variant, case)


@pytest.fixture
def mode_evidence(perfsuite_run: SuiteSession, variant, case, mode) -> Evidence:
    """Evidence for this test's variant, case and mode; skips with the reason when it cannot run."""
    return perfsuite_run.evidence(variant, case, mode)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["perfsuite"] = session_of(config).machine_info()


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    """Store the measured peaks (outside machine_info, which is compared) and, for an interrupted or
    stopped run, the partial-run marker that keeps it from being used as a baseline."""
    session_of(config).update_saved_json(output_json)


def pytest_benchmark_compare_machine_info(
    config, benchmarksession, machine_info, compared_benchmark
) -> None:
    """Say plainly when the baseline came from other hardware or another torch; keep it for the gate."""
    for difference in session_of(config).baseline_differences(compared_benchmark):
        benchmarksession.logger.warning(
            f"perfsuite: baseline differs in {difference}; "
            "timings from different hardware or software are not comparable"
        )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus):
    """Note an interrupted run before pytest-benchmark saves (its marker goes into the saved file), then
    write table.md and run.json before any summary hook can fail."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        session_of(session.config).interrupted()
        # a benchmark stopped before its first round has no data, which pytest-benchmark cannot save
        saved = getattr(session.config, "_benchmarksession", None)
        if saved is not None:
            saved.benchmarks[:] = [bench for bench in saved.benchmarks if bench]
    result = yield
    session_of(session.config).write_outputs()
    session_of(session.config).record_history(
        session.config
    )  # when no terminal summary recorded it
    return result


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config):
    """Print the table after pytest-benchmark's; a regression it finds fails the run without a traceback.
    The run is recorded in the history store first (pytest-benchmark has saved it by now)."""
    session_of(config).record_history(config)
    try:
        yield
    except PerformanceRegression:
        terminalreporter.write_line(
            "perfsuite: performance regressed beyond --benchmark-compare-fail (see 'Performance has regressed' above)",
            red=True,
        )
        terminalreporter._session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        lines = session_of(config).table_lines()
        coverage = session_of(config).baseline_coverage()
        if coverage:
            terminalreporter.write_line(f"perfsuite: {coverage}", yellow=True)
        if lines:
            terminalreporter.section("perfsuite: attention at a glance")
            for line in lines:
                terminalreporter.write_line(line)
        if session_of(config).history_line:
            terminalreporter.write_line(session_of(config).history_line)
        if config.getoption("perfsuite_gate"):
            run_gate(terminalreporter, config)


def run_gate(terminalreporter, config: pytest.Config) -> None:
    """perfsuite's verdicts against the --benchmark-compare baseline; a regression fails the run."""
    terminalreporter.section("perfsuite: regression gate")
    benchmarks = [b.as_dict(include_data=True) for b in config._benchmarksession.benchmarks]
    try:
        outcome = session_of(config).gate(
            benchmarks,
            config.getoption("perfsuite_gate_force"),
            config.getoption("perfsuite_fail_on_structure"),
        )
    except PerfsuiteError as exc:
        terminalreporter.write_line(f"perfsuite: {exc}", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    if outcome.judged_nothing:
        terminalreporter.write_line(
            "perfsuite: the gate judged nothing: no benchmark of this run is in the baseline",
            red=True,
        )
    # the report lists the failures; its closing verdict line is printed once, in colour
    terminalreporter.write_line(outcome.report_md.removesuffix(f"\n**{outcome.verdict_line}**\n"))
    terminalreporter.write_line(
        outcome.verdict_line, red=bool(outcome.exit_code), green=not outcome.exit_code
    )
    exit_status = {1: pytest.ExitCode.TESTS_FAILED, 2: pytest.ExitCode.USAGE_ERROR}.get(
        outcome.exit_code
    )
    if exit_status is not None:
        terminalreporter._session.exitstatus = exit_status


__all__ = ["SuiteSession", "session_of"]
