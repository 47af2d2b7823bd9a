"""What a run prints on pytest's terminal: the collection's notes, and at the end the table, the
baseline's coverage, the history line and the regression gate's section (``--perfsuite-gate``),
with the exit status a regression or an unusable baseline sets. The plugin's terminal hooks hand
over here; the gate's decisions are ``gate.flow``'s (through ``SuiteSession.gate``).
"""

from __future__ import annotations

import pytest

from perfsuite.errors import PerfsuiteError
from perfsuite.suite import options
from perfsuite.suite.session import SuiteSession
from perfsuite.variants.user import loaded_user_variants

NO_SUITE_COLLECTED = (
    "perfsuite: no test of the attention suite was collected here. The suite ships with "
    "perfsuite: run `perfsuite run` (timed) or `perfsuite run --check` from your repository "
    "root, or `pytest --pyargs perfsuite.suite`."
)


def _fail(terminalreporter, status: pytest.ExitCode) -> None:
    """Set the run's exit status (pytest-benchmark's way: the reporter's session)."""
    terminalreporter._session.exitstatus = status


def collection_notes(session: pytest.Session, suite: SuiteSession) -> None:
    """The shard's note (what it kept), the combinations not generated (their skip was certain; every
    reason with ``-v``), and what to do when perfsuite was asked for but none of its suite's tests
    were collected."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    if suite.shard_note:
        reporter.write_line(suite.shard_note)
    verbose = session.config.option.verbose > 0
    for line in suite.not_generated.lines(most=None if verbose else 4):
        reporter.write_line(line)
    suite_items = [item for item in session.items if "variant" in getattr(item, "fixturenames", ())]
    if not suite_items:
        # the repository's own tests (plain pytest with perfsuite keys in its configuration) are not
        # the suite's business: nothing of perfsuite ran, so no variant of the user's is idle
        if options.asked_for_perfsuite(session.config):
            reporter.write_line(NO_SUITE_COLLECTED, yellow=True)
        return
    # a shard holds some variants' tests only, and -k / -m deselect on purpose
    chosen = bool(
        suite.shard_note or session.config.option.keyword or session.config.option.markexpr
    )
    idle = [] if chosen else idle_user_variants(suite_items, suite.settings.variants)
    reasons = "the reasons are above" if suite.not_generated.total else "-v lists the skips"
    for name in idle:
        reporter.write_line(
            f"perfsuite: your variant {name} has no test on these cases: each combination's skip is "
            f"certain ({reasons}; a form it does not declare is the usual one)",
            yellow=True,
        )
    users = [v for v in suite.settings.variants if v in loaded_user_variants()]
    if idle and len(idle) == len(users):
        raise pytest.UsageError(
            f"none of your variants ({', '.join(idle)}) has a test on these cases, so this run would "
            f"check nothing of yours; declare the forms the cases carry ({reasons}) or "
            "choose cases your variants run (perfsuite_case_set, --perfsuite-cases)"
        )


def idle_user_variants(items, selected) -> list[str]:
    """The selected users' variants (``--perfsuite-variant``, ``perfsuite_user_variants``, entry points)
    that no collected suite test runs: a run of theirs that is all skips would otherwise read as a pass."""
    ran = set()
    for item in items:
        variant = getattr(getattr(item, "callspec", None), "params", {}).get("variant")
        if variant is not None:
            ran.add(variant.name)
    return [v for v in selected if v in loaded_user_variants() and v not in ran]


TESTED_NOTHING = (
    "perfsuite: every test of the attention suite was skipped: nothing was checked or timed "
    "(exit 5, as when nothing is collected); the skip reasons say why (-rs lists them)"
)


def tested_nothing(session: pytest.Session, suite: SuiteSession, exitstatus: int) -> bool:
    """Whether a finished run of the attention suite passed and failed nothing (every test skipped);
    said on the terminal. Collect-only runs and runs that failed or stopped keep their status."""
    if exitstatus != pytest.ExitCode.OK or session.config.option.collectonly:
        return False
    if not suite.runs_suite:
        return False
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return False
    ran = [
        r
        for key in ("passed", "failed", "error", "xfailed", "xpassed")
        for r in reporter.stats.get(key, [])
        if getattr(r, "when", "call") == "call" or key == "error"
    ]
    if ran or not reporter.stats.get("skipped"):
        return False
    reporter.ensure_newline()
    reporter.write_line(TESTED_NOTHING, yellow=True)
    return True


def regressed(terminalreporter) -> None:
    """pytest-benchmark's ``--benchmark-compare-fail`` found a regression: one red line, a failed run
    (no traceback)."""
    terminalreporter.write_line(
        "perfsuite: performance regressed beyond --benchmark-compare-fail (see 'Performance has regressed' above)",
        red=True,
    )
    _fail(terminalreporter, pytest.ExitCode.TESTS_FAILED)


def summary(terminalreporter, config: pytest.Config, suite: SuiteSession) -> None:
    """The end of the run: the baseline's coverage note, the table section, the history line, and
    with ``--perfsuite-gate`` the gate's section."""
    lines = suite.table_lines()
    coverage = suite.baseline_coverage()
    if coverage:
        terminalreporter.write_line(f"perfsuite: {coverage}", yellow=True)
    if lines:
        terminalreporter.section("perfsuite: attention at a glance")
        for line in lines:
            terminalreporter.write_line(line)
    if suite.history_line:
        terminalreporter.write_line(suite.history_line)
    if config.getoption("perfsuite_gate"):
        gate_section(terminalreporter, config, suite)


def gate_section(terminalreporter, config: pytest.Config, suite: SuiteSession) -> None:
    """perfsuite's verdicts against the --benchmark-compare baseline (gate.md written by the session).

    A regression fails the run (exit 1); a baseline that cannot be judged (``PerfsuiteError``: none
    loaded, from other hardware or software without ``--perfsuite-gate-force``), or one that judged
    nothing, is a usage error (exit 4), said in red.
    """
    terminalreporter.section("perfsuite: regression gate")
    benchmarks = [b.as_dict(include_data=True) for b in config._benchmarksession.benchmarks]
    try:
        outcome = suite.gate(
            benchmarks,
            config.getoption("perfsuite_gate_force"),
            config.getoption("perfsuite_fail_on_structure"),
        )
    except PerfsuiteError as exc:
        terminalreporter.write_line(f"perfsuite: {exc}", red=True)
        _fail(terminalreporter, pytest.ExitCode.USAGE_ERROR)
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
    status = {1: pytest.ExitCode.TESTS_FAILED, 2: pytest.ExitCode.USAGE_ERROR}.get(
        outcome.exit_code
    )
    if status is not None:
        _fail(terminalreporter, status)
