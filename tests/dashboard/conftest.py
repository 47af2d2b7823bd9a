"""Fixtures of the dashboard tests: a history store built in the test (``dashboard_store``), and a headless
chromium page that fails the test on a console error or a network request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dashboard_browser import ARGS, CHROMIUM, record_problems
from dashboard_store import build_store


@pytest.fixture
def history_store(tmp_path: Path) -> tuple[str, list[str]]:
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    return url, build_store(url)


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("PERFSUITE_REQUIRE_CHROMIUM") == "1":  # set by .ci/run
            pytest.fail(
                "PERFSUITE_REQUIRE_CHROMIUM=1 but /usr/bin/chromium is missing (.ci/install-packages.sh)"
            )
        pytest.skip("no /usr/bin/chromium (Debian's chromium: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in perfsuite[dev]")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A page that fails the test on a console error, a page error or a request that is not file://."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    problems = record_problems(opened)
    yield opened
    context.close()
    assert problems == [], problems
