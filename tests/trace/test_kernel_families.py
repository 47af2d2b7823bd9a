import gzip
import json
from pathlib import Path

import pytest

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.evidence import gather_evidence
from perfsuite.trace.kernel_families import UNKNOWN, kernel_family
from perfsuite.variants import get_variant

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def kernel_names():
    names = set()
    for path in TRACES.glob("*.json.gz"):
        with gzip.open(path, "rt") as handle:
            names |= {e["name"] for e in json.load(handle)["traceEvents"] if e.get("cat") == "kernel"}
    return sorted(names)


@pytest.mark.parametrize(
    "marker, family",
    [
        ("ampere_sgemm_", "GEMM fp32 CUDA cores (sgemm)"),
        ("tensorop_s1688gemm", "GEMM tensor core TF32"),
        ("triton_poi_fused_add_cos_sin_0", "Triton"),
        ("ncclKernel_SendRecv", "NCCL collective"),
        ("direct_copy_kernel_cuda", "copy"),
        ("CatArrayBatchedCopy", "copy"),
        ("_MI16x16x1_", "GEMM ROCm matrix core (Tensile)"),
        ("softmax_warp_forward", "softmax"),
        ("LayerNormForwardCUDAKernel", "normalization"),
        ("sum_functor", "reduction"),
        ("gemvNSP_kernel", "GEMV (cuBLAS)"),
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
    assert len(names) == 200
    assert unknown == [
        "void compute_cuda_kernel<long>",
        "void linearize_index_kernel<long>",
        "void permute_pooled_embs_kernel<float>",
    ]


@pytest.mark.parametrize(
    "name, family",
    [  # kernel names as they appear in the post's A100 traces
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>", "fused attention: flash"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)", "fused attention: memory-efficient (cutlass)"),
        ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "fused attention: cuDNN"),
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", "GEMM tensor core fp16/bf16"),
        ("ampere_sgemm_128x64_tn", "GEMM fp32 CUDA cores (sgemm)"),
    ],
)
def test_attention_and_gemm_kernels_of_the_post(name, family):
    assert kernel_family(name) == family


def test_sdpa_backend_is_read_from_the_trace(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    flash = gather_evidence(get_variant("sdpa_flash"), case, 0, tmp_path).steps[0]
    math = gather_evidence(get_variant("sdpa_math"), case, 0, tmp_path).steps[0]
    naive = gather_evidence(get_variant("naive"), case, 0, tmp_path).steps[0]
    assert flash.sdpa_backends == ["FLASH_ATTENTION (CPU)"]
    assert math.sdpa_backends == ["MATH"]
    assert naive.sdpa_backends == []
