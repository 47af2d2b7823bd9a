"""Kernel fingerprints: what family a device kernel belongs to, read from its name.

The rules read names the way the post does: ``sgemm`` is an fp32 GEMM on CUDA cores,
``s16816``/``h16816`` a bf16/fp16 tensor-core GEMM, ``s1688`` a TF32 tensor-core GEMM (fp32
inputs rounded to TF32), ``pytorch_flash``/``flash_fwd`` FlashAttention, ``fmha_cutlass`` the
memory-efficient (cutlass) attention, ``cudnn_generated ... sdpa``/``fmha`` cuDNN attention.
The first matching rule of ``FAMILY_RULES`` wins (``rules_markdown()`` renders the table,
which the README shows); a name no rule matches is ``unknown``: shown, never guessed.
"""

from __future__ import annotations

import re

# (family, pattern). Order matters: specific before general (a copy kernel is also "elementwise").
FAMILY_RULES: tuple[tuple[str, str], ...] = (
    ("NCCL collective", r"nccl"),
    ("fused attention: flash", r"pytorch_flash|flash_fwd|flash_bwd|flash::|flash_attn"),
    ("fused attention: memory-efficient (cutlass)", r"fmha_cutlass|AttentionKernel|mem_eff_attention|efficient_attention"),
    ("fused attention: cuDNN", r"cudnn_generated.*(sdpa|fmha|flash)|cudnn.*fmha|xmma_fmha"),
    ("Triton", r"^triton_|^triton"),
    ("GEMM tensor core TF32", r"s1688gemm|tf32"),
    ("GEMM tensor core fp16/bf16", r"[sh]16816gemm|s16816|h16816|bf16.*gemm|gemm.*bf16|hgemm|[^s]1688gemm"),
    ("GEMM ROCm matrix core (Tensile)", r"^Cijk_.*_MI\d+x\d+"),
    ("GEMM ROCm (Tensile)", r"^Cijk_"),
    ("GEMM fp32 CUDA cores (sgemm)", r"sgemm|gemmk1_kernel"),
    ("GEMV (cuBLAS)", r"gemv"),
    ("GEMM split-K reduction / epilogue", r"splitKreduce|epilogue::impl|cublasLt"),
    ("copy", r"direct_copy_kernel|copy_kernel|CatArrayBatchedCopy|copy_device_to_device"),
    ("softmax", r"softmax|SoftMax"),
    ("normalization", r"layer_norm|LayerNorm|RowwiseMoments|GammaBeta|batch_norm|rms_norm"),
    ("reduction", r"reduce_kernel|Reduce|reduction"),
    ("scan / sort (CUB)", r"cub::Device(Scan|RadixSort|Compact|Select)"),
    ("indexing", r"index_elementwise|indexSelect|index_put|scatter_gather|gather_kernel"),
    ("elementwise", r"elementwise_kernel|FillFunctor|multi_tensor_apply|scal_kernel"),
    ("embedding (FBGEMM)", r"split_embedding"),
    ("FBGEMM other", r"fbgemm_gpu"),
)
UNKNOWN = "unknown"
_COMPILED = tuple((family, re.compile(pattern)) for family, pattern in FAMILY_RULES)


def kernel_family(name: str) -> str:
    """The family of a device kernel ``name`` (see ``FAMILY_RULES``), or ``"unknown"``."""
    for family, pattern in _COMPILED:
        if pattern.search(name):
            return family
    return UNKNOWN


def rules_markdown() -> str:
    """The rule table as Markdown (for the README and ``perfsuite trace --rules``)."""
    rows = ["| family | rule (regex searched in the kernel name) |", "| --- | --- |"]
    # "|" inside a table cell must be escaped, even inside backticks (GitHub Markdown)
    rows += [f"| {family} | `{pattern.replace('|', chr(92) + '|')}` |" for family, pattern in FAMILY_RULES]
    return "\n".join(rows)


# CPU-side ATen ops that tell which SDPA backend ran.
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
    "aten::_scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
    "aten::_scaled_dot_product_attention_math": "MATH",
    "aten::_scaled_dot_product_fused_attention_overrideable": "OVERRIDEABLE",
}


def sdpa_backends(cpu_ops: dict[str, int]) -> list[str]:
    """SDPA backends whose dispatch op appears among ``cpu_ops`` (name -> count)."""
    return [backend for op, backend in SDPA_BACKEND_OPS.items() if cpu_ops.get(op)]
