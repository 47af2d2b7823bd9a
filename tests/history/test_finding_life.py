"""A finding's life on the user's scenario of issue 52 (``scenario_store``), on SQLite and PostgreSQL:
a regression an interleaved gate confirmed stays open across later commits, separate runs that cannot
show a change stay unconfirmed (never a finding), the gather merged after its pull request gate FAILED is
a structural finding linked to that gate, and an accepted finding keeps its reason in the store."""

from __future__ import annotations

import json

import pytest

from perfsuite.cli.main import main
from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.history import open_store
from perfsuite.history.capture import main_line, merged_at

from scenario_store import (
    PAGED,
    SEPARATE_RUNS,
    SINK,
    make_repository,
    record_scenario,
    separate_run,
)


@pytest.fixture
def scenario(tmp_path, store_url, monkeypatch):
    found = make_repository(tmp_path / "serving")
    monkeypatch.chdir(found.repo)  # detect follows this repository's main line, as a user's does
    with open_store(store_url) as store:
        record_scenario(store, found)
    return found


def detect_json(url: str, capsys) -> tuple[int, list[dict]]:
    code = main(["history", "--store", url, "detect", "--json"])
    return code, json.loads(capsys.readouterr().out)


def open_findings(records: list[dict]) -> set[tuple[str, str, str]]:
    return {
        (r["benchmark"], f["first_bad"], f["kind"])
        for r in records
        for f in r["findings"]
        if f["status"] == "open"
    }


def test_after_the_readme_commit_detect_names_the_regression_and_the_gather(
    scenario, store_url, capsys
):
    names = scenario.names
    assert main(["history", "--store", store_url, "detect"]) == 1
    text = capsys.readouterr().out
    assert f"first bad {names['regression'][:10]}" in text
    assert "x1.068 [1.041, 1.097] slower (interleaved gate); structure unchanged [open]" in text
    assert f"{names['rename'][:10]} -> {names['gather'][:10]}: +2 gathers" in text
    assert f"pull request gate FAILED on this structure at {scenario.gather_tip[:10]}" in text
    code, records = detect_json(store_url, capsys)
    assert code == 1
    assert open_findings(records) == {
        (PAGED, names["regression"], "timing"),
        (PAGED, names["gather"], "structure"),
    }
    every = [f for r in records for f in r["findings"]]
    assert not {f["first_bad"] for f in every} & {names["rename"], names["readme"]}
    # the separate runs' steps (0.5x-1.7x on unchanged code) are drawn as unconfirmed, each with the
    # command that would confirm it, never a finding
    suspects = [u for r in records for u in r["unconfirmed"]]
    assert suspects and all(u["command"].startswith("perfsuite ab --base-ref ") for u in suspects)
    assert {(u["benchmark"], u["first_bad"]) for u in suspects} >= {(SINK, names["readme"])}


def test_the_dashboard_lists_the_same_findings_and_no_false_improvement(scenario, store_url):
    names = scenario.names
    order = main_line(scenario.repo)[1]
    with open_store(store_url) as store:
        heads = [scenario.gather_tip]
        model = dashboard_from_store(
            store, commit_order=order, merged_at=merged_at(scenario.repo, heads, order)
        )
    listed = {
        (s.variant, c.first_bad, c.regression)
        for s in model.series
        for c in s.change_points
        if c.open
    }
    assert listed == {
        ("paged_attention", names["regression"], True),
        ("paged_attention", names["gather"], True),
    }
    drawn = [c for s in model.series for c in s.change_points if not c.open]
    assert drawn and all(c.status == "unconfirmed" for c in drawn)
    assert all("to confirm it: perfsuite ab --base-ref" in c.note for c in drawn)
    [gather] = [
        c
        for s in model.series
        for c in s.change_points
        if c.open and c.first_bad == names["gather"]
    ]
    assert "+2 gathers" in gather.size and "+8.0 MiB gathered" in gather.size
    assert "pull request gate FAILED" in gather.cause


def test_the_regression_stays_open_until_accepted_with_its_reason_kept(scenario, store_url, capsys):
    names = scenario.names
    code, records = detect_json(store_url, capsys)
    [regression] = [
        f for r in records for f in r["findings"] if f["first_bad"] == names["regression"]
    ]
    reason = "per-page bookkeeping is worth 7% here"
    assert (
        main(["history", "--store", store_url, "accept", regression["id"], "--reason", reason]) == 0
    )
    assert reason in capsys.readouterr().out
    code, records = detect_json(store_url, capsys)
    [accepted] = [f for r in records for f in r["findings"] if f["id"] == regression["id"]]
    assert (accepted["status"], accepted["reason"]) == ("accepted", reason)
    assert code == 1  # the gather is still open
    assert open_findings(records) == {(PAGED, names["gather"], "structure")}
    assert main(["history", "--store", store_url, "show", PAGED]) == 0
    shown = capsys.readouterr().out
    assert f"{regression['id']}" in shown and f"[accepted: {reason}]" in shown
    assert main(["history", "--store", store_url, "show", SINK]) == 0
    shown = capsys.readouterr().out
    readme = names["readme"][:10]
    assert f"-> {readme}: x0.499" in shown and "better; structure unchanged  (p=" in shown
    assert [line for line in shown.splitlines() if f"-> {readme}" in line and "  (p=" in line][
        0
    ].endswith("[unconfirmed]")


def test_before_the_gate_the_separate_runs_alone_name_nothing(
    tmp_path, store_url, monkeypatch, capsys
):
    found = make_repository(tmp_path / "serving")
    monkeypatch.chdir(found.repo)
    with open_store(store_url) as store:
        for role in SEPARATE_RUNS:
            store.record(separate_run(found, role))
    code, records = detect_json(store_url, capsys)
    # without the gates, the structure is still history; the timing steps are only unconfirmed
    assert code == 1
    assert open_findings(records) == {(PAGED, found.names["gather"], "structure")}
    assert all(f["kind"] == "structure" for r in records for f in r["findings"])


def test_a_gate_regression_stays_open_until_a_later_gate_shows_it_recovered(store_url, capsys):
    """Flat separate runs; a gate calls commit 10 slower: open at 11 and 12 (no later measurement says
    otherwise); a later gate from its last good commit 9 to 12 that finds no change recovers it."""
    from test_gates import record_gates, record_history

    with open_store(store_url) as store:
        record_history(store, step_at=99)
        record_gates(store, (9, 10, 1.072, 1.031, 1.114, "slower"))
    assert main(["history", "--store", store_url, "detect", "--measure", "time_s"]) == 1
    assert "[open]" in capsys.readouterr().out
    with open_store(store_url) as store:
        record_gates(store, (9, 12, 1.004, 0.98, 1.03, "no change"))
    code, records = detect_json(store_url, capsys)
    [finding] = [f for r in records for f in r["findings"]]
    assert code == 0 and finding["status"] == "recovered"
    assert finding["closed_at"] == "12" + "ab" * 19


def test_a_gate_that_decided_on_shared_contended_pairs_is_a_pair(store_url):
    """On a loaded machine every block pair of a gate may be contended; ``--contended-pairs shared`` keeps
    pairs whose two blocks both were (the load slows both sides alike) and the gate decides on them. The
    store marks such sides contended; the history still reads the gate's verdict, as the gate decided it."""
    from history_records import make_run
    from perfsuite.history.importing import runs_from_ab_json
    from test_gates import ab_payload, record_history, series_of, sha

    payload = ab_payload(9, 10, 1.354, 1.301, 1.411, "slower")
    payload["benchmarks"][0]["contended_pairs"] = [True] * 4
    undecided = ab_payload(10, 11, 1.0, 0.8, 1.3, "inconclusive: contended")
    undecided["benchmarks"][0]["contended_pairs"] = [True] * 4
    with open_store(store_url) as store:
        record_history(store, step_at=99)
        for document in (payload, undecided):
            for run in runs_from_ab_json(document, testbed=make_run("x", sha(1), 1).testbed):
                store.record(run)
        pairs = store.pairs(series_of(store))
    assert [(p.base_sha, p.head_sha, p.verdict) for p in pairs] == [(sha(9), sha(10), "slower")]
