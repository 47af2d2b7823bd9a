"""A paged KV cache: the paged form's built-ins.

A paged case (``perfsuite.attention.layouts``, ``Form.PAGED``) passes query
``[batch, num_heads, seq_len_q, head_dim]`` (decode: ``seq_len_q = 1``; chunked prefill: a
chunk), key/value as page caches ``[num_pages, page_size, num_kv_heads, head_dim]``,
``block_table`` (int32 ``[batch, max_pages]``: sequence ``b``'s ``p``-th page) and
``seq_lens_kv`` (int32 ``[batch]``). The queries of sequence ``b`` are its last ``seq_len_q``
positions.

* ``paged_gather``: the naive way: gather each sequence's pages into a dense
  ``[batch, num_kv_heads, max_pages * page_size, head_dim]`` cache (a copy of the cache every
  step, which the structural fingerprint shows with its bytes), then SDPA with a padding mask.
* ``paged_flex``: eager flex_attention over the cache viewed as one sequence (no copy), the block
  table and lengths in a mask (query row ``r`` belongs to sequence ``r // seq_len_q``).
* ``varlen_attn_paged``: ``torch.nn.attention.varlen.varlen_attn(block_table=...)`` (torch 2.12+,
  CUDA only).
"""

from __future__ import annotations

import inspect
import warnings

import torch
import torch.nn.functional as F

from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.layouts import padded_allowed
from perfsuite.variants.registry import VariantFn, prepared_on_every_call, register_variant
from perfsuite.variants.unsupported import CaseUnsupported
from perfsuite.variants.varlen import _torch_varlen, varlen_window


def gather_dense(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """``[num_pages, page_size, kv_heads, dim]`` pages -> dense ``[batch, kv_heads, max_pages *
    page_size, dim]`` (one ``index_select`` gather of every page the table names, then a copy into
    the heads-first layout)."""
    batch, max_pages = block_table.shape
    _, page_size, heads, dim = cache.shape
    pages = torch.index_select(cache, 0, block_table.reshape(-1).long())
    return pages.view(batch, max_pages * page_size, heads, dim).transpose(1, 2).contiguous()


@register_variant(
    "paged_gather",
    "pages gathered into a dense cache each step, then SDPA with a padding mask",
    forms=(Form.VALUE_HEAD_DIM,),
)
def paged_gather_attention(query, key, value, *, mask, scale, block_table, seq_lens_kv):
    """``key``/``value`` are page caches; copies them dense (``gather_dense``) on every call."""
    k, v = gather_dense(key, block_table), gather_dense(value, block_table)
    batch, _, seq_len_q, _ = query.shape
    q_lens = torch.full_like(seq_lens_kv, seq_len_q)
    allowed = padded_allowed(mask.kind, q_lens, seq_lens_kv, seq_len_q, k.shape[2])
    return F.scaled_dot_product_attention(
        query, k, v, attn_mask=allowed, scale=scale, enable_gqa=k.shape[1] != query.shape[1]
    )


def prepare_varlen_attn_paged(inputs: AttentionInputs) -> VariantFn:
    """Checks torch's ``varlen_attn`` takes ``block_table`` (torch 2.12+) and the mask."""
    varlen_attn = _torch_varlen()
    if "block_table" not in inspect.signature(varlen_attn).parameters:
        raise CaseUnsupported(
            f"torch {torch.__version__}'s varlen_attn has no block_table (added in torch 2.12)"
        )
    window = varlen_window(inputs.mask.kind)

    def attention(query, key, value, *, mask, scale, block_table, seq_lens_kv):
        batch, heads, seq_len_q, dim = query.shape
        packed = query.transpose(1, 2).reshape(batch * seq_len_q, heads, dim)
        cu_q = torch.arange(
            0, (batch + 1) * seq_len_q, seq_len_q, dtype=torch.int32, device=query.device
        )
        out = varlen_attn(
            packed,
            key,
            value,
            cu_q,
            None,
            seq_len_q,
            block_table.shape[1] * key.shape[1],
            scale=scale,
            window_size=window,
            enable_gqa=key.shape[2] != heads,
            seqused_k=seq_lens_kv,
            block_table=block_table,
        )
        return out.view(batch, seq_len_q, heads, -1).transpose(1, 2)

    return attention


register_variant(
    "varlen_attn_paged",
    "torch.nn.attention.varlen.varlen_attn with block_table over the paged cache (CUDA, torch 2.12+)",
    prepare=prepare_varlen_attn_paged,
    devices=("cuda",),
    requires=(Form.PAGED,),
    forward_only="checked forward only",
)(prepared_on_every_call(prepare_varlen_attn_paged, "torch's varlen_attn over a paged cache."))


def prepare_paged_flex(inputs: AttentionInputs) -> VariantFn:
    """Eager flex_attention over the page cache viewed (not copied) as one ``[1, kv_heads,
    num_pages * page_size, dim]`` sequence, a block mask built once per case from the block table."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from perfsuite.attention.masks import mask_kind

    query, key = inputs.query, inputs.key
    batch, heads, seq_len_q, _ = query.shape
    num_pages, page_size = key.shape[0], key.shape[1]
    table = inputs.forms["block_table"].long()
    lengths = inputs.forms["seq_lens_kv"].long()
    info = mask_kind(inputs.mask.kind)
    logical = torch.full((batch, num_pages), -1, dtype=torch.long, device=table.device)
    for b in range(batch):  # physical page -> its place in sequence b (-1: not one of b's pages)
        count = -(-int(lengths[b]) // page_size)
        logical[b, table[b, :count]] = torch.arange(count, device=table.device)

    def mask_mod(_b, _h, q_idx, kv_idx):
        seq, row = q_idx // seq_len_q, q_idx % seq_len_q
        place = logical[seq, kv_idx // page_size]
        position = place * page_size + kv_idx % page_size
        length = lengths[seq]
        visible = (place >= 0) & (position < length)
        if info.causal:
            distance = row + (length - seq_len_q) * info.bottom_right - position
            visible = visible & (distance >= 0)
            if info.window is not None:
                visible = visible & (distance < info.window)
        return visible

    block_mask = create_block_mask(
        mask_mod, None, None, batch * seq_len_q, num_pages * page_size, device=query.device
    )

    def attention(query, key, value, *, mask, scale, block_table, seq_lens_kv):
        def as_sequence(
            cache,
        ):  # [num_pages, page_size, kv_heads, dim] -> [1, kv_heads, slots, dim], a view
            return cache.flatten(0, 1).unsqueeze(0).transpose(1, 2)

        flat_q = query.transpose(1, 2).reshape(1, batch * seq_len_q, heads, -1).transpose(1, 2)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = flex_attention(
                flat_q,
                as_sequence(key),
                as_sequence(value),
                block_mask=block_mask,
                scale=scale,
                enable_gqa=key.shape[2] != heads,
            )
        return out.transpose(1, 2).reshape(batch, seq_len_q, heads, -1).transpose(1, 2)

    return attention


register_variant(
    "paged_flex",
    "eager flex_attention over the page cache as one sequence (a view, no copy), the block table in a mask",
    prepare=prepare_paged_flex,
    forms=(Form.VALUE_HEAD_DIM,),
    requires=(Form.PAGED,),
)(prepared_on_every_call(prepare_paged_flex, "flex_attention over a paged cache."))
