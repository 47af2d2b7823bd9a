"""The post's naive attention: an out-of-place ``masked_fill`` copies the scores."""

from __future__ import annotations

import torch

from perfsuite.variants.registry import register_variant


def expand_kv_heads(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Repeat each key/value head for its group of query heads, as SDPA's ``enable_gqa`` does.

    ``[batch, num_kv_heads, seq, head_dim]`` -> ``[batch, num_heads, seq, head_dim]`` with
    ``repeat_interleave`` over heads (head ``h`` uses kv head ``h // (num_heads // num_kv_heads)``),
    not ``repeat``, which would pair query heads with the wrong kv heads.
    """
    groups = num_heads // tensor.shape[1]
    return tensor if groups == 1 else tensor.repeat_interleave(groups, dim=1)


@register_variant(
    "naive",
    "matmul, scale, out-of-place masked_fill, softmax, matmul",
    copies_scores_when_masked=True,
    fully_masked_rows="nan",
    saves_scores_for_backward=True,
    forms=("value_head_dim",),
)
def naive_attention(query, key, value, *, mask, scale):
    """Attention written op by op; ``masked_fill`` clones the ``[B, H, Sq, Skv]`` scores."""
    key, value = expand_kv_heads(key, query.shape[1]), expand_kv_heads(value, query.shape[1])
    scores = torch.matmul(query, key.transpose(-2, -1))
    scores = scores * scale
    if mask.additive is not None:
        scores = scores + mask.additive
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value)
