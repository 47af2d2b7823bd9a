"""``history detect`` and the dashboard agree (one judgement, ``history.judging``), on what a new user's
trial found: a score-copy step while every time is contended, a dirty run at the newest commit beside a
clean rerun, counts read as counts, and an inconclusive gate that judged nothing (SQLite: the code paths
are the store's Python, the same for PostgreSQL)."""

from __future__ import annotations

import dataclasses

from history_records import make_run
from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.history import open_store
from perfsuite.history.changepoints import check_newest, detect
from perfsuite.history.render import show_lines

from test_gates import BENCH, TIMES_S, record_gates, sha

COPY_AT = 4


def detected(url: str, capsys) -> dict[str, dict]:
    """``perfsuite history detect --json``'s records by measure (outside git: the stored order)."""
    import json

    from perfsuite.cli.main import main

    main(["history", "--store", url, "detect", "--json"])
    return {r["measure"]: r for r in json.loads(capsys.readouterr().out)}


def record_copy_step(store, commits: int = 6, contended: bool = True) -> list[str]:
    """Commits 0..commits-1, each timed under contention (no time is usable); from ``COPY_AT`` on, one
    more score copy (the trace counts it, contended or not)."""
    shas = [sha(p) for p in range(commits)]
    for p, s in enumerate(shas):
        store.record(make_run(f"r{p}", s, p, contended=contended, copies=int(p >= COPY_AT)))
    return shas


def test_the_dashboard_names_the_score_copy_regression_detect_confirms(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(url) as store:
        shas = record_copy_step(store)
        model = dashboard_from_store(store)
    found = detected(url, capsys)["score_copies"]
    assert found["regression"] and not detected(url, capsys)["time_s"]["judged"]
    assert (found["last_good"], found["first_bad"]) == (shas[COPY_AT - 1], shas[COPY_AT])
    [series] = model.series
    [change] = [c for c in series.change_points if c.open]
    assert (change.last_good, change.first_bad) == (found["last_good"], found["first_bad"])
    assert change.regression and change.size == "0 -> 1 score copies"
    assert "+1 copy cpu aten::clone [2x4x64x64]" in change.cause


def test_a_dirty_run_is_set_aside_and_the_clean_rerun_at_that_commit_is_judged(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(url) as store:
        shas = record_copy_step(store, contended=False)
        newest = len(shas) - 1
        # at the newest commit: a run of an uncommitted tree (the fix, not committed), then a clean rerun
        dirty = make_run("dirty", shas[-1], newest, copies=0, dirty=True)
        store.record(dataclasses.replace(dirty, recorded_at=1.9e9))
        again = make_run("again", shas[-1], newest, copies=1)
        store.record(dataclasses.replace(again, recorded_at=1.9e9 + 1))
        (copies,) = store.list_series(measure="score_copies")
        points = store.points(copies.key)
        model = dashboard_from_store(store)
    assert [p.dirty for p in points][-2:] == [True, False]
    assert points[-2].contended and points[-2].state == "uncommitted changes"
    assert points[-1].median == 1 and not points[-1].contended
    found = detected(url, capsys)["score_copies"]
    assert found["regression"] and (found["last_good"], found["first_bad"]) == (shas[3], shas[4])
    [series] = model.series
    assert [p.commit for p in series.points] == shas  # the dirty run is no extra commit
    assert series.points[-1].copies == 1 and [c.sha for c in model.commits] == shas


def test_counts_read_as_counts_in_show_and_detect(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(url) as store:
        record_copy_step(store, contended=False)
        (series,) = store.list_series(measure="score_copies")
        points = store.points(series.key)
    changes = detect(points, "score_copies")
    text = "\n".join(show_lines(series, points, [], changes))
    assert "0 -> 1 score copies worse" in text and "x999" not in text
    verdict = check_newest(points, "score_copies")
    assert verdict.regression and verdict.reason.startswith("0 -> 1 score copies")
    assert "beyond x" not in verdict.reason


def test_an_inconclusive_gate_at_the_newest_commit_is_not_judged(tmp_path, capsys):
    from perfsuite.cli.main import main

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(url) as store:
        for p in range(1, 6):
            store.record(make_run(f"r{p}", sha(p), p, TIMES_S * 3))
        record_gates(store, (4, 5, 0.889, 0.135, 5.868, "inconclusive: contended"))
        (series,) = store.list_series(benchmark=BENCH, measure="time_s")
        verdict = check_newest(store.points(series.key), pairs=store.pairs(series))
    assert not verdict.judged and not verdict.regression
    assert main(["history", "--store", url, "detect", "--measure", "time_s"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("not judged") and "0 of 1 series judged" in out


def test_a_copy_added_then_removed_is_a_recovered_regression_and_its_fix_the_recovery(
    tmp_path, capsys
):
    """A new user's five commits (base, comment, out-of-place ``masked_fill``, comment, the fix), timed
    on a shared machine where the copy's commit happened to run faster: ``detect`` and the dashboard
    overflowed on the log of zero copies, the dashboard listed the copy as "faster" (the time step's
    noise at the same commits), and the fix was filed as a new open finding."""
    from perfsuite.cli.main import main

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    copies = (0, 0, 1, 1, 0)
    level_s = (
        1.0e-3,
        1.0e-3,
        0.85e-3,
        0.85e-3,
        0.85e-3,
    )  # separate runs' levels: the machine's, not the copy's
    with open_store(url) as store:
        for p, (n, level) in enumerate(zip(copies, level_s)):
            times = tuple(level * (1 + 0.002 * ((i * 7) % 11 - 5)) for i in range(30))
            store.record(make_run(f"r{p}", sha(p), p, times, copies=n))
        model = dashboard_from_store(store)
    found = detected(url, capsys)
    assert not found["score_copies"]["regression"] and found["score_copies"]["judged"]
    assert found["score_copies"]["reason"].startswith("0 -> 0 score copies: the newest point")
    assert main(["history", "--store", url, "detect"]) == 0
    text = capsys.readouterr().out
    assert "0 confirmed regression(s) open" in text and "[open]" not in text
    assert main(["history", "--store", url, "show", BENCH]) == 0
    [series] = model.series
    changes = {(c.last_good, c.first_bad): c for c in series.change_points}
    added, fixed = (
        changes[(sha(1), sha(2))],
        changes[(sha(3), sha(4))],
    )  # a time step sits at the first too
    assert added.regression and added.size == "0 -> 1 score copies" and added.ratio == 1.0
    assert added.status == "recovered" and not added.open
    assert fixed.status == "recovery" and not fixed.open and not fixed.regression
    assert fixed.note.startswith("recovery: closes ") and fixed.size == "1 -> 0 score copies"


def test_an_unconfirmed_step_says_since_which_step_its_clean_points_are_counted(tmp_path):
    """A new user read "1 clean point(s) before it; 4 are needed" as a wait of a few commits: the count
    starts at the step before it (an unconfirmed one too), which the reason now names."""
    from perfsuite.history.findings import series_findings

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    level_s = (1.0, 1.01, 0.99, 1.0, 1.2, 1.19, 1.21, 0.8, 0.81, 0.79)
    with open_store(url) as store:
        for p, level in enumerate(level_s):
            times = tuple(level * 1e-3 * (1 + 0.002 * ((i * 7) % 11 - 5)) for i in range(30))
            store.record(make_run(f"r{p}", sha(p), p, times))
        (series,) = store.list_series(measure="time_s")
        points = store.points(series.key)
    found, suspects = series_findings(series.key, points)
    assert [(f.last_good, f.first_bad) for f in found] == [(sha(3), sha(4))]
    [suspect] = suspects
    assert (suspect.last_good, suspect.first_bad) == (sha(6), sha(7))
    assert suspect.why.startswith(f"3 clean point(s) before it since the step at {sha(4)[:10]}; 4 ")


def test_show_accept_and_detect_agree_on_a_fixed_and_an_accepted_copy(tmp_path, capsys):
    """The new user's second trial: `show` of the time series listed the structural half of the copy
    (which `detect` leaves to the count) and the fix as `change ... no added work changed [open]`;
    `accept` of a finding that was already recovered said 'series ...: none in the store'; after an
    accept, `detect` called the accepted copy 'unconfirmed'."""
    import json

    from perfsuite.cli.main import main

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(url) as store:
        for p, n in enumerate((0, 0, 1, 1, 0)):
            store.record(make_run(f"r{p}", sha(p), p, TIMES_S, copies=n))
    assert main(["history", "--store", url, "show", BENCH]) == 0
    shown = capsys.readouterr().out
    assert "[open]" not in shown and "no added work changed" not in shown
    assert main(["history", "--store", url, "show", BENCH, "--measure", "score_copies"]) == 0
    counted = capsys.readouterr().out
    assert "score copies worse" in counted and "(p=" not in counted  # a count has no p-value
    [copy] = [line for line in counted.splitlines() if "REGRESSION" in line]
    copy_id = copy.split()[0]
    assert main(["history", "--store", url, "accept", copy_id, "--reason", "r"]) == 2
    assert f"{copy_id!r}: this finding is recovered at {sha(4)[:10]}" in capsys.readouterr().err

    url = f"sqlite:///{tmp_path / 'accepted.sqlite'}"
    with open_store(url) as store:
        for p, n in enumerate((0, 0, 0, 1)):
            store.record(make_run(f"r{p}", sha(p), p, TIMES_S, copies=n))
    assert main(["history", "--store", url, "detect"]) == 1
    detected_text = capsys.readouterr().out  # the cause once, under the series' REGRESSION line
    assert detected_text.count("+1 copy cpu aten::clone") == 1, detected_text
    assert "(exact count); structure as above [open]" in detected_text
    assert (
        main(["history", "--store", url, "accept", BENCH, "--reason", "known, fix under way"]) == 0
    )
    capsys.readouterr()
    assert main(["history", "--store", url, "detect", "--json"]) == 0
    [count] = [r for r in json.loads(capsys.readouterr().out) if r["measure"] == "score_copies"]
    assert count["reason"].startswith("accepted: known, fix under way; 0 -> 1 score copies")
