"""The dashboard's first screen on issue 52's scenario (``tests/history/scenario_store.py``), in Debian's
headless chromium: Findings list the regression the interleaved gate confirmed and the gather merged
after its pull request gate FAILED, nothing at the rename or README commits, no false improvement; the
separate runs' steps are drawn as unconfirmed with the command that would confirm them; Compare
starts at the last confirmed change, never at the contended first point."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perfsuite.cli.main import main
from perfsuite.history import open_store

from test_browser import open_site, shoot

sys.path.insert(0, str(Path(__file__).parents[1] / "history"))  # the scenario is the history tests'
from scenario_store import make_repository, record_scenario

pytestmark = pytest.mark.slow


def test_the_first_screen_lists_the_regression_and_the_gather_and_nothing_else(
    tmp_path, page, monkeypatch
):
    scenario = make_repository(tmp_path / "serving")
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    with open_store(url) as store:
        record_scenario(store, scenario)
    monkeypatch.chdir(scenario.repo)
    out = tmp_path / "site"
    assert main(["dashboard", "--store", url, "--out", str(out)]) == 0
    open_site(page, out / "index.html")
    names = {role: sha[:8] for role, sha in scenario.names.items()}
    rows = page.locator("#changes tbody tr")
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    assert len(texts) == 2, texts
    assert page.locator("#findings .lead").inner_text().startswith("2 open regression(s) and 0 ")
    [slower] = [t for t in texts if names["regression"] in t]
    assert "paged_attention" in slower and "+6.8% [+4.1%, +9.7%]" in slower
    assert "interleaved gate" in slower and names["gather"] in slower
    [gather] = [t for t in texts if "+2 gathers" in t]
    assert names["rename"] in gather and names["gather"] in gather
    assert "pull request gate FAILED" in gather
    first_bad = [rows.nth(i).locator("td").nth(5).inner_text() for i in range(rows.count())]
    assert sorted(b.split()[0] for b in first_bad) == sorted([names["gather"], names["regression"]])
    assert page.locator("#changes tr.improvement").count() == 0
    first = shoot(page, "scenario-first-screen", tmp_path)
    # the separate runs' steps are drawn on their series as unconfirmed, with the command
    notes = page.locator("li.unconfirmed")
    assert notes.count() >= 1
    assert "to confirm it: perfsuite ab --base-ref" in notes.first.inner_text()
    # Compare starts at the last confirmed change: the gate's two commits
    a = page.locator("#compare-a option:checked").inner_text()
    b = page.locator("#compare-b option:checked").inner_text()
    assert a.startswith(names["gather"]) and b.startswith(names["regression"])
    page.locator("#series").scroll_into_view_if_needed()
    shoot(page, "scenario-series", tmp_path)
    assert first.exists()


def test_compare_without_a_confirmed_change_starts_at_the_newest_two_clean_points(
    tmp_path, page, monkeypatch
):
    """Only the sink benchmark's separate runs (code that never changed, the first run contended): no
    finding, so Compare starts at the newest two commits with a clean point, never at the contended first."""
    import dataclasses

    from scenario_store import SEPARATE_RUNS, SINK, separate_run

    scenario = make_repository(tmp_path / "serving")
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    with open_store(url) as store:
        for role in SEPARATE_RUNS:
            run = separate_run(scenario, role)
            store.record(
                dataclasses.replace(
                    run, benchmarks=tuple(b for b in run.benchmarks if b.name == SINK)
                )
            )
    monkeypatch.chdir(scenario.repo)
    out = tmp_path / "site"
    assert main(["dashboard", "--store", url, "--out", str(out)]) == 0
    open_site(page, out / "index.html")
    assert page.locator("#changes").count() == 0
    a = page.locator("#compare-a option:checked").inner_text()
    b = page.locator("#compare-b option:checked").inner_text()
    names = {role: sha[:8] for role, sha in scenario.names.items()}
    assert a.startswith(names["regression"]) and b.startswith(names["readme"])
    assert page.locator("#compare-table tr.set-aside").count() == 0
