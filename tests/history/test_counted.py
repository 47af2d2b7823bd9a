"""Score-copy counts are exact: a copy added at the newest commit is a change point and a regression at once,
whatever the machine's speed did (found by a new user's trial: a copy planted at the newest commit showed
"no change points", `detect` said `ok` and printed a ratio of 1e300)."""

from __future__ import annotations

from perfsuite.history.changepoints import check_newest, detect
from perfsuite.history.query import Point


def _point(number: int, copies: float, reference_ms: float = 1.0, contended: bool = False) -> Point:
    return Point(
        sha=f"{number:040x}",
        position=number,
        commit_time=float(number),
        branch="main",
        subject=f"commit {number}",
        dirty=False,
        run_uids=(f"run{number}",),
        values=() if contended else (copies,),
        all_values=(copies,),
        contended=contended,
        median=copies,
        software_fingerprint="sw",
        software={},
        structure=None,
        structure_hash=None,
        recorded_at=float(number),
        speed_reference_ms=reference_ms,
    )


def test_a_copy_added_at_the_newest_commit_is_a_change_point_there():
    points = [_point(1, 0), _point(2, 0), _point(3, 1)]
    found = detect(points, "score_copies")
    assert [c.first_bad.sha for c in found] == [points[-1].sha]


def test_one_value_each_side_is_not_enough_for_a_step():
    assert detect([_point(1, 0), _point(2, 1)], "score_copies") == []


def test_detect_judges_a_new_copy_on_the_newest_point_alone_and_ignores_the_machine_speed():
    points = [_point(1, 0), _point(2, 0, reference_ms=1.15), _point(3, 1, reference_ms=0.87)]
    verdict = check_newest(points, "score_copies", confirm=2)
    assert verdict.regression and verdict.judged
    assert verdict.reason.startswith("0 -> 1 score copies") and "e+" not in verdict.reason


def test_a_contended_newest_time_point_is_not_judged_and_says_so():
    points = [_point(1, 1e-3), _point(2, 1e-3), _point(3, 1e-3, contended=True)]
    verdict = check_newest(points, "time_s")
    assert not verdict.regression and not verdict.judged
