"""Root conftest: the hypothesis profile. (The perfsuite plugin loads by its pytest11 entry point.)"""

import pytest

from perfsuite.testing.strategies import PROFILE_ENV, load_profile


def pytest_configure(config):
    try:
        config.stash[PROFILE_KEY] = load_profile()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config):
    return f"hypothesis profile: {config.stash[PROFILE_KEY]} (set {PROFILE_ENV}=dev|ci|nightly)"


PROFILE_KEY = pytest.StashKey[str]()
