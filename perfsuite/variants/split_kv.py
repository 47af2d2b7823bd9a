"""Split-KV decode (flash-decoding): the keys split into chunks attended separately, merged by log-sum-exp.

Each of ``num_splits`` chunks of keys gives a partial output ``o_i`` (softmax over the chunk's
keys) and its log-sum-exp ``lse_i = m_i + log(sum exp(s - m_i))`` (``m_i``: the chunk's largest
score). The merge weighs each partial by ``exp(lse_i - lse)`` with ``lse = logsumexp_i(lse_i)``
(Dao et al., "Flash-Decoding for long-context inference", 2023): the partial outputs and their
log-sum-exps are written once per split, the merge's extra traffic.
"""

from __future__ import annotations

import math

import torch

from perfsuite.attention.contract import Form
from perfsuite.variants.naive import expand_kv_heads
from perfsuite.variants.registry import register_variant


def chunk_bounds(seq_len_kv: int, num_splits: int) -> list[tuple[int, int]]:
    """``num_splits`` (at most ``seq_len_kv``) contiguous ``(start, end)`` key ranges of nearly equal size."""
    size = math.ceil(seq_len_kv / max(1, min(num_splits, seq_len_kv)))
    return [(start, min(start + size, seq_len_kv)) for start in range(0, seq_len_kv, size)]


def partial_attention(query, key, value, mask, scale, start: int, end: int):
    """``(output, lse)`` of keys ``start:end``: ``[B, H, Sq, Dv]`` and ``[B, H, Sq, 1]`` (``-inf``
    where the chunk shows a query no key; its output is then 0)."""
    scores = torch.matmul(query, key[:, :, start:end].transpose(-2, -1)) * scale
    if mask.additive is not None:
        scores = scores + mask.additive[..., start:end]
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out[..., start:end], float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(scores - top)
    total = weights.sum(dim=-1, keepdim=True)
    output = torch.matmul(weights, value[:, :, start:end]) / total.clamp_min(1e-30)
    return output, top + torch.log(total)


@register_variant(
    "split_kv",
    "decode split over the keys into num_splits chunks, merged by log-sum-exp (flash-decoding)",
    forms=(Form.VALUE_HEAD_DIM,),
)
def split_kv_attention(query, key, value, *, mask, scale, num_splits):
    """Partial attention per key chunk (``partial_attention``), merged with the max correction."""
    key = expand_kv_heads(key, query.shape[1])
    value = expand_kv_heads(value, query.shape[1])
    parts = [
        partial_attention(query, key, value, mask, scale, start, end)
        for start, end in chunk_bounds(key.shape[2], num_splits)
    ]
    lse = torch.stack([p[1] for p in parts])  # [splits, B, H, Sq, 1]
    weights = torch.exp(lse - torch.logsumexp(lse, dim=0, keepdim=True)).nan_to_num(0.0)
    return (weights * torch.stack([p[0] for p in parts])).sum(dim=0)
