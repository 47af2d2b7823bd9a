"""Naive attention with in-place scale, bias and mask: no copy of the score matrix.

In-place ops are only safe without autograd when they modify a tensor saved for backward;
here they modify the matmul's output, which matmul does not save, but the suite runs every
forward under ``torch.no_grad()`` regardless (``perfsuite.measure.evidence.bind``).
"""

from __future__ import annotations

import torch

from perfsuite.variants.naive import expand_kv_heads
from perfsuite.variants.registry import register_variant


@register_variant(
    "naive_inplace",
    "naive with mul_, add_ and masked_fill_ (no score copy)",
    fully_masked_rows="nan",
    saves_scores_for_backward=True,
    forms=("value_head_dim",),
)
def naive_inplace_attention(query, key, value, *, mask, scale):
    """Like ``naive`` but scales, biases and masks the fresh score tensor in place."""
    key, value = expand_kv_heads(key, query.shape[1]), expand_kv_heads(value, query.shape[1])
    scores = torch.matmul(query, key.transpose(-2, -1))
    scores.mul_(scale)
    if mask.additive is not None:
        scores.add_(mask.additive)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value)
