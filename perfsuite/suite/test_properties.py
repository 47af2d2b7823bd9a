"""Every property as an ordinary test over the suite's variants and cases (plugin-parametrized).

A hypothesis failure prints the command that reruns its case here:
``perfsuite run --check -k test_property --perfsuite-cases <id> --perfsuite-seed <seed> --perfsuite-variants <v>``.
"""

import pytest

from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.suite.reliability import (
    COPIES_CHECK,
    check_of,
    float64_check_of,
    headline,
    refer_copy,
)
from perfsuite.testing.properties import ALL_CHECKS, applicable


# a check that does not apply to a variant and case (``applicable``) is not generated
@pytest.mark.perfsuite_each("check", list(ALL_CHECKS), applicable)
def test_property(check, variant, case, perfsuite_run, request):
    """One property; a property that fails where the output is already wrong on the case skips with one
    line naming the check that reports it in full (the pair's float64 check when collected, on whichever
    xdist worker; else the first that failed), and ``score_copies`` so where another score-copy check of
    the pair reported the copy first: one FAILED per mistake per case."""
    seed = perfsuite_run.settings.seed
    try:
        failure = ALL_CHECKS[check](variant, case, seed)
    except VariantUnsupported as exc:
        pytest.skip(f"variant {variant.name} cannot run case {case.id}: {exc}")
    if failure is not None:
        key = (variant.name, case.id)
        if check == "score_copies":  # one copy, counted by two more checks: one failure explains it
            _refer_copy(perfsuite_run, request, variant, case, f"{check} fails too")
            perfsuite_run.copy_failures.note(key, request.node.nodeid, failure)
        what = f"{check} fails: {headline(failure)}"
        perfsuite_run.output_failures.refer(key, what)
        twin = float64_check_of(request.session.items, variant.name, case.id)
        if (
            twin is not None and check != "score_copies"
        ):  # it reports a wrong output in full, whatever ran first, on any worker
            wrong = failure if check == "matches_reference" else _wrong_output(variant, case, seed)
            if wrong is not None:
                perfsuite_run.output_failures.refer_to(key, twin, wrong, what)
        if check == "matches_reference":
            perfsuite_run.output_failures.note(key, request.node.nodeid, failure)
    assert failure is None, failure


def _refer_copy(perfsuite_run, request, variant, case, what: str) -> None:
    """Skip, referring to the score-copy check that reports the copy in full (``refer_copy``; the pair's
    forward evidence is gathered for it when this process has none); returns when there is none."""
    perfsuite_run.copy_failures.refer((variant.name, case.id), what)
    if check_of(request.session.items, COPIES_CHECK, variant.name, case.id) is None:
        return
    try:
        evidence = perfsuite_run.evidence(variant, case)
    except (pytest.skip.Exception, pytest.fail.Exception):
        return  # its own skip or error is reported by the tests that need the evidence
    refer_copy(perfsuite_run, request, evidence, what)


def _wrong_output(variant, case, seed: int) -> str | None:
    """The float64 check's failure on the case's own inputs, or None (right, or it cannot run)."""
    try:
        return ALL_CHECKS["matches_reference"](variant, case, seed)
    except Exception:  # the property's own failure stands
        return None
