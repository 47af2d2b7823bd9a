"""The checks catch broken variants: tests of the suite's own tests."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.evidence import gather_evidence
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.reference import TOLERANCES, compare_with_reference, reference_attention
from perfsuite.variants import Variant, get_variant
from perfsuite.variants.naive_inplace import naive_inplace_attention

CASE = AttentionCase(1, 2, 32, 32, 16, "fp32", "cpu", "causal")


def variant(name, fn, fully_masked_rows="zeros"):
    return Variant(
        name=name, fn=fn, description="test-only variant", fully_masked_rows=fully_masked_rows
    )


def test_every_dtype_has_a_tolerance():
    from perfsuite.attention.cases import DTYPES

    assert set(DTYPES.values()) <= set(TOLERANCES)


def test_reference_agrees_with_sdpa_math_in_float64():
    inputs = make_inputs(CASE, seed=3)
    q, k, v = (t.double() for t in (inputs.query, inputs.key, inputs.value))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(reference_attention(inputs), expected)


@pytest.mark.parametrize(
    "mask", ["noncausal", "causal_br", "bool", "additive", "padding", "window3"]
)
def test_reference_agrees_with_sdpa_math_in_float64_for_every_mask_and_gqa(mask):
    case = AttentionCase(
        2, 4, 12, 7, 8, "fp64", "cpu", mask, num_kv_heads=2, scale=0.4, contiguous=False
    )
    inputs = make_inputs(case, seed=5)
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        expected = torch.nn.functional.scaled_dot_product_attention(
            inputs.query,
            inputs.key,
            inputs.value,
            attn_mask=inputs.mask.sdpa_mask,
            scale=0.4,
            enable_gqa=True,
        )
    torch.testing.assert_close(reference_attention(inputs), expected)


def test_fully_masked_rows_nan_variants_are_held_to_nan_and_zero_variants_to_zeros(tmp_path):
    """bottom-right causal with seq_len_q > seq_len_kv: the first rows see no key."""
    case = AttentionCase(1, 2, 9, 4, 8, "fp32", "cpu", "causal_br")
    naive = gather_evidence(get_variant("naive"), case, seed=0, trace_dir=tmp_path)
    sdpa = gather_evidence(get_variant("sdpa_math"), case, seed=0, trace_dir=tmp_path)
    assert naive.comparison.failure is None and sdpa.comparison.failure is None
    # the same naive output judged by the zeros rule fails, naming the NaN rows
    as_zeros = gather_evidence(
        variant("naive_as_zeros", get_variant("naive").fn), case, 0, tmp_path
    )
    assert "non-finite outputs" in as_zeros.comparison.failure
    as_nan = gather_evidence(
        variant("sdpa_as_nan", get_variant("sdpa_math").fn, "nan"), case, 0, tmp_path
    )
    assert "sees no key and was expected to be NaN" in as_nan.comparison.failure


def test_a_variant_that_leaks_future_keys_fails_equivalence(tmp_path):
    def leaky(query, key, value, *, mask, scale):
        return (
            torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1) @ value
        )  # ignores the mask

    evidence = gather_evidence(variant("leaky", leaky), CASE, seed=0, trace_dir=tmp_path)
    failure = evidence.comparison.failure
    assert failure is not None
    assert "variant leaky on case b1h2s32d16-fp32-causal-cpu (seed 0)" in failure
    assert "worst element at [batch, head, query, dim]" in failure


def test_non_finite_output_fails_and_names_the_element():
    inputs = make_inputs(CASE, seed=0)
    expected = reference_attention(inputs)
    broken = expected.float().clone()
    broken[0, 1, 5, 3] = float("nan")
    result = compare_with_reference(broken, expected, "variant x on case y")
    assert result.failure.startswith(
        "variant x on case y: 1 non-finite outputs; first worst element at"
    )
    assert "[0, 1, 5, 3]" in result.failure


def test_a_hidden_clone_of_the_scores_is_counted(tmp_path):
    def cloning(query, key, value, *, mask, scale):
        scores = (query @ key.transpose(-2, -1)).clone()
        return (
            naive_inplace_attention(query, key, value, mask=mask, scale=scale) + 0 * scores[..., :1]
        )

    evidence = gather_evidence(variant("cloning", cloning), CASE, seed=0, trace_dir=tmp_path)
    assert evidence.score_copies("cpu") == [1, 1]
    assert evidence.expected_score_copies == 0


def test_naive_copies_once_and_inplace_never(tmp_path):
    naive = gather_evidence(get_variant("naive"), CASE, seed=0, trace_dir=tmp_path)
    inplace = gather_evidence(get_variant("naive_inplace"), CASE, seed=0, trace_dir=tmp_path)
    assert naive.score_copies("cpu") == [1, 1] and inplace.score_copies("cpu") == [0, 0]
    # naive allocates two more score matrices: the out-of-place `* scale` and the masked_fill clone
    extra = naive.steps[0].allocated_bytes["cpu"] - inplace.steps[0].allocated_bytes["cpu"]
    assert extra == 2 * CASE.score_bytes
    assert naive.trace_path.exists() and naive.trace_path.name.endswith(".pt.trace.json.gz")


def test_a_backend_without_a_kernel_is_unsupported_with_the_reason(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("on a CUDA machine the efficient backend may have a kernel")
    with pytest.raises(
        VariantUnsupported, match="SDPBackend.EFFICIENT_ATTENTION has no kernel for fp32 on cpu"
    ):
        gather_evidence(get_variant("sdpa_efficient"), CASE, seed=0, trace_dir=tmp_path)


def test_other_errors_are_errors_not_skips(tmp_path):
    def crashing(query, key, value, *, mask, scale):
        raise RuntimeError("shape mismatch in my kernel")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        gather_evidence(variant("crashing", crashing), CASE, seed=0, trace_dir=tmp_path)


def test_cuda_case_on_a_machine_without_cuda_is_unsupported(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cuda_case = AttentionCase(1, 2, 32, 32, 16, "bf16", "cuda", "causal")
    with pytest.raises(VariantUnsupported, match="device cuda is not available"):
        gather_evidence(get_variant("naive"), cuda_case, seed=0, trace_dir=tmp_path)


@pytest.mark.parametrize("mask", ["causal", "causal_br", "bool", "additive", "padding", "window4"])
def test_blockwise_reference_equals_the_whole_one(mask):
    from perfsuite.attention.reference import query_blocks, reference_gradients

    case = AttentionCase(2, 4, 10, 9, 8, "fp32", "cpu", mask, num_kv_heads=2)
    inputs = make_inputs(case, 0)
    row_bytes = 2 * 4 * 9 * 8  # one query row of float64 scores
    assert query_blocks(inputs, block_bytes=5 * row_bytes) == [(0, 5), (5, 10)]
    whole, blocked = (
        reference_attention(inputs),
        reference_attention(inputs, block_bytes=3 * row_bytes),
    )
    torch.testing.assert_close(blocked, whole, atol=1e-12, rtol=1e-12)
    grad_output = torch.randn(
        whole.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    for got, want in zip(
        reference_gradients(inputs, grad_output, block_bytes=row_bytes),
        reference_gradients(inputs, grad_output),
    ):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    with pytest.raises(ValueError, match="block_bytes must be positive, got 0"):
        query_blocks(inputs, block_bytes=0)


def test_a_reference_out_of_memory_is_not_compared(tmp_path, monkeypatch):
    from perfsuite.measure import correctness

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")

    monkeypatch.setattr(correctness, "reference_attention", out_of_memory)
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    found = gather_evidence(get_variant("sdpa"), case, 0, tmp_path)
    assert found.comparison is None
    assert found.not_compared.startswith(
        "not compared: the float64 reference of b1h2s16d8-fp32-causal-cpu ran out of cpu memory"
    )


def test_a_saved_bias_is_not_a_score_matrix_at_batch_1(tmp_path):
    from perfsuite.measure.evidence import input_tensors
    from perfsuite.measure.saved_tensors import measure_saved

    case = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "additive")
    inputs = make_inputs(case, 0)
    bias = inputs.mask.additive
    assert (
        bias.shape == case.score_shape
    )  # [1, H, Sq, Skv]: as many elements as the scores at batch 1
    query = inputs.query.detach().requires_grad_(True)

    def saves_the_bias():
        return (query.sum() * bias).sum()  # mul saves the bias for query's gradient

    assert measure_saved(saves_the_bias, case.score_shape, (query,)).score_sized == 1
    assert (
        measure_saved(
            saves_the_bias, case.score_shape, (query,) + input_tensors(inputs)
        ).score_sized
        == 0
    )


def test_sdpa_flash_saving_its_bias_at_batch_1_saves_no_score_matrix(tmp_path):
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "additive")
    flash = gather_evidence(
        get_variant("sdpa_flash"), case, 0, tmp_path, "forward_backward"
    ).saved_for_backward
    naive = gather_evidence(
        get_variant("naive"), case, 0, tmp_path, "forward_backward"
    ).saved_for_backward
    assert flash.score_sized == 0  # it saves a copy of the [1, H, Sq, Skv] bias, an input
    assert naive.score_sized == 1  # the unfused softmax output


class OutOfResources(Exception):
    """Named like triton.runtime.errors.OutOfResources (Triton is not installed on every machine)."""


def _raises(error):
    def attention(query, key, value, *, mask, scale):
        raise error

    return Variant(name="raiser", fn=attention, description="raises")


def _inductor_wrapped():
    try:
        raise OutOfResources(
            "out of resource: shared memory, Required: 262144, Hardware limit: 232448"
        )
    except OutOfResources as inner:
        try:
            raise RuntimeError("backend='inductor' raised:") from inner
        except RuntimeError as outer:
            return outer


@pytest.mark.parametrize(
    "error, why",
    [
        (
            RuntimeError(
                "cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph."
            ),
            "cuDNN has no execution plan for this case on this GPU",
        ),
        (
            _inductor_wrapped(),
            "a Triton kernel needs more shared memory or registers than this GPU has",
        ),
        (
            RuntimeError(
                "NoValidChoicesError: No choices to select, please consider adding ATEN into max_autotune_gemm_backends"
            ),
            "Inductor's autotuning found no kernel choice",
        ),
    ],
    ids=["cudnn-no-plan", "triton-out-of-resources", "inductor-no-choices"],
)
def test_machine_limits_are_skips_with_their_reason(error, why):
    from perfsuite.measure.evidence import run_once

    variant = _raises(error)
    with pytest.raises(VariantUnsupported, match=why) as info:
        run_once(variant, CASE, lambda: variant.fn(None, None, None, mask=None, scale=None))
    assert "torch: '" in str(info.value)


def test_other_errors_are_not_turned_into_skips():
    from perfsuite.measure.evidence import run_once

    variant = _raises(RuntimeError("The size of tensor a (4) must match the size of tensor b (5)"))
    with pytest.raises(RuntimeError, match="must match"):
        run_once(variant, CASE, lambda: variant.fn(None, None, None, mask=None, scale=None))


def test_an_undeclared_score_copy_fails_naming_the_op_and_what_to_do(tmp_path):
    """The suite's copy check on naive's code registered without declarations (as a user's function is)."""
    from perfsuite.suite.test_attention import score_copies_failure

    evidence = gather_evidence(
        variant("plain_naive", get_variant("naive").fn, "nan"), CASE, 0, tmp_path
    )
    message = score_copies_failure(evidence)
    first = message.splitlines()[0].split("; ")[0]
    assert first.endswith(
        "1 extra copy of the score matrix per forward: copy [1x2x32x32] in aten::masked_fill > "
        "aten::clone > aten::copy_ (score-sized copies per forward on the cpu lane [1, 1], expected [0, 0])"
    ), first
    assert "score-sized copies in the first step: aten::clone [1x2x32x32]" in message
    assert "masked_fill_" in message and "copies_scores_when_masked=True" in message
    assert "CopyRecord" not in message


def test_the_repr_of_evidence_names_it_on_a_bottom_right_causal_case():
    """A traceback shows an ``Evidence`` argument: its repr names variant, case and mode, and does not fail
    on the prepared case's ``CausalBias`` mask copies (which have no ``variant``)."""
    import dataclasses
    from pathlib import Path

    from perfsuite.measure.evidence import Evidence, prepare_case

    case = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "causal_br")
    sdpa = get_variant("sdpa")
    fields = {f.name: None for f in dataclasses.fields(Evidence)}
    evidence = Evidence(
        **fields
        | {"variant": sdpa, "case": case, "mode": "forward", "trace_path": Path("t.json.gz")}
        | {"prepared": prepare_case(sdpa, case, 0)}
    )
    assert repr(evidence).startswith(
        f"Evidence(variant='sdpa', case='{case.id}', mode='forward', correct"
    )
