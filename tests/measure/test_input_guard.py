"""A variant cannot fool the float64 check by changing its inputs, and what it returns is held to the contract."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import make_inputs
from perfsuite.measure.correctness import ContractViolation, nonfinite_after_timing
from perfsuite.measure.evidence import gather_evidence, prepare_case
from perfsuite.measure.input_guard import changed_inputs, pristine_copy
from perfsuite.variants import Variant

F = torch.nn.functional
CASE = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")


def sdpa(query, key, value, *, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)


def doubles_query_wrong_answer(query, key, value, *, mask, scale):
    """Attends over the doubled query: before, the reference followed it (max error 2.2e-06, a pass)."""
    query.mul_(2)
    return sdpa(query, key, value, mask=mask, scale=scale)


def doubles_query_right_answer(query, key, value, *, mask, scale):
    """Right answer, mutated input: before, a meaningless error of 1.9 and no word about the mutation."""
    out = sdpa(query, key, value, mask=mask, scale=scale)
    query.mul_(2)
    return out


def _variant(name, fn):
    return Variant(name=name, fn=fn, description="test-only")


@pytest.mark.parametrize("fn", [doubles_query_wrong_answer, doubles_query_right_answer])
def test_a_variant_that_modifies_its_query_fails_with_the_tensor_named(fn, tmp_path):
    evidence = gather_evidence(_variant(fn.__name__, fn), CASE, 0, tmp_path)
    assert evidence.comparison.failure is not None
    assert f"variant {fn.__name__} modified its `query` in place" in evidence.comparison.failure
    assert evidence.modified_inputs
    # restored: the inputs the timed step runs on are the case's, not doubled ones
    assert changed_inputs(evidence.prepared.inputs, make_inputs(CASE, 0)) == []


def test_the_wrong_answer_is_also_reported_against_the_unmodified_reference(tmp_path):
    evidence = gather_evidence(_variant("wrong", doubles_query_wrong_answer), CASE, 0, tmp_path)
    assert "against the reference from the unmodified inputs" in evidence.comparison.failure


def test_a_well_behaved_variant_passes_and_leaves_its_inputs_alone(tmp_path):
    evidence = gather_evidence(_variant("clean", sdpa), CASE, 0, tmp_path, "forward_backward")
    assert evidence.comparison.failure is None and evidence.modified_inputs is None
    assert evidence.prepared.check_inputs() is None


def test_a_mutation_only_in_later_calls_is_found_after_the_profiled_calls(tmp_path):
    calls = []

    def mutates_from_the_second_call(query, key, value, *, mask, scale):
        calls.append(1)
        if len(calls) > 1:
            value.add_(1)
        return sdpa(query, key, value, mask=mask, scale=scale)

    evidence = gather_evidence(_variant("later", mutates_from_the_second_call), CASE, 0, tmp_path)
    assert "modified its `value` in place" in evidence.comparison.failure


def test_mask_tensors_are_guarded_too():
    case = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "additive")
    inputs = make_inputs(case, 0)
    pristine = pristine_copy(inputs)
    inputs.mask.additive.add_(1)
    assert "mask.additive" in changed_inputs(inputs, pristine)


def returns_tuple(query, key, value, *, mask, scale):
    return sdpa(query, key, value, mask=mask, scale=scale), None


def returns_none(query, key, value, *, mask, scale):
    return None


def returns_float64(query, key, value, *, mask, scale):
    return sdpa(query, key, value, mask=mask, scale=scale).double()


def returns_wrong_shape(query, key, value, *, mask, scale):
    return sdpa(query, key, value, mask=mask, scale=scale)[:, :, :4]


@pytest.mark.parametrize(
    "fn, message",
    [
        (returns_tuple, r"returned tuple, not a torch.Tensor \(return the attention output alone"),
        (returns_none, "returned NoneType, not a torch.Tensor"),
        (returns_float64, "returned dtype torch.float64, expected the inputs' torch.float32"),
        (
            returns_wrong_shape,
            r"returned shape \[1, 2, 4, 8\], expected \[B, H, Sq, D\] = \[1, 2, 16, 8\]",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["forward", "forward_backward"])
def test_a_return_value_outside_the_contract_is_named(fn, message, mode, tmp_path):
    """Before: float64 for float32 inputs passed everything; a tuple or None raised a raw AttributeError."""
    if fn is returns_none and mode != "forward":
        pytest.skip("None has no backward to take")
    with pytest.raises(ContractViolation, match=message):
        gather_evidence(_variant(fn.__name__, fn), CASE, 0, tmp_path, mode)


def test_nan_on_every_third_call_is_caught_outside_the_timed_window():
    """Before: only the first call was checked; the timed run passed."""
    calls = []

    def nan_every_third(query, key, value, *, mask, scale):
        calls.append(1)
        out = sdpa(query, key, value, mask=mask, scale=scale)
        return out * float("nan") if len(calls) % 3 == 0 else out

    prepared = prepare_case(_variant("flaky", nan_every_third), CASE, 0)
    from perfsuite.attention.modes import make_step

    step = make_step("forward", prepared.fn, prepared.inputs, prepared.grad_output)
    step()
    message = nonfinite_after_timing(step)
    assert message and "returned non-finite values (256 NaN" in message
    assert (
        nonfinite_after_timing(make_step("forward", sdpa, prepared.inputs, prepared.grad_output))
        is None
    )
