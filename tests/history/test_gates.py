"""Interleaved A/B gates in the history: stored from ``perfsuite ab --json``, read back as pairs, and
overruling separate-run change points (``changepoints.with_gates``), on both engines."""

from __future__ import annotations

import dataclasses

from history_records import make_run
from perfsuite.history import open_store
from perfsuite.history.changepoints import GATE, SEPARATE_RUNS, detect, with_gates
from perfsuite.history.importing import runs_from_ab_json
from perfsuite.history.query import Pair
from perfsuite.history.render import show_json, show_lines

BENCH = "naive/b2h4s64d32-fp32-causal-cpu/forward"
TIMES_S = (1.0e-3, 1.02e-3, 0.98e-3, 1.01e-3, 0.99e-3)


def sha(position: int) -> str:
    return f"{position:02d}" + "ab" * 19  # short sha: 10abababab


def ab_payload(base: int, head: int, ratio: float, low: float, high: float, verdict: str) -> dict:
    """A ``perfsuite ab --json`` document of one benchmark gated between two commits."""
    commit = lambda p: {"sha": sha(p), "branch": "main", "position": p, "dirty": False}
    return {
        "machine": {"base_machine": {"torch": "2.13.0"}, "torch": "2.13.0"},
        "benchmarks": [
            {
                "key": BENCH,
                "base_blocks_s": [list(TIMES_S)] * 4,
                "head_blocks_s": [[t * ratio for t in TIMES_S]] * 4,
                "contended_pairs": [False] * 4,
                "verdict": verdict,
                "ratio": {"ratio": ratio, "low": low, "high": high, "method": "paired sequential"},
            }
        ],
        "commits": {"base": commit(base), "head": commit(head)},
        "perfsuite_run_uid": f"gate-{base}-{head}",
        "perfsuite_software": {
            side: dict(make_run("x", sha(1), 1).software.versions) for side in ("base", "head")
        },
    }


def record_history(store, step_at: int = 6, commits: int = 12) -> None:
    """Separate runs of ``commits`` commits whose level moves by x1.3 at ``step_at`` (what a change of
    the machine's speed between runs looks like to them); each run has more rounds than a gate's
    side, so the gates' rounds pooled into a point do not move its median."""
    for p in range(1, commits + 1):
        scale = 1.3 if p >= step_at else 1.0
        store.record(make_run(f"r{p}", sha(p), p, tuple(t * scale for t in TIMES_S * 9)))


def record_gates(store, *gates: tuple) -> None:
    testbed = make_run("x", sha(1), 1).testbed
    for gate in gates:
        for run in runs_from_ab_json(ab_payload(*gate), testbed=testbed):
            store.record(run)


def series_of(store):
    (series,) = store.list_series(benchmark=BENCH, measure="time_s")
    return series


def test_separate_runs_see_a_step_and_a_gate_between_those_commits_dismisses_it(store_url):
    with open_store(store_url) as store:
        record_history(store)
        series = series_of(store)
        alone = detect(store.points(series.key))
        assert [(c.index, c.evidence) for c in alone] == [(5, SEPARATE_RUNS)]
        record_gates(store, (5, 6, 1.004, 0.98, 1.03, "no change"))
        points = store.points(series.key)
        assert [p.sha for p in points] == [sha(p) for p in range(1, 13)]
        assert detect(points, pairs=store.pairs(series)) == []


def test_a_decisive_gate_names_the_commit_that_separate_runs_missed(store_url):
    with open_store(store_url) as store:
        record_history(store, step_at=99)  # flat levels: separate runs see nothing
        record_gates(
            store,
            (8, 9, 1.01, 0.97, 1.04, "no change"),
            (9, 10, 1.072, 1.031, 1.114, "slower"),
        )
        series = series_of(store)
        pairs = store.pairs(series)
        assert [(p.base_sha, p.head_sha, p.verdict) for p in pairs] == [
            (sha(8), sha(9), "no change"),
            (sha(9), sha(10), "slower"),
        ]
        points = store.points(series.key)
        (change,) = detect(points, pairs=pairs)
        assert (change.last_good.sha, change.first_bad.sha) == (sha(9), sha(10))
        assert change.evidence == GATE and change.worse
        assert (change.ratio, change.interval) == (1.072, (1.031, 1.114))
        text = "\n".join(show_lines(series, points, [], [change]))
        assert "x1.072 [1.031, 1.114] worse (interleaved gate)" in text and "p=" not in text
        document = show_json(series, points, [], [change])["change_points"][0]
        assert document["evidence"] == GATE and document["p_value"] is None


def test_a_gate_whose_base_is_the_newer_commit_is_read_the_other_way(store_url):
    with open_store(store_url) as store:
        record_history(store, step_at=99)
        record_gates(store, (10, 9, 0.93, 0.9, 0.96, "faster"))  # ab --base-ref new --head-ref old
        series = series_of(store)
        (change,) = detect(store.points(series.key), pairs=store.pairs(series))
        assert (change.last_good.sha, change.first_bad.sha) == (sha(9), sha(10))
        assert change.worse and abs(change.ratio - 1 / 0.93) < 1e-12
        assert abs(change.interval[0] - 1 / 0.96) < 1e-12


def test_a_gate_of_an_uncommitted_side_is_not_a_pair(store_url):
    with open_store(store_url) as store:
        record_history(store, step_at=99)
        payload = ab_payload(9, 10, 1.2, 1.1, 1.3, "slower")
        payload["commits"]["head"]["dirty"] = True
        for run in runs_from_ab_json(payload, testbed=make_run("x", sha(1), 1).testbed):
            store.record(run)
        assert store.pairs(series_of(store)) == []


def test_nested_decisive_gates_keep_the_narrowest_and_the_newest_gate_of_two_commits_counts():
    from perfsuite.history.query import Point

    points = [
        Point(sha(p), p, float(p), "main", None, False, (str(p),), TIMES_S, TIMES_S, False,
              1e-3, "sw", {}, None, None, float(p))
        for p in range(1, 11)
    ]  # fmt: skip
    gate = lambda b, h, r, verdict, when: Pair(
        sha(b), sha(h), r, (r - 0.02, r + 0.02), verdict, when
    )
    found = with_gates(
        points,
        [],
        [
            gate(2, 8, 1.2, "slower", 1.0),
            gate(4, 5, 1.2, "slower", 2.0),
            gate(6, 7, 1.1, "slower", 3.0),
            gate(6, 7, 1.0, "no change", 4.0),  # a rerun of the same two commits, newer
        ],
    )
    assert [(c.last_good.sha, c.first_bad.sha) for c in found] == [(sha(4), sha(5))]
    dismissed = dataclasses.replace(found[0], evidence=SEPARATE_RUNS, p_value=1e-6)
    assert with_gates(points, [dismissed], [gate(1, 10, 1.0, "no change", 5.0)]) == []
    assert with_gates(points, [dismissed], []) == [dismissed]  # no gate spans it: kept


def test_history_detect_lets_the_newest_commits_gate_decide(store_url, capsys):
    from perfsuite.cli.main import main

    with open_store(store_url) as store:
        record_history(store, step_at=11)  # separate runs: the two newest x1.3, a "regression"
        record_gates(store, (10, 12, 1.01, 0.98, 1.04, "no change"))
    assert main(["history", "--store", store_url, "detect", "--measure", "time_s"]) == 0
    assert "interleaved gate against 10abababab says x1.010" in capsys.readouterr().out
    with open_store(store_url) as store:
        record_gates(store, (11, 12, 1.08, 1.04, 1.12, "slower"))  # narrower: it decides
    assert main(["history", "--store", store_url, "detect", "--measure", "time_s"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "last good 11abababab" in out
    assert main(["history", "--store", store_url, "show", BENCH]) == 0
    assert "(interleaved gate)" in capsys.readouterr().out
