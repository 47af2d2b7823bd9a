"""The suite session's end-of-run output: the warning that names contended benchmarks."""


def test_the_run_ends_with_a_warning_naming_contended_benchmarks(make_result):
    from perfsuite.suite.session import contention_warning

    quiet = make_result(0.002, contended=False)
    loaded = make_result(
        0.004,
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
