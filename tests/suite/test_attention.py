"""The attention suite: every variant x case is checked, profiled and timed.

Parametrized by the perfsuite plugin over the selected variants and cases; a variant
that cannot run a case is skipped with the reason torch gave.
"""

from perfsuite.evidence import bind
from perfsuite.inputs import make_inputs
from perfsuite.plugin import benchmark_extra_info, record_result
from perfsuite.profiling import ACTIVE_STEPS
from perfsuite.timing import synchronized


def test_matches_float64_reference(attention_evidence):
    failure = attention_evidence.comparison.failure
    assert failure is None, failure


def test_score_copies_per_forward(attention_evidence):
    """naive copies the masked score matrix once per forward; the others never copy it."""
    evidence = attention_evidence
    assert len(evidence.forwards) == ACTIVE_STEPS, f"profiler recorded {len(evidence.forwards)} forwards in {evidence.trace_path}"
    lanes = ["cpu", "device"] if evidence.case.device == "cuda" else ["cpu"]
    for lane in lanes:
        copies = evidence.score_copies(lane)
        expected = [evidence.expected_score_copies] * ACTIVE_STEPS
        all_copies = [c for f in evidence.forwards for c in f.copies]
        assert copies == expected, (
            f"{evidence.variant.name} on {evidence.case.id}: score-sized copies per forward on the {lane} lane "
            f"{copies}, expected {expected}; copies seen: {all_copies}; trace: {evidence.trace_path}"
        )


def test_benchmark(attention_evidence, benchmark, perfsuite_run):
    evidence = attention_evidence
    case = evidence.case
    forward = synchronized(bind(evidence.variant, make_inputs(case, perfsuite_run.settings.seed)), case.device)
    benchmark.group = case.id
    benchmark.extra_info.update(benchmark_extra_info(evidence))
    benchmark(forward)
    stats = benchmark.stats.stats if benchmark.stats else None  # None when timing is disabled
    result = record_result(perfsuite_run, evidence, stats.median if stats else None, stats.rounds if stats else None)
    benchmark.extra_info["achieved_tflops"] = result.achieved_tflops
    benchmark.extra_info["achieved_gbps"] = result.achieved_gbps
