import pytest
import torch

from perfsuite.cases import AttentionCase, build_cases, parse_causal, parse_device, parse_dtype, parse_shape


def test_case_ids_name_shape_dtype_mask_and_device():
    case = AttentionCase(8, 16, 1024, 1024, 64, "bf16", "cuda", True)
    assert case.id == "b8h16s1024d64-bf16-causal-cuda"
    assert AttentionCase(1, 8, 1, 4096, 128, "fp32", "cpu", False).id == "b1h8q1k4096d128-fp32-noncausal-cpu"


def test_score_matrix_size_in_bytes():
    case = AttentionCase(2, 8, 256, 256, 64, "bf16", "cpu", True)
    assert case.score_shape == (2, 8, 256, 256)
    assert case.score_bytes == 2 * 8 * 256 * 256 * 2


def test_parse_shape_accepts_bxhxsxd():
    assert parse_shape(" 8x16x1024x64 ") == (8, 16, 1024, 64)


@pytest.mark.parametrize(
    "text, message",
    [("8x16x1024x0", "head_dim=0"), ("0x1x2x3", "batch=0"), ("8x16x1024", "four positive integers"), ("axbxcxd", "four")],
)
def test_parse_shape_names_the_bad_value(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_shape(text)
    assert repr(text) in str(info.value)


def test_parse_dtype_aliases_and_rejects_unknown():
    assert parse_dtype("bfloat16") == "bf16" and parse_dtype("FP32") == "fp32"
    with pytest.raises(ValueError, match=r"'fp9' is not supported; allowed: fp64, fp32, bf16, fp16"):
        parse_dtype("fp9")


def test_parse_device_and_causal():
    assert parse_device("CUDA") == "cuda"
    with pytest.raises(ValueError, match="'tpu'.*allowed: cpu, cuda"):
        parse_device("tpu")
    assert parse_causal("both") == (True, False)
    with pytest.raises(ValueError, match="'sometimes'"):
        parse_causal("sometimes")


def test_build_cases_is_the_full_product_in_order():
    cases = build_cases([(1, 2, 8, 4), (2, 2, 16, 4)], ["fp32", "bf16"], "cpu", (True, False))
    assert len(cases) == 8
    assert cases[0].id == "b1h2s8d4-fp32-causal-cpu" and cases[-1].id == "b2h2s16d4-bf16-noncausal-cpu"
    assert cases[1].torch_dtype is torch.float32
