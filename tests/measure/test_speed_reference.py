"""The reference kernel beside each CPU benchmark and the speed check of separate-run comparisons."""

import math

import pytest

from perfsuite.measure import speed_reference
from perfsuite.measure.speed_reference import record, reference_ms, reference_of, speed_change


def info(before, after):
    return {"speed_reference": record(before, after)}


def test_the_reference_is_a_positive_time_in_ms_and_rejects_no_calls():
    assert reference_ms(calls=3) > 0
    with pytest.raises(ValueError, match="calls must be >= 1, got 0"):
        reference_ms(calls=0)


def test_a_benchmark_s_reference_is_the_geometric_mean_of_before_and_after():
    assert reference_of(info(1.0, 4.0)) == pytest.approx(2.0)
    assert reference_of({}) is None  # CUDA benchmarks and older runs carry none
    assert reference_of({"speed_reference": {"before_ms": 0.0, "after_ms": 1.0}}) is None
    assert reference_of({"speed_reference": {"before_ms": "1", "after_ms": 1.0}}) is None


@pytest.mark.parametrize(
    "head_ms, flagged", [(1.04, False), (1 / 1.04, False), (1.06, True), (1 / 1.06, True)]
)
def test_speed_change_beyond_the_limit_either_way_is_named(head_ms, flagged):
    found = speed_change(info(1.0, 1.0), info(head_ms, head_ms))
    assert (found is not None) == flagged
    if flagged:
        assert f"x{head_ms:.2f}" in found and f"limit {speed_reference.SPEED_LIMIT:.0%}" in found


def test_no_verdict_is_withheld_without_a_reference_on_both_sides():
    assert speed_change({}, info(1.0, 9.0)) is None
    assert speed_change(info(1.0, 9.0), {}) is None
    assert speed_change(info(1.0, 1.0), info(2.0, 2.0), limit=math.inf) is None


def test_the_contention_switch_turns_the_speed_check_off_too(monkeypatch):
    monkeypatch.setenv("PERFSUITE_CONTENTION_CHECK", "off")
    assert speed_change(info(1.0, 1.0), info(2.0, 2.0)) is None


def test_a_run_whose_machine_changed_speed_says_so_with_the_range():
    from perfsuite.measure.speed_reference import run_spread

    assert run_spread([0.70, 0.72, 0.73]) is None  # within 5%
    assert run_spread([0.9]) is None and run_spread([]) is None
    found = run_spread([0.648, 0.70, 0.882])
    assert "beside its 3 CPU benchmarks took 0.648-0.882 ms (x1.36, limit 5%)" in found
