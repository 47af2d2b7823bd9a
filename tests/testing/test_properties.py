"""Property tests: every selected variant (``--perfsuite-variants``, users' own included), on cases
hypothesis draws (profile: see perfsuite.testing.strategies).

Compiled variants (and ``PER_CASE_COMPILE``) are left out unless they declare ``property_tests=True``
(``Variant.runs_property_tests``): each drawn case would compile anew; they get the same checks on the suite's cases in ``perfsuite/suite/test_properties.py``. Kept apart
from the timed suite: hypothesis refuses function-scoped fixtures such as ``benchmark`` under ``@given``.
"""

import pytest
import torch
from hypothesis import given, settings

from perfsuite.testing import properties
from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.evidence import bind, run_once
from perfsuite.attention.inputs import make_inputs
from perfsuite.testing.strategies import MASKS_HIDING_KEYS, attention_cases, seeds
from perfsuite.variants import Variant, get_variant

DEVICES = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
LOW_PRECISION = ("fp32", "bf16", "fp16")
CAUSAL_LIKE = ("causal", "causal_br", "window")
# Variants whose per-case setup compiles (its first call per drawn shape exceeds hypothesis' deadline).
PER_CASE_COMPILE = {"flex_eager": "flex's block mask is built per drawn shape, through Dynamo"}
STRUCTURE_EXAMPLES = max(5, settings().max_examples // 4)  # each example runs the profiler


@pytest.fixture(scope="module")
def variants(perfsuite_variants):
    """The selected variants that are not compiled (see the module docstring), warmed up: each runs
    once per dtype so lazy initialisation never counts against a deadline."""
    chosen = [
        v.name
        for v in perfsuite_variants
        if v.runs_property_tests and v.name not in PER_CASE_COMPILE and not v.needs_a_form
    ]  # variants for score modifications only: tests/testing/test_score_mod_properties.py
    for device in DEVICES:
        for dtype in LOW_PRECISION:
            case = AttentionCase(1, 2, 4, 4, 8, dtype, device, "causal")
            inputs = make_inputs(case, 0)
            for name in chosen:
                try:
                    run_once(get_variant(name), case, bind(get_variant(name), inputs))
                except VariantUnsupported:
                    pass
    return tuple(chosen)


def holds_for_every_variant(check, case, seed, variants, **kwargs):
    """Run ``check`` for each of ``variants`` that can run ``case``; fail with the first message."""
    ran = 0
    for name in variants:
        try:
            failure = check(get_variant(name), case, seed, **kwargs)
        except VariantUnsupported:
            continue
        ran += 1
        assert failure is None, failure
    assert ran, f"no variant could run {case.id}"


def only(variants, *names):
    """The ``names`` among the selected variants; a skip when none of them is selected."""
    chosen = [v for v in variants if v in names]
    if not chosen:
        pytest.skip(f"none of {', '.join(names)} is selected (--perfsuite-variants)")
    return chosen


@given(case=attention_cases(devices=DEVICES, dtypes=LOW_PRECISION), seed=seeds())
def test_every_variant_matches_the_float64_reference(case, seed, variants):
    holds_for_every_variant(properties.check_matches_reference, case, seed, variants)


@given(case=attention_cases(devices=DEVICES), seed=seeds())
def test_permuting_batch_rows_or_heads_permutes_the_output(case, seed, variants):
    holds_for_every_variant(properties.check_batch_and_head_independence, case, seed, variants)


@given(case=attention_cases(devices=DEVICES, masks=CAUSAL_LIKE), seed=seeds())
def test_keys_after_the_causal_horizon_do_not_change_earlier_rows(case, seed, variants):
    holds_for_every_variant(properties.check_causality, case, seed, variants)


@given(case=attention_cases(devices=DEVICES, masks=MASKS_HIDING_KEYS), seed=seeds())
def test_changing_a_masked_out_key_or_value_changes_nothing_it_hides(case, seed, variants):
    holds_for_every_variant(properties.check_masked_keys_do_not_matter, case, seed, variants)


@given(case=attention_cases(devices=DEVICES, masks=MASKS_HIDING_KEYS), seed=seeds())
def test_a_nan_in_a_masked_out_key_or_value_never_yields_wrong_finite_values(case, seed, variants):
    holds_for_every_variant(
        properties.check_masked_keys_do_not_matter, case, seed, variants, nan=True
    )


@given(case=attention_cases(devices=DEVICES, masks=MASKS_HIDING_KEYS), seed=seeds())
def test_masked_fill_variants_ignore_a_nan_in_a_masked_out_key(case, seed, variants):
    holds_for_every_variant(
        properties.check_nan_masked_key, case, seed, only(variants, "naive", "naive_inplace")
    )


@given(case=attention_cases(devices=DEVICES), seed=seeds())
def test_adding_a_constant_to_a_row_of_scores_changes_nothing(case, seed, variants):
    holds_for_every_variant(properties.check_shift_invariance, case, seed, variants)


@settings(max_examples=STRUCTURE_EXAMPLES)
@given(
    case=attention_cases(devices=DEVICES, dtypes=("fp32", "bf16"), contiguous=True), seed=seeds()
)
def test_naive_copies_the_scores_once_per_masked_forward_and_inplace_never(case, seed, variants):
    holds_for_every_variant(
        properties.check_score_copies, case, seed, only(variants, "naive", "naive_inplace")
    )


def test_property_checks_say_nan_and_name_a_mutated_input():
    """Before: a variant returning NaN failed a property check without the word NaN; a mutation went unnamed."""
    from perfsuite.measure.correctness import ContractViolation
    from perfsuite.testing.properties import check_shift_invariance

    case = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "causal")
    calls = []

    def nan_on_second_call(query, key, value, *, mask, scale):
        calls.append(1)
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scale
        )
        return out * float("nan") if len(calls) == 2 else out

    failure = check_shift_invariance(
        Variant(name="nan2", fn=nan_on_second_call, description="test-only"), case, 0
    )
    assert failure and "NaN in" in failure

    def mutates(query, key, value, *, mask, scale):
        key.zero_()
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scale
        )

    with pytest.raises(ContractViolation, match="modified its `key` in place"):
        check_shift_invariance(Variant(name="mut", fn=mutates, description="test-only"), case, 0)


def test_a_case_too_large_for_memory_is_a_skip_with_its_sizes_not_an_allocator_error():
    """The property checks keep the suite's memory budget: the inputs of this case would need some
    hundreds of PiB, so the check refuses before allocating (before: the allocator's traceback,
    blamed on the variant)."""
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.measure.evidence import VariantUnsupported
    from perfsuite.testing.properties import check_matches_reference
    from perfsuite.variants import get_variant

    case = parse_case_id("b1024h1024s1048576d128-fp32-causal-cpu")
    with pytest.raises(VariantUnsupported, match=r"sdpa on b1024h1024s1048576d128\S* needs about"):
        check_matches_reference(get_variant("sdpa"), case, 0)
