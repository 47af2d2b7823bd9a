"""Kernel fingerprints: what family a device kernel belongs to, read from its name.

This module is the one place that reads kernel names: trace summaries (copies, memsets),
the suite's fused-kernel checks and the trace report all call it.

The rules read names the way the post does. Fused attention kernels are named by stack:
PyTorch's flash (``pytorch_flash::flash_fwd_kernel``) and FlashAttention 2/3 (``flash_fwd``,
``flash::FlashAttnFwdSm90``), memory-efficient / cutlass (``fmha_cutlassF``,
``PyTorchMemEffAttention::AttentionKernel``), cuDNN SDPA (``cudnn_generated_fort_native_sdpa``),
AOTriton on ROCm (``attn_fwd``, ``bwd_kernel_dk_dv``), Composable Kernel (``ck_tile``
``FmhaFwdKernel``, ``kernel_batched_gemm_softmax_gemm``), FlashInfer (``flashinfer::``) and
TensorRT-LLM (``fmha_v2_``, ``xqa``). A GEMM's precision is read from its name in a second
step (``PRECISION_RULES``): explicit element types first (``bf16``, ``f16``, ``e4m3``,
``tf32``), so that ``cutlass_75_tensorop_bf16_s1688gemm_bf16`` is bf16 (``s1688`` names the
MMA shape and fp32 accumulation; only without an element type does it mean TF32, as in the
post's A100 traces), then library codes: cuBLAS's Hopper ``nvjet_<A><compute><D>`` (``h``
fp16, ``t`` bf16, ``s`` fp32 inputs, where fp32 and TF32 are not told apart by name) and
Tensile / hipBLASLt ``Cijk_<A>_<B>_<type>`` (``B`` bf16, ``H`` fp16, ``S`` fp32, ``D`` fp64,
``F8`` fp8).

The first matching rule of ``FAMILY_RULES`` wins (``rules_markdown()`` renders the tables,
which the documentation's kernel-families page shows); a name no rule matches is ``unknown``: shown, never guessed; a GEMM
whose precision no rule reads is ``GEMM (precision not in name)``.
"""

from __future__ import annotations

import re

GEMM = "GEMM"
COPY = "copy"
GATHER = "gather / concatenate"
MEMSET = "memset"

# (family, pattern). Order matters: specific before general (cuDNN's SDPA names contain
# "flash", CK's fused attention contains "gemm", FBGEMM contains "gemm", a copy kernel is
# also an "elementwise_kernel").
FAMILY_RULES: tuple[tuple[str, str], ...] = (
    ("NCCL collective", r"nccl"),
    ("fused attention: cuDNN", r"cudnn_generated.*(sdpa|fmha|flash)|cudnn.*fmha|xmma_fmha"),
    ("fused attention: TensorRT-LLM", r"fmha_v2_|fmhaSm\d+|xqa_kernel|masked_multihead_attention"),
    (
        "fused attention: FlashInfer",
        r"flashinfer::|BatchPrefillWith|SinglePrefillWith|BatchDecodeWith|SingleDecodeWith",
    ),
    ("fused attention: flash", r"pytorch_flash|flash_fwd|flash_bwd|flash::|flash_attn|FlashAttn"),
    (
        "fused attention: memory-efficient (cutlass)",
        r"fmha_cutlass|AttentionKernel|mem_eff_attention|efficient_attention",
    ),
    (
        "fused attention: AOTriton (ROCm)",
        r"^(attn_fwd|attn_bwd|bwd_kernel_dk_dv|bwd_kernel_dq|bwd_kernel_fuse|bwd_preprocess)(?![A-Za-z0-9_])",
    ),
    (
        "fused attention: Composable Kernel fmha (ROCm)",
        r"Fmha(Fwd|Bwd)|fmha_(fwd|bwd)|batched_gemm_softmax_gemm",
    ),
    ("Triton template (flex attention, autotuned GEMM)", r"^triton_tem_"),
    ("Triton", r"^triton"),
    ("embedding (FBGEMM)", r"split_embedding"),
    ("FBGEMM other", r"fbgemm_gpu"),
    ("convolution", r"s\d+(fprop|dgrad|wgrad)|implicit_gemm|implicit_convolve|conv2d_|convolution"),
    ("layout transform (cuDNN)", r"nchwToNhwc|nhwcToNchw"),
    ("GEMV (cuBLAS)", r"gemv"),
    ("GEMM split-K reduction / epilogue", r"splitKreduce|epilogue::impl|cublasLt"),
    (GEMM, r"gemm|Gemm|GEMM|nvjet_|^Cijk_"),
    # ATen's gathers: cat/stack (CatArrayBatchedCopy*), index_select and embedding
    # (indexSelect{Small,Large}Index, vectorized_gather_kernel), advanced indexing ``x[idx]``
    # (index_elementwise_kernel of index_kernel_impl; index_put_kernel_impl is a scatter), gather
    # (_cuda_scatter_gather_internal_kernel<false, ...>; <true is scatter), take (take_kernel).
    (
        GATHER,
        r"CatArrayBatchedCopy|indexSelect(Small|Large)Index|vectorized_gather_kernel|index_elementwise_kernel.*index_kernel_impl|_cuda_scatter_gather_internal_kernel<false|take_kernel",
    ),
    (
        COPY,
        r"^Memcpy|^Copy(HostToDevice|DeviceToHost|DeviceToDevice)|direct_copy_kernel|copy_kernel|copy_device_to_device|__amd_rocclr_copy",
    ),
    (MEMSET, r"^Memset|__amd_rocclr_fill"),
    ("softmax", r"softmax|SoftMax"),
    ("normalization", r"layer_norm|LayerNorm|RowwiseMoments|GammaBeta|batch_norm|rms_norm"),
    ("reduction", r"reduce_kernel|Reduce|reduction"),
    ("scan / sort (CUB)", r"cub::Device(Scan|RadixSort|Compact|Select)"),
    ("indexing", r"index_elementwise|index_put|scatter_gather"),
    ("elementwise", r"elementwise_kernel|FillFunctor|multi_tensor_apply|scal_kernel"),
)

# (precision, pattern) searched in a kernel the GEMM rule matched; first match wins.
PRECISION_RULES: tuple[tuple[str, str], ...] = (
    ("fp8", r"e4m3|e5m2|fp8|f8f6f4|^Cijk_A[a-z]+_B[a-z]+_F8"),
    ("bf16", r"bf16|bfloat16|BFloat16|^nvjet_(sm\d+_)?t|^Cijk_A[a-z]+_B[a-z]+_B"),
    ("fp16", r"f16|half|h\d{3,5}gemm|hgemm|^nvjet_(sm\d+_)?h|^Cijk_A[a-z]+_B[a-z]+_H"),
    ("fp64", r"dgemm|f64|^Cijk_A[a-z]+_B[a-z]+_D"),
    ("TF32", r"tf32|s1688gemm|s1684gemm"),
    ("fp32", r"sgemm|f32f32_f32f32|gemmk1_kernel|^Cijk_A[a-z]+_B[a-z]+_S"),
    ("fp32 or TF32", r"^nvjet_(sm\d+_)?s"),
)
UNKNOWN = "unknown"
GEMM_PRECISION_UNKNOWN = f"{GEMM} (precision not in name)"
FUSED_ATTENTION_PREFIX = "fused attention: "
# Families whose presence in a forward means attention ran unfused (matmul or softmax kernels).
UNFUSED_FAMILY_PREFIXES = (GEMM, "GEMV", "softmax")
_COMPILED = tuple((family, re.compile(pattern)) for family, pattern in FAMILY_RULES)
_PRECISIONS = tuple((precision, re.compile(pattern)) for precision, pattern in PRECISION_RULES)
_MEMCPY_KIND_RE = re.compile(r"^Memcpy (\w+)")
# roctracer / rocprofiler names of asynchronous copies, as some ROCm profiler versions write them.
_ROCM_COPY_KINDS = {
    "CopyHostToDevice": "HtoD",
    "CopyDeviceToHost": "DtoH",
    "CopyDeviceToDevice": "DtoD",
}


def gemm_precision(name: str) -> str | None:
    """The element precision of a GEMM kernel ``name`` (``"bf16"``, ``"TF32"``, ...; see
    ``PRECISION_RULES``), or None when its name does not say."""
    for precision, pattern in _PRECISIONS:
        if pattern.search(name):
            return precision
    return None


def kernel_family(name: str) -> str:
    """The family of a device kernel ``name`` (see ``FAMILY_RULES``), or ``"unknown"``.

    GEMMs are ``"GEMM <precision>"`` (``"GEMM bf16"``, ``"GEMM TF32"``), or
    ``"GEMM (precision not in name)"``.
    """
    for family, pattern in _COMPILED:
        if pattern.search(name):
            if family != GEMM:
                return family
            precision = gemm_precision(name)
            return f"{GEMM} {precision}" if precision else GEMM_PRECISION_UNKNOWN
    return UNKNOWN


def is_copy_kernel(name: str) -> bool:
    """True for a device kernel that copies memory (``direct_copy_kernel_cuda``, a ``Memcpy``
    filed as a kernel by some ROCm profilers, ROCclr's blit ``__amd_rocclr_copyBuffer``)."""
    return kernel_family(name) == COPY


def is_gather_kernel(name: str) -> bool:
    """True for a device kernel that gathers data into a new tensor: ``torch.cat``/``stack``
    (``CatArrayBatchedCopy``), ``index_select``/``embedding`` (``indexSelectLargeIndex``,
    ``vectorized_gather_kernel``), advanced indexing ``x[idx]`` (``index_elementwise_kernel`` of
    ``index_kernel_impl``), ``torch.gather`` and ``torch.take``. Scatters (``index_put``,
    ``scatter_``) are not gathers: they write into an existing tensor."""
    return kernel_family(name) == GATHER


def is_memset_kernel(name: str) -> bool:
    """True for a device kernel that fills memory like a Memset (``Memset ...`` filed as a
    kernel, ROCclr's ``__amd_rocclr_fillBuffer``)."""
    return kernel_family(name) == MEMSET


def memcpy_kind(name: str) -> str | None:
    """``"DtoD"`` for ``"Memcpy DtoD (Device -> Device)"`` (and ROCm's ``"CopyDeviceToDevice"``);
    None for a name that is not a Memcpy."""
    match = _MEMCPY_KIND_RE.match(name)
    if match:
        return match.group(1)
    return next(
        (kind for prefix, kind in _ROCM_COPY_KINDS.items() if name.startswith(prefix)), None
    )


def is_fused_attention(family: str) -> bool:
    """True for a ``fused attention: ...`` family."""
    return family.startswith(FUSED_ATTENTION_PREFIX)


def is_unfused_attention_work(family: str) -> bool:
    """True for a family that means attention ran unfused: a GEMM, GEMV or softmax kernel."""
    return family.startswith(UNFUSED_FAMILY_PREFIXES)


def _table(header: str, rules: tuple[tuple[str, str], ...]) -> list[str]:
    rows = [f"| {header} | rule (regex searched in the kernel name) |", "| --- | --- |"]
    # "|" inside a table cell must be escaped, even inside backticks (GitHub Markdown)
    rows += [f"| {name} | `{pattern.replace('|', chr(92) + '|')}` |" for name, pattern in rules]
    return rows


def rules_markdown() -> str:
    """The rule tables as Markdown (for the documentation's reference page and ``perfsuite trace --rules``)."""
    rows = _table("family", FAMILY_RULES) + ["", f"A {GEMM}'s precision, first match wins:", ""]
    rows += _table("precision", PRECISION_RULES)
    return "\n".join(rows)


# CPU-side ATen ops that tell which SDPA backend ran: SDPA's dispatch ops, and the backend
# ops a user (or another library) may call directly.
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_flash_attention_backward": "FLASH_ATTENTION",
    "aten::_flash_attention_forward": "FLASH_ATTENTION",
    "aten::_flash_attention_backward": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION (CPU)",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "FLASH_ATTENTION (CPU)",
    "aten::_scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
    "aten::_scaled_dot_product_efficient_attention_backward": "EFFICIENT_ATTENTION",
    "aten::_efficient_attention_forward": "EFFICIENT_ATTENTION",
    "aten::_efficient_attention_backward": "EFFICIENT_ATTENTION",
    "aten::_scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
    "aten::_scaled_dot_product_cudnn_attention_backward": "CUDNN_ATTENTION",
    "aten::_cudnn_attention_forward": "CUDNN_ATTENTION",
    "aten::_scaled_dot_product_attention_math": "MATH",
    "aten::_scaled_dot_product_fused_attention_overrideable": "OVERRIDEABLE",
}

# The fused kernel family each pinned SDPA backend must run on CUDA (ROCm's flash and
# efficient backends run AOTriton or CK kernels instead; see ``backend_kernel_families``).
SDPA_BACKEND_FAMILIES = {
    "FLASH_ATTENTION": ("fused attention: flash",),
    "EFFICIENT_ATTENTION": ("fused attention: memory-efficient (cutlass)",),
    "CUDNN_ATTENTION": ("fused attention: cuDNN",),
}
_ROCM_BACKEND_FAMILIES = (
    "fused attention: AOTriton (ROCm)",
    "fused attention: Composable Kernel fmha (ROCm)",
)


def backend_kernel_families(backend: str, rocm: bool = False) -> tuple[str, ...]:
    """Fused kernel families ``backend`` (``"FLASH_ATTENTION"``, ``"EFFICIENT_ATTENTION"``,
    ``"CUDNN_ATTENTION"``) may run; on ROCm flash and efficient run AOTriton or CK kernels.

    Raises ``ValueError`` naming ``backend`` when it has no fused kernel family.
    """
    if backend not in SDPA_BACKEND_FAMILIES:
        raise ValueError(
            f"SDPA backend {backend!r} has no fused kernel family; known: {sorted(SDPA_BACKEND_FAMILIES)}"
        )
    if rocm and backend != "CUDNN_ATTENTION":
        return _ROCM_BACKEND_FAMILIES
    return SDPA_BACKEND_FAMILIES[backend]


def sdpa_backends(cpu_ops: dict[str, int]) -> list[str]:
    """SDPA backends whose dispatch or backend op appears among ``cpu_ops`` (name -> count),
    each named once, in ``SDPA_BACKEND_OPS`` order."""
    return list(
        dict.fromkeys(backend for op, backend in SDPA_BACKEND_OPS.items() if cpu_ops.get(op))
    )


FLEX_FUSED_FAMILY = "Triton template (flex attention, autotuned GEMM)"


def fused_kernel_failure(kernels: dict[str, int], expected: tuple[str, ...]) -> str | None:
    """Why a forward's ``kernels`` (name -> count) are not one fused attention of ``expected``
    families, or None when they are.

    Fails when no kernel of ``expected`` ran, when a fused attention kernel of another family
    ran (a silent fallback to another backend), or when any GEMM, GEMV or softmax kernel ran
    (unfused attention); the message names the offending kernels and their families.
    """
    families = {name: kernel_family(name) for name in kernels}
    ran = sum(count for name, count in kernels.items() if families[name] in expected)
    other = sorted(
        f"{name[:100]} [{families[name]}]"
        for name in kernels
        if is_fused_attention(families[name]) and families[name] not in expected
    )
    unfused = sorted(
        f"{name[:100]} [{families[name]}]"
        for name in kernels
        if is_unfused_attention_work(families[name])
    )
    problems = []
    if not ran:
        problems.append(f"no kernel of {' or '.join(expected)} ran")
    if other:
        problems.append(f"other fused attention kernels ran: {other}")
    if unfused:
        problems.append(f"unfused matmul/softmax kernels ran: {unfused}")
    return "; ".join(problems) or None


# -- flash implementations (FA2, FA3, FA4) --------------------------------------------------------
# SDPA's flash backend runs the implementation torch has active: its built-in FA2, or FA3 / FA4 after
# ``torch.nn.attention.activate_flash_attention_impl`` (``list_flash_attention_impls()``). The ATen op
# is ``aten::_scaled_dot_product_flash_attention`` either way (torch/nn/attention/_fa3.py and _fa4.py
# re-register its CUDA kernel), so only the device kernels tell them apart. A kernel of the
# ``fused attention: flash`` family is read in a second step, first match wins:
FLASH_FAMILY = "fused attention: flash"
FLASH_IMPL_RULES: tuple[tuple[str, str], ...] = (
    # FA4: the CuTe-DSL kernels of Dao-AILab/flash-attention flash_attn/cute (flash_fwd_sm100.py
    # FlashAttentionForwardSm100, flash_fwd_sm90.py, flash_bwd_sm100.py, flash_fwd_combine.py, ...),
    # which torch imports from flash_attn.cute.interface (torch/nn/attention/_fa4.py). CuTe DSL names a
    # kernel after its module path with the dots dropped, then its class:
    # kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__...
    # (the profiler names quoted in Dao-AILab/flash-attention pull request #2564, whose readable
    # prefix keeps this part at the end).
    ("FA4", r"flash_attncute"),
    # FA3: Dao-AILab/flash-attention hopper/ (the flash_attn_3 package, module flash_attn_interface,
    # whose torch.ops.flash_attn_3.fwd/bwd torch/nn/attention/_fa3.py calls):
    # hopper/flash_fwd_launch_template.h launches cutlass::device_kernel<flash::enable_sm90<
    # flash::FlashAttnFwdSm90<...>>> (FlashAttnFwdSm80 before Hopper); hopper/flash_bwd_launch_template.h
    # FlashAttnBwdSm90 / FlashAttnBwdSm80, FlashAttnBwdPreprocess, FlashAttnBwdPostprocessConvertdQ;
    # hopper/flash_fwd_combine_launch_template.h FlashAttnFwdCombine (split-KV);
    # hopper/flash_prepare_scheduler.cu flash::prepare_varlen_num_blocks_kernel. Older builds named the
    # class flash::FlashAttnBwd (ptxas output quoted in Dao-AILab/flash-attention issue #1162), and a
    # mangled name keeps the class name (5flash16FlashAttnFwdSm90), so the prefix alone is the rule.
    ("FA3", r"FlashAttn(Fwd|Bwd)|flash::prepare_varlen_num_blocks"),
    # FA2: torch's built-in copy, namespace pytorch_flash (pytorch/pytorch
    # aten/src/ATen/native/transformers/cuda/flash_attn/flash_fwd_launch_template.h: flash_fwd_kernel,
    # flash_fwd_splitkv_kernel, flash_fwd_splitkv_combine_kernel; flash_bwd_launch_template.h:
    # flash_bwd_dot_do_o_kernel, flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel, flash_bwd_convert_dq_kernel),
    # and the flash-attn 2 package's same kernels (csrc/flash_attn/src/flash_fwd_launch_template.h,
    # namespace flash).
    ("FA2", r"pytorch_flash::|\bflash_(fwd|bwd)_\w*kernel<"),
)
FLASH_IMPLS = tuple(impl for impl, _ in FLASH_IMPL_RULES)
FLASH_IMPL_UNKNOWN = "flash implementation not in name"
_FLASH_IMPLS = tuple((impl, re.compile(pattern)) for impl, pattern in FLASH_IMPL_RULES)


def flash_implementation(name: str) -> str | None:
    """``"FA2"``, ``"FA3"`` or ``"FA4"`` for a kernel of the ``fused attention: flash`` family
    (``FLASH_IMPL_RULES``); None for another family's kernel or a flash kernel whose name does not say."""
    if kernel_family(name) != FLASH_FAMILY:
        return None
    return next((impl for impl, pattern in _FLASH_IMPLS if pattern.search(name)), None)


def flash_impl_failure(kernels: dict[str, int], impl: str) -> str | None:
    """Why a forward's ``kernels`` (name -> count) are not flash implementation ``impl``'s, or None.

    Fails when no flash kernel of ``impl`` ran, or when a flash kernel of another implementation
    (or one whose implementation its name does not say) ran; the message names the claimed
    implementation, the ones that ran and their kernels. Kernels of other families are
    ``fused_kernel_failure``'s to judge.

    Raises ``ValueError`` for an ``impl`` not in ``FLASH_IMPLS``.
    """
    if impl not in FLASH_IMPLS:
        raise ValueError(f"flash implementation {impl!r}; known: {', '.join(FLASH_IMPLS)}")
    flash = {
        name: flash_implementation(name) or FLASH_IMPL_UNKNOWN
        for name in kernels
        if kernel_family(name) == FLASH_FAMILY
    }
    others = sorted(f"{name[:100]} [{ran}]" for name, ran in flash.items() if ran != impl)
    if impl in flash.values() and not others:
        return None
    ran = sorted({ran for ran in flash.values() if ran != impl})
    problems = [] if impl in flash.values() else [f"no {impl} flash kernel ran"]
    if others:
        problems.append(f"{' and '.join(ran)} ran instead: {others}")
    return f"claimed flash implementation {impl}: " + "; ".join(problems)


def flash_impl_rules_markdown() -> str:
    """The flash-implementation rules as a Markdown table (the kernel-families reference page)."""
    return "\n".join(_table("flash implementation", FLASH_IMPL_RULES))


def pinned_backend_failure(
    kernels: dict[str, int], backend: str, flash_impl: str | None = None, rocm: bool = False
) -> str | None:
    """Why a forward's ``kernels`` (name -> count) are not what an SDPA variant pinned to ``backend``
    claims, or None: its own fused family only (``fused_kernel_failure``), and for the flash
    backend on CUDA the flash implementation ``flash_impl`` (``flash_impl_failure``; ROCm's flash
    backend runs AOTriton or CK, so no implementation is read there).

    Raises ``ValueError`` for a ``backend`` without a fused family or an unknown ``flash_impl``.
    """
    failure = fused_kernel_failure(kernels, backend_kernel_families(backend, rocm=rocm))
    if failure or flash_impl is None or rocm:
        return failure
    return flash_impl_failure(kernels, flash_impl)
