"""Attention as a serving engineer writes it: decode over a paged KV cache, prefill over a packed
batch. Loaded by the tests as a user's module (``--perfsuite-variant module:function``)."""

import torch
import torch.nn.functional as F


def paged_decode(query, key, value, *, mask, scale, block_table, seq_lens_kv):
    """Decode over a paged cache: ``key``/``value`` are ``[num_pages, page_size, kv_heads, dim]``;
    sequence ``b``'s pages are ``block_table[b]``, its length ``seq_lens_kv[b]``; its queries are
    its last ``query.shape[2]`` positions (bottom-right causal)."""
    batch, heads, q_len, _ = query.shape
    page_size, kv_heads = key.shape[1], key.shape[2]
    out = query.new_empty(batch, heads, q_len, value.shape[-1])
    for b in range(batch):
        length = int(seq_lens_kv[b])
        pages = block_table[b, : (length + page_size - 1) // page_size].long()
        k = key[pages].flatten(0, 1)[:length].transpose(0, 1)  # [kv_heads, length, dim]
        v = value[pages].flatten(0, 1)[:length].transpose(0, 1)
        scores = torch.matmul(
            query[b].unflatten(0, (kv_heads, -1)), k.unsqueeze(1).transpose(-2, -1)
        )
        position = torch.arange(length - q_len, length).unsqueeze(1)
        scores = scores.mul_(scale).masked_fill_(torch.arange(length) > position, float("-inf"))
        out[b] = torch.matmul(torch.softmax(scores, dim=-1), v.unsqueeze(1)).flatten(0, 1)
    return out


def varlen_prefill(
    query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
):
    """Causal prefill over a packed batch: ``query`` ``[total, heads, dim]``, sequence ``b`` in
    rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]``."""
    out = query.new_empty(query.shape[0], query.shape[1], value.shape[-1])
    for b in range(cu_seqlens_q.shape[0] - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_kv[b]), int(cu_seqlens_kv[b + 1])
        attended = F.scaled_dot_product_attention(
            query[q0:q1].transpose(0, 1),
            key[k0:k1].transpose(0, 1),
            value[k0:k1].transpose(0, 1),
            is_causal=mask.is_causal,
            scale=scale,
            enable_gqa=key.shape[1] != query.shape[1],
        )
        out[q0:q1] = attended.transpose(0, 1)
    return out
