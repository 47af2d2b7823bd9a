"""Numerical facts the mask and in-place conventions rest on (docs/explanation/correctness-and-masks.md)."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.evidence import bind
from perfsuite.attention.inputs import make_inputs
from perfsuite.variants import Variant, get_variant


def test_minus_1e9_does_not_fit_fp16():
    """masked_fill refuses it outright; a cast turns it into -inf (so -inf rows follow the NaN/zeros rule)."""
    scores = torch.zeros(2, 2, dtype=torch.float16)
    with pytest.raises(
        RuntimeError, match="cannot be converted to type c10::Half without overflow"
    ):
        scores.masked_fill(torch.eye(2, dtype=torch.bool), -1e9)
    assert torch.isneginf(torch.tensor(-1e9).to(torch.float16))
    assert torch.tensor(-1e9).to(torch.bfloat16).item() == pytest.approx(
        -1e9, rel=1e-2
    )  # bf16 has fp32's range


def test_fp16_min_plus_a_negative_score_overflows_to_minus_inf():
    lowest = torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16)
    assert torch.isneginf(lowest + torch.tensor(-100.0, dtype=torch.float16))


def test_a_row_that_sees_no_key_is_nan_in_naive_and_zeros_in_sdpa():
    case = AttentionCase(1, 2, 6, 3, 8, "fp32", "cpu", "causal_br")  # rows 0..2 see no key
    inputs = make_inputs(case, seed=0)
    naive = bind(get_variant("naive"), inputs)()
    sdpa = bind(get_variant("sdpa_math"), inputs)()
    assert torch.isnan(naive[:, :, :3]).all() and torch.isfinite(naive[:, :, 3:]).all()
    assert (sdpa[:, :, :3] == 0).all()


def test_boolean_and_additive_masks_are_different_things():
    """A float 0/1 mask is added to the scores; it selects nothing."""
    case = AttentionCase(1, 1, 4, 4, 8, "fp32", "cpu", "noncausal")
    inputs = make_inputs(case, seed=0)
    select = torch.tensor([True, True, False, False]).expand(4, 4)
    as_bool = torch.nn.functional.scaled_dot_product_attention(
        inputs.query, inputs.key, inputs.value, attn_mask=select
    )
    as_float = torch.nn.functional.scaled_dot_product_attention(
        inputs.query, inputs.key, inputs.value, attn_mask=select.float()
    )
    only_first_two = torch.nn.functional.scaled_dot_product_attention(
        inputs.query, inputs.key[:, :, :2], inputs.value[:, :, :2]
    )
    torch.testing.assert_close(as_bool, only_first_two)
    assert not torch.allclose(as_float, only_first_two)


def test_the_suite_runs_every_forward_without_autograd():
    seen = []

    def spy(query, key, value, *, mask, scale):
        seen.append(torch.is_grad_enabled())
        return query

    case = AttentionCase(1, 1, 4, 4, 8, "fp32", "cpu", "causal")
    inputs = make_inputs(case, seed=0)
    inputs = inputs.replace(query=inputs.query.requires_grad_())
    with torch.enable_grad():
        bind(Variant(name="spy", fn=spy, description="records grad mode"), inputs)()
    assert seen == [False]


def grad_inputs(case):
    inputs = make_inputs(case, seed=0)
    return inputs.replace(
        **{n: getattr(inputs, n).detach().requires_grad_() for n in ("query", "key", "value")}
    )


def test_naive_inplace_modifies_only_tensors_autograd_did_not_save():
    """mul_/add_/masked_fill_ act on the matmul output, which matmul does not save: backward works
    and matches naive. The suite still runs it under no_grad, where in-place is always safe."""
    case = AttentionCase(1, 2, 5, 5, 8, "fp64", "cpu", "causal")
    grads = []
    for name in ("naive", "naive_inplace"):
        inputs = grad_inputs(case)
        get_variant(name).fn(
            inputs.query, inputs.key, inputs.value, mask=inputs.mask, scale=inputs.scale
        ).sum().backward()
        grads.append(inputs.query.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_in_place_on_a_tensor_saved_for_backward_raises_under_autograd():
    """Zeroing fully masked rows in place on softmax's output (which softmax saves for backward)."""
    case = AttentionCase(1, 2, 6, 3, 8, "fp64", "cpu", "causal_br")
    inputs = grad_inputs(case)
    scores = (inputs.query @ inputs.key.transpose(-2, -1)).masked_fill(
        inputs.mask.masked_out, float("-inf")
    )
    weights = torch.softmax(scores, dim=-1)
    weights.nan_to_num_(0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (weights @ inputs.value).sum().backward()
