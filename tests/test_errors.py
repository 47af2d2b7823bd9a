"""One exception hierarchy: errors about bad values are ValueErrors, and each can name its source."""

import pytest

from perfsuite.errors import (
    BaselineError,
    ConfigError,
    DeviceTimingError,
    IncomparableRuns,
    PerfsuiteError,
    ReportError,
    TraceError,
    UsageError,
    WorkerError,
    did_you_mean,
)


@pytest.mark.parametrize(
    "error", [ConfigError, DeviceTimingError, TraceError, BaselineError, ReportError]
)
def test_bad_value_errors_are_value_errors_and_perfsuite_errors(error):
    assert issubclass(error, ValueError) and issubclass(error, PerfsuiteError)


@pytest.mark.parametrize("error", [IncomparableRuns, WorkerError, UsageError])
def test_other_errors_are_perfsuite_errors_only(error):
    assert issubclass(error, PerfsuiteError) and not issubclass(error, ValueError)


def test_an_error_carries_the_file_or_option_it_is_about():
    error = ConfigError("option modes: mode 'fwd' is not supported", source="option modes")
    assert (str(error), error.source) == (
        "option modes: mode 'fwd' is not supported",
        "option modes",
    )
    assert PerfsuiteError("no source").source is None


def test_did_you_mean_names_the_closest_known_name_or_nothing():
    assert did_you_mean("naiv", ["naive", "sdpa"]) == " (did you mean 'naive'?)"
    assert did_you_mean("zzz", ["naive", "sdpa"]) == ""
