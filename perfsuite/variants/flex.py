"""``flex_attention``: compiled (fused) and eager (an unfused reference), block mask built once per case.

Each case's mask becomes a flex ``mask_mod`` and, for an additive bias, a ``score_mod``:
causal, bottom-right causal and sliding-window masks are written as index arithmetic, so
``create_block_mask`` can mark whole blocks as empty and the fused kernel skips them; boolean
and padding masks are looked up in the case's ``allowed`` tensor. ``prepare`` builds the
``BlockMask`` once per case, outside the timed call; ``flex_compiled`` also compiles per case
(``perfsuite.variants.compiled.compile_for_case``).

Without ``torch.compile``, flex_attention runs an unfused implementation that materializes the
``[batch, num_heads, seq_len_q, seq_len_kv]`` scores (torch warns so): ``flex_eager`` is that
reference, not a fast path. On the CPU, torch 2.13 has no flex backward ("FlexAttention does not
support backward on CPU"), so backward modes skip there with torch's message.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import AttentionMask, mask_kind
from perfsuite.variants.compiled import compile_for_case
from perfsuite.variants.registry import VariantFn, register_variant

_EAGER_WARNING = "flex_attention called without torch.compile"


def _broadcast_lookup(tensor: torch.Tensor) -> Callable:
    """``(b, h, q, kv) -> tensor[...]`` for a tensor broadcastable to ``[batch, heads, seq_q, seq_kv]``."""
    full = tensor.reshape((1,) * (4 - tensor.dim()) + tuple(tensor.shape))
    varies = [size > 1 for size in full.shape]  # a size-1 dim is broadcast: always index 0

    def lookup(b, h, q_idx, kv_idx):
        return full[
            tuple(index if vary else 0 for index, vary in zip((b, h, q_idx, kv_idx), varies))
        ]

    return lookup


def mask_mod_for(mask: AttentionMask, seq_len_q: int, seq_len_kv: int) -> Callable | None:
    """The flex ``mask_mod`` (True = attend) of ``mask``, or None when it hides no key."""
    kind = mask_kind(mask.kind)
    if kind.causal:  # index arithmetic: flex skips whole blocks
        return lambda b, h, q_idx, kv_idx: kind.sees(q_idx, kv_idx, seq_len_q, seq_len_kv)
    return None if mask.allowed is None else _broadcast_lookup(mask.allowed)


def score_mod_for(mask: AttentionMask) -> Callable | None:
    """The flex ``score_mod`` adding ``mask.additive`` to the scaled score, or None."""
    if mask.additive is None:
        return None
    bias = _broadcast_lookup(mask.additive)
    return lambda score, b, h, q_idx, kv_idx: score + bias(b, h, q_idx, kv_idx)


def block_mask_for(mask: AttentionMask, query: torch.Tensor, key: torch.Tensor) -> BlockMask | None:
    """``create_block_mask`` of the case's mask for ``query`` ``[B, H, Sq, D]`` and ``key`` ``[B, Hkv, Skv, D]``."""
    batch, num_heads, seq_len_q, _ = query.shape
    seq_len_kv = key.shape[2]
    mask_mod = mask_mod_for(mask, seq_len_q, seq_len_kv)
    if mask_mod is None:
        return None
    allowed = mask.allowed if mask.allowed is not None and mask.allowed.dim() == 4 else None
    per_batch = batch if allowed is not None and allowed.shape[0] > 1 else None
    per_head = num_heads if allowed is not None and allowed.shape[1] > 1 else None
    return create_block_mask(
        mask_mod, per_batch, per_head, seq_len_q, seq_len_kv, device=query.device
    )


def call_flex(query, key, value, block_mask, score_mod, scale):
    """flex_attention with grouped-query heads when key/value have fewer heads than query."""
    return flex_attention(
        query,
        key,
        value,
        score_mod=score_mod,
        block_mask=block_mask,
        scale=scale,
        enable_gqa=key.shape[1] != query.shape[1],
    )


def _for_case(inputs: AttentionInputs, flex_call: Callable) -> VariantFn:
    block_mask = block_mask_for(inputs.mask, inputs.query, inputs.key)
    score_mod = score_mod_for(inputs.mask)

    def attention(query, key, value, *, mask, scale):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_EAGER_WARNING)
            return flex_call(query, key, value, block_mask, score_mod, scale)

    return attention


def prepare_eager(inputs: AttentionInputs) -> VariantFn:
    """Block mask and score_mod built once for this case; eager (unfused) flex_attention."""
    return _for_case(inputs, call_flex)


def prepare_compiled(inputs: AttentionInputs) -> VariantFn:
    """Block mask and score_mod built once for this case; flex_attention compiled for it."""
    return refusing_cpu_backward(_for_case(inputs, compile_for_case(call_flex)))


def refusing_cpu_backward(fn: VariantFn) -> VariantFn:
    """``fn``, but a call that needs a backward on the CPU raises torch's refusal before Dynamo traces it.

    torch has no flex_attention backward on the CPU. When that refusal is raised while Dynamo traces
    flex_attention, Dynamo gives up on flex_attention's code for the rest of the process: every later
    ``torch.compile(flex_attention)`` (transformers' ``hf_flex_attention``) then runs the unfused eager
    path without a word (seen with torch 2.13: ``bmm`` and ``softmax`` ops, no compiled graph).
    """

    def attention(query, key, value, *, mask, scale):
        if (
            query.device.type == "cpu"
            and torch.is_grad_enabled()
            and any(t.requires_grad for t in (query, key, value))
        ):
            raise NotImplementedError(
                "FlexAttention does not support backward on CPU (refused before torch.compile "
                "traces it, which would make Dynamo skip flex_attention for the whole process)"
            )
        return fn(query, key, value, mask=mask, scale=scale)

    return attention


@functools.cache
def _shared_compiled_flex() -> Callable:
    """One compiled flex for direct calls of ``flex_compiled_attention`` (without ``prepare``), made
    at the first such call; its Dynamo cache is subject to the recompile limit. The suite always
    goes through ``prepare``."""
    return torch.compile(call_flex, dynamic=False)


@register_variant(
    "flex_eager",
    "flex_attention without torch.compile: unfused reference, materializes the scores",
    prepare=prepare_eager,
    forms=("value_head_dim",),
)
def flex_eager_attention(query, key, value, *, mask, scale):
    """Eager flex_attention; called directly it builds the block mask on every call."""
    return prepare_eager(AttentionInputs(query, key, value, mask, scale))(
        query, key, value, mask=mask, scale=scale
    )


@register_variant(
    "flex_compiled",
    "flex_attention under torch.compile: fused, block mask built once per case",
    prepare=prepare_compiled,
    compiled=True,
    saves_scores_for_backward=False,
    fused=True,
    forms=("value_head_dim",),
)
def flex_compiled_attention(query, key, value, *, mask, scale):
    """Compiled flex_attention; called directly it builds the block mask on every call."""
    return _for_case(AttentionInputs(query, key, value, mask, scale), _shared_compiled_flex())(
        query, key, value, mask=mask, scale=scale
    )
