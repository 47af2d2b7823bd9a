"""Naive attention with in-place scale and mask: no copy of the score matrix.

In-place ops are only safe without autograd (the suite runs forwards under
``torch.no_grad()``), since ``softmax`` and ``matmul`` may save their inputs for backward.
"""

from __future__ import annotations

import torch

from perfsuite.variants.registry import register_variant


@register_variant("naive_inplace", "naive with mul_ and masked_fill_ (no score copy)")
def naive_inplace_attention(query, key, value, *, causal, scale, causal_masked_out):
    """Like ``naive`` but scales and masks the fresh score tensor in place."""
    scores = torch.matmul(query, key.transpose(-2, -1))
    scores.mul_(scale)
    if causal:
        scores.masked_fill_(causal_masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value)
