"""Stored baselines are validated: a newer schema is refused by version, lacking fields are named,
an unreadable fingerprint is 'not compared' (never a FAIL)."""

import json

import numpy as np
import pytest

from perfsuite.errors import BaselineError
from perfsuite.gate.baseline import check_baseline_file
from perfsuite.gate.compare import compare_runs, gate_failed
from perfsuite.gate.stats import GateSettings

SETTINGS = GateSettings()


def run(times, **info):
    extra = {
        "schema_version": 2,
        "variant": "naive",
        "case": "b1h2s16d8-fp32-causal-cpu",
        "mode": "forward",
        "fingerprint": {"cpu_ops": {"aten::bmm": 2}, "kernels": {}, "allocated_bytes": 0},
    } | info
    extra = {k: v for k, v in extra.items() if v is not None}
    return {
        "benchmarks": [
            {
                "name": "test_benchmark[x]",
                "extra_info": extra,
                "stats": {"median": float(np.median(times)), "data": list(times)},
            }
        ]
    }


def test_a_newer_schema_version_is_refused_with_the_version_named(tmp_path):
    """Before: schema_version 99 was accepted silently."""
    path = tmp_path / "0001_x.json"
    path.write_text(json.dumps(run([1.0] * 5, schema_version=99)))
    with pytest.raises(BaselineError, match="schema_version 99 is newer than this perfsuite reads"):
        check_baseline_file(path)
    with pytest.raises(
        BaselineError,
        match="the base run's benchmark naive/b1h2s16d8-fp32-causal-cpu: schema_version 99",
    ):
        compare_runs(run([1.0] * 5, schema_version=99), run([1.0] * 5), SETTINGS)


def test_fields_a_comparison_lacks_are_named_in_the_verdict():
    """Before: missing extra_info gave NOT JUDGED with no reason."""
    base = run([1.0] * 5)
    base["benchmarks"][0]["extra_info"] = {"variant": "naive", "case": "b1h2s16d8-fp32-causal-cpu"}
    [found] = compare_runs(base, run([1.0] * 5), SETTINGS)
    assert (
        found.verdict == "inconclusive"
        and "the base run lacks extra_info fingerprint" in found.note
    )


def test_a_base_entry_without_variant_and_case_names_the_fields_it_lacks():
    """Before: it read 'missing (only in the base run)', naming nothing."""
    base = run([1.0] * 5, variant=None, case=None)
    found = {c.key: c for c in compare_runs(base, run([1.0] * 5), SETTINGS)}
    assert found["test_benchmark[x]"].note == (
        "only in the base run (its extra_info lacks variant, case: it is keyed by its test name, "
        "which matches no benchmark of the other run)"
    )
    assert found["naive/b1h2s16d8-fp32-causal-cpu"].note == "only in the head run"


def test_an_unreadable_fingerprint_is_not_compared_and_never_fails_the_structure_gate():
    """Before: a fingerprint in an unknown form failed 4 of 4 with --fail-on-structure."""
    rng = np.random.default_rng(0)
    times = np.exp(rng.normal(0, 0.01, 30))
    [found] = compare_runs(run(times, fingerprint={"ops": [1, 2]}), run(times), SETTINGS)
    assert found.structure == [
        "not compared: the fingerprint of the base it has neither 'cpu_ops' nor 'kernels'"
    ]
    assert not gate_failed([found], fail_on_structure=True)


def test_a_benchmark_timed_on_different_clocks_is_not_compared():
    """A row timed on graph replay in one run and on blocked events (its capture failed) in the
    other measures different things: inconclusive, naming both clocks, never slower or faster."""
    [found] = compare_runs(
        run([1.0] * 5, clock="cuda_graph"), run([2.0] * 5, clock="blocked_event"), SETTINGS
    )
    assert found.verdict == "inconclusive" and found.note == (
        "timed on different clocks (base cuda_graph, head blocked_event): not comparable"
    )
    [same] = compare_runs(run([1.0] * 5, clock="kernel"), run([1.0] * 5, clock="kernel"), SETTINGS)
    assert "clocks" not in same.note  # one clock: compared as usual
