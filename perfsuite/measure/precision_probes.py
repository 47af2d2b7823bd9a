"""Precision and stability probes: inputs on which a quietly less careful kernel fails, with the kind named.

* **Large scores** (``large_score_values``): query and key built so that the score of key ``j`` is
  ``step * ((j mod 8) - 6)`` for every query: from ``-6 step`` to ``+step``, ``step`` 2048
  (``LARGE_SCORE_STEP``; in float16 the largest power of two whose products stay in range). ``exp``
  of a score of 2048 overflows in float32 and bfloat16 (above 88.7) and float16 (above 11.1), so a
  softmax without its max subtraction returns infinity or NaN ("overflow in the softmax"). The first
  key scores ``-12288``, below ``-1e4``, while keys a causal mask hides score up to ``+2048``: a mask
  written with a finite constant of about ``-1e4`` (common in bfloat16 and float16 code), added to
  the scores or filled in, lets hidden keys win ("a hidden key was weighed"). Multiples of a power
  of two are exact in every dtype, ties stay ties, so the plain computation in the case's dtype is
  near exact and the derived tolerance stays tight.
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

LARGE_SCORE_STEP = 2048.0  # a power of two: its multiples are exact in every floating dtype
LARGE_SCORE_PERIOD = 8
LARGE_SCORE_SHIFT = 6  # key j scores step * ((j mod 8) - 6): from -6 step to +step
FLOAT16_PRODUCT_LIMIT = 32768.0  # |q . k| before the scale stays below this in float16


def large_score_step(dtype: torch.dtype, head_dim: int) -> float:
    """``LARGE_SCORE_STEP``; in float16 the largest power of two <= it whose largest product before the
    scale (``6 step sqrt(head_dim)``) stays below ``FLOAT16_PRODUCT_LIMIT`` (float16 ends at 65504)."""
    if dtype != torch.float16:
        return LARGE_SCORE_STEP
    step = LARGE_SCORE_STEP
    while step > 1 and LARGE_SCORE_SHIFT * step * head_dim**0.5 > FLOAT16_PRODUCT_LIMIT:
        step /= 2
    return step


_LOWER = {
    torch.float64: (torch.float32, torch.float16, torch.bfloat16),
    torch.float32: (torch.float16, torch.bfloat16),
    torch.float16: (torch.bfloat16,),
    torch.bfloat16: (),
}


def large_score_values(inputs: AttentionInputs) -> AttentionInputs:
    """``inputs`` with query and key replaced (value and mask kept) so that the score of key ``j`` is
    ``step * ((j mod 8) - 6)`` for every query (``large_score_step``): query ``[B, H, Sq, D]`` holds
    ``step / scale`` in its first feature and zeros elsewhere, key ``[B, Hkv, Skv, D]`` holds
    ``(j mod 8) - 6``. Shapes, dtypes and devices are those of ``inputs``.

    Raises:
        ValueError: ``inputs.scale`` is 0 (every score is 0 whatever the query: there is no probe).
    """
    if inputs.scale == 0:
        raise ValueError("scale 0: every score is 0, so no large score can be built (no probe)")
    step = large_score_step(inputs.query.dtype, inputs.query.shape[-1])
    query = torch.zeros_like(inputs.query)
    key = torch.zeros_like(inputs.key)
    query[..., 0] = step / inputs.scale
    phase = torch.arange(key.shape[2], device=key.device) % LARGE_SCORE_PERIOD - LARGE_SCORE_SHIFT
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
            "overflows for scores above 88.7 in float32 and bfloat16, 11.1 in float16; these reach "
            f"{LARGE_SCORE_STEP:g})"
        )
    elif hides_keys:
        kind = (
            "a hidden key was weighed: the mask's value is not large enough for these scores (a finite "
            "negative constant such as -1e4, where the keys a row sees score down to "
            f"{-LARGE_SCORE_SHIFT * LARGE_SCORE_STEP:g}; mask with -inf or the dtype's lowest value)"
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
