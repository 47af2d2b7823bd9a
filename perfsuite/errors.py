"""perfsuite's exceptions: one hierarchy, each error naming the file or option it is about.

``PerfsuiteError`` is the base the command line catches (printed as one line, exit 2) and the
plugin turns into a usage error. Each error keeps ``source``: the file, option or ini key the
message is about (``None`` when there is none), so callers can point at it without parsing text.
Errors that report a bad value also derive from ``ValueError``, as Python's own do.

    PerfsuiteError
    +-- ConfigError          a setting, option or variant spec is invalid (names it and what is allowed)
    |   +-- DeviceTimingError   a bad timer setting or device answer
    +-- TraceError           a file that is not a Kineto / Chrome trace
    +-- BaselineError        a saved run that cannot be read as a baseline (corrupt, truncated, absent)
    +-- IncomparableRuns     two runs from different hardware or software (the fields that differ)
    +-- ReportError          a file that is not a saved run of the suite
    +-- WorkerError          an A/B worker process failed or answered with an error
    +-- UsageError           a command-line request that cannot be carried out
    +-- HistoryError         a performance-history store that cannot be opened or written (names it)
        +-- NoHistoryStoreYet   a store file that does not exist yet, opened only to read
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest name of ``known`` (``difflib``), or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class PerfsuiteError(Exception):
    """Base of perfsuite's errors; ``source`` names the file or option the error is about."""

    def __init__(self, message: str, source: str | None = None):
        super().__init__(message)
        self.source = source


class ConfigError(PerfsuiteError, ValueError):
    """A setting's value is invalid; the message says which, from where, and what is allowed."""


class DeviceTimingError(ConfigError):
    """A bad timer setting or device answer (``perfsuite.measure.device_timing``); names the value."""


class TraceError(PerfsuiteError, ValueError):
    """A file that cannot be read as a Kineto / Chrome trace; the message names the file."""


class BaselineError(PerfsuiteError, ValueError):
    """A saved run that cannot be used as a baseline (unreadable, truncated, absent); names the file."""


class IncomparableRuns(PerfsuiteError):
    """Two runs (or A/B sides) measured on different hardware or software; names the fields."""


class ReportError(PerfsuiteError, ValueError):
    """A file that is not a saved run; the message names it."""


class WorkerError(PerfsuiteError):
    """An A/B worker process exited or answered with an error; names its source tree."""


class GateTampered(WorkerError):
    """An A/B worker's code changed how it is timed (a replaced timer or setting, times that disagree
    with the coordinator's clock) or hung past its limit; the gate fails naming the side (exit 1)."""


class UsageError(PerfsuiteError):
    """A command-line request that cannot be carried out; printed as one line, exit code 2."""


__all__ = [
    "PerfsuiteError",
    "ConfigError",
    "DeviceTimingError",
    "TraceError",
    "BaselineError",
    "IncomparableRuns",
    "ReportError",
    "WorkerError",
    "UsageError",
    "HistoryError",
    "NoHistoryStoreYet",
]


class HistoryError(PerfsuiteError):
    """A history store (``perfsuite.history``) that cannot be opened, read or written: not a
    store, a newer schema, an unreachable server; ``source`` is the file or URL (password hidden)."""


class NoHistoryStoreYet(HistoryError):
    """A history store file that does not exist yet, opened to read only (nothing recorded there yet);
    readers that may find none (the gate's noise floor) say nothing instead of warning."""
