"""Every property as an ordinary test over the suite's variants and cases (plugin-parametrized).

A hypothesis failure prints the command that reruns its case here:
``perfsuite run --check -k test_property --perfsuite-cases <id> --perfsuite-seed <seed> --perfsuite-variants <v>``.
"""

import pytest

from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.suite.reliability import headline
from perfsuite.testing.properties import ALL_CHECKS, applicable


# a check that does not apply to a variant and case (``applicable``) is not generated
@pytest.mark.perfsuite_each("check", list(ALL_CHECKS), applicable)
def test_property(check, variant, case, perfsuite_run, request):
    """One property; a property that fails where the output is already wrong on the case (an earlier
    check said so in full) fails with one line naming that check, and ``score_copies`` so where
    another score-copy check of the pair reported the copy first."""
    try:
        failure = ALL_CHECKS[check](variant, case, perfsuite_run.settings.seed)
    except VariantUnsupported as exc:
        pytest.skip(f"variant {variant.name} cannot run case {case.id}: {exc}")
    if failure is not None:
        key = (variant.name, case.id)
        if check == "score_copies":  # one copy, counted by two more checks: one failure explains it
            perfsuite_run.copy_failures.refer(key, f"{check} fails too")
            perfsuite_run.copy_failures.note(key, request.node.nodeid, failure)
        perfsuite_run.output_failures.refer(key, f"{check} fails: {headline(failure)}")
        if check == "matches_reference":
            perfsuite_run.output_failures.note(key, request.node.nodeid, failure)
    assert failure is None, failure
