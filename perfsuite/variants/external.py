"""flash-attn's ``flash_attn_func`` and xformers' ``memory_efficient_attention`` as suite variants.

Both are CUDA kernels from packages of their own. Each variant is registered whether or not its
package is installed, and skips with the reason (package missing, not a CUDA case, a dtype or mask the
kernel does not take), so a run lists what it could not measure. Layouts: both take
``[batch, seq, heads, head_dim]``; the adapters pass ``query.transpose(1, 2)`` (a view) and return
the output transposed back (a view).

flash-attn (``flash_attn_func(q, k, v, softmax_scale=..., causal=..., window_size=(left, right))``):
fp16/bf16 only; causal is aligned bottom-right (flash-attn >= 2.1), so top-left ``causal`` runs only
when ``seq_len_q == seq_len_kv``; ``window<W>`` is ``window_size=(W - 1, 0)``; grouped kv heads are
native. It takes no mask tensor: ``bool``, ``padding`` and ``additive`` cases are skips (padding
needs ``flash_attn_varlen_func`` with unpadded inputs, another calling convention).

xformers (``memory_efficient_attention(q, k, v, attn_bias=..., scale=...)``): causal kinds as its
``LowerTriangularMask`` (top-left), ``LowerTriangularFromBottomRightMask`` and
``LowerTriangularFromBottomRightLocalAttentionMask``; ``bool``/``padding``/``additive`` as a float
bias tensor ``[B, H, Sq, Skv]`` (``-inf`` at hidden keys); grouped kv heads as the 5D
``[B, S, Hkv, groups, D]`` layout with ``expand`` (no copy).

Neither was run on this project's machines (no CUDA device, packages not installed): the adapters
follow the packages' documented signatures and are exercised here only through their skips.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import mask_kind
from perfsuite.variants.registry import VariantFn, register_variant
from perfsuite.variants.unsupported import CaseUnsupported, optional_module


def _need_cuda(name: str, query: torch.Tensor) -> None:
    if query.device.type != "cuda":
        raise CaseUnsupported(f"{name} runs on CUDA only (this case is on {query.device.type})")


def _cuda_module(name: str, import_name: str, hint: str, query: torch.Tensor):
    """The imported CUDA-only library; ``CaseUnsupported`` off CUDA or when it is not installed."""
    _need_cuda(name, query)
    module, missing = optional_module(import_name, hint)
    if module is None:
        raise CaseUnsupported(missing)
    return module


def prepare_flash_attn(inputs: AttentionInputs) -> VariantFn:
    """``flash_attn_func`` bound to the case's causal flag and window (see the module docstring)."""
    module = _cuda_module(
        "flash-attn", "flash_attn", "install flash-attn (CUDA builds only)", inputs.query
    )
    query, key, mask = inputs.query, inputs.key, inputs.mask
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise CaseUnsupported(f"flash_attn_func takes fp16 and bf16 only, not {query.dtype}")
    kind = mask_kind(mask.kind)
    if mask.additive is not None or (mask.allowed is not None and not kind.causal):
        raise CaseUnsupported(
            f"flash_attn_func takes no mask tensor ({kind.name}); padding needs flash_attn_varlen_func"
        )
    if kind.causal and not kind.bottom_right and query.shape[2] != key.shape[2]:
        raise CaseUnsupported(
            "flash-attn aligns causal masks bottom-right; top-left causal with seq_len_q != seq_len_kv "
            "has no flash-attn form"
        )
    window = (kind.window - 1, 0) if kind.window else (-1, -1)

    def attention(query, key, value, *, mask, scale):
        output = module.flash_attn_func(
            query.transpose(1, 2),
            key.transpose(1, 2),
            value.transpose(1, 2),
            softmax_scale=scale,
            causal=kind.causal,
            window_size=window,
        )
        return output.transpose(1, 2)

    return attention


def prepare_xformers(inputs: AttentionInputs) -> VariantFn:
    """``memory_efficient_attention`` with the case's mask as an xformers bias (see the module docstring)."""
    module = _cuda_module("xformers", "xformers.ops", "install xformers", inputs.query)
    query, key, mask = inputs.query, inputs.key, inputs.mask
    batch, num_heads, seq_len_q, head_dim = query.shape
    num_kv_heads, seq_len_kv = key.shape[1], key.shape[2]
    kind = mask_kind(mask.kind)
    fmha = module.fmha.attn_bias
    if mask.additive is None and kind.causal and kind.window:
        bias = fmha.LowerTriangularFromBottomRightLocalAttentionMask(kind.window)
    elif mask.additive is None and kind.causal:
        bias = (
            fmha.LowerTriangularFromBottomRightMask()
            if kind.bottom_right
            else fmha.LowerTriangularMask()
        )
    elif mask.sdpa_mask is None:
        bias = None
    else:
        selection = mask.sdpa_mask
        if selection.dtype == torch.bool:
            selection = torch.zeros(
                selection.shape, dtype=query.dtype, device=query.device
            ).masked_fill(~selection, float("-inf"))
        bias = selection.expand(batch, num_heads, seq_len_q, seq_len_kv)
    groups = num_heads // num_kv_heads

    def layout(tensor: torch.Tensor, heads: int) -> torch.Tensor:
        t = tensor.transpose(1, 2)  # [B, S, heads, D]
        if groups == 1:
            return t
        if heads == num_heads:
            return t.reshape(batch, t.shape[1], num_kv_heads, groups, head_dim)
        return t.unsqueeze(3).expand(batch, t.shape[1], num_kv_heads, groups, head_dim)

    def attention(query, key, value, *, mask, scale):
        out_bias = (
            bias
            if not isinstance(bias, torch.Tensor) or groups == 1
            else bias.reshape(batch, num_kv_heads, groups, seq_len_q, seq_len_kv)
        )
        output = module.memory_efficient_attention(
            layout(query, num_heads),
            layout(key, num_kv_heads),
            layout(value, num_kv_heads),
            attn_bias=out_bias,
            scale=scale,
        )
        return output.reshape(batch, seq_len_q, num_heads, head_dim).transpose(1, 2)

    return attention


def _direct(prepare: Callable[[AttentionInputs], VariantFn], name: str) -> VariantFn:
    def attention(query, key, value, *, mask, scale):
        return prepare(AttentionInputs(query, key, value, mask, scale))(
            query, key, value, mask=mask, scale=scale
        )

    attention.__doc__ = f"{name}; called directly it prepares on every call."
    return attention


register_variant(
    "flash_attn",
    "flash-attn flash_attn_func (CUDA, fp16/bf16; causal, window, no mask tensor)",
    prepare=prepare_flash_attn,
    fused=True,
    saves_scores_for_backward=False,
    wraps="flash-attn",
    devices=("cuda",),  # _need_cuda
)(_direct(prepare_flash_attn, "flash_attn_func"))
register_variant(
    "xformers",
    "xformers memory_efficient_attention (CUDA; causal biases or a float bias tensor)",
    prepare=prepare_xformers,
    fused=True,
    saves_scores_for_backward=False,
    wraps="xformers",
    devices=("cuda",),  # _need_cuda
)(_direct(prepare_xformers, "memory_efficient_attention"))
