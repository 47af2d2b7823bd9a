"""Root conftest: loads the perfsuite pytest plugin and the hypothesis profile."""

from perfsuite.strategies import PROFILE_ENV, load_profile

pytest_plugins = ("perfsuite.plugin",)
HYPOTHESIS_PROFILE = load_profile()


def pytest_report_header(config):
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (set {PROFILE_ENV}=dev|ci|nightly)"
