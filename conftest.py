"""Root conftest: the hypothesis profile, and pytest-xdist's environment kept from the processes tests
start. (The perfsuite plugin loads by its pytest11 entry point.)"""

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


XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker_in_child_processes(monkeypatch):
    """Under ``pytest -n`` (scripts/test.sh) each worker has ``PYTEST_XDIST_WORKER`` set; a pytest a test
    starts would inherit it, and pytest-benchmark would then disable timing there as if it were a worker."""
    for name in XDIST_ENV:
        monkeypatch.delenv(name, raising=False)
