"""Chunked prefill over a paged KV cache: packed queries, keys behind a block table.

A ``packedpaged`` case (``perfsuite.attention.layouts``; forms ``Form.VARLEN`` and ``Form.PAGED``)
passes query ``[total_q, num_heads, head_dim]`` packed with ``cu_seqlens_q`` (int32 ``[batch + 1]``;
sequences have different numbers of new tokens: a batch mixing decode steps and prefill chunks),
key/value as page caches ``[num_pages, page_size, num_kv_heads, head_dim]`` with ``block_table``
(int32 ``[batch, max_pages]``) and ``seq_lens_kv`` (int32 ``[batch]``: each sequence's context,
its new tokens included), plus ``cu_seqlens_kv`` (the offsets the keys would have packed; its
``diff`` is ``seq_lens_kv``), ``max_seqlen_q`` and ``max_seqlen_kv``. The queries of sequence ``b``
are the last ``q_len`` positions of its ``seq_lens_kv[b]`` keys (``causal_br``: query ``i`` sees
keys ``0 .. kv_len - q_len + i``). The page size is ``key.shape[1]``. This is the form of vLLM's
and FlashInfer's batch prefill over a paged cache and of FlashAttention's ``flash_attn_varlen_func``
with ``block_table``.

* ``paged_prefill_gather``: the naive way: every sequence's pages gathered into a dense cache (a
  copy each step, which the structural fingerprint shows with its bytes), the packed queries
  padded to the longest chunk, SDPA with a padding mask, packed again.
* ``paged_prefill_flex``: eager flex_attention over the packed queries and the page cache viewed
  (not copied) as one sequence, the block table, the lengths and the causal alignment in a block
  mask built once per case.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.layouts import padded_allowed, unpack
from perfsuite.attention.masks import mask_kind
from perfsuite.variants.paged import cache_as_sequence, gather_dense
from perfsuite.variants.registry import VariantFn, prepared_on_every_call, register_variant
from perfsuite.variants.varlen import repack


@register_variant(
    "paged_prefill_gather",
    "packed chunks over a paged cache: pages gathered dense each step, queries padded, SDPA with a padding mask",
    forms=(Form.VALUE_HEAD_DIM,),
)
def paged_prefill_gather(
    query,
    key,
    value,
    *,
    mask,
    scale,
    cu_seqlens_q,
    cu_seqlens_kv,
    max_seqlen_q,
    max_seqlen_kv,
    block_table,
    seq_lens_kv,
):
    """Gather (``paged.gather_dense``), pad the queries (``layouts.unpack``), attend, repack:
    ``[total_q, H, D]`` in, ``[total_q, H, Dv]`` out."""
    k, v = gather_dense(key, block_table), gather_dense(value, block_table)
    q = unpack(query, cu_seqlens_q, max_seqlen_q)
    allowed = padded_allowed(mask.kind, cu_seqlens_q.diff(), seq_lens_kv, max_seqlen_q, k.shape[2])
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
    )
    return repack(out, cu_seqlens_q)


def paged_mask_mod(
    kind: str,
    block_table: torch.Tensor,
    seq_lens_kv: torch.Tensor,
    num_pages: int,
    page_size: int,
    q_sequence: torch.Tensor,
    q_position: torch.Tensor,
    q_lens: torch.Tensor,
):
    """A flex ``mask_mod`` over a page cache viewed as one sequence of ``num_pages * page_size``
    slots: query row ``r`` (of sequence ``q_sequence[r]``, its ``q_position[r]``-th query of
    ``q_lens[seq]``) sees slot ``s`` when the slot's page is one of the sequence's (by its block
    table), its position in the sequence is below ``seq_lens_kv[seq]``, and mask ``kind`` allows
    it on the sequence's own lengths. All tensors int, on one device: ``block_table`` ``[batch,
    max_pages]``, ``seq_lens_kv`` and ``q_lens`` ``[batch]``, ``q_sequence``/``q_position``
    ``[rows]``."""
    info = mask_kind(kind)
    table, lengths = block_table.long(), seq_lens_kv.long()
    batch = table.shape[0]
    logical = torch.full((batch, num_pages), -1, dtype=torch.long, device=table.device)
    for b in range(batch):  # physical page -> its place in sequence b (-1: not one of b's pages)
        count = -(-int(lengths[b]) // page_size)
        logical[b, table[b, :count]] = torch.arange(count, device=table.device)
    offset = (lengths - q_lens.long()) if info.bottom_right else torch.zeros_like(lengths)

    def mask_mod(_b, _h, q_idx, kv_idx):
        seq = q_sequence[q_idx]
        place = logical[seq, kv_idx // page_size]
        position = place * page_size + kv_idx % page_size
        visible = (place >= 0) & (position < lengths[seq])
        if info.causal:
            distance = q_position[q_idx] + offset[seq] - position
            visible = visible & (distance >= 0)
            if info.window is not None:
                visible = visible & (distance < info.window)
        return visible

    return mask_mod


def prepare_paged_prefill_flex(inputs: AttentionInputs) -> VariantFn:
    """The block mask (``paged_mask_mod``) built once per case from ``cu_seqlens_q``, the block
    table and the lengths; eager flex_attention over ``[1, H, total_q, D]`` and the cache view."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    forms = inputs.forms
    cu_q = forms["cu_seqlens_q"].long()
    q_lens = cu_q.diff()
    total_q = inputs.query.shape[0]
    num_pages, page_size = inputs.key.shape[0], inputs.key.shape[1]
    device = inputs.query.device
    q_sequence = torch.repeat_interleave(torch.arange(q_lens.shape[0], device=device), q_lens)
    q_position = torch.arange(total_q, device=device) - cu_q[:-1][q_sequence]
    block_mask = create_block_mask(
        paged_mask_mod(
            inputs.mask.kind,
            forms["block_table"],
            forms["seq_lens_kv"],
            num_pages,
            page_size,
            q_sequence,
            q_position,
            q_lens,
        ),
        None,
        None,
        total_q,
        num_pages * page_size,
        device=device,
    )

    def attention(query, key, value, *, mask, scale, **_forms):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = flex_attention(
                query.transpose(0, 1).unsqueeze(0),
                cache_as_sequence(key),
                cache_as_sequence(value),
                block_mask=block_mask,
                scale=scale,
                enable_gqa=key.shape[2] != query.shape[1],
            )
        return out[0].transpose(0, 1)

    return attention


register_variant(
    "paged_prefill_flex",
    "eager flex_attention over packed chunks and the page cache as one sequence (a view), the block table in a mask",
    prepare=prepare_paged_prefill_flex,
    forms=(Form.VALUE_HEAD_DIM,),
    requires=(Form.VARLEN, Form.PAGED),
)(
    prepared_on_every_call(
        prepare_paged_prefill_flex, "flex_attention over packed chunks and a paged cache."
    )
)
