"""torch.compile per case (escaping Dynamo's recompile limit) and flex_attention's masks."""

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

from perfsuite.measure import compile_stats
from perfsuite.attention.cases import parse_case_id
from perfsuite.measure.evidence import gather_evidence
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.masks import PLAIN_KINDS
from perfsuite.variants import get_variant
from perfsuite.variants.compiled import compile_for_case, own_code_copy
from perfsuite.variants.flex import mask_mod_for, score_mod_for


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
        assert compile_stats.since(before).graphs_compiled == 1  # the other shapes silently ran eager
        per_case = [compile_for_case(double) for _ in shapes]
        before = compile_stats.snapshot()
        for fn, shape in zip(per_case, shapes):
            assert fn(torch.ones(shape)).sum() == 2 * shape[0]
        assert compile_stats.since(before).graphs_compiled == len(shapes)
        before = compile_stats.snapshot()
        for fn, shape in zip(per_case, shapes):
            fn(torch.ones(shape))
        assert compile_stats.since(before).graphs_compiled == 0  # cached, per case


@pytest.mark.parametrize("kind", [k for k in PLAIN_KINDS if k not in ("noncausal", "additive")] + ["window5"])
@pytest.mark.parametrize("shape", ["b2h3q7k11d4", "b2h3q11k7d4", "b1h2s9d4"])
def test_flex_mask_mod_selects_exactly_the_allowed_keys(kind, shape):
    case = parse_case_id(f"{shape}-fp32-{kind}-cpu")
    mask = make_inputs(case, 3).mask
    mask_mod = mask_mod_for(mask, case.seq_len_q, case.seq_len_kv)
    flex = create_mask(mask_mod, case.batch, case.num_heads, case.seq_len_q, case.seq_len_kv, device="cpu")
    torch.testing.assert_close(flex, mask.allowed.expand(case.score_shape), rtol=0, atol=0)


def test_flex_without_a_mask_has_no_mask_mod_and_an_additive_bias_becomes_a_score_mod():
    noncausal = make_inputs(parse_case_id("b1h2s5d4-fp32-noncausal-cpu"), 0).mask
    assert mask_mod_for(noncausal, 5, 5) is None and score_mod_for(noncausal) is None
    additive = make_inputs(parse_case_id("b1h2s5d4-fp32-additive-cpu"), 0).mask
    score_mod = score_mod_for(additive)
    b, h, q, kv = (torch.tensor(i) for i in (0, 1, 2, 3))
    assert score_mod(torch.tensor(1.0), b, h, q, kv) == 1.0 + additive.additive[0, 1, 2, 3]


def test_naive_compiled_keeps_nan_rows_and_says_why_gradients_are_not_compared(tmp_path):
    case = parse_case_id("b1h2q6k4d8-fp32-causal_br-cpu")  # the first two queries see no key
    forward = gather_evidence(get_variant("naive_compiled"), case, 0, tmp_path, "forward")
    assert forward.comparison.failure is None  # held to NaN in exactly those rows
    both = gather_evidence(get_variant("naive_compiled"), case, 0, tmp_path, "forward_backward")
    assert both.comparison is None and "gradients are NaN" in both.not_compared
