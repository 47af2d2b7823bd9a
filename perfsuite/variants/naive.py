"""The post's naive attention: an out-of-place ``masked_fill`` copies the scores."""

from __future__ import annotations

import torch

from perfsuite.variants.registry import register_variant


@register_variant(
    "naive",
    "matmul, scale, out-of-place masked_fill, softmax, matmul",
    copies_scores_when_masked=True,
)
def naive_attention(query, key, value, *, causal, scale, causal_masked_out):
    """Attention written op by op; ``masked_fill`` clones the ``[B, H, Sq, Skv]`` scores."""
    scores = torch.matmul(query, key.transpose(-2, -1))
    scores = scores * scale
    if causal:
        scores = scores.masked_fill(causal_masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value)
