"""The reference comparison holds each fully-masked-row behaviour to what it declares."""

import pytest
import torch

from perfsuite.attention.reference import (
    UNDEFINED_ROW_RESULTS,
    FullyMaskedRows,
    compare_with_reference,
)

EXPECTED = torch.zeros(
    1, 1, 3, 2, dtype=torch.float64
)  # row 0 sees no key: the reference gives zeros there
EXPECTED[0, 0, 1:] = 1.0
FULLY_MASKED = torch.tensor([[[True, False, False]]])


def output(row0: float) -> torch.Tensor:
    actual = EXPECTED.clone().to(torch.float32)
    actual[0, 0, 0] = row0
    return actual


@pytest.mark.parametrize(
    "declared, row0, passes",
    [
        (FullyMaskedRows.ZEROS, 0.0, True),
        (FullyMaskedRows.ZEROS, float("nan"), False),
        (FullyMaskedRows.ZEROS, 0.5, False),
        (FullyMaskedRows.NAN, float("nan"), True),
        (FullyMaskedRows.NAN, 0.0, False),
        (FullyMaskedRows.FINITE, 0.5, True),
        (FullyMaskedRows.FINITE, float("nan"), False),
        (FullyMaskedRows.ANY, float("nan"), True),
        (FullyMaskedRows.ANY, 0.5, True),
    ],
)
def test_fully_masked_rows_are_held_to_their_declaration(declared, row0, passes):
    result = compare_with_reference(output(row0), EXPECTED, "v on c", FULLY_MASKED, declared)
    assert (result.failure is None) == passes, result.failure


def test_declarations_are_plain_strings_and_the_undefined_ones_are_named_once():
    assert [str(r) for r in FullyMaskedRows] == ["zeros", "nan", "finite", "any"]
    assert UNDEFINED_ROW_RESULTS == ("finite", "any")
    assert (
        compare_with_reference(
            output(float("nan")), EXPECTED, "v on c", FULLY_MASKED, "nan"
        ).failure
        is None
    )
