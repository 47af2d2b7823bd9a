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
* ``paged_flex``: eager flex_attention over the cache viewed as one sequence (no gather of pages;
  eager flex on the CPU clones the viewed pool each step), the block table and lengths in a mask
  (query row ``r`` belongs to sequence ``r // seq_len_q``).
* ``varlen_attn_paged``: ``torch.nn.attention.varlen.varlen_attn(block_table=...)`` (torch 2.12+,
  CUDA only).
* ``paged_split_kv``: split-KV decode over the pages (flash-decoding): runs of whole pages
  attended alone, merged by their log-sum-exp; the split form (``num_splits``) when the case
  carries it, else ``DEFAULT_PAGE_SPLITS``.
* ``flex_paged_attention``: torch's ``PagedAttention`` (FlexAttention's paged cache, torch's
  ``torch.nn.attention.experimental._paged_attention``): its page table set from the block table,
  the logical block mask converted to physical pages, compiled flex_attention over the cache
  viewed as torch's ``[1, kv_heads, num_pages * page_size, dim]``.
* ``flex_paged_decode``: the same pinned to flex's decode template (``kernel_options=
  {"BACKEND": "TRITON_DECODE"}``): CUDA only; skipped with the torch version where torch has no
  such backend, and with torch's rule where the template refuses the case.

Chunked prefill over a paged cache (packed queries) is in ``perfsuite.variants.paged_prefill``.
"""

from __future__ import annotations

import inspect
import warnings

import torch
import torch.nn.functional as F

from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.layouts import padded_allowed
from perfsuite.attention.masks import mask_kind
from perfsuite.variants.naive import expand_kv_heads
from perfsuite.variants.registry import VariantFn, prepared_on_every_call, register_variant
from perfsuite.variants.unsupported import CaseUnsupported
from perfsuite.variants.varlen import _torch_varlen, varlen_gqa_keywords, varlen_window


def cache_as_sequence(cache: torch.Tensor) -> torch.Tensor:
    """``[num_pages, page_size, kv_heads, dim]`` -> ``[1, kv_heads, num_pages * page_size, dim]``,
    a view (no gather): the cache as one sequence of slots, as flex_attention over pages reads it."""
    return cache.flatten(0, 1).unsqueeze(0).transpose(1, 2)


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
    gqa = varlen_gqa_keywords(varlen_attn, inputs.query.shape[1], inputs.key.shape[2])

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
            seqused_k=seq_lens_kv,
            **gqa,
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
    "eager flex_attention over the page cache as one sequence (a view, no gather of pages), the block table in a mask",
    prepare=prepare_paged_flex,
    forms=(Form.VALUE_HEAD_DIM,),
    requires=(Form.PAGED,),
)(prepared_on_every_call(prepare_paged_flex, "flex_attention over a paged cache."))


# -- split-KV over pages (flash-decoding over a paged cache) ---------------------------------

DEFAULT_PAGE_SPLITS = 4  # when the case does not set num_splits


def page_splits(max_pages: int, num_splits: int) -> list[tuple[int, int]]:
    """``(first, end)`` ranges of block-table columns: ``num_splits`` (at most ``max_pages``)
    runs of whole pages of nearly equal length. ``ValueError`` when ``num_splits < 1``."""
    if num_splits < 1:
        raise ValueError(f"num_splits={num_splits}; it must be at least 1")
    size = -(-max_pages // min(num_splits, max(max_pages, 1)))
    return [(first, min(first + size, max_pages)) for first in range(0, max_pages, size)]


@register_variant(
    "paged_split_kv",
    "flash-decoding over a paged cache: each run of pages attended alone, merged by log-sum-exp",
    forms=(Form.VALUE_HEAD_DIM,),
)
def paged_split_kv_attention(
    query, key, value, *, mask, scale, block_table, seq_lens_kv, num_splits=DEFAULT_PAGE_SPLITS
):
    """Split-KV decode over pages (Dao et al., "Flash-Decoding for long-context inference", 2023).

    The block table's columns are cut into ``num_splits`` runs of whole pages (``page_splits``;
    the case's ``num_splits`` on a split-KV case, else ``DEFAULT_PAGE_SPLITS``). For each run, every
    sequence's pages of that run are read through its block table, attended (keys past
    ``seq_lens_kv`` and those the mask hides removed) into a partial output ``o_i`` ``[B, H, Sq,
    Dv]`` and its log-sum-exp ``lse_i = m_i + log(sum exp(s - m_i))`` ``[B, H, Sq, 1]`` (``-inf``
    for a run holding none of a query's keys). The merge weighs each partial by
    ``exp(lse_i - logsumexp_i(lse_i))``: the partials and their log-sum-exps are the merge's extra
    writes. Query ``[B, H, Sq, D]``, caches ``[num_pages, page_size, Hkv, D]``; returns ``[B, H,
    Sq, Dv]``.
    """
    batch, heads, seq_len_q, _ = query.shape
    page_size = key.shape[1]
    info = mask_kind(mask.kind)
    lengths = seq_lens_kv.long().view(batch, 1, 1, 1)
    q_pos = torch.arange(seq_len_q, device=query.device).view(1, 1, -1, 1)
    offset = (lengths - seq_len_q) if info.bottom_right else torch.zeros_like(lengths)
    outputs, lses = [], []
    for first, end in page_splits(block_table.shape[1], num_splits):
        pages = block_table[:, first:end].long()  # [B, P]
        # this run's pages of every sequence: [B, H, P * page_size, D]
        k, v = (
            expand_kv_heads(cache[pages].flatten(1, 2).transpose(1, 2), heads)
            for cache in (key, value)
        )
        position = first * page_size + torch.arange(k.shape[2], device=query.device)
        visible = position.view(1, 1, 1, -1) < lengths
        if info.causal:
            distance = q_pos + offset - position.view(1, 1, 1, -1)
            visible = visible & (distance >= 0)
            if info.window is not None:
                visible = visible & (distance < info.window)
        scores = torch.matmul(query, k.transpose(-2, -1)).mul_(scale)
        scores = scores.masked_fill_(~visible, float("-inf"))  # in place: no copy of the scores
        top = scores.amax(dim=-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        weights = torch.exp(scores - top)
        total = weights.sum(dim=-1, keepdim=True)
        outputs.append(torch.matmul(weights, v) / total.clamp_min(1e-30))
        lses.append(top + torch.log(total))
    lse = torch.stack(lses)  # [splits, B, H, Sq, 1]
    merge = torch.exp(lse - torch.logsumexp(lse, dim=0, keepdim=True)).nan_to_num(0.0)
    return (merge * torch.stack(outputs)).sum(dim=0)


# -- torch's PagedAttention (over FlexAttention) and flex's decode template ------------------


def torch_paged_attention_class():
    """torch's ``PagedAttention`` (``torch.nn.attention.experimental._paged_attention`` in torch
    2.13; a public ``paged_attention`` module is tried first), or ``CaseUnsupported`` naming the
    torch version."""
    import importlib

    for name in (
        "torch.nn.attention.experimental.paged_attention",
        "torch.nn.attention.experimental._paged_attention",
    ):
        try:
            return importlib.import_module(name).PagedAttention
        except (ImportError, AttributeError):
            continue
    raise CaseUnsupported(
        f"torch {torch.__version__} has no torch.nn.attention.experimental._paged_attention."
        "PagedAttention (FlexAttention's paged KV cache)"
    )


def flex_decode_missing() -> str | None:
    """Why flex_attention cannot be pinned to its decode template in this torch
    (``kernel_options={"BACKEND": "TRITON_DECODE"}``), or None."""
    import typing

    from torch.nn.attention import flex_attention as flex_module

    backends = typing.get_args(getattr(flex_module, "_Backend", None)) or ()
    if "TRITON_DECODE" in backends:
        return None
    if not backends:
        return (
            f"torch {torch.__version__}'s flex_attention has no kernel_options BACKEND: its decode "
            "template (flex_decoding) is chosen by heuristics only"
        )
    return (
        f"torch {torch.__version__}'s flex_attention BACKEND takes {', '.join(backends)}, "
        "not TRITON_DECODE"
    )


def flex_decode_refusal(
    query_len: int, num_heads: int, num_kv_heads: int, block_mask_heads: int = 1
) -> str | None:
    """Why flex's decode template refuses a case, by torch's rule
    (``torch/_inductor/kernel/flex/flex_decoding.py``, ``_use_flex_decoding``, 2.11 to 2.13): between
    1 and 127 queries per sequence; a power-of-two ratio of query heads to key/value heads; a block
    mask with 1 head, or (without grouped-query heads) one per query head. Else None.

    ``block_mask_heads``: the head dimension of the block mask's ``kv_indices`` (1 for the paged
    variants' ``H=None`` mask). The template's other conditions (static batch and head counts, no
    ``OUTPUT_MAX`` or ``FORCE_USE_FLEX_ATTENTION`` option) hold for every case this suite compiles;
    torch's own refusal is still caught at the call (``FLEX_DECODE_REFUSED``).
    """
    if not 0 < query_len < 128:
        return (
            f"flex's decode template takes 1 to 127 queries per sequence; this case has {query_len}"
        )
    groups = num_heads // num_kv_heads
    if groups < 1 or groups & (groups - 1):
        return (
            f"flex's decode template takes a power-of-two ratio of query heads to key/value heads; "
            f"this case has {num_heads}:{num_kv_heads} ({groups})"
        )
    allowed = (1,) if num_heads != num_kv_heads else (1, num_heads)
    if block_mask_heads not in allowed:
        return (
            f"flex's decode template takes a block mask with {' or '.join(map(str, allowed))} "
            f"head(s) here; this one has {block_mask_heads}"
        )
    return None


# What torch's flex lowering raises when BACKEND="TRITON_DECODE" is asked of a case the decode
# template refuses (torch/_inductor/kernel/flex/flex_attention.py).
FLEX_DECODE_REFUSED = "flex_decoding cannot be used for this input"


def skip_flex_decode_refusal(attention: VariantFn) -> VariantFn:
    """``attention`` raising ``CaseUnsupported`` where torch refuses the decode template
    (``FLEX_DECODE_REFUSED`` anywhere in the error's chain, e.g. inside ``BackendCompilerFailed``);
    other errors pass unchanged."""

    def decode(*args, **kwargs):
        try:
            return attention(*args, **kwargs)
        except Exception as exc:
            chain, inner = [], exc
            while inner is not None and len(chain) < 10:
                chain.append(str(inner))
                inner = inner.__cause__ or inner.__context__
            if not any(FLEX_DECODE_REFUSED in text for text in chain):
                raise
            raise CaseUnsupported(
                f"torch refused flex's decode template for this case: {FLEX_DECODE_REFUSED}"
            ) from exc

    return decode


def torch_paged_block_mask(inputs: AttentionInputs):
    """torch's ``PagedAttention`` filled with the case's block table (no page is moved: its page
    table and physical-to-logical map are set from ``block_table``), and the logical block mask of
    the case (query ``i`` of sequence ``b`` at key position ``seq_lens_kv[b] - seq_len_q + i`` for
    ``causal_br``; columns in blocks of one page) converted to the physical pages with
    ``convert_logical_block_mask``. Returns the converted ``BlockMask``."""
    from torch.nn.attention.flex_attention import create_block_mask

    from perfsuite.attention.masks import mask_kind as kind_of

    paged_attention = torch_paged_attention_class()
    query, key = inputs.query, inputs.key
    batch, _, seq_len_q, _ = query.shape
    num_pages, page_size = key.shape[0], key.shape[1]
    table = inputs.forms["block_table"].long()
    lengths = inputs.forms["seq_lens_kv"].long()
    device = query.device
    cache = paged_attention(num_pages, page_size, batch, device=str(device))
    for b in range(batch):
        count = -(-int(lengths[b]) // page_size)
        cache.page_table[b, :count] = table[b, :count]
        cache.physical_to_logical[b, table[b, :count]] = torch.arange(count, device=device)
        cache.capacity[b] = count * page_size
    info = kind_of(inputs.mask.kind)

    def logical_mask(b, _h, q_idx, kv_idx):
        visible = kv_idx < lengths[b]
        if info.causal:
            distance = q_idx + (lengths[b] - seq_len_q) * info.bottom_right - kv_idx
            visible = visible & (distance >= 0)
            if info.window is not None:
                visible = visible & (distance < info.window)
        return visible

    logical = create_block_mask(
        logical_mask,
        batch,
        None,
        seq_len_q,
        table.shape[1] * page_size,
        device=device,
        BLOCK_SIZE=(128, page_size),
    )
    return cache.convert_logical_block_mask(logical, kv_len=lengths)


def prepare_torch_paged(
    inputs: AttentionInputs, compile: bool = True, kernel_options: dict | None = None
) -> VariantFn:
    """flex_attention (compiled per case unless ``compile`` is false) over the page caches viewed
    as torch's ``[1, kv_heads, num_pages * page_size, dim]`` cache, with the block mask of
    ``torch_paged_block_mask``; ``kernel_options`` passed to flex (the decode template's)."""
    from torch.nn.attention.flex_attention import flex_attention

    from perfsuite.variants.compiled import compile_for_case

    block_mask = torch_paged_block_mask(inputs)

    def call(query, key, value, block_mask, scale):
        return flex_attention(
            query,
            cache_as_sequence(key),
            cache_as_sequence(value),
            block_mask=block_mask,
            scale=scale,
            enable_gqa=key.shape[2] != query.shape[1],
            kernel_options=kernel_options,
        )

    flex_call = compile_for_case(call) if compile else call

    def attention(query, key, value, *, mask, scale, **_forms):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return flex_call(query, key, value, block_mask, scale)

    return attention


register_variant(
    "flex_paged_attention",
    "torch's PagedAttention: compiled flex_attention over the paged cache, the block table in its block mask",
    prepare=prepare_torch_paged,
    compiled=True,
    forms=(Form.VALUE_HEAD_DIM,),
    requires=(Form.PAGED,),
)(prepared_on_every_call(prepare_torch_paged, "torch's PagedAttention over a paged cache."))


def prepare_flex_paged_decode(inputs: AttentionInputs) -> VariantFn:
    """``prepare_torch_paged`` pinned to flex's decode template, after checking torch offers it
    (``flex_decode_missing``) and takes the case (``flex_decode_refusal``)."""
    missing = flex_decode_missing()
    if missing:
        raise CaseUnsupported(missing)
    refusal = flex_decode_refusal(inputs.query.shape[2], inputs.query.shape[1], inputs.key.shape[2])
    if refusal:
        raise CaseUnsupported(refusal)
    return skip_flex_decode_refusal(
        prepare_torch_paged(inputs, kernel_options={"BACKEND": "TRITON_DECODE"})
    )


register_variant(
    "flex_paged_decode",
    "torch's PagedAttention on flex's decode template (kernel_options BACKEND='TRITON_DECODE', CUDA)",
    prepare=prepare_flex_paged_decode,
    compiled=True,
    devices=("cuda",),
    forms=(Form.VALUE_HEAD_DIM,),
    requires=(Form.PAGED,),
)(
    prepared_on_every_call(
        prepare_flex_paged_decode, "torch's PagedAttention on flex's decode template."
    )
)
