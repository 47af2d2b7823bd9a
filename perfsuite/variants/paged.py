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
* ``varlen_attn_paged``: ``torch.nn.attention.varlen.varlen_attn(block_table=...)`` (torch 2.12+,
  CUDA only).
"""

from __future__ import annotations

import inspect

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
