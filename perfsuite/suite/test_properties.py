"""Every property as an ordinary test over the suite's variants and cases (plugin-parametrized).

A hypothesis failure prints the command that reruns its case here:
``perfsuite run --check -k test_property --perfsuite-cases <id> --perfsuite-seed <seed> --perfsuite-variants <v>``.
"""

import pytest

from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.testing.properties import ALL_CHECKS, applicable


# a check that does not apply to a variant and case (``applicable``) is not generated
@pytest.mark.perfsuite_each("check", list(ALL_CHECKS), applicable)
def test_property(check, variant, case, perfsuite_run):
    try:
        failure = ALL_CHECKS[check](variant, case, perfsuite_run.settings.seed)
    except VariantUnsupported as exc:
        pytest.skip(f"variant {variant.name} cannot run case {case.id}: {exc}")
    assert failure is None, failure
