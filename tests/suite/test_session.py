"""The suite session's end-of-run output: the warning that names contended benchmarks."""

from perfsuite.report.results import BenchmarkResult


def result(median_s):
    return BenchmarkResult(
        variant="naive",
        case_id="b1h1s8d8-fp32-causal-cpu",
        device="cpu",
        flop=2_000_000,
        bytes_moved=1000,
        median_s=median_s,
        rounds=10,
        work_per_step=45,
        work_unit="ops",
        score_copies_per_step=1,
        allocated_bytes=4 * 1024 * 1024,
        peak_bytes=3 * 1024,
        max_abs_error=1.5e-7,
        correct=True,
    )


def test_the_run_ends_with_a_warning_naming_contended_benchmarks():
    import dataclasses

    from perfsuite.suite.session import contention_warning

    quiet = dataclasses.replace(result(0.002), contended=False)
    loaded = dataclasses.replace(
        result(0.004),
        variant="sdpa",
        contended=True,
        contention_reasons=("threads waited for a CPU 40% of the wall time (limit 5%)",),
    )
    assert contention_warning([quiet]) == []
    first, named = contention_warning([quiet, loaded])
    assert first.startswith("perfsuite: WARNING: 1 of 2 timings are not trustworthy")
    assert named == (
        "perfsuite:   sdpa forward b1h1s8d8-fp32-causal-cpu: threads waited for a CPU 40% of the wall "
        "time (limit 5%)"
    )
