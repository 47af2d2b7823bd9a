"""Two saved runs are matched benchmark by benchmark with one key, and verdicts keep their stored spelling."""

import json

from perfsuite.attention.modes import Mode
from perfsuite.gate.compare import VERDICTS, BenchmarkKey, benchmark_key
from perfsuite.gate.stats import Verdict


def saved(variant="naive", case="b1h2s16d8-fp32-causal-cpu", **extra):
    return {"name": "test_latency[x]", "extra_info": {"variant": variant, "case": case, **extra}}


def test_the_forward_is_written_without_its_mode_and_other_modes_with_it():
    assert (
        str(BenchmarkKey("naive", "b1h2s16d8-fp32-causal-cpu")) == "naive/b1h2s16d8-fp32-causal-cpu"
    )
    assert str(BenchmarkKey("sdpa", "c", Mode.BACKWARD)) == "sdpa/c/backward"
    assert BenchmarkKey("sdpa", "c", "backward") == BenchmarkKey("sdpa", "c", Mode.BACKWARD)


def test_a_saved_entry_and_a_result_of_this_run_get_the_same_key():
    assert benchmark_key(saved(mode="forward_backward")) == str(
        BenchmarkKey("naive", "b1h2s16d8-fp32-causal-cpu", Mode.FORWARD_BACKWARD)
    )
    assert (
        benchmark_key(saved(mode="forward"))
        == benchmark_key(saved())
        == "naive/b1h2s16d8-fp32-causal-cpu"
    )


def test_an_entry_without_perfsuite_extra_info_is_keyed_by_its_test_name():
    assert benchmark_key({"name": "test_other", "extra_info": {}}) == "test_other"
    assert benchmark_key({}) == "?"


def test_verdicts_are_stored_and_printed_as_their_plain_strings():
    assert VERDICTS == tuple(Verdict)
    assert [str(v) for v in Verdict] == [
        "slower",
        "faster",
        "no change",
        "inconclusive",
        "inconclusive: contended",
        "missing",
    ]
    assert json.loads(json.dumps({"verdict": Verdict.NO_CHANGE})) == {"verdict": "no change"}
    assert f"| {Verdict.SLOWER} |" == "| slower |" and Verdict("no change") is Verdict.NO_CHANGE


def test_an_interval_is_printed_outward_and_never_touches_1_when_it_excludes_it():
    """Before: ``slower 1.068 [1.000, 1.141]`` for a low end of 1.00024, and ``1.000 [0.000, inf]``
    for a one-pair benchmark."""
    from perfsuite.gate.compare import format_ratio_interval

    assert format_ratio_interval(1.068, 1.00024, 1.14051, 6) == "1.068 [1.0002, 1.141]"
    assert format_ratio_interval(0.95, 0.9012, 0.99996, 6) == "0.950 [0.901, 0.99996]"
    assert format_ratio_interval(1.01, 0.9876, 1.0301, 6) == "1.010 [0.987, 1.031]"  # outward
    assert format_ratio_interval(1.0, 0.0, float("inf"), 1) == "1.000 (no interval from 1 sample)"
    # a t interval over two worker pairs (a new user's gate printed a 42-digit bound)
    assert format_ratio_interval(0.917, 1e-40, 2.6171e41, 2) == "0.917 [0.000, 2.62e+41]"
    assert format_ratio_interval(1.01, 0.5, 1000.0, 3) == "1.010 [0.500, 1.00e+3]"
