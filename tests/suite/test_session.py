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


def test_builtins_that_do_not_apply_are_one_line_and_real_skips_stay_named():
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.report.results import SkippedResult
    from perfsuite.suite.session import inapplicable_builtins, skip_lines
    from perfsuite.variants import get_variant, variant_names
    from perfsuite.variants.registry import certain_skip

    # the smoke case set's CPU cases
    cases = [parse_case_id(f"b2h8s256d64-fp32-causal{t}-cpu") for t in ("", "-transposed")]
    names = ["naive", "sdpa_flash", "sdpa_efficient", "flash_attn", "naive_mods", "paged_gather"]
    pairs = [(get_variant(n), c) for n in names for c in cases]
    inapplicable = inapplicable_builtins(pairs, users={"paged_gather"})  # as if it were the user's
    assert {v for v, _ in inapplicable} == {"sdpa_efficient", "flash_attn", "naive_mods"}
    assert inapplicable[("flash_attn", cases[0].id)] == "run on cuda only"
    # the suite records what certain_skip says (not generated), and torch's refusals when running
    skipped = [
        SkippedResult(v.name, c.id, reason, mode)
        for v, c in pairs
        for mode in ("forward", "backward")
        if (reason := certain_skip(v, c, mode))
    ]
    skipped.append(SkippedResult("sdpa_flash", cases[0].id, "SDPBackend.FLASH_ATTENTION refuses"))
    every = skip_lines(skipped, inapplicable)
    assert every[-1] == (
        "perfsuite: 3 built-in(s) do not apply to these cases and were left out (2 run on cuda only; "
        "1 are for other case forms, such as score modifications and layouts); table.md names each "
        "with its reason"
    )
    named = [line.split(" on ")[0] for line in every[:-1]]
    assert named == ["skipped paged_gather", "skipped sdpa_flash"]  # a user's variant, a refusal
    # variants named one by one (no inapplicable map): every skip is its own line, as before
    assert len(skip_lines(skipped, {})) == 5 and len(variant_names()) > len(names)
