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


def test_a_low_precision_scale_that_would_round_the_query_again_is_a_skip():
    """Before: ``b2h2s4d256-bf16-noncausal-scale2.5`` (query factor 2.5 * 16 = 40) exceeded the bf16
    tolerance for some seeds; a factor that is a power of two (scale 2: 32) is exact and still runs."""
    inexact = AttentionCase(2, 2, 4, 4, 256, "bf16", "cpu", "noncausal", scale=2.5)
    with pytest.raises(VariantUnsupported, match=r"scale \* sqrt\(head_dim\) = 40.*bfloat16"):
        prepare_case(get_variant("mha"), inexact, seed=0)
    for exact in (
        AttentionCase(2, 2, 4, 4, 256, "bf16", "cpu", "noncausal", scale=2.0),
        AttentionCase(2, 2, 4, 4, 256, "fp32", "cpu", "noncausal", scale=2.5),
    ):
        prepare_case(get_variant("mha"), exact, seed=0)


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


@pytest.mark.parametrize(
    "case_id",
    [
        "b2h2s8d4-fp32-bool-cpu",  # [B, 1, Sq, Skv]: baddbmm copies the [B*H, Sq, Skv] mask
        "b1h2s8d4-fp32-bool-cpu",  # one batch row: a shared [Sq, Skv] mask, broadcast
        "b2h1s8d4-fp32-additive-cpu",  # one head: shared too
        "b2h2s8d4-fp32-padding-cpu",  # key_padding_mask: [B*H, 1, Skv], broadcast
        "b2h2s8d4-fp32-noncausal-padded-uniform-cpu",  # per-sequence mask of a padded batch
    ],
)
def test_need_weights_copies_a_per_batch_mask_where_it_declares_it(tmp_path, case_id):
    """Score accounting counts the copy exactly on the cases the declaration names, so the suite
    reports it (test_score_accounting_per_step expects it there) and fails on any other."""
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.measure.profiling import FORWARD_ANNOTATION, record_trace
    from perfsuite.measure.score_accounting import account_windows

    variant, case = get_variant("mha_need_weights"), parse_case_id(case_id)
    inputs = make_inputs(case, seed=0)
    with torch.no_grad():
        trace = record_trace(bind(variant, inputs), "cpu", tmp_path / "mha.json.gz")
    accounts = account_windows(trace, FORWARD_ANNOTATION, case.score_shape, case.head_dim)
    copies = [a.copies for a in accounts]
    declared = variant.declared_score_copy(case)
    assert copies and copies == [1.0 if declared else 0.0] * len(copies), (case_id, copies)
    if declared:
        labels = [w.label for w in accounts[0].writes]
        assert "copy [4x8x8] in aten::baddbmm > aten::copy_" in labels, labels
        assert "baddbmm" in declared and "per batch row or head" in declared
