import functools
import gzip
import json
from pathlib import Path

import pytest

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.evidence import gather_evidence
from perfsuite.trace.kernel_families import (
    is_gather_kernel,
    GEMM_PRECISION_UNKNOWN,
    UNKNOWN,
    backend_kernel_families,
    flash_impl_failure,
    flash_impl_rules_markdown,
    flash_implementation,
    fused_kernel_failure,
    gemm_precision,
    is_copy_kernel,
    is_memset_kernel,
    is_unfused_attention_work,
    kernel_family,
    memcpy_kind,
    pinned_backend_failure,
    rules_markdown,
    sdpa_backends,
)
from perfsuite.trace.summary import load_trace, summarize_windows
from perfsuite.variants import get_variant

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


@functools.cache  # read once per process: each parametrized case used to reload every trace
def kernel_names():
    names = set()
    for path in TRACES.glob("*.json.gz"):
        with gzip.open(path, "rt") as handle:
            names |= {
                e["name"] for e in json.load(handle)["traceEvents"] if e.get("cat") == "kernel"
            }
    return tuple(sorted(names))


@pytest.mark.parametrize(
    "marker, family",
    [
        ("ampere_sgemm_", "GEMM fp32"),
        (
            "_tensorop_s1688gemm",
            "GEMM TF32",
        ),  # cutlass_80_tensorop_s1688gemm: no element type, so TF32 (A100, fp32 model)
        (
            "_bf16_s1688gemm_bf16",
            "GEMM bf16",
        ),  # H100 bf16 model: s1688 is the MMA shape, bf16 the element type
        ("sm90_xmma_gemm_bf16bf16", "GEMM bf16"),
        ("Cijk_Alik_Bljk_B_BS_BH", "GEMM bf16"),  # hipBLASLt on MI300X, bf16
        ("Cijk_Alik_Bljk_SB_", "GEMM fp32"),  # hipBLASLt on MI250, fp32
        ("pytorch_flash::flash_fwd_kernel", "fused attention: flash"),
        ("attn_fwd", "fused attention: AOTriton (ROCm)"),
        ("triton_poi_fused_add_cos_sin_0", "Triton"),
        ("ncclKernel_SendRecv", "NCCL collective"),
        ("direct_copy_kernel_cuda", "copy"),
        ("CatArrayBatchedCopy", "gather / concatenate"),  # torch.cat writes one tensor from many
        ("indexSelectLargeIndex", "gather / concatenate"),
        ("_cuda_scatter_gather_internal_kernel<false", "gather / concatenate"),  # torch.gather
        (
            "_cuda_scatter_gather_internal_kernel<true, at::native::OpaqueType",
            "indexing",
        ),  # scatter_: writes in place
        ("index_put_kernel_impl", "indexing"),  # x[idx] = v: a scatter, not a gather
        ("softmax_warp_forward", "softmax"),
        ("LayerNormForwardCUDAKernel", "normalization"),
        ("sum_functor", "reduction"),
        ("gemvNSP_kernel", "GEMV (cuBLAS)"),
        ("internal::gemvx::kernel", "GEMV (cuBLAS)"),
        ("s16816fprop", "convolution"),
        ("DeviceRadixSortOnesweepKernel", "scan / sort (CUB)"),
        ("split_embedding_codegen_forward", "embedding (FBGEMM)"),
        ("masked_fill_kernel", "elementwise"),
    ],
)
def test_real_kernel_names_get_their_family(marker, family):
    matching = [n for n in kernel_names() if marker in n]
    assert matching, f"no kernel with {marker!r} in the test traces"
    assert {kernel_family(n) for n in matching} == {family}


def test_every_kernel_in_the_traces_is_classified_or_openly_unknown():
    names = kernel_names()
    unknown = sorted(n.split("(")[0] for n in names if kernel_family(n) == UNKNOWN)
    assert len(names) == 236
    assert unknown == [
        "void at::native::",  # upsample_nearest1d_out_frame<...>: its template arguments hold "("
        "void compute_cuda_kernel<long>",
        "void linearize_index_kernel<long>",
        "void permute_pooled_embs_kernel<float>",
    ]
    assert not [n for n in names if kernel_family(n) == GEMM_PRECISION_UNKNOWN]


@pytest.mark.parametrize(
    "name, family",
    [  # kernel names as they appear in the post's A100 traces
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>",
            "fused attention: flash",
        ),
        (
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)",
            "fused attention: memory-efficient (cutlass)",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
            "fused attention: cuDNN",
        ),
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", "GEMM bf16"),
        ("ampere_sgemm_128x64_tn", "GEMM fp32"),
    ],
)
def test_attention_and_gemm_kernels_of_the_post(name, family):
    assert kernel_family(name) == family


@pytest.mark.parametrize(
    "name, family",
    [  # names as today's stacks print them (cuDNN 9, FlashAttention 2/3, CK, AOTriton, FlashInfer, TensorRT-LLM)
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0",
            "fused attention: cuDNN",
        ),
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t>, true>(Flash_fwd_params)",
            "fused attention: flash",
        ),
        (
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cutlass::bfloat16_t>>>>(Params)",
            "fused attention: flash",
        ),
        (
            "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80>::Params)",
            "fused attention: memory-efficient (cutlass)",
        ),
        ("bwd_kernel_dk_dv", "fused attention: AOTriton (ROCm)"),
        ("bwd_kernel_dq", "fused attention: AOTriton (ROCm)"),
        (
            "void ck_tile::kentry<256, 1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<ck_tile::bf16_t>>>(Kargs)",
            "fused attention: Composable Kernel fmha (ROCm)",
        ),
        (
            "void ck::kernel_batched_gemm_softmax_gemm_xdl_cshuffle_v1<ck::half_t>(Arg)",
            "fused attention: Composable Kernel fmha (ROCm)",
        ),
        (
            "void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits, Params>(Params)",
            "fused attention: FlashInfer",
        ),
        (
            "fmha_v2_flash_attention_fp16_64_128_S_qkv_128_sm90_kernel",
            "fused attention: TensorRT-LLM",
        ),
        ("triton_tem_fused_0", "Triton template (flex attention, autotuned GEMM)"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT", "GEMM bf16"),
        ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTT", "GEMM fp16"),
        ("nvjet_sm90_hss_320x128_64x3_2x1_v_bz_NNN", "GEMM fp16"),
        ("nvjet_sss_128x128_64x4_1x2_h_bz_NNN", "GEMM fp32 or TF32"),
        (
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            "GEMM TF32",
        ),
        ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x32_cublas", "GEMM fp32"),
        ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cublas", "GEMM fp8"),
        (
            "void cutlass::device_kernel<cutlass3x_sm100_tensorop_s256x128x16gemm_bf16_bf16_f32_bf16_bf16_256x128x64_2x1x1_0_tnt_align8>(Params)",
            "GEMM bf16",
        ),
        (
            "void cutlass::device_kernel<cutlass3x_sm90_tensorop_s64x128x8tf32gemm_f32_f32_f32_f32_f32_128x128x32_1x1x1_0_tnn_align4>(Params)",
            "GEMM TF32",
        ),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB1", "GEMM fp16"),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB1", "GEMM bf16"),
        ("Cijk_Ailk_Bljk_DB_MT64x64x16_SN_1LDSB0", "GEMM fp64"),
        ("some_vendor_gemm_kernel_64x64", GEMM_PRECISION_UNKNOWN),
    ],
)
def test_fused_attention_and_gemm_kernels_of_todays_stacks(name, family):
    assert kernel_family(name) == family


def test_gemm_precision_reads_the_element_type_before_the_mma_shape():
    assert gemm_precision("cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1") == "bf16"
    assert gemm_precision("cutlass_75_tensorop_f16_s1688gemm_f16_128x128_nn_align1") == "fp16"
    assert gemm_precision("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4") == "TF32"
    assert gemm_precision("a_kernel_that_says_nothing") is None


def test_copy_memset_and_memcpy_names_have_one_source():
    assert is_copy_kernel(
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)"
    )
    assert not is_copy_kernel(
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(...)"
    )  # a gather (is_gather_kernel), shown with the cat's result shape and bytes
    assert is_gather_kernel(
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(...)"
    )
    # torch >= 2.6 index/index_select fast path, and cache[block_table] through TensorIterator
    assert is_gather_kernel(
        "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int)"
    )
    assert is_gather_kernel(
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
        "at::native::index_kernel_impl<at::native::OpaqueType<4> >(...)"
    )
    assert is_gather_kernel(
        "void at::native::elementwise_kernel<128, 4, at::native::take_kernel(...)"
    )
    assert is_copy_kernel(
        "Memcpy DtoD (Device -> Device)"
    )  # a ROCm profiler filing a copy as a kernel
    assert is_copy_kernel("__amd_rocclr_copyBuffer")
    assert not is_copy_kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    )
    assert is_memset_kernel("__amd_rocclr_fillBufferAligned") and is_memset_kernel(
        "Memset (Device)"
    )
    assert (
        memcpy_kind("Memcpy HtoD (Pinned -> Device)") == "HtoD" and memcpy_kind("attn_fwd") is None
    )
    assert memcpy_kind("CopyDeviceToDevice") == "DtoD" and is_copy_kernel("CopyHostToDevice")


def test_unfused_work_is_gemm_gemv_or_softmax():
    assert is_unfused_attention_work(kernel_family("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT"))
    assert is_unfused_attention_work(
        kernel_family("std::enable_if<!(false), void>::type internal::gemvx::kernel<int>")
    )
    assert is_unfused_attention_work(
        kernel_family("void (anonymous namespace)::softmax_warp_forward<float>")
    )
    assert not is_unfused_attention_work(kernel_family("attn_fwd"))


def test_backend_ops_called_directly_name_their_backend():
    assert sdpa_backends({"aten::_efficient_attention_forward": 1}) == ["EFFICIENT_ATTENTION"]
    assert sdpa_backends({"aten::_flash_attention_forward": 2}) == ["FLASH_ATTENTION"]
    both = {"aten::_scaled_dot_product_flash_attention": 1, "aten::_flash_attention_forward": 1}
    assert sdpa_backends(both) == ["FLASH_ATTENTION"]


def test_backend_kernel_families_per_platform():
    assert backend_kernel_families("CUDNN_ATTENTION") == ("fused attention: cuDNN",)
    assert "fused attention: AOTriton (ROCm)" in backend_kernel_families(
        "FLASH_ATTENTION", rocm=True
    )
    with pytest.raises(ValueError, match="'MATH'"):
        backend_kernel_families("MATH")


def test_rules_table_escapes_pipes_and_lists_precisions():
    table = rules_markdown()
    assert "| precision |" in table and "| fused attention: AOTriton (ROCm) |" in table
    assert all(
        line.count("|") - line.count("\\|") == 3
        for line in table.splitlines()
        if line.startswith("|")
    )


def test_sdpa_backend_is_read_from_the_trace(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    flash = gather_evidence(get_variant("sdpa_flash"), case, 0, tmp_path).steps[0]
    math = gather_evidence(get_variant("sdpa_math"), case, 0, tmp_path).steps[0]
    naive = gather_evidence(get_variant("naive"), case, 0, tmp_path).steps[0]
    assert flash.sdpa_backends == ["FLASH_ATTENTION (CPU)"]
    assert math.sdpa_backends == ["MATH"]
    assert naive.sdpa_backends == []


def test_fused_kernel_failure_names_fallbacks_and_unfused_work():
    flash = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(Flash_fwd_params)"
    cutlass = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)"
    expected = backend_kernel_families("FLASH_ATTENTION")
    assert (
        fused_kernel_failure(
            {flash: 1, "void at::native::vectorized_elementwise_kernel<4>": 1}, expected
        )
        is None
    )
    fallback = fused_kernel_failure({cutlass: 1}, expected)
    assert "no kernel of fused attention: flash ran" in fallback and "fmha_cutlassF" in fallback
    unfused = fused_kernel_failure(
        {flash: 1, "nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT": 2}, expected
    )
    assert unfused.startswith("unfused matmul/softmax kernels ran") and "nvjet_tst" in unfused


def test_h100_flash_trace_passes_the_flash_check_only_on_its_attention_kernels():
    with gzip.open(TRACES / "h100_bert-small_sdpa-flash.json.gz", "rt") as handle:
        kernels = [e["name"] for e in json.load(handle)["traceEvents"] if e.get("cat") == "kernel"]
    attention = {n: 1 for n in kernels if "flash" in n}
    assert (
        attention
        and fused_kernel_failure(attention, backend_kernel_families("FLASH_ATTENTION")) is None
    )
    assert "unfused" in fused_kernel_failure(
        dict.fromkeys(kernels, 1), backend_kernel_families("FLASH_ATTENTION")
    )
    assert "no kernel of fused attention: cuDNN" in fused_kernel_failure(
        attention, backend_kernel_families("CUDNN_ATTENTION")
    )


# Flash implementations: names as their sources launch them (kernel_families.FLASH_IMPL_RULES cites each).
FA2_TORCH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)"
FA3_FWD = "void cutlass::device_kernel<flash::enable_sm90<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<64> >, 64, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, false, false, false, false, true, false, false, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<64>, cute::C<64> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false, false, false>, flash::StaticPersistentTileScheduler<false> > > >(flash::FlashAttnFwdSm90<...>::Params)"
FA4_FWD = "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213_tensor0000o11101213_tensor0000o10111213_tensor0000o11101213_None_None_None_Non_0"


@pytest.mark.parametrize(
    "name, impl",
    [
        (FA2_TORCH, "FA2"),
        (
            "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>(pytorch_flash::Flash_bwd_params)",
            "FA2",
        ),
        (
            "void flash::flash_fwd_splitkv_kernel<flash::Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t>, true, false>(flash::Flash_fwd_params)",
            "FA2",
        ),
        (FA3_FWD, "FA3"),
        (
            "void cutlass::device_kernel<flash::enable_sm90<flash::FlashAttnBwdSm90<...> > >(flash::FlashAttnBwdSm90<...>::Params)",
            "FA3",
        ),
        (
            "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5, 256, 1, false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> >(...)",
            "FA3",
        ),
        (
            "void flash::prepare_varlen_num_blocks_kernel<4, true>(int, int, int, int const*, int const*)",
            "FA3",
        ),
        (
            "_ZN7cutlass13device_kernelIN5flash12FlashAttnBwdINS1_21CollectiveMainloopBwdILi2E",
            "FA3",
        ),
        (FA4_FWD, "FA4"),
        (
            "kernel_cutlass_kernel_flash_attncuteflash_fwdFlashAttentionForwardSm90_object_at__tensor0000o11101213_0",
            "FA4",
        ),
        (
            "kernel_cutlass_kernel_flash_attncuteflash_bwd_sm100FlashAttentionBackwardSm100_object_at__tensor0000o11101213_0",
            "FA4",
        ),
        # Dao-AILab/flash-attention pull request #2564's readable prefix keeps CuTe DSL's name at the end
        (
            "flash_fwd_sm100_bf16_head_dim128_tile128x128_threads384_causal_kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o1_0",
            "FA4",
        ),
        (
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)",
            None,
        ),
    ],
)
def test_flash_implementation_is_read_from_the_kernel_name(name, impl):
    assert flash_implementation(name) == impl
    assert (kernel_family(name) == "fused attention: flash") == (impl is not None)


def _fake_device_trace(tmp_path, rename: str | None):
    """The recorded H100 trace cut down to its attention kernels (a pinned flash forward's window),
    the flash kernel renamed to ``rename`` when given: the device trace of another implementation."""
    with gzip.open(TRACES / "h100_bert-small_sdpa-flash.json.gz", "rt") as handle:
        trace = json.load(handle)
    events = []
    for event in trace["traceEvents"]:
        if event.get("cat") == "kernel":
            if "pytorch_flash::" not in event["name"]:
                continue
            event = dict(event, name=rename or event["name"])
        events.append(event)
    path = tmp_path / "fake.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(dict(trace, traceEvents=events), handle)
    (window,) = summarize_windows(load_trace(path), "ProfilerStep")
    return window.kernels


def test_a_pinned_flash_variant_proves_its_implementation_on_a_fake_device_trace(tmp_path):
    fa2_ran = _fake_device_trace(tmp_path, None)
    assert list(fa2_ran) == [FA2_TORCH] and fa2_ran[FA2_TORCH] == 4
    fa3 = get_variant("sdpa_flash_fa3")
    assert (fa3.sdpa_backend, fa3.flash_impl, get_variant("sdpa_flash").flash_impl) == (
        "FLASH_ATTENTION",
        "FA3",
        "FA2",
    )
    assert pinned_backend_failure(fa2_ran, "FLASH_ATTENTION", "FA2") is None
    failure = pinned_backend_failure(fa2_ran, fa3.sdpa_backend, fa3.flash_impl)
    assert failure.startswith("claimed flash implementation FA3: no FA3 flash kernel ran; FA2 ran")
    assert "pytorch_flash::flash_fwd_kernel" in failure
    fa3_ran = _fake_device_trace(tmp_path, FA3_FWD)
    assert pinned_backend_failure(fa3_ran, "FLASH_ATTENTION", "FA3") is None
    fa4_ran = _fake_device_trace(tmp_path, FA4_FWD)
    assert "FA4 ran instead" in pinned_backend_failure(fa4_ran, "FLASH_ATTENTION", "FA3")
    # both ran: the claimed one is not enough when another implementation ran beside it
    both = flash_impl_failure({FA3_FWD: 1, FA2_TORCH: 1}, "FA3")
    assert both.startswith("claimed flash implementation FA3: FA2 ran instead")
    unnamed = flash_impl_failure({"flash_attn_some_future_kernel": 1}, "FA4")
    assert "flash implementation not in name" in unnamed
    # ROCm's flash backend runs AOTriton: no implementation is read there
    assert pinned_backend_failure({"attn_fwd": 1}, "FLASH_ATTENTION", "FA3", rocm=True) is None
    with pytest.raises(ValueError, match="'FA5'"):
        flash_impl_failure(fa2_ran, "FA5")


def test_flash_impl_rules_table_is_on_the_reference_page():
    table = flash_impl_rules_markdown()
    assert "| flash implementation |" in table and "| FA4 | `flash_attncute` |" in table
