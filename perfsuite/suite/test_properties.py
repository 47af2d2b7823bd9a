"""Every property as an ordinary test over the suite's variants and cases (plugin-parametrized).

A hypothesis failure prints the command that reruns its case here:
``perfsuite run --check -k test_property --perfsuite-cases <id> --perfsuite-seed <seed> --perfsuite-variants <v>``.
"""

import pytest

from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.testing.properties import ALL_CHECKS, applicable


@pytest.mark.parametrize("check", list(ALL_CHECKS))
def test_property(check, variant, case, perfsuite_run):
    reason = applicable(check, variant, case)
    if reason:
        pytest.skip(f"{check} on {case.id}: {reason}")
    try:
        failure = ALL_CHECKS[check](variant, case, perfsuite_run.settings.seed)
    except VariantUnsupported as exc:
        pytest.skip(f"variant {variant.name} cannot run case {case.id}: {exc}")
    assert failure is None, failure
