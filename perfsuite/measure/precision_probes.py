"""Precision and stability probes: inputs on which a quietly less careful kernel fails, with the kind named.

* **Large scores** (``large_score_values``): query and key built so that the score of key ``j`` is
  ``step * ((j mod 8) - 6)`` for every query: from ``-6 step`` to ``+step``, ``step`` 2048
  (``LARGE_SCORE_STEP``; in float16 the largest power of two whose products stay in range). ``exp``
  of a score of 2048 overflows in float32 and bfloat16 (above 88.7) and float16 (above 11.1), so a
  softmax without its max subtraction returns infinity or NaN ("overflow in the softmax"). The first
  key scores ``-12288``, below ``-1e4``, while keys a causal mask hides score up to ``+2048``: a mask
  written with a finite constant of about ``-1e4`` (common in bfloat16 and float16 code), added to
  the scores or filled in, lets hidden keys win ("a hidden key was weighed": said only when the
  reference rerun with such a finite mask value, ``FINITE_MASK_VALUES``, gives the variant's output;
  any other mistake on these inputs is "wrong on large scores"). Multiples of a power
  of two are exact in every dtype, ties stay ties, so the plain computation in the case's dtype is
  near exact and the derived tolerance stays tight.
* **Below the case's precision** (``precision_kind``): a failed comparison is named "computed below
  the case's precision" only when the reference rerun in a lower dtype (float16, bfloat16) reproduces
  the error: its mean and its largest error within ``REPRODUCED_MEAN`` and ``REPRODUCED_MAX`` times the
  variant's, and no mistake the failure's own reruns confirm explains it instead (float16
  arithmetic inside a float32 case fails the derived tolerance: its error is about 100 times the
  float32 plain computation's; a dropped score modification makes an error of another pattern).

Cost: the large-score probe is one more forward call and one more float64 reference (forward mode).
"""

from __future__ import annotations

import torch

import dataclasses

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.reference import TOLERANCES, reference_attention

LARGE_SCORE_STEP = 2048.0  # a power of two: its multiples are exact in every floating dtype
LARGE_SCORE_PERIOD = 8
LARGE_SCORE_SHIFT = 6  # key j scores step * ((j mod 8) - 6): from -6 step to +step
FLOAT16_PRODUCT_LIMIT = 32768.0  # |q . k| before the scale stays below this in float16
# finite mask values seen in attention code (-1e4 in bfloat16/float16 code); -1e9 or the dtype's lowest
# value hide a key on the probe as -inf does, so only these can explain a hidden key weighed there
FINITE_MASK_VALUES = (-1e4, -5e3, -1e3)
# a lower dtype's rerun reproduces an error when its mean absolute error is within REPRODUCED_MEAN times the
# variant's and its largest within REPRODUCED_MAX times (the largest of a few elements varies more: a float16
# computation's measured 0.4x to 2.6x the float16 reference's on 256-element cases, its mean 0.8x to 1.2x)
WRONG_ON_LARGE_SCORES = (
    "wrong on large scores"  # a probe failure neither an overflow nor a mask value explains
)
REPRODUCED_MEAN = 2.0
REPRODUCED_MAX = 4.0


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


def finite_mask_inputs(inputs: AttentionInputs, mask_value: float) -> AttentionInputs:
    """``inputs`` whose hidden keys get ``mask_value`` added instead of ``-inf`` (a finite mask, as
    code that masks with a constant computes); ``inputs`` unchanged when its mask hides no key."""
    mask = inputs.mask
    if mask.masked_out is None:
        return inputs
    zeros = torch.zeros(mask.masked_out.shape, dtype=torch.float64, device=mask.masked_out.device)
    finite = zeros.masked_fill(mask.masked_out, mask_value)
    if mask.additive is not None:
        finite = finite + mask.additive.to(torch.float64).masked_fill(mask.masked_out, 0.0)
    return inputs.replace(mask=dataclasses.replace(mask, masked_out=None, additive=finite))


def explaining_mask_value(inputs: AttentionInputs, output: torch.Tensor) -> float | None:
    """The first of ``FINITE_MASK_VALUES`` with which the float64 reference gives ``output``
    ``[B, H, Sq, D]`` (within the dtype's tolerance, ``TOLERANCES``), filled in for hidden keys'
    scores or added to them, or None: no finite mask value explains the output. ``inputs``: the
    probe's (``large_score_values``)."""
    if inputs.mask.masked_out is None or not bool(torch.isfinite(output).all()):
        return None
    atol, rtol = TOLERANCES[inputs.query.dtype]
    actual = output.detach().to(torch.float64)
    for mask_value in FINITE_MASK_VALUES:
        for expected in (
            reference_attention(inputs, hidden_score=mask_value),
            reference_attention(finite_mask_inputs(inputs, mask_value)),
        ):
            expected = expected.to(actual.device)
            if bool(((actual - expected).abs() <= atol + rtol * expected.abs()).all()):
                return mask_value
    return None


def large_score_failure(
    variant_name: str, failure: str | None, output: torch.Tensor, mask_value: float | None
) -> str | None:
    """The probe's failure with its kind named, or None when the output passed. ``mask_value``: the
    finite mask value that explains ``output`` (``explaining_mask_value``), or None."""
    if failure is None:
        return None
    if not bool(torch.isfinite(output).all()):
        kind = (
            "overflow in the softmax: exp of a score overflowed (a softmax without its max subtraction "
            "overflows for scores above 88.7 in float32 and bfloat16, 11.1 in float16; these reach "
            f"{LARGE_SCORE_STEP:g})"
        )
    elif mask_value is not None:
        kind = (
            "a hidden key was weighed: the mask's value is not large enough for these scores (the "
            f"output is the reference's with hidden keys at {mask_value:g} instead of -inf, where the keys "
            f"a row sees score down to {-LARGE_SCORE_SHIFT * LARGE_SCORE_STEP:g}; mask with -inf or the "
            "dtype's lowest value)"
        )
    else:
        kind = WRONG_ON_LARGE_SCORES
    return f"variant {variant_name} fails the large-score probe ({kind}): {failure}"


def restates_wrong_output(failure: str) -> bool:
    """True for a large-score probe failure of no kind of its own (``WRONG_ON_LARGE_SCORES``): an output
    already wrong on the case's own inputs is wrong on the probe's too, the same mistake."""
    return f"fails the large-score probe ({WRONG_ON_LARGE_SCORES})" in failure


def precision_kind(
    inputs: AttentionInputs, expected: torch.Tensor, actual: torch.Tensor, atol: float
) -> str | None:
    """ "computed below the case's precision" when the reference rerun in a dtype lower than the case's
    reproduces the error of ``actual`` against ``expected`` (both ``[B, H, Sq, D]``): its mean and its
    largest absolute error within ``REPRODUCED_MEAN`` and ``REPRODUCED_MAX`` times ``actual``'s, the
    largest over ``atol``; naming that dtype. Else None."""
    if actual.shape != expected.shape or not bool(torch.isfinite(actual).all()):
        return None  # a wrong shape or a non-finite value is not a precision's error
    error = (actual.detach().to(torch.float64) - expected).abs()
    max_abs_error = float(error.max()) if error.numel() else 0.0
    if not max_abs_error > atol:
        return None
    for dtype in _LOWER.get(inputs.query.dtype, ()):
        try:
            low = reference_attention(inputs, dtype).to(torch.float64)
        except RuntimeError:  # a dtype this device cannot compute in
            continue
        low_error = (low - expected).abs().nan_to_num(nan=0.0)
        largest, mean = float(low_error.max()), float(low_error.mean())
        if (
            largest > atol
            and _within(largest, max_abs_error, REPRODUCED_MAX)
            and _within(mean, float(error.mean()), REPRODUCED_MEAN)
        ):
            name = str(dtype).removeprefix("torch.")
            return (
                f"computed below the case's precision: the reference computed in {name} reproduces the "
                f"error (largest {max_abs_error:.3g}, {name}'s {float(low_error.max()):.3g}; mean "
                f"{float(error.mean()):.3g}, {name}'s {float(low_error.mean()):.3g}), not a "
                f"{str(inputs.query.dtype).removeprefix('torch.')} computation"
            )
    return None


def _within(a: float, b: float, factor: float) -> bool:
    """``a`` and ``b`` (non-negative) within ``factor`` times each other."""
    return a <= factor * b and b <= factor * a
