"""nn.MultiheadAttention as variants: transparent projections, its mask conventions, its skips."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.reference import reference_attention
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.evidence import bind, prepare_case
from perfsuite.variants import get_variant
from perfsuite.variants.multihead import module_masks, transparent_module


def test_transparent_module_turns_its_own_scale_into_the_cases():
    module = transparent_module(
        num_heads=2, head_dim=4, scale=0.3, dtype=torch.float32, device=torch.device("cpu")
    )
    q_block = module.in_proj_weight[:8]
    torch.testing.assert_close(q_block, torch.eye(8) * 0.3 * 2.0)  # scale * sqrt(head_dim)
    torch.testing.assert_close(module.out_proj.weight, torch.eye(8))


@pytest.mark.parametrize("name", ["mha", "mha_need_weights"])
@pytest.mark.parametrize(
    "mask", ["causal", "causal_br", "window3", "padding", "bool", "additive", "noncausal"]
)
def test_mha_matches_the_float64_reference_with_a_custom_scale(name, mask):
    case = AttentionCase(2, 3, 5, 7, 8, "fp32", "cpu", mask, scale=0.4)
    inputs = make_inputs(case, seed=0)
    torch.testing.assert_close(
        bind(get_variant(name), inputs)().double(),
        reference_attention(inputs),
        atol=2e-5,
        rtol=2e-5,
    )


def test_masks_use_the_modules_convention_true_hides():
    case = AttentionCase(2, 3, 4, 6, 8, "fp32", "cpu", "padding")
    inputs = make_inputs(case, seed=0)
    attn_mask, key_padding_mask = module_masks(inputs.mask, 2, 3, 4, 6)
    assert attn_mask is None and torch.equal(key_padding_mask, ~inputs.mask.allowed.reshape(2, 6))
    causal = make_inputs(AttentionCase(2, 3, 4, 6, 8, "fp32", "cpu", "causal_br"), seed=0)
    attn_mask, _ = module_masks(causal.mask, 2, 3, 4, 6)
    assert attn_mask.shape == (4, 6) and torch.equal(attn_mask, ~causal.mask.allowed)


def test_grouped_query_cases_are_skips_with_the_reason():
    case = AttentionCase(1, 4, 3, 3, 8, "fp32", "cpu", "causal", num_kv_heads=2)
    with pytest.raises(VariantUnsupported, match="no grouped-query attention"):
        prepare_case(get_variant("mha"), case, seed=0)


def test_need_weights_gives_nan_where_sdpa_gives_zeros():
    """A query that sees no key: need_weights=True runs softmax over all -inf (NaN); False runs SDPA (zeros)."""
    case = AttentionCase(1, 2, 6, 3, 8, "fp32", "cpu", "causal_br")  # queries 0..2 see no key
    inputs = make_inputs(case, seed=0)
    weights = bind(get_variant("mha_need_weights"), inputs)()
    plain = bind(get_variant("mha"), inputs)()
    assert torch.isnan(weights[:, :, :3]).all() and torch.isfinite(weights[:, :, 3:]).all()
    assert (plain[:, :, :3] == 0).all()
    assert (
        get_variant("mha_need_weights").fully_masked_rows == "nan"
        and get_variant("mha").fully_masked_rows == "zeros"
    )
