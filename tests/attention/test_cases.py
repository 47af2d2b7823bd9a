import pytest
import torch

from perfsuite.attention.cases import (
    DEVICES,
    AttentionCase,
    Device,
    Shape,
    build_cases,
    covering_pairs,
    parse_case_id,
    parse_device,
    parse_dtype,
    parse_masks,
    parse_shape,
)


def test_case_ids_name_shape_dtype_mask_and_device():
    case = AttentionCase(8, 16, 1024, 1024, 64, "bf16", "cuda", "causal")
    assert case.id == "b8h16s1024d64-bf16-causal-cuda"
    decode = AttentionCase(
        1,
        32,
        1,
        4096,
        128,
        "fp32",
        "cpu",
        "causal_br",
        num_kv_heads=8,
        scale=0.125,
        contiguous=False,
    )
    assert decode.id == "b1h32kv8q1k4096d128-fp32-causal_br-scale0.125-strided-cpu"


@pytest.mark.parametrize(
    "case_id",
    [
        "b8h16s1024d64-bf16-causal-cuda",
        "b1h32kv8q1k4096d128-fp32-causal_br-scale0.125-strided-cpu",
        "b2h4q3k7d20-fp16-window64-cpu",
        "b1h1s1d1-fp64-noncausal-scale1e-05-cpu",
    ],
)
def test_case_ids_round_trip(case_id):
    assert parse_case_id(case_id).id == case_id


def test_score_matrix_size_in_bytes():
    case = AttentionCase(2, 8, 256, 256, 64, "bf16", "cpu")
    assert case.score_shape == (2, 8, 256, 256)
    assert case.score_bytes == 2 * 8 * 256 * 256 * 2
    assert case.softmax_scale == pytest.approx(1 / 8)


def test_parse_shape_accepts_plain_and_gqa_forms():
    assert parse_shape(" 8x16x1024x64 ") == Shape(8, 16, 16, 1024, 1024, 64)
    assert parse_shape("4x32:8x1:4096x128") == Shape(4, 32, 8, 1, 4096, 128)


@pytest.mark.parametrize(
    "text, message",
    [
        ("8x16x1024x0", "head_dim=0"),
        ("0x1x2x3", "batch=0"),
        ("8x16x1024", "batch x num_heads x seq_len x head_dim"),
        ("axbxcxd", "positive integers"),
        ("2x8:3x16x8", "num_kv_heads=3 does not divide num_heads=8"),
    ],
)
def test_parse_shape_names_the_bad_value(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_shape(text)
    assert repr(text) in str(info.value)


def test_parse_dtype_aliases_and_rejects_unknown():
    assert parse_dtype("bfloat16") == "bf16" and parse_dtype("FP32") == "fp32"
    with pytest.raises(
        ValueError, match=r"'fp9' is not supported; allowed: fp64, fp32, bf16, fp16"
    ):
        parse_dtype("fp9")


def test_parse_device_and_masks():
    assert parse_device("CUDA") is Device.CUDA == "cuda"
    assert DEVICES == tuple(Device) == ("cpu", "cuda")
    assert parse_case_id("b1h2s16d8-fp32-causal-cpu").device is Device.CPU
    with pytest.raises(ValueError, match="'tpu'.*allowed: cpu, cuda"):
        parse_device("tpu")
    assert parse_masks("both") == ("causal", "noncausal")
    assert parse_masks("window128") == ("window128",)
    for bad in ("sometimes", "window0", "window"):
        with pytest.raises(
            ValueError, match=f"mask '{bad}' is not supported; allowed: noncausal, causal"
        ):
            parse_masks(bad)


def test_bad_case_ids_are_refused():
    with pytest.raises(ValueError, match="case id 'b1h2-fp32' is not of the form"):
        parse_case_id("b1h2-fp32")
    with pytest.raises(ValueError, match="dtype 'fp8'"):
        parse_case_id("b1h1s4d4-fp8-causal-cpu")


def test_build_cases_is_the_full_product_in_order():
    cases = build_cases(
        [Shape(1, 2, 2, 8, 8, 4), Shape(2, 2, 1, 1, 16, 4)],
        ["fp32", "bf16"],
        "cpu",
        ["causal", "noncausal"],
    )
    assert len(cases) == 8
    assert (
        cases[0].id == "b1h2s8d4-fp32-causal-cpu"
        and cases[-1].id == "b2h2kv1q1k16d4-bf16-noncausal-cpu"
    )
    assert cases[1].torch_dtype is torch.float32


def test_pairwise_cases_keep_every_pair_of_values_and_drop_the_rest():
    shapes = [Shape(1, 2, 2, 8, 8, 4), Shape(2, 2, 1, 1, 16, 4), Shape(1, 4, 4, 6, 6, 8)]
    masks = ["causal", "noncausal", "causal_br", "bool", "additive", "padding", "window4"]
    full = build_cases(shapes, ["fp32", "bf16"], "cpu", masks)
    pairwise = build_cases(shapes, ["fp32", "bf16"], "cpu", masks, combinations="pairwise")
    key = lambda c: (c.seq_len_q, c.num_kv_heads, c.num_heads)  # tells the three shapes apart
    seen = lambda cs: (
        {(key(c), c.dtype) for c in cs},
        {(key(c), c.mask) for c in cs},
        {(c.dtype, c.mask) for c in cs},
    )
    assert seen(pairwise) == seen(full)
    assert len(pairwise) == 21 < len(full) == 42  # 3 shapes x 7 masks is the least that can cover
    assert [c for c in full if c in pairwise] == pairwise  # a subset, in the product's order


def test_covering_pairs_on_edge_products():
    assert covering_pairs([]) == []
    assert covering_pairs([("a", "x")]) == [("a", "x")]
    two_factors = [(a, b) for a in "ab" for b in "xyz"]
    assert covering_pairs(two_factors) == two_factors  # with two factors every row is its own pair
    with pytest.raises(ValueError, match="combinations 'some': expected one of all, pairwise"):
        build_cases([Shape(1, 2, 2, 8, 8, 4)], ["fp32"], "cpu", ["causal"], combinations="some")


@pytest.mark.parametrize(
    "case_id, hides",
    [
        ("b2h4kv2q1k48d20-bf16-causal_br-cpu", False),  # the decode query sees the whole cache
        ("b2h4kv2q1k48d20-bf16-causal-cpu", True),  # top-left: query 0 sees key 0 only
        ("b1h2q16k24d8-fp32-causal_br-cpu", True),
        ("b1h2s16d8-fp32-window4-cpu", True),
        ("b1h2s16d8-fp32-noncausal-cpu", False),
        ("b1h2s16d8-fp32-padding-cpu", True),  # random masks are taken to hide one
    ],
)
def test_whether_a_cases_mask_hides_a_key_follows_its_lengths(case_id, hides):
    from perfsuite.testing.properties import applicable
    from perfsuite.variants import get_variant

    case = parse_case_id(case_id)
    assert case.hides_a_key_here is hides
    # so a property about hidden keys is not generated where it could only pass without looking
    reason = applicable("masked_keys_do_not_matter", get_variant("naive"), case)
    assert (reason is None) is hides, reason
