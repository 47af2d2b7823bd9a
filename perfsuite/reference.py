"""The float64 oracle every variant is held to, and per-dtype tolerances.

Tolerances (absolute and relative, applied by ``torch.testing.assert_close`` as
``|actual - expected| <= atol + rtol * |expected|``) are set from each dtype's unit
roundoff ``u`` (``torch.finfo(dtype).eps / 2``) and what attention does in that dtype:

* the output is a convex combination of value rows, so with standard-normal inputs
  its elements are O(1) and absolute error is the meaningful measure;
* a low-precision implementation rounds the softmax weights and the output to the
  dtype (about ``2u`` relative each) and accumulates matmuls in float32, so its error
  is a small multiple of ``u``, nearly independent of ``seq_len``;
* margins of 4x or more over the largest error measured on CPU (see README) leave room for
  other kernels (GPU fused kernels, TF32) without hiding real bugs, which give O(1) errors.

| dtype | u        | atol  | rtol  |
|-------|----------|-------|-------|
| fp64  | 1.1e-16  | 1e-10 | 1e-10 |
| fp32  | 6.0e-8   | 2e-5  | 2e-5  |
| fp16  | 4.9e-4   | 8e-3  | 8e-3  |
| bf16  | 3.9e-3   | 5e-2  | 5e-2  |
"""

from __future__ import annotations

import dataclasses

import torch

from perfsuite.inputs import AttentionInputs

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (8e-3, 8e-3),
    torch.bfloat16: (5e-2, 5e-2),
}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Outcome of comparing one output with the reference.

    ``max_abs_error``: largest ``|actual - expected|`` (inf when non-finite values exist);
    ``failure``: None when within tolerance, else a message naming the worst element.
    """

    max_abs_error: float
    failure: str | None


def reference_attention(inputs: AttentionInputs) -> torch.Tensor:
    """Attention in float64 from the same inputs, ``[batch, num_heads, seq_len_q, head_dim]``.

    ``softmax(q @ k^T * scale + mask) @ v`` with masked scores set to ``-inf``.
    """
    q, k, v = (t.to(torch.float64) for t in (inputs.query, inputs.key, inputs.value))
    scores = torch.matmul(q, k.transpose(-2, -1)) * inputs.scale
    if inputs.causal_masked_out is not None:
        scores = scores.masked_fill(inputs.causal_masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _describe(index: tuple[int, ...], actual: torch.Tensor, expected: torch.Tensor) -> str:
    got, want = actual[index].item(), expected[index].item()
    return f"worst element at [batch, head, query, dim] = {list(index)}: got {got!r}, expected {want!r}"


def compare_with_reference(actual: torch.Tensor, expected: torch.Tensor, label: str) -> Comparison:
    """Compare a variant's output with the float64 reference.

    ``label`` names the variant and case in the message. Non-finite outputs always fail.
    """
    if actual.shape != expected.shape:
        return Comparison(float("inf"), f"{label}: output shape {list(actual.shape)} != {list(expected.shape)}")
    actual64 = actual.detach().to(torch.float64)
    non_finite = ~torch.isfinite(actual64)
    if non_finite.any():
        index = tuple(int(i) for i in non_finite.nonzero()[0])
        count = int(non_finite.sum())
        return Comparison(float("inf"), f"{label}: {count} non-finite outputs; first " + _describe(index, actual64, expected))
    error = (actual64 - expected).abs()
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    atol, rtol = TOLERANCES[actual.dtype]
    try:
        torch.testing.assert_close(actual64, expected, atol=atol, rtol=rtol)
    except AssertionError as exc:
        summary = str(exc).splitlines()[0:4]
        message = f"{label}: not within atol={atol}, rtol={rtol} of the float64 reference; " + _describe(worst, actual64, expected)
        return Comparison(float(error.max()), message + "\n" + "\n".join(summary))
    return Comparison(float(error.max()), None)
