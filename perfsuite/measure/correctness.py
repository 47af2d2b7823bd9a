"""A variant's results against the float64 reference: outputs, fully masked rows, gradients."""

from __future__ import annotations

import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import fully_masked_rows
from perfsuite.attention.modes import StepResult
from perfsuite.attention.reference import (REFERENCE_BLOCK_BYTES, UNDEFINED_ROW_RESULTS, Comparison, compare_gradients,
                                          compare_with_reference, reference_attention, tolerances)
from perfsuite.variants import Variant


def check_output(variant: Variant, case: AttentionCase, inputs: AttentionInputs, output: torch.Tensor,
                 label: str) -> Comparison:
    """Compare ``output`` with the float64 reference, holding fully masked rows to the variant's rule."""
    rows = fully_masked_rows(inputs.mask, case.score_shape)
    expected = reference_attention(inputs)
    return compare_with_reference(output, expected, label, rows, variant.fully_masked_rows, tolerances(inputs, expected))


def compare_result(variant: Variant, case: AttentionCase, inputs: AttentionInputs, grad_output: torch.Tensor,
                   mode: str, result: StepResult, seed: int) -> tuple[Comparison | None, str | None]:
    """The comparison with the float64 reference, or None and why not (NaN rows, out of memory).

    ``inputs`` are the values the reference is computed from; ``grad_output`` ``[B, H, Sq, D]``
    seeded backward in gradient modes.
    """
    try:
        return _compare_with_reference(variant, case, inputs, grad_output, mode, result, seed)
    except torch.OutOfMemoryError:
        if case.device == "cuda":
            torch.cuda.empty_cache()
        return None, (f"not compared: the float64 reference of {case.id} ran out of {case.device} memory even in blocks "
                      f"of {REFERENCE_BLOCK_BYTES} bytes of scores (perfsuite.attention.reference)")


def _compare_with_reference(variant: Variant, case: AttentionCase, inputs: AttentionInputs, grad_output: torch.Tensor,
                            mode: str, result: StepResult, seed: int) -> tuple[Comparison | None, str | None]:
    in_mode = "" if mode == "forward" else f" in mode {mode}"
    label = f"variant {variant.name} on case {case.id}{in_mode} (seed {seed})"
    output = check_output(variant, case, inputs, result.output, label)
    if result.gradients is None or output.failure:
        return output, None
    rows = int(fully_masked_rows(inputs.mask, case.score_shape).sum())
    if variant.fully_masked_rows == "nan" and rows:
        return None, (f"{variant.name} returns NaN for the {rows} query rows of this case that see no key, so its "
                      "gradients are NaN everywhere: nothing to compare (the forward check holds those rows to NaN)")
    if variant.fully_masked_rows in UNDEFINED_ROW_RESULTS and rows:
        return None, (f"{variant.name} declares fully_masked_rows={variant.fully_masked_rows!r}: the {rows} query rows "
                      "of this case that see no key may hold any value the reference does not define, so neither are "
                      "the gradients: nothing to compare")
    gradients = compare_gradients(result.gradients, inputs, grad_output, label)
    return Comparison(max(output.max_abs_error, gradients.max_abs_error), gradients.failure), None
