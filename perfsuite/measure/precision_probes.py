"""Precision and stability probes: inputs on which a quietly less careful kernel fails, with the kind named.

* **Large scores** (``large_score_values``): query and key built so the scores are multiples of
  ``LARGE_SCORE_STEP`` up to ``LARGE_SCORE_MAX`` (14336), rising with the key index (period 8).
  ``exp`` of such a score overflows in every floating dtype (float32 and bfloat16 above 88.7,
  float16 above 11.1), so a softmax without its max subtraction returns infinity or NaN ("overflow
  in the softmax"). A key a mask hides scores up to 14336 while the keys a row sees may score 0, so a
  mask that adds a finite negative constant smaller in size than about 1.5e4 (``-1e4``, common in
  bfloat16 and float16 code) lets hidden keys win ("a hidden key was weighed"). The scores are
  exact in every dtype up to the rounding of the query's one non-zero entry, ties between keys of
  the same score stay ties, so the plain computation in the case's dtype is near exact and the
  derived tolerance stays tight.
* **Below the case's precision** (``precision_kind``): a failed comparison whose error is of the
  size a float16 or bfloat16 computation makes on the same inputs is named "computed below the case's
  precision" (float16 arithmetic inside a float32 case fails the derived tolerance: its error is
  about 100 times the float32 plain computation's).

Cost: the large-score probe is one more forward call and one more float64 reference (forward mode).
"""

from __future__ import annotations

import torch

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.reference import reference_attention

LARGE_SCORE_STEP = 2048.0  # exact in float16 and bfloat16, as are its multiples up to 7x
LARGE_SCORE_PERIOD = 8
LARGE_SCORE_MAX = LARGE_SCORE_STEP * (LARGE_SCORE_PERIOD - 1)

_LOWER = {
    torch.float64: (torch.float32, torch.float16, torch.bfloat16),
    torch.float32: (torch.float16, torch.bfloat16),
    torch.float16: (torch.bfloat16,),
    torch.bfloat16: (),
}


def large_score_values(inputs: AttentionInputs) -> AttentionInputs:
    """``inputs`` with query and key replaced (value and mask kept) so that the score of key ``j`` is
    ``LARGE_SCORE_STEP * (j mod 8)`` for every query: query ``[B, H, Sq, D]`` holds
    ``LARGE_SCORE_STEP / scale`` in its first feature and zeros elsewhere, key ``[B, Hkv, Skv, D]``
    holds ``j mod 8`` in its first feature. Shapes, dtypes and devices are those of ``inputs``."""
    query = torch.zeros_like(inputs.query)
    key = torch.zeros_like(inputs.key)
    query[..., 0] = LARGE_SCORE_STEP / inputs.scale
    phase = torch.arange(key.shape[2], device=key.device) % LARGE_SCORE_PERIOD
    key[..., 0] = phase.to(key.dtype).view(1, 1, -1)
    return inputs.replace(query=query, key=key)


def large_score_failure(
    variant_name: str, failure: str | None, output: torch.Tensor, hides_keys: bool
) -> str | None:
    """The probe's failure with its kind named, or None when the output passed."""
    if failure is None:
        return None
    if not bool(torch.isfinite(output).all()):
        kind = (
            "overflow in the softmax: exp of a score overflowed (a softmax without its max subtraction "
            f"overflows for scores above 88.7 in float32; these reach {LARGE_SCORE_MAX:g})"
        )
    elif hides_keys:
        kind = (
            "a hidden key was weighed: the mask's value is not large enough for these scores (a finite "
            f"negative constant such as -1e4 added to scores up to {LARGE_SCORE_MAX:g}; mask with -inf or the "
            "dtype's lowest value)"
        )
    else:
        kind = "wrong on large scores"
    return f"variant {variant_name} fails the large-score probe ({kind}): {failure}"


def precision_kind(
    inputs: AttentionInputs, expected: torch.Tensor, max_abs_error: float, atol: float
) -> str | None:
    """ "computed below the case's precision" when ``max_abs_error`` (over ``atol``) is within 4x of the
    error the plain computation makes in a lower dtype than the case's, naming that dtype; else None."""
    if not max_abs_error > atol or not torch.isfinite(torch.tensor(max_abs_error)):
        return None
    for dtype in _LOWER.get(inputs.query.dtype, ()):
        try:
            low = reference_attention(inputs, dtype).to(torch.float64)
        except RuntimeError:  # a dtype this device cannot compute in
            continue
        error = float((low - expected).abs().nan_to_num(nan=0.0).max())
        if error > atol and max_abs_error <= 4 * error:
            name = str(dtype).removeprefix("torch.")
            return (
                f"computed below the case's precision: the error {max_abs_error:.3g} is of the size a {name} "
                f"computation makes on these inputs ({error:.3g}), not a {str(inputs.query.dtype).removeprefix('torch.')} one"
            )
    return None
