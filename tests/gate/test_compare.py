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
