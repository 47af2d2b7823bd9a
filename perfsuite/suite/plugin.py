"""The pytest plugin: hooks of a few lines that hand over to a ``SuiteSession``.

Installed with perfsuite, it loads through its ``pytest11`` entry point. Tests that take the
``variant`` and ``case`` arguments are parametrized over every selected variant x case, with ids
such as ``naive-b8h16s1024d64-bf16-causal-cuda``; tests that also take ``mode`` over every
selected mode too (``...-cuda-forward_backward``). Compiled variants run on
``perfsuite_compiled_cases`` when it is set, and a test marked ``perfsuite_only("compiled")``
only sees variants whose ``Variant.compiled`` is true (``perfsuite_only(predicate)`` takes any
``Variant -> bool``). Options: ``perfsuite.suite.options``; run state: ``perfsuite.suite.session``;
collection (shards, pair order): ``perfsuite.suite.collection``; the terminal summary and the
gate's section: ``perfsuite.suite.terminal``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from pytest_benchmark.session import BenchmarkSession, PerformanceRegression

from perfsuite.errors import PerfsuiteError
from perfsuite.gate.baseline import check_compare_value
from perfsuite.measure import conditions
from perfsuite.measure.evidence import Evidence
from perfsuite.suite import collection, options, terminal
from perfsuite.suite.session import SuiteSession
from perfsuite.variants import Variant, get_variant

SESSION_KEY = pytest.StashKey[SuiteSession]()


def session_of(config: pytest.Config) -> SuiteSession:
    """The run's ``SuiteSession``."""
    return config.stash[SESSION_KEY]


def _benchmarks(config: pytest.Config) -> BenchmarkSession | None:
    """pytest-benchmark's session, or None (``-p no:benchmark``)."""
    return getattr(config, "_benchmarksession", None)


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    """A ``PerfsuiteError`` becomes pytest's usage error: one line ``perfsuite: ...``, exit 4."""
    try:
        yield
    except PerfsuiteError as exc:
        raise pytest.UsageError(f"perfsuite: {exc}") from None


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers; refuse a test path taken as ``--benchmark-compare``'s value before
    pytest-benchmark loads it (its warning is an INTERNALERROR where warnings are errors); make the
    run's session (``SuiteSession.from_config``)."""
    options.add_markers(config)
    with _usage_errors():
        check_compare_value(config.getoption("benchmark_compare", None))
        config.stash[SESSION_KEY] = SuiteSession.from_config(config)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Every --benchmark-compare use (gate or not) must name a whole saved run; list this run's traces."""
    config, benchmarks = session.config, _benchmarks(session.config)
    with _usage_errors():
        session_of(config).check_compare(
            benchmarks,
            config.getoption("benchmark_compare", None),
            config.getoption("perfsuite_gate"),
        )
    timed = benchmarks is not None and not benchmarks.disabled
    session_of(config).start(session, timed=timed)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    benchmark = "benchmark" in getattr(item, "fixturenames", ())
    session_of(item.config).test_started(item.nodeid, benchmark)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not options.uses_perfsuite(config):
        return []
    suite = session_of(config)
    applied = suite.applied_conditions
    return options.header_lines(suite.settings) + conditions.header_lines(applied=applied)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"variant", "case"} <= set(metafunc.fixturenames):
        session_of(metafunc.config).parametrize(metafunc)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: every shard splits the same selection
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list
) -> None:
    """Keep this run's shard (``--perfsuite-shard``), and run each (variant, case) pair's tests together,
    so its memory can be released after them (``collection.collected``)."""
    with _usage_errors():
        collection.collected(config, items, session_of(config))


def pytest_runtest_teardown(item, nextitem) -> None:
    """After a pair's last test: drop its cached inputs and steps (``SuiteSession.release``)."""
    if collection.ends_pair(item, nextitem):
        session_of(item.config).release(*collection.pair_of(item))


def pytest_collection_finish(session: pytest.Session) -> None:
    """The shard's note; what to do when perfsuite was configured but none of its suite's tests were collected."""
    terminal.collection_notes(session, session_of(session.config))


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
    write table.md and run.json before any summary hook can fail. A run of the suite in which every
    test was skipped tested nothing: it exits 5, as a run that collected nothing does."""
    suite = session_of(session.config)
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        suite.interrupted(_benchmarks(session.config))
    if terminal.tested_nothing(session, suite, exitstatus):
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
    result = yield
    suite.finished(session.config)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config):
    """Print the table after pytest-benchmark's; a regression it finds fails the run without a traceback.
    The run is recorded in the history store first (pytest-benchmark has saved it by now)."""
    session_of(config).record_history(config)
    try:
        yield
    except PerformanceRegression:
        terminal.regressed(terminalreporter)
    finally:
        terminal.summary(terminalreporter, config, session_of(config))


__all__ = ["SuiteSession", "session_of"]
