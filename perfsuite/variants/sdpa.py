"""``F.scaled_dot_product_attention``: torch's own dispatch and each backend pinned.

Pinned variants use ``torch.nn.attention.sdpa_kernel`` with a single backend, so torch
cannot fall back to another one: when the backend cannot run a case, torch raises
``RuntimeError: No available kernel`` and the suite reports a skip with torch's reasons.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from perfsuite.attention.contract import Form
from perfsuite.variants.registry import register_variant

# Variant name -> SDPBackend member name, as torch spells the backends.
PINNED_BACKENDS = {
    "sdpa_math": "MATH",
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
}


# Why SDPA cannot do a score modification (``register_variant(forms_refused=...)``): the skip reason.
SDPA_REFUSES = {
    Form.ALIBI: "these SDPA variants pass the case's mask only; sdpa_alibi passes the ALiBi bias "
    "as a float attn_mask",
    Form.SOFTCAP: "SDPA applies nothing between its score matmul and its softmax, so it cannot cap "
    "the scores (a float attn_mask is only added); see naive_mods or flex_mods_*",
    Form.SINKS: "SDPA's softmax has no extra denominator term, and its fused kernels return no "
    "log-sum-exp to correct the output with; see flex_mods_*",
}


def call_sdpa(query, key, value, mask, scale):
    """SDPA with the case's mask (``is_causal`` or ``attn_mask``) and GQA when key/value have fewer heads."""
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask.sdpa_mask,
        is_causal=mask.is_causal,
        scale=scale,
        enable_gqa=key.shape[1] != query.shape[1],
    )


@register_variant(
    "sdpa",
    "F.scaled_dot_product_attention, torch picks the backend",
    forms_refused=SDPA_REFUSES,
    forms=("value_head_dim",),
)
def sdpa_attention(query, key, value, *, mask, scale):
    """SDPA with torch's own backend choice."""
    return call_sdpa(query, key, value, mask, scale)


def _pinned(backend_name: str):
    backend = getattr(SDPBackend, backend_name)

    def pinned_attention(query, key, value, *, mask, scale):
        with sdpa_kernel([backend]):
            return call_sdpa(query, key, value, mask, scale)

    pinned_attention.__doc__ = f"SDPA restricted to SDPBackend.{backend_name}, no fallback."
    return pinned_attention


# torch has CPU kernels for math and flash only; efficient and cuDNN run on CUDA (and ROCm) devices
CPU_BACKENDS = ("MATH", "FLASH_ATTENTION")

for _name, _backend in PINNED_BACKENDS.items():
    # math saves its softmax for backward; the fused backends save a logsumexp per row instead.
    register_variant(
        _name,
        f"SDPA pinned to SDPBackend.{_backend}",
        sdpa_backend=_backend,
        saves_scores_for_backward=_backend == "MATH",
        fused=_backend != "MATH",
        devices=None if _backend in CPU_BACKENDS else ("cuda",),
        forms_refused=SDPA_REFUSES,
        forms=("value_head_dim",),
        # torch's built-in flash kernels; sdpa_flash_fa3 / sdpa_flash_fa4 activate the others
        flash_impl="FA2" if _backend == "FLASH_ATTENTION" else None,
    )(_pinned(_backend))
