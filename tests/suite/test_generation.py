"""Combinations whose skip is certain are not generated, only counted (perfsuite.suite.generation)."""

from types import SimpleNamespace

import pytest

from perfsuite.attention.cases import parse_case_id
from perfsuite.suite.generation import NotGenerated, certain_skip, combinations
from perfsuite.variants import get_variant
from perfsuite.variants.registry import Variant

CPU = parse_case_id("b1h2s16d8-fp32-causal-cpu")
SQUARE = parse_case_id("b1h2s8d8-fp32-noncausal-cpu")  # head_dim == seq_len_kv
CUDA = parse_case_id("b1h2s16d8-bf16-causal-cuda")
MODES = ("forward", "backward", "forward_backward")


def _definition(*markers) -> SimpleNamespace:
    """A test function as ``combinations`` reads it: its name and closest markers."""
    found = {m.name: m for m in markers}
    return SimpleNamespace(originalname="test_x", get_closest_marker=found.get)


def _ids(params) -> list[str]:
    return [p.id for p in params]


def test_a_variant_is_generated_only_on_the_devices_it_declares():
    efficient = get_variant("sdpa_efficient")
    assert efficient.devices == ("cuda",)
    assert certain_skip(efficient, CPU, "forward") == "sdpa_efficient runs on cuda only"
    assert certain_skip(efficient, CUDA, "forward") is None
    assert certain_skip(get_variant("sdpa_flash"), CPU, "forward") is None  # flash has a CPU kernel
    left_out = NotGenerated()
    names, params = combinations(
        _definition(), [(efficient, CPU), (efficient, CUDA)], MODES, left_out
    )
    assert names == ("variant", "case", "mode")
    assert _ids(params) == [f"sdpa_efficient-{CUDA.id}-{m}" for m in MODES]
    assert left_out.counts == {"sdpa_efficient runs on cuda only": 3}


def test_backward_modes_of_a_forward_only_variant_are_not_generated():
    variant = Variant(name="fwd", fn=lambda *a, **k: None, description="", forward_only="no grad")
    left_out = NotGenerated()
    _, params = combinations(_definition(), [(variant, CPU)], MODES, left_out)
    assert _ids(params) == [f"fwd-{CPU.id}-forward"]
    assert left_out.counts == {"fwd has no backward on cpu: no grad": 2}


def test_a_tests_own_condition_and_each_value_are_applied_per_combination():
    naive = get_variant("naive")
    applies = pytest.mark.perfsuite_applies.with_args(
        lambda v, c, m: "square" if c.head_dim == c.seq_len_kv else None
    ).mark
    each = pytest.mark.perfsuite_each(
        "check", ["a", "b"], lambda value, v, c: "no b" if value == "b" else None
    ).mark
    left_out = NotGenerated()
    names, params = combinations(
        _definition(applies, each), [(naive, CPU), (naive, SQUARE)], None, left_out
    )
    assert names == ("variant", "case", "check")
    assert _ids(params) == [f"naive-{CPU.id}-a"]
    assert params[0].values == (naive, CPU, "a")
    assert left_out.counts == {"test_x: square": 1, "check b: no b": 1}
    marks = [m for m in params[0].marks if m.name == "xdist_group"]
    assert marks and marks[0].args == (f"naive-{CPU.id}",)  # a pair's tests stay on one worker


def test_the_note_counts_every_reason_or_the_most_frequent():
    left_out = NotGenerated()
    assert left_out.lines() == []
    for reason, count in (("a", 3), ("b", 2), ("c", 1)):
        for _ in range(count):
            left_out.add(reason)
    assert left_out.lines(most=2) == [
        "perfsuite: 6 combinations not generated (their skip is certain before running): "
        "3 x a; 2 x b; and 1 other reason (-v lists them)"
    ]
    assert left_out.lines(most=None)[0].endswith("3 x a; 2 x b; 1 x c")


def test_devices_must_be_known():
    from perfsuite.variants.registry import register_variant

    def fn(query, key, value, *, mask, scale):
        return query

    for bad in (("tpu",), ()):
        with pytest.raises(ValueError, match="allowed: a non-empty list of cpu, cuda"):
            register_variant("never_registered", "", devices=bad)(fn)


@pytest.mark.slow
def test_a_selected_variant_that_cannot_run_here_is_one_named_skip_not_an_empty_run(pytester):
    """sdpa_cudnn on CPU cases: nothing of it is generated, the run says why, and exits 0."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_suite="from perfsuite.suite.test_attention import test_benchmark  # noqa: F401\n"
    )
    result = pytester.runpytest_subprocess(
        "--perfsuite-variants=sdpa_cudnn,naive",
        "--perfsuite-shapes=1x2x16x8",
        "--perfsuite-dtypes=fp32",
        "--perfsuite-masks=causal",
        "--perfsuite-devices=cpu",
        "-p",
        "no:cacheprovider",
    )
    result.stdout.fnmatch_lines(
        [
            "perfsuite: 3 combinations not generated (their skip is certain before running): "
            "3 x sdpa_cudnn runs on cuda only"
        ]
    )
    result.assert_outcomes(passed=3)
    alone = pytester.runpytest_subprocess(
        "--perfsuite-variants=sdpa_cudnn", "--perfsuite-devices=cpu", "-p", "no:cacheprovider"
    )
    alone.assert_outcomes(skipped=1)
    alone.stdout.fnmatch_lines(["*not generated*sdpa_cudnn runs on cuda only*"])
