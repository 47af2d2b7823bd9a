"""Variable-length (packed) batches: the varlen form's built-ins.

A packed case (``perfsuite.attention.layouts``, ``Form.VARLEN``) passes query
``[total_q, num_heads, head_dim]``, key/value ``[total_kv, num_kv_heads, head_dim]`` and
``cu_seqlens_q``/``cu_seqlens_kv`` (int32 ``[batch + 1]``), ``max_seqlen_q``/``max_seqlen_kv``.

Backward (``backward`` and ``forward_backward`` modes; varlen training is real): every built-in
here has one, held per sequence to the float64 reference's gradients in the packed layout
(``perfsuite.attention.reference_layouts``), except ``flex_document`` on the CPU (torch's eager
flex_attention has no CPU backward). A user's function on a packed case gets backward too.

* ``varlen_padded_sdpa``: pads the batch to its longest sequence, runs SDPA with a padding mask
  and packs the answer again: what a model without varlen kernels pays (the padding's FLOP and
  bytes, and the copies in and out).
* ``flex_document``: eager flex_attention over the packed tensor as one sequence with a document
  mask (a query sees only keys of its own sequence), the block mask built once per case.
* ``sdpa_nested``: SDPA over nested jagged tensors built from the packed batch (torch refuses
  a causal mask on them, so noncausal cases only).
* ``varlen_attn``: ``torch.nn.attention.varlen.varlen_attn`` (torch 2.10+, CUDA only: its
  flash kernel has no CPU implementation).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.layouts import padded_allowed, unpack
from perfsuite.attention.masks import mask_kind
from perfsuite.variants.registry import VariantFn, prepared_on_every_call, register_variant
from perfsuite.variants.score_mods import FLEX_CPU_BACKWARD
from perfsuite.variants.unsupported import CaseUnsupported


def repack(padded: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, max_len, dim]`` -> ``[total, heads, dim]``: each sequence's valid rows."""
    offsets = cu_seqlens.tolist()
    return torch.cat(
        [
            padded[b, :, : offsets[b + 1] - offsets[b]].transpose(0, 1)
            for b in range(len(offsets) - 1)
        ]
    )


@register_variant(
    "varlen_padded_sdpa",
    "packed batch padded to its longest sequence, SDPA with a padding mask, packed again",
    forms=(Form.VALUE_HEAD_DIM,),
)
def varlen_padded_sdpa(
    query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
):
    """Pad, attend, repack; the mask hides each sequence's padded keys (``layouts.padded_allowed``)."""
    q = unpack(query, cu_seqlens_q, max_seqlen_q)
    k = unpack(key, cu_seqlens_kv, max_seqlen_kv)
    v = unpack(value, cu_seqlens_kv, max_seqlen_kv)
    allowed = padded_allowed(
        mask.kind, cu_seqlens_q.diff(), cu_seqlens_kv.diff(), max_seqlen_q, max_seqlen_kv
    )
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
    )
    return repack(out, cu_seqlens_q)


def document_mask_mod(kind: str, cu_seqlens_q: torch.Tensor, cu_seqlens_kv: torch.Tensor):
    """The flex ``mask_mod`` of a packed batch: a query sees a key of its own sequence that mask
    ``kind`` allows on the sequence's own lengths (``causal_br``: aligned at the sequence's end)."""
    info = mask_kind(kind)
    q_lens, kv_lens = cu_seqlens_q.diff().long(), cu_seqlens_kv.diff().long()
    batch = q_lens.shape[0]
    device = cu_seqlens_q.device
    doc_q = torch.repeat_interleave(torch.arange(batch, device=device), q_lens)
    doc_kv = torch.repeat_interleave(torch.arange(batch, device=device), kv_lens)
    pos_q = torch.arange(doc_q.shape[0], device=device) - cu_seqlens_q[:-1].long()[doc_q]
    pos_kv = torch.arange(doc_kv.shape[0], device=device) - cu_seqlens_kv[:-1].long()[doc_kv]
    offset = (kv_lens - q_lens) if info.bottom_right else torch.zeros_like(q_lens)

    def mask_mod(b, h, q_idx, kv_idx):
        same = doc_q[q_idx] == doc_kv[kv_idx]
        if not info.causal:
            return same
        distance = pos_q[q_idx] + offset[doc_q[q_idx]] - pos_kv[kv_idx]
        sees = distance >= 0
        if info.window is not None:
            sees = sees & (distance < info.window)
        return same & sees

    return mask_mod


def prepare_flex_document(inputs: AttentionInputs) -> VariantFn:
    """The document block mask built once per case; eager flex_attention over ``[1, H, total, D]``."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    forms = inputs.forms
    total_q, total_kv = inputs.query.shape[0], inputs.key.shape[0]
    block_mask = create_block_mask(
        document_mask_mod(inputs.mask.kind, forms["cu_seqlens_q"], forms["cu_seqlens_kv"]),
        None,
        None,
        total_q,
        total_kv,
        device=inputs.query.device,
    )

    def attention(query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, **_):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = flex_attention(
                query.transpose(0, 1).unsqueeze(0),
                key.transpose(0, 1).unsqueeze(0),
                value.transpose(0, 1).unsqueeze(0),
                block_mask=block_mask,
                scale=scale,
                enable_gqa=key.shape[1] != query.shape[1],
            )
        return out[0].transpose(0, 1)

    return attention


register_variant(
    "flex_document",
    "eager flex_attention over the packed batch with a document mask (block mask once per case)",
    prepare=prepare_flex_document,
    forms=(Form.VALUE_HEAD_DIM,),
    requires=(Form.VARLEN,),
    forward_only={"cpu": FLEX_CPU_BACKWARD},  # eager flex: backward on CUDA only
)(
    prepared_on_every_call(
        prepare_flex_document, "flex_attention with a document mask over a packed batch."
    )
)


def _torch_varlen():
    """``torch.nn.attention.varlen.varlen_attn``, or ``CaseUnsupported`` naming the torch version."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        raise CaseUnsupported(
            f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn (added in torch 2.10)"
        ) from None
    return varlen_attn


def varlen_window(kind: str) -> tuple[int, int]:
    """``window_size`` of ``varlen_attn`` for mask ``kind``: ``(-1, -1)`` none, ``(-1, 0)``
    bottom-right causal, ``(W - 1, 0)`` a window of ``W`` keys. Top-left causal is refused with
    ``CaseUnsupported`` (flash aligns causal masks bottom-right)."""
    info = mask_kind(kind)
    if not info.causal:
        return (-1, -1)
    if not info.bottom_right:
        raise CaseUnsupported(
            "varlen_attn aligns causal masks bottom-right (window_size=(-1, 0)); top-left 'causal' "
            "differs when a sequence has fewer queries than keys: use causal_br"
        )
    return (-1, 0) if info.window is None else (info.window - 1, 0)


def prepare_varlen_attn(inputs: AttentionInputs) -> VariantFn:
    """Checks torch has ``varlen_attn`` and the mask is one it takes."""
    varlen_attn = _torch_varlen()
    window = varlen_window(inputs.mask.kind)
    gqa = varlen_gqa_keywords(varlen_attn, inputs.query.shape[1], inputs.key.shape[1])

    def attention(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        return varlen_attn(
            query,
            key,
            value,
            cu_seqlens_q,
            cu_seqlens_kv,
            max_seqlen_q,
            max_seqlen_kv,
            scale=scale,
            window_size=window,
            **gqa,
        )

    return attention


def varlen_gqa_keywords(varlen_attn, num_heads: int, num_kv_heads: int) -> dict[str, bool]:
    """``{"enable_gqa": ...}`` where ``varlen_attn``'s signature has the parameter (torch 2.12+),
    else ``{}``: torch 2.11's ``varlen_attn`` (keywords ``scale``, ``window_size``, ``return_aux``)
    has none, and its flash kernel takes fewer key/value heads than query heads as they are."""
    import inspect

    if "enable_gqa" in inspect.signature(varlen_attn).parameters:
        return {"enable_gqa": num_kv_heads != num_heads}
    return {}


register_variant(
    "varlen_attn",
    "torch.nn.attention.varlen.varlen_attn over the packed batch (CUDA, torch 2.10+)",
    prepare=prepare_varlen_attn,
    devices=("cuda",),
    requires=(Form.VARLEN,),
)(prepared_on_every_call(prepare_varlen_attn, "torch's varlen_attn over a packed batch."))


def prepare_sdpa_nested(inputs: AttentionInputs) -> VariantFn:
    """Nested jagged tensors take no causal mask (torch: "Nested tensors for query / key are not
    supported when is_causal=True"): only noncausal cases."""
    if inputs.mask.kind != "noncausal":
        raise CaseUnsupported(
            f"torch {torch.__version__}: SDPA over nested jagged tensors takes no mask and no "
            f"is_causal; mask {inputs.mask.kind!r} needs one"
        )

    def attention(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        def jagged(t, cu):
            return torch.nested.nested_tensor_from_jagged(t, cu.long()).transpose(1, 2)

        groups = query.shape[1] // key.shape[1]  # nested SDPA has no GQA: kv heads repeated
        with warnings.catch_warnings():  # torch calls every nested tensor a prototype
            warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
            out = F.scaled_dot_product_attention(
                jagged(query, cu_seqlens_q),
                jagged(key.repeat_interleave(groups, dim=1), cu_seqlens_kv),
                jagged(value.repeat_interleave(groups, dim=1), cu_seqlens_kv),
                scale=scale,
            )
        return out.transpose(1, 2).values()

    return attention


register_variant(
    "sdpa_nested",
    "SDPA over nested jagged tensors made from the packed batch (noncausal only)",
    prepare=prepare_sdpa_nested,
    requires=(Form.VARLEN,),
)(prepared_on_every_call(prepare_sdpa_nested, "SDPA over nested jagged tensors."))
