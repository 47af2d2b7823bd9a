"""FP8 attention and the flash implementations torch can switch to (CUDA).

* ``fp8_dequant_sdpa``: FP8 inputs dequantized with their descales to bfloat16, then SDPA: the
  plain computation an FP8 kernel is held against (runs on every device).
* ``sdpa_fp8``: SDPA's experimental quantized path,
  ``torch.nn.attention.experimental._scaled_dot_product_attention_quantized`` (e4m3 with per-head
  descales, forward only, bfloat16 output; runs with FA3 activated, so CUDA on Hopper where FA3's
  kernels are installed; elsewhere the skip names what is missing).
* ``sdpa_flash_fa3``, ``sdpa_flash_fa4``: SDPA pinned to the flash backend with the named flash
  implementation activated (``torch.nn.attention.activate_flash_attention_impl``) for the call and
  FA2 restored after it. They run where ``list_flash_attention_impls()`` offers the implementation
  and it registered (CUDA builds); elsewhere the skip names what is missing. On CUDA the suite
  proves from the kernel names that the claimed implementation ran
  (``perfsuite.trace.kernel_families.FLASH_IMPL_RULES``): an FA3 run that launched FA2's
  ``pytorch_flash::flash_fwd_kernel`` fails naming both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.layouts import dequantize_fp8
from perfsuite.variants.registry import VariantFn, prepared_on_every_call, register_variant
from perfsuite.variants.sdpa import call_sdpa
from perfsuite.variants.unsupported import CaseUnsupported

FP8_OUTPUT_DTYPE = torch.bfloat16


@register_variant(
    "fp8_dequant_sdpa",
    "FP8 inputs dequantized to bfloat16 with their descales, then SDPA (the plain computation)",
    forms=(Form.VALUE_HEAD_DIM,),
)
def fp8_dequant_sdpa(query, key, value, *, mask, scale, q_descale, k_descale, v_descale):
    """``[B, H, S, D]`` float8 tensors times their ``[B, Hkv]`` descales, SDPA in bfloat16."""
    q = dequantize_fp8(query, q_descale, FP8_OUTPUT_DTYPE)
    k = dequantize_fp8(key, k_descale, FP8_OUTPUT_DTYPE)
    v = dequantize_fp8(value, v_descale, FP8_OUTPUT_DTYPE)
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask.sdpa_mask,
        is_causal=mask.is_causal,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )


def quantized_sdpa():
    """SDPA's quantized entry point, or ``CaseUnsupported`` naming the torch version."""
    try:
        from torch.nn.attention.experimental._scaled_dot_product_attention_quantized import (
            _scaled_dot_product_attention_quantized,
        )
    except ImportError:
        raise CaseUnsupported(
            f"torch {torch.__version__} has no torch.nn.attention.experimental."
            "_scaled_dot_product_attention_quantized"
        ) from None
    return _scaled_dot_product_attention_quantized


def prepare_sdpa_fp8(inputs: AttentionInputs) -> VariantFn:
    """Checks torch has the quantized path, FA3 can be activated here (the quantized path runs on
    FA3 only) and the mask is plain or top-left causal; the call runs with FA3 activated.

    The descales go to torch as the case holds them, ``[B, Hkv]`` each: torch validates every
    descale, ``q_descale`` included, against ``(batch, num_kv_heads)`` and broadcasts it over the
    query heads itself (``_validate_descale``), so a grouped-query case runs as it is.
    """
    attention_fp8 = quantized_sdpa()
    if inputs.mask.kind not in ("noncausal", "causal"):
        raise CaseUnsupported(
            f"SDPA's quantized path takes is_causal only; mask {inputs.mask.kind!r} needs a tensor"
        )
    missing = flash_impl_missing("FA3") or flash_impl_unusable("FA3", inputs.query.device.type)
    if missing:
        raise CaseUnsupported(f"SDPA's quantized path runs on FA3: {missing}")

    def attention(query, key, value, *, mask, scale, q_descale, k_descale, v_descale):
        with flash_impl_active("FA3"):
            return attention_fp8(
                query,
                key,
                value,
                is_causal=mask.is_causal,
                scale=scale,
                q_descale=q_descale,
                k_descale=k_descale,
                v_descale=v_descale,
            )

    return attention


register_variant(
    "sdpa_fp8",
    "SDPA's experimental FP8 path (_scaled_dot_product_attention_quantized; FA3, CUDA)",
    prepare=prepare_sdpa_fp8,
    devices=("cuda",),
    requires=(Form.FP8,),
    forward_only="forward only (torch's quantized path has no backward)",
)(prepared_on_every_call(prepare_sdpa_fp8, "SDPA's experimental FP8 path."))

FLASH_IMPLS = ("FA3", "FA4")


def flash_impl_missing(impl: str) -> str | None:
    """Why the flash implementation ``impl`` cannot be activated by this torch, or None."""
    attention = torch.nn.attention
    if not hasattr(attention, "list_flash_attention_impls"):
        return f"torch {torch.__version__} has no torch.nn.attention.list_flash_attention_impls"
    offered = attention.list_flash_attention_impls()
    if impl not in offered:
        return f"torch {torch.__version__} offers flash implementations {offered or 'none'}, not {impl}"
    return None


def flash_impl_unusable(impl: str, device: str) -> str | None:
    """Why ``impl``, though listed, cannot run here: not a CUDA device, or its activation fails
    (its kernel package is not installed); the activation is undone. None when it can."""
    if device != "cuda":
        return f"{impl} is a CUDA flash implementation; this case runs on {device}"
    try:
        torch.nn.attention.activate_flash_attention_impl(impl)
    except Exception as exc:  # e.g. ModuleNotFoundError: No module named 'flash_attn_interface'
        return f"torch {torch.__version__} lists {impl} but cannot activate it: {type(exc).__name__}: {exc}"
    finally:
        torch.nn.attention.restore_flash_attention_impl(_raise_warn=False)
    return None


@contextlib.contextmanager
def flash_impl_active(impl: str) -> Iterator[None]:
    """The flash implementation ``impl`` activated inside, FA2 restored after; nothing is
    re-registered when ``impl`` is already the active one
    (``torch.nn.attention.current_flash_attention_impl``, where torch has it)."""
    attention = torch.nn.attention
    current = getattr(attention, "current_flash_attention_impl", None)
    if current is not None and current() == impl:
        yield
        return
    attention.activate_flash_attention_impl(impl)
    try:
        yield
    finally:
        attention.restore_flash_attention_impl(_raise_warn=False)


def _flash_impl(impl: str):
    def prepare(inputs: AttentionInputs) -> VariantFn:
        missing = flash_impl_missing(impl) or flash_impl_unusable(impl, inputs.query.device.type)
        if missing:
            raise CaseUnsupported(missing)

        def attention(query, key, value, *, mask, scale):
            with flash_impl_active(impl), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return call_sdpa(query, key, value, mask, scale)

        return attention

    return prepare


for _impl in FLASH_IMPLS:
    register_variant(
        f"sdpa_flash_{_impl.lower()}",
        f"SDPA pinned to the flash backend with the {_impl} implementation activated (CUDA)",
        prepare=_flash_impl(_impl),
        sdpa_backend="FLASH_ATTENTION",
        fused=True,
        devices=("cuda",),
        flash_impl=_impl,  # proved on CUDA by its kernels' names (kernel_families.FLASH_IMPL_RULES)
    )(prepared_on_every_call(_flash_impl(_impl), f"SDPA flash with {_impl} activated."))
