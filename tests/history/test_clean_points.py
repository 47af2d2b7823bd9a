"""Only clean points are used: a benchmark of a run cut short, one whose variant failed the float64 check,
and an A/B side with a single clean pair or an undecided verdict are stored with their state, shown
apart, never used by the statistics and never the fastest (SQLite and PostgreSQL)."""

from __future__ import annotations

from history_records import make_run
from perfsuite.cli.main import main
from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.dashboard.model import to_json
from perfsuite.history import Commit, open_store
from perfsuite.history.importing import run_from_benchmark_json, runs_from_ab_json
from perfsuite.storage import INCOMPLETE_KEY

CASE = "b2h4s64d32-fp32-causal-cpu"
BENCH = f"naive/{CASE}/forward"


def saved_run(position: int, times: dict[str, float], wrong: tuple[str, ...] = (), **extra) -> dict:
    """A saved pytest-benchmark document: one benchmark per variant with five rounds near ``times``."""
    return {
        "datetime": f"2026-01-0{position}T00:00:00",
        "benchmarks": [
            {
                "fullname": f"test_attention[{variant}]",
                "stats": {"data": [t * (1 + 0.001 * i) for i in range(5)]},
                "extra_info": {
                    "variant": variant,
                    "case": CASE,
                    "mode": "forward",
                    "correct": variant not in wrong,
                },
            }
            for variant, t in times.items()
        ],
        **extra,
    }


def record_saved(store, position: int, document: dict) -> None:
    model = make_run("x", "0", position)
    store.record(
        run_from_benchmark_json(
            document,
            commit=Commit(sha=f"{position:x}" * 40, branch="main", position=position),
            testbed=model.testbed,
            software=model.software,
        )
    )


def test_a_run_cut_short_is_set_aside_and_detect_does_not_judge_it(
    store_url, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # not a git repository: the stored order
    with open_store(store_url) as store:
        for position in range(1, 5):
            record_saved(store, position, saved_run(position, {"naive": 1e-3}))
        cut = saved_run(
            5, {"naive": 3e-3}, **{INCOMPLETE_KEY: {"interrupted": "KeyboardInterrupt"}}
        )
        record_saved(store, 5, cut)
        points = store.points(store.list_series(benchmark=BENCH, measure="time_s")[0].key)
    assert [(p.contended, p.state) for p in points][-2:] == [(False, None), (True, "partial run")]
    assert points[-1].values == () and len(points[-1].all_values) == 5
    assert main(["history", "--store", store_url, "detect", "--measure", "time_s"]) == 2
    out = capsys.readouterr().out
    assert "not judged" in out and "0 of 1 series judged" in out


def test_a_variant_that_failed_its_check_is_never_the_fastest(store_url):
    with open_store(store_url) as store:
        for position in (1, 2):
            record_saved(
                store,
                position,
                saved_run(position, {"zeros": 1e-4, "sdpa": 5e-4, "naive": 1e-3}, wrong=("zeros",)),
            )
        dashboard = dashboard_from_store(store)
    (fastest,) = dashboard.fastest
    assert (fastest.variant, fastest.runner_up) == ("sdpa", "naive")
    (zeros,) = [s for s in dashboard.series if s.variant == "zeros"]
    assert all(p.contended and p.state == "failed correctness" for p in zeros.points)
    (drawn,) = [s for s in to_json(dashboard)["series"] if s["variant"] == "zeros"]
    assert drawn["k"] == [0, 1] and drawn["kw"] == ["failed correctness"] * 2


def ab_payload(uid: str, pairs: int, contended: int, verdict: str, high: float) -> dict:
    """A ``perfsuite ab --json`` document of one benchmark between commits 1 and 2: ``pairs`` block pairs,
    the first ``contended`` of them set aside."""
    commit = lambda p: {"sha": f"{p:x}" * 40, "branch": "main", "position": p, "dirty": False}
    return {
        "machine": {"base_machine": {"torch": "2.13.0"}, "torch": "2.13.0"},
        "benchmarks": [
            {
                "key": BENCH,
                "base_blocks_s": [[1e-3, 1.01e-3]] * pairs,
                "head_blocks_s": [[3e-3, 3.01e-3]] * pairs,
                "contended_pairs": [True] * contended + [False] * (pairs - contended),
                "verdict": verdict,
                "ratio": {"ratio": 3.0, "low": 1e-3, "high": high},
            }
        ],
        "commits": {"base": commit(1), "head": commit(2)},
        "perfsuite_run_uid": uid,
        "perfsuite_software": {
            side: dict(make_run("x", "0", 1).software.versions) for side in ("base", "head")
        },
    }


def test_a_single_pair_or_undecided_ab_side_is_not_a_point(store_url):
    testbed = make_run("x", "0", 1).testbed
    with open_store(store_url) as store:
        for payload in (
            ab_payload("one-pair", 30, 29, "inconclusive: contended", float("inf")),
            ab_payload("undecided", 4, 0, "inconclusive", 9.0),
        ):
            for run in runs_from_ab_json(payload, testbed=testbed):
                store.record(run)
        (series,) = store.list_series(benchmark=BENCH, measure="time_s")
        points, pairs = store.points(series.key), store.pairs(series)
    assert [(p.contended, p.state) for p in points] == [
        (True, "single A/B pair, undecided A/B"),
        (True, "single A/B pair, undecided A/B"),
    ]
    assert [p.verdict for p in pairs] == ["inconclusive"]  # the single pair is no paired estimate
