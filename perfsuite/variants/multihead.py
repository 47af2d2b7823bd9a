"""``torch.nn.MultiheadAttention`` (and so ``F.multi_head_attention_forward``) as suite variants.

The module owns its projections, so ``prepare`` makes them transparent, once per case:
``embed_dim = num_heads * head_dim``, no biases, the out-projection the identity, the key and value
in-projections the identity, and the query in-projection ``scale * sqrt(head_dim)`` times the identity,
so the module's own ``1 / sqrt(head_dim)`` becomes the case's ``scale``. The call then computes the
suite's attention; the three in-projections and the out-projection (four ``[B*S, E] x [E, E]``
matmuls) and the layout changes ``[B, H, S, D] <-> [B, S, H*D]`` are part of what is timed and
profiled (the module cannot run without them), which is why these variants are not comparable in
time with the bare kernels: compare ``mha`` with ``mha_need_weights`` to see what ``need_weights``
costs. In bf16/fp16 a scale whose factor is not a power of two is a skip (``refuse_inexact_query_factor``).

Masks are given the way the module takes them: causal kinds, ``bool`` and ``additive`` as
``attn_mask`` (bool with True = **hide**, the opposite of SDPA's convention, ``[Sq, Skv]`` or
``[B * H, Sq, Skv]``; a float bias as is), ``padding`` as ``key_padding_mask`` ``[B, Skv]`` (True =
hide). The module has one kv head per query head: grouped-query cases are skips.

* ``mha``: ``need_weights=False``; the module then calls ``F.scaled_dot_product_attention``.
* ``mha_need_weights``: ``need_weights=True`` (the module's default): an explicit ``softmax``
  whose ``[B, H, Sq, Skv]`` weights it returns (averaged over heads by default); a query that
  sees no key gets a NaN row (softmax over all ``-inf``), where ``mha`` (SDPA) returns zeros.
  With a mask that differs per batch row or head it copies that mask into its score buffer each
  forward (``baddbmm``; ``copies_a_score_sized_mask``): a declared score copy (``MASK_COPY``).

The native fast path (``torch._native_multi_head_attention``) needs self-attention (``query is key
is value``), which an adapter given separate query, key and value never meets.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import AttentionMask, mask_kind
from perfsuite.attention.layouts import Storage
from perfsuite.variants.registry import (
    DeclaredScoreCopy,
    VariantFn,
    prepared_on_every_call,
    register_variant,
)
from perfsuite.variants.unsupported import CaseUnsupported


def transparent_module(
    num_heads: int, head_dim: int, scale: float, dtype: torch.dtype, device: torch.device
) -> torch.nn.MultiheadAttention:
    """``nn.MultiheadAttention`` whose projections pass the heads through (see the module docstring).

    ``embed_dim = num_heads * head_dim``; the query block of ``in_proj_weight`` is
    ``scale * sqrt(head_dim) * I`` so that scores are ``scale * q @ k^T``.
    """
    embed_dim = num_heads * head_dim
    module = torch.nn.MultiheadAttention(
        embed_dim, num_heads, bias=False, batch_first=True, device=device, dtype=dtype
    )
    eye = torch.eye(embed_dim, dtype=dtype, device=device)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([eye * (scale * math.sqrt(head_dim)), eye, eye]))
        module.out_proj.weight.copy_(eye)
    return module.eval()


def module_masks(
    mask: AttentionMask, batch: int, num_heads: int, seq_len_q: int, seq_len_kv: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(attn_mask, key_padding_mask)`` for ``nn.MultiheadAttention`` from the suite's mask.

    Bool masks are inverted (the module's True hides). A padding mask of one row per batch element
    becomes ``key_padding_mask`` ``[B, Skv]`` (a padded layout's per-query mask does not); other selections and biases become ``attn_mask`` ``[Sq, Skv]`` when shared by
    every batch row and head, else ``[B * H, Sq, Skv]``.
    """
    kind = mask_kind(mask.kind)
    per_key = mask.masked_out is not None and mask.masked_out.shape[-2] == 1
    if kind.name == "padding" and mask.additive is None and per_key:
        return None, mask.masked_out.reshape(batch, seq_len_kv)
    if mask.additive is not None:
        form = mask.sdpa_mask  # the bias with -inf at hidden keys
    elif mask.masked_out is not None:
        form = mask.masked_out
    else:
        return None, None
    if form.dim() == 2:
        return form, None
    full = form.expand(batch, num_heads, seq_len_q, seq_len_kv)
    if form.shape[0] == 1 and form.shape[1] == 1:
        return full[0, 0], None
    return full.reshape(batch * num_heads, seq_len_q, seq_len_kv), None


def copies_a_score_sized_mask(case) -> bool:
    """True when ``module_masks`` gives the module a ``[B * H, Sq, Skv]`` ``attn_mask`` for ``case``
    (an ``AttentionCase``): a mask that differs between batch rows (``bool``: ``[B, 1, Sq, Skv]``,
    a padded layout's per-sequence mask) or heads (``additive``: ``[1, H, Sq, Skv]``). With
    ``need_weights=True`` ``F.multi_head_attention_forward`` then computes the scores as
    ``baddbmm(attn_mask, q, k^T)``, whose ``aten::copy_`` writes that mask into the score buffer
    first: a score-sized copy each forward. A shared ``[Sq, Skv]`` mask (causal kinds) or a
    ``key_padding_mask`` (``[B * H, 1, Skv]``) is broadcast instead, a mask expansion."""
    kind = mask_kind(case.mask).name
    if case.layout.storage == Storage.PADDED:
        return case.batch > 1
    if kind == "bool":
        return case.batch > 1
    if kind == "additive":
        return case.num_heads > 1
    return False


MASK_COPY = DeclaredScoreCopy(
    copies_a_score_sized_mask,
    "with a mask that differs per batch row or head (bool, additive, padded layouts), "
    "nn.MultiheadAttention(need_weights=True) computes the scores as baddbmm(attn_mask, q, k^T), "
    "which copies the [B*H, Sq, Skv] mask into the score buffer each forward (aten::baddbmm > aten::copy_)",
)


def _to_embed(tensor: torch.Tensor) -> torch.Tensor:
    """``[B, H, S, D]`` -> ``[B, S, H*D]`` (a copy unless the heads are already interleaved that way)."""
    batch, heads, seq, dim = tensor.shape
    return tensor.transpose(1, 2).reshape(batch, seq, heads * dim)


def refuse_inexact_query_factor(scale: float, head_dim: int, dtype: torch.dtype) -> None:
    """``CaseUnsupported`` when folding ``scale`` into the query in-projection would round the query
    once more than attention does: in a dtype below float32, ``q * (scale * sqrt(head_dim))`` is exact
    only when that factor is a power of two. The module has no ``scale`` argument, and the extra
    rounding (relative 2**-9 in bfloat16) grows with the logits: on ``b2h2s4d256-bf16-noncausal-scale2.5``
    (factor 40) it exceeded the suite's bf16 tolerance, on ``scale2`` (factor 32) it was exact."""
    factor = scale * math.sqrt(head_dim)
    if torch.finfo(dtype).bits < 32 and math.frexp(factor)[0] != 0.5:
        raise CaseUnsupported(
            f"nn.MultiheadAttention has no scale argument: the case's scale {scale:g} is folded into "
            f"the query in-projection as scale * sqrt(head_dim) = {factor:g}, which rounds the query "
            f"once more in {str(dtype).removeprefix('torch.')} (exact only for a power of two)"
        )


def prepare_for(need_weights: bool) -> Callable[[AttentionInputs], VariantFn]:
    """``prepare`` of ``mha``/``mha_need_weights``: the transparent module and its masks, built once per case."""

    def prepare(inputs: AttentionInputs) -> VariantFn:
        query, key = inputs.query, inputs.key
        batch, num_heads, seq_len_q, head_dim = query.shape
        num_kv_heads, seq_len_kv = key.shape[1], key.shape[2]
        if num_kv_heads != num_heads:
            raise CaseUnsupported(
                f"nn.MultiheadAttention has one kv head per query head (no grouped-query attention); "
                f"this case has {num_heads} query heads and {num_kv_heads} kv heads"
            )
        refuse_inexact_query_factor(inputs.scale, head_dim, query.dtype)
        module = transparent_module(num_heads, head_dim, inputs.scale, query.dtype, query.device)
        attn_mask, key_padding_mask = module_masks(
            inputs.mask, batch, num_heads, seq_len_q, seq_len_kv
        )

        def attention(query, key, value, *, mask, scale):
            output, _ = module(
                _to_embed(query),
                _to_embed(key),
                _to_embed(value),
                attn_mask=attn_mask,
                key_padding_mask=key_padding_mask,
                need_weights=need_weights,
            )
            return output.view(batch, seq_len_q, num_heads, head_dim).transpose(1, 2)

        return attention

    return prepare


def _direct(need_weights: bool) -> VariantFn:
    return prepared_on_every_call(
        prepare_for(need_weights),
        f"nn.MultiheadAttention with need_weights={need_weights}; "
        "builds the module on every direct call.",
    )


register_variant(
    "mha",
    "nn.MultiheadAttention(need_weights=False) with identity projections: runs SDPA inside",
    prepare=prepare_for(False),
    wraps="torch.nn.MultiheadAttention",
)(_direct(False))
register_variant(
    "mha_need_weights",
    "nn.MultiheadAttention(need_weights=True, its default) with identity projections: explicit softmax",
    prepare=prepare_for(True),
    saves_scores_for_backward=True,
    fully_masked_rows="nan",
    wraps="torch.nn.MultiheadAttention",
    score_copy=MASK_COPY,
)(_direct(True))
