"""Root conftest: the hypothesis profile. (The perfsuite plugin loads by its pytest11 entry point.)"""

from perfsuite.strategies import PROFILE_ENV, load_profile

HYPOTHESIS_PROFILE = load_profile()


def pytest_report_header(config):
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (set {PROFILE_ENV}=dev|ci|nightly)"
