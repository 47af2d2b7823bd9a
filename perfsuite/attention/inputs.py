"""Random attention inputs for a case, reproducible from a seed."""

from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Mapping

import torch

from perfsuite.attention import layouts
from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.layouts import Storage
from perfsuite.attention.masks import AttentionMask, build_mask, compose, mask_kind
from perfsuite.attention.score_mods import form_values


@dataclasses.dataclass(frozen=True)
class AttentionInputs:
    """Tensors one forward consumes.

    ``query``: ``[batch, num_heads, seq_len_q, head_dim]``; ``key``/``value``:
    ``[batch, num_kv_heads, seq_len_kv, head_dim]``, in the case's dtype and device
    (strided views of a ``[batch, seq, heads, head_dim]`` layout for non-contiguous cases).
    ``mask``: the case's ``AttentionMask``, built once outside the timed call.
    ``scale``: the softmax scale.
    ``forms``: the keyword arguments of the forms the case carries (``perfsuite.attention.contract.FORMS``:
    ``alibi_slopes``, ``softcap``, ...), empty for a plain case.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: AttentionMask
    scale: float
    forms: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def replace(self, **changes) -> AttentionInputs:
        return dataclasses.replace(self, **changes)

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of a call under the contract: ``mask``, ``scale`` and the forms'."""
        return {"mask": self.mask, "scale": self.scale, **self.forms}


def draw_tensor(
    generator: torch.Generator,
    batch: int,
    heads: int,
    seq_len: int,
    head_dim: int,
    case: AttentionCase,
) -> torch.Tensor:
    """Standard normal ``[batch, heads, seq_len, head_dim]`` drawn in float32 on the CPU, then
    converted, so the values are identical on every device; non-contiguous when the case says so
    (``strided``: a transposed ``[batch, seq, heads, head_dim]``; ``transposed``: a transposed
    ``[batch, heads, head_dim, seq]``, ``stride(-1) == seq_len``)."""
    if case.transposed:
        sample = torch.randn(batch, heads, head_dim, seq_len, generator=generator).transpose(-2, -1)
    elif case.contiguous:
        sample = torch.randn(batch, heads, seq_len, head_dim, generator=generator)
    else:
        sample = torch.randn(batch, seq_len, heads, head_dim, generator=generator).transpose(1, 2)
    return sample.to(device=case.device, dtype=case.torch_dtype)


def make_inputs(case: AttentionCase, seed: int) -> AttentionInputs:
    """Query/key/value, mask and the forms' keyword values for ``case`` from ``seed``: score
    modifications' (``perfsuite.attention.score_mods.form_values``, drawn last, so a plain case's
    tensors do not change with them); a case with a layout gets its tensors in the layout's form and
    its forms' keywords (``layout_inputs``)."""
    if not case.layout.is_plain:
        return layout_inputs(case, seed)
    generator = torch.Generator().manual_seed(seed)
    query = draw_tensor(generator, case.batch, case.num_heads, case.seq_len_q, case.head_dim, case)
    key = draw_tensor(
        generator, case.batch, case.num_kv_heads, case.seq_len_kv, case.head_dim, case
    )
    value = draw_tensor(
        generator, case.batch, case.num_kv_heads, case.seq_len_kv, case.head_dim, case
    )
    mask = build_mask(
        case.mask,
        case.score_shape,
        case.torch_dtype,
        case.device,
        generator,
        case.score_mods.query_offset,
    )
    forms = form_values(
        case.score_mods,
        batch=case.batch,
        num_heads=case.num_heads,
        seq_len_q=case.seq_len_q,
        seq_len_kv=case.seq_len_kv,
        offset=case.query_offset,
        device=case.device,
        generator=generator,
    )
    return AttentionInputs(query, key, value, mask, case.softmax_scale, forms)


def sequence_allowed(kind: str, q_len: int, kv_len: int, device: str = "cpu") -> torch.Tensor:
    """Bool ``[q_len, kv_len]``: which keys of one sequence each of its queries sees under mask
    ``kind`` (``noncausal``, ``causal``, ``causal_br``, ``window<W>``) on the sequence's own lengths."""
    info = mask_kind(kind)
    if not info.causal:
        return torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    q_idx = torch.arange(q_len, device=device).unsqueeze(1)
    kv_idx = torch.arange(kv_len, device=device).unsqueeze(0)
    return info.sees(q_idx, kv_idx, q_len, kv_len)


def layout_mask(case: AttentionCase) -> AttentionMask:
    """The mask a layout case passes. Padded: ``kind="padding"`` with ``allowed`` ``[batch, 1,
    seq_len_q, seq_len_kv]`` holding each sequence's mask and hiding its padded keys (a padded query
    row sees its sequence's keys). Other storages: the case's kind without tensors (each sequence's
    mask follows from its lengths; ``is_causal`` for top-left causal)."""
    if case.layout.storage != Storage.PADDED:
        return compose(case.mask, None, None, top_left_causal=case.mask == "causal")
    q_lens, kv_lens = layouts.sequence_lengths(
        case.layout, case.batch, case.seq_len_q, case.seq_len_kv
    )
    allowed = layouts.padded_allowed(
        case.mask,
        torch.tensor(q_lens),
        torch.tensor(kv_lens),
        case.seq_len_q,
        case.seq_len_kv,
    )
    return compose("padding", allowed.to(case.device), None)


def layout_inputs(case: AttentionCase, seed: int) -> AttentionInputs:
    """Inputs of a layout case from ``seed`` (``perfsuite.attention.layouts``).

    Drawn as dense ``[batch, heads, seq_len, head_dim]`` (value: ``head_dim_v``) first, then:
    padded: kept dense, with ``layout_mask``; packed: ``[total, heads, head_dim]`` with
    ``cu_seqlens_q/kv`` (int32 ``[batch + 1]``) and ``max_seqlen_q/kv``; paged: key/value as page
    caches ``[num_pages, page_size, num_kv_heads, head_dim]`` in a seeded page order, with
    ``block_table`` (int32 ``[batch, max_pages]``) and ``seq_lens_kv`` (int32 ``[batch]``);
    packedpaged: queries packed as for packed (``cu_seqlens_q/kv``, ``max_seqlen_q/kv``; the
    key offsets are those the keys would have packed), key/value paged as for paged;
    split-KV: ``num_splits``; FP8: float8_e4m3fn query/key/value with ``q/k/v_descale``
    (float32 ``[batch, num_kv_heads]``).
    """
    layout, device = case.layout, case.device
    generator = torch.Generator().manual_seed(seed)
    dim_v = layout.head_dim_v or case.head_dim
    query = draw_tensor(generator, case.batch, case.num_heads, case.seq_len_q, case.head_dim, case)
    key = draw_tensor(
        generator, case.batch, case.num_kv_heads, case.seq_len_kv, case.head_dim, case
    )
    value = draw_tensor(generator, case.batch, case.num_kv_heads, case.seq_len_kv, dim_v, case)
    q_lens, kv_lens = layouts.sequence_lengths(layout, case.batch, case.seq_len_q, case.seq_len_kv)
    forms: dict[str, object] = {}
    if layout.storage == Storage.PACKED_PAGED:  # packed queries over a paged cache
        query = layouts.pack(query, q_lens)
        forms.update(
            cu_seqlens_q=layouts.cu_seqlens(q_lens, device),
            cu_seqlens_kv=layouts.cu_seqlens(kv_lens, device),
            max_seqlen_q=max(q_lens),
            max_seqlen_kv=max(kv_lens),
        )
    if layout.storage == Storage.PACKED:
        query, key, value = (
            layouts.pack(query, q_lens),
            layouts.pack(key, kv_lens),
            layouts.pack(value, kv_lens),
        )
        forms.update(
            cu_seqlens_q=layouts.cu_seqlens(q_lens, device),
            cu_seqlens_kv=layouts.cu_seqlens(kv_lens, device),
            max_seqlen_q=max(q_lens),
            max_seqlen_kv=max(kv_lens),
        )
    elif layout.keys_paged:
        pages = torch.Generator().manual_seed(seed + PAGE_ORDER_SEED_OFFSET)
        key, block_table = layouts.paginate(key, kv_lens, layout.page_size, pages)
        value, _ = layouts.paginate(
            value,
            kv_lens,
            layout.page_size,
            torch.Generator().manual_seed(seed + PAGE_ORDER_SEED_OFFSET),
        )
        forms.update(
            block_table=block_table,
            seq_lens_kv=torch.tensor(kv_lens, dtype=torch.int32, device=device),
        )
    if layout.num_splits is not None:
        forms["num_splits"] = layout.num_splits
    if layout.fp8:
        query, forms["q_descale"] = layouts.quantize_fp8(query, case.num_kv_heads)
        key, forms["k_descale"] = layouts.quantize_fp8(key, case.num_kv_heads)
        value, forms["v_descale"] = layouts.quantize_fp8(value, case.num_kv_heads)
    mask = (
        build_mask(case.mask, case.score_shape, case.torch_dtype, device, generator)
        if layout.storage == Storage.DENSE
        else layout_mask(case)
    )
    return AttentionInputs(query, key, value, mask, case.softmax_scale, forms)


PAGE_ORDER_SEED_OFFSET = 2_000_003  # the page order: a stream of its own
GRAD_OUTPUT_SEED_OFFSET = 1_000_003  # a stream of its own, so inputs do not change with modes


def make_grad_output(case: AttentionCase, seed: int) -> torch.Tensor:
    """Standard normal, shaped as the case's output, that seeds backward, from ``seed``:
    ``[batch, num_heads, seq_len_q, head_dim]`` (``head_dim_v`` for a value head dim of its own);
    a packed case's ``[total_q, num_heads, head_dim_v]`` (the dense draw packed); a padded case's
    padded query rows hold zeros (they are not part of the answer, so no gradient flows from them)."""
    generator = torch.Generator().manual_seed(seed + GRAD_OUTPUT_SEED_OFFSET)
    layout = case.layout
    dim = layout.head_dim_v or case.head_dim
    sample = torch.randn(case.batch, case.num_heads, case.seq_len_q, dim, generator=generator)
    if layout.storage in (Storage.PACKED, Storage.PADDED):
        q_lens, _ = layouts.sequence_lengths(layout, case.batch, case.seq_len_q, case.seq_len_kv)
        if layout.storage == Storage.PACKED:
            sample = layouts.pack(sample, q_lens)
        else:
            for b, q_len in enumerate(q_lens):
                sample[b, :, q_len:] = 0
    return sample.to(device=case.device, dtype=case.torch_dtype)
