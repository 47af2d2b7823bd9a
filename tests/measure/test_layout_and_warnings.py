"""Output layout recorded and compared, transposed-last-dimension cases, skip reasons, variant warnings."""

import warnings

import pytest
import torch

from perfsuite.attention.cases import AttentionCase, parse_case_id
from perfsuite.attention.inputs import make_inputs
from perfsuite.measure import warnings_capture
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.warnings_capture import VariantWarning
from perfsuite.measure.layout import describe_layout, layout_differences
from perfsuite.measure.evidence import gather_evidence
from perfsuite.variants import Variant, get_variant

TRANSPOSED = "b1h2s16d8-fp32-causal-transposed-cpu"
STRIDED = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal", contiguous=False)


def test_a_transposed_case_has_a_non_contiguous_last_dimension_and_round_trips_its_id():
    case = parse_case_id(TRANSPOSED)
    assert case.transposed and case.id == TRANSPOSED
    inputs = make_inputs(case, 0)
    assert (
        inputs.query.stride(-1) == 16
        and inputs.key.stride(-1) == 16
        and inputs.value.stride(-1) == 16
    )
    with pytest.raises(ValueError, match="not both"):
        AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal", contiguous=False, transposed=True)


def test_the_flash_skip_reason_names_the_stride_not_the_dtype(tmp_path):
    """Before: 'SDPBackend.FLASH_ATTENTION has no kernel for fp32 on cpu' for a stride refusal."""
    with pytest.raises(VariantUnsupported) as caught:
        gather_evidence(get_variant("sdpa_flash"), parse_case_id(TRANSPOSED), 0, tmp_path)
    reason = str(caught.value)
    assert (
        "last dimension of the input to have stride 1" in reason
        and "no kernel for fp32" not in reason
    )
    assert "Triggered internally" not in reason


def test_output_strides_are_recorded_and_differences_between_variants_named(tmp_path):
    flash = gather_evidence(get_variant("sdpa_flash"), STRIDED, 0, tmp_path)
    math = gather_evidence(get_variant("sdpa_math"), STRIDED, 0, tmp_path)
    assert math.output_layout == "contiguous" and math.output_stride == (256, 128, 8, 1)
    assert flash.output_layout == "dense as [B, Sq, H, D]" and flash.output_stride == (
        256,
        8,
        16,
        1,
    )
    assert layout_differences([flash.layout_record, math.layout_record]) == [
        f"{STRIDED.id} (forward): dense as [B, Sq, H, D] (sdpa_flash); contiguous (sdpa_math)"
    ]
    assert layout_differences([math.layout_record]) == []


def test_describe_layout_falls_back_to_strides():
    assert describe_layout(torch.empty(2, 3, 4, 5)[..., ::2]) == "strides (60, 20, 5, 2)"


def warns_on_first_call(query, key, value, *, mask, scale):
    warnings.warn("this kernel is experimental", UserWarning, stacklevel=2)
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, is_causal=mask.is_causal, scale=scale
    )


def test_a_variants_warnings_are_recorded_and_shown_once_with_the_variant_named(
    tmp_path, monkeypatch
):
    """Before: recorded by run_once and dropped."""
    monkeypatch.setattr(warnings_capture, "_ANNOUNCED", set())
    variant = Variant(name="noisy", fn=warns_on_first_call, description="test-only")
    case = AttentionCase(1, 2, 8, 8, 8, "fp32", "cpu", "causal")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        first = gather_evidence(variant, case, 0, tmp_path, "forward")
        gather_evidence(variant, case, 0, tmp_path, "backward")
    assert (
        len(first.warnings) == 1 and "UserWarning: this kernel is experimental" in first.warnings[0]
    )
    # once, though the per-case prepare call, two modes and their profiled calls all warned
    assert [str(w.message) for w in shown] == [
        f"variant noisy warned on its first call: {first.warnings[0]}"
    ]
    assert shown[0].category is VariantWarning


def _uncompiled_flex(query, key, value, *, mask, scale):
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(query, key, value, scale=scale)


def test_torchs_warn_once_does_not_hide_a_warning_from_the_next_variant(tmp_path, monkeypatch):
    """flex_attention warns "unfused" once per process; each uncompiled flex variant still has it."""
    monkeypatch.setattr(warnings_capture, "_ANNOUNCED", set())
    case = AttentionCase(1, 2, 8, 8, 8, "fp32", "cpu", "noncausal")
    found = []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for name in ("flex_first", "flex_second"):
            variant = Variant(name=name, fn=_uncompiled_flex, description="test-only")
            found.append(gather_evidence(variant, case, 0, tmp_path, "forward").warnings)
    assert all(any("unfused implementation" in line for line in lines) for lines in found), found
