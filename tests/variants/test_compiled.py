"""torch.compile per case (escaping Dynamo's recompile limit), and naive_compiled's fully masked rows."""

import torch

from perfsuite.measure import compile_stats
from perfsuite.attention.cases import parse_case_id
from perfsuite.measure.evidence import gather_evidence
from perfsuite.variants import get_variant
from perfsuite.variants.compiled import compile_for_case, own_code_copy


def double(x):
    return x * 2


def test_own_code_copy_behaves_the_same_with_its_own_code_object():
    copy = own_code_copy(double)
    assert copy.__code__ is not double.__code__ and copy(torch.ones(2)).tolist() == [2.0, 2.0]


def test_each_case_compiles_once_even_past_the_recompile_limit():
    """A shared compiled function falls back to eager past the limit; per-case copies never do."""
    shapes = [(3,), (5,), (7,)]
    with torch._dynamo.config.patch(recompile_limit=1):
        shared = torch.compile(own_code_copy(double), dynamic=False)
        before = compile_stats.snapshot()
        for shape in shapes:
            shared(torch.ones(shape))
        assert (
            compile_stats.since(before).graphs_compiled == 1
        )  # the other shapes silently ran eager
        per_case = [compile_for_case(double) for _ in shapes]
        before = compile_stats.snapshot()
        for fn, shape in zip(per_case, shapes):
            assert fn(torch.ones(shape)).sum() == 2 * shape[0]
        assert compile_stats.since(before).graphs_compiled == len(shapes)
        before = compile_stats.snapshot()
        for fn, shape in zip(per_case, shapes):
            fn(torch.ones(shape))
        assert compile_stats.since(before).graphs_compiled == 0  # cached, per case


def test_naive_compiled_keeps_nan_rows_and_says_why_gradients_are_not_compared(tmp_path):
    case = parse_case_id("b1h2q6k4d8-fp32-causal_br-cpu")  # the first two queries see no key
    forward = gather_evidence(get_variant("naive_compiled"), case, 0, tmp_path, "forward")
    assert forward.comparison.failure is None  # held to NaN in exactly those rows
    both = gather_evidence(get_variant("naive_compiled"), case, 0, tmp_path, "forward_backward")
    assert both.comparison is None and "gradients are NaN" in both.not_compared
