"""flex_attention's masks: a mask_mod that selects exactly the allowed keys, an additive bias as a score_mod."""

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.masks import PLAIN_KINDS
from perfsuite.variants.flex import mask_mod_for, score_mod_for


@pytest.mark.parametrize(
    "kind", [k for k in PLAIN_KINDS if k not in ("noncausal", "additive")] + ["window5"]
)
@pytest.mark.parametrize("shape", ["b2h3q7k11d4", "b2h3q11k7d4", "b1h2s9d4"])
def test_flex_mask_mod_selects_exactly_the_allowed_keys(kind, shape):
    case = parse_case_id(f"{shape}-fp32-{kind}-cpu")
    mask = make_inputs(case, 3).mask
    mask_mod = mask_mod_for(mask, case.seq_len_q, case.seq_len_kv)
    flex = create_mask(
        mask_mod, case.batch, case.num_heads, case.seq_len_q, case.seq_len_kv, device="cpu"
    )
    torch.testing.assert_close(flex, mask.allowed.expand(case.score_shape), rtol=0, atol=0)


def test_flex_without_a_mask_has_no_mask_mod_and_an_additive_bias_becomes_a_score_mod():
    noncausal = make_inputs(parse_case_id("b1h2s5d4-fp32-noncausal-cpu"), 0).mask
    assert mask_mod_for(noncausal, 5, 5) is None and score_mod_for(noncausal) is None
    additive = make_inputs(parse_case_id("b1h2s5d4-fp32-additive-cpu"), 0).mask
    score_mod = score_mod_for(additive)
    b, h, q, kv = (torch.tensor(i) for i in (0, 1, 2, 3))
    assert score_mod(torch.tensor(1.0), b, h, q, kv) == 1.0 + additive.additive[0, 1, 2, 3]
