"""Declarations real attention libraries need (fully masked rows, compiled, property tests), and --perfsuite-variant naming one function."""

import sys
import textwrap

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.correctness import check_output
from perfsuite.measure.evidence import gather_evidence
from perfsuite.attention.inputs import make_inputs
from perfsuite.testing.properties import ALL_CHECKS, applicable
from perfsuite.variants import Variant, get_variant, registry
from perfsuite.variants.user import load_variant_spec

# causal_br with more queries than keys: the first query rows see no key.
NO_KEY_ROWS = AttentionCase(1, 2, 12, 8, 8, "fp32", "cpu", "causal_br")


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def large_negative_mask(query, key, value, *, mask, scale):
    """Masks with -1e4 (not -inf), as several libraries do: a row that sees no key averages the values."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, -1e4)
    return torch.matmul(torch.softmax(scores, dim=-1), value)


def returns_nan_rows(query, key, value, *, mask, scale):
    output = large_negative_mask(query, key, value, mask=mask, scale=scale)
    return output.masked_fill(~mask.allowed.any(-1, keepdim=True), float("nan"))


def test_finite_rows_are_a_declaration_the_equivalence_check_honours():
    inputs = make_inputs(NO_KEY_ROWS, 0)
    output = large_negative_mask(
        inputs.query, inputs.key, inputs.value, mask=inputs.mask, scale=inputs.scale
    )
    as_zeros = Variant(name="lib", fn=large_negative_mask, description="test-only")
    assert (
        "expected" in check_output(as_zeros, NO_KEY_ROWS, inputs, output, "lib").failure
    )  # zeros: fails
    declared = Variant(
        name="lib", fn=large_negative_mask, description="test-only", fully_masked_rows="finite"
    )
    assert check_output(declared, NO_KEY_ROWS, inputs, output, "lib").failure is None
    bad = returns_nan_rows(
        inputs.query, inputs.key, inputs.value, mask=inputs.mask, scale=inputs.scale
    )
    failure = check_output(declared, NO_KEY_ROWS, inputs, bad, "lib").failure
    assert "sees no key and was declared finite, got NaN or inf" in failure


def test_finite_rows_leave_gradients_uncompared_with_the_reason(tmp_path):
    declared = Variant(
        name="lib", fn=large_negative_mask, description="test-only", fully_masked_rows="finite"
    )
    evidence = gather_evidence(declared, NO_KEY_ROWS, 0, tmp_path, "backward")
    assert evidence.comparison is None and "fully_masked_rows='finite'" in evidence.not_compared


def test_finite_rows_are_left_out_of_the_masked_key_property():
    declared = Variant(
        name="lib", fn=large_negative_mask, description="test-only", fully_masked_rows="finite"
    )
    assert ALL_CHECKS["masked_keys_do_not_matter"](declared, NO_KEY_ROWS, 0) is None
    undeclared = Variant(name="lib", fn=large_negative_mask, description="test-only")
    assert "changed when it changed" in ALL_CHECKS["masked_keys_do_not_matter"](
        undeclared, NO_KEY_ROWS, 0
    )


def test_forward_only_on_one_device_skips_backward_there_only(tmp_path):
    registry.register_variant(
        "gpu_backward_only", "test-only", forward_only={"cpu": "the CPU kernel has no backward"}
    )(large_negative_mask)
    variant = get_variant("gpu_backward_only")
    assert variant.backward_unsupported("cpu") == "the CPU kernel has no backward"
    assert variant.backward_unsupported("cuda") is None
    case = AttentionCase(1, 2, 8, 8, 8, "fp32", "cpu", "causal")
    with pytest.raises(
        VariantUnsupported, match="no backward on cpu: the CPU kernel has no backward"
    ):
        gather_evidence(variant, case, 0, tmp_path, "forward_backward")
    assert gather_evidence(variant, case, 0, tmp_path, "forward").comparison.failure is None


@pytest.mark.parametrize(
    "value, message", [({"tpu": "x"}, "'tpu'"), ({"cpu": ""}, "non-empty"), (3, "forward_only=3")]
)
def test_a_bad_forward_only_declaration_is_named(value, message):
    with pytest.raises(ValueError, match=message):
        registry.register_variant("bad", "test-only", forward_only=value)(large_negative_mask)


def test_an_internally_compiled_variant_can_declare_property_tests():
    case = AttentionCase(1, 2, 8, 8, 8, "fp32", "cpu", "causal")
    compiled = Variant(name="c", fn=large_negative_mask, description="test-only", compiled=True)
    assert "declare property_tests=True" in applicable("matches_reference", compiled, case)
    declared = Variant(
        name="c",
        fn=large_negative_mask,
        description="test-only",
        compiled=True,
        property_tests=True,
    )
    assert applicable("matches_reference", declared, case) is None
    opted_out = Variant(
        name="e", fn=large_negative_mask, description="test-only", property_tests=False
    )
    assert "property_tests=False" in applicable("matches_reference", opted_out, case)


MODULE = textwrap.dedent("""
    from perfsuite.variants.registry import register_variant

    @register_variant("declared_fast", "the one named")
    def fast(query, key, value, *, mask, scale):
        return query

    @register_variant("declared_slow", "not named", forward_only="declared by its decorator")
    def slow(query, key, value, *, mask, scale):
        return query
""")


def test_a_spec_registers_only_the_named_function_of_a_module_and_keeps_the_others_declarations(
    tmp_path, monkeypatch
):
    (tmp_path / "declared_variants.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "declared_variants", raising=False)
    assert load_variant_spec("declared_variants:fast") == "declared_fast"
    assert (
        "declared_fast" in registry.variant_names()
        and "declared_slow" not in registry.variant_names()
    )
    assert (
        load_variant_spec("declared_variants:slow") == "declared_slow"
    )  # named later: its declaration is back
    assert get_variant("declared_slow").forward_only == "declared by its decorator"
