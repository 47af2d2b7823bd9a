"""Attention over chunks of queries: peak memory of one ``[B, H, chunk, Skv]`` score block
instead of the whole ``[B, H, Sq, Skv]`` matrix.

It follows perfsuite's variant signature ``(query, key, value, *, mask, scale)``; ``mask`` is
a ``perfsuite.attention.masks.AttentionMask`` (``additive`` bias and ``masked_out`` selection, each
broadcastable to ``[batch, num_heads, seq_len_q, seq_len_kv]``).
"""

import torch

CHUNK = 64


def _rows(tensor, start, stop):
    """Rows ``start:stop`` of a mask tensor along the query dimension (size 1 broadcasts)."""
    if tensor is None or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., start:stop, :]


def chunked_attention(query, key, value, *, mask, scale):
    """Softmax attention computed ``CHUNK`` queries at a time; a query that sees no key gives zeros."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    chunks = []
    for start in range(0, query.shape[-2], CHUNK):
        stop = min(start + CHUNK, query.shape[-2])
        scores = torch.matmul(query[..., start:stop, :], key.transpose(-2, -1)).mul_(scale)
        if mask.additive is not None:
            scores.add_(_rows(mask.additive, start, stop))
        if mask.masked_out is not None:
            scores.masked_fill_(_rows(mask.masked_out, start, stop), float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(
            0.0
        )  # out of place: softmax saves its output for backward
        chunks.append(torch.matmul(weights, value))
    return torch.cat(chunks, dim=-2)
