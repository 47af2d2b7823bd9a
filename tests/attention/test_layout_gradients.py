"""Layout cases in backward: padded, packed (varlen) and value-head-dim cases are trained through and
checked per sequence against the float64 reference's gradients; inference-only layouts (paged,
split-KV, FP8) are skipped naming why; the causality property runs per sequence on packed cases;
a split-KV failure says whether the merge is what is wrong."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.inputs import make_grad_output, make_inputs
from perfsuite.attention.modes import make_step
from perfsuite.attention.reference_layouts import (
    compare_sequence_gradients,
    reference_gradients_in_layout,
)
from perfsuite.measure.correctness import compare_result
from perfsuite.measure.evidence import gather_evidence
from perfsuite.suite.generation import certain_skip
from perfsuite.testing.properties import applicable, check_causality, check_matches_reference
from perfsuite.variants import get_variant
from perfsuite.variants.split_kv import chunk_bounds

SERVING = Path(__file__).parent.parent / "data" / "serving_attention.py"
PACKED = "b3h4kv2s12d8-fp32-causal-packed-uniform-cpu"
PADDED = "b3h4kv2s12d8-fp32-causal-padded-uniform-cpu"
SPLIT = "b2h4kv2q1k32d8-fp32-noncausal-split4-cpu"


def _varlen_prefill():
    spec = importlib.util.spec_from_file_location("serving_attention", SERVING)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.varlen_prefill


def _gradient_check(variant, case_id, mode="forward_backward"):
    case = parse_case_id(case_id)
    inputs, grad_output = make_inputs(case, 0), make_grad_output(case, 0)
    result = make_step(mode, variant.for_case(inputs), inputs, grad_output)()
    comparison, not_compared = compare_result(variant, case, inputs, grad_output, mode, result, 0)
    assert not_compared is None
    return comparison


@pytest.mark.parametrize(
    "name, case_id",
    [
        ("sdpa", PADDED),
        ("naive", "b2h4kv2s8d12-fp32-causal_br-padded-onelong-dv8-cpu"),
        ("varlen_padded_sdpa", "b3h4kv2s12d8-fp32-causal_br-packed-uniform-dv4-cpu"),
        ("sdpa_nested", "b3h4kv2s12d8-fp32-noncausal-packed-uniform-cpu"),
        ("sdpa", "b2h4kv2s8d12-fp32-causal-dv8-cpu"),
    ],
)
def test_built_ins_backward_on_padded_packed_and_value_head_dim_cases_match_the_reference(
    name, case_id
):
    assert certain_skip(get_variant(name), parse_case_id(case_id), "backward") is None
    comparison = _gradient_check(get_variant(name), case_id)
    assert comparison.failure is None and 0 < comparison.max_abs_error < 1e-5


def test_the_suite_checks_a_packed_case_in_backward(tmp_path):
    evidence = gather_evidence(
        get_variant("varlen_padded_sdpa"), parse_case_id(PACKED), 0, tmp_path, "backward"
    )
    assert evidence.comparison.failure is None and evidence.comparison.max_abs_error > 0


def test_a_users_varlen_prefill_gets_backward_and_a_gradient_wrong_for_one_sequence_is_named(
    variant_of,
):
    prefill = _varlen_prefill()
    assert _gradient_check(variant_of("t_varlen", prefill), PACKED, "backward").failure is None

    def keys_of_sequence_1_detached(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        rows = torch.zeros(key.shape[0], 1, 1, dtype=torch.bool)
        rows[int(cu_seqlens_kv[1]) : int(cu_seqlens_kv[2])] = True
        detached = torch.where(rows, key.detach(), key)
        return prefill(
            query,
            detached,
            value,
            mask=mask,
            scale=scale,
            cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=cu_seqlens_kv,
            max_seqlen_q=max_seqlen_q,
            max_seqlen_kv=max_seqlen_kv,
        )

    failure = _gradient_check(variant_of("t_detached", keys_of_sequence_1_detached), PACKED).failure
    assert "in mode forward_backward" in failure
    assert "grad_key of sequence 1 of 3 (q_len 10, kv_len 10): not within" in failure
    assert "worst element at [head, position, dim] = [" in failure and "(packed row 1" in failure


def test_a_padded_cases_padding_positions_must_have_zero_gradients():
    case = parse_case_id(PADDED)
    inputs, grad_output = make_inputs(case, 0), make_grad_output(case, 0)
    assert bool((grad_output[1, :, 10:] == 0).all())  # padded query rows seed no gradient
    result = make_step("forward_backward", get_variant("sdpa").fn, inputs, grad_output)()
    assert (
        compare_sequence_gradients(case, inputs, grad_output, result.gradients, "x").failure is None
    )
    for want, got in zip(
        reference_gradients_in_layout(case, inputs, grad_output), result.gradients
    ):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)  # padding: zeros both
    grad_key = result.gradients[1].clone()
    grad_key[1, 0, 11, 2] = 0.5  # sequence 1 has 10 keys: position 11 is padding
    gradients = (result.gradients[0], grad_key, result.gradients[2])
    failure = compare_sequence_gradients(case, inputs, grad_output, gradients, "x").failure
    assert (
        "grad_key of sequence 1 of 3 (q_len 10, kv_len 10) is not zero at padding position 11"
        in failure
    )
    assert "[head, position, dim] = [0, 11, 2]" in failure


@pytest.mark.parametrize(
    "name, case_id, why",
    [
        (
            "paged_gather",
            "b2h2kv1q1k8d4-fp32-causal_br-paged4-uniform-cpu",
            "paged KV-cache cases are inference only",
        ),
        ("split_kv", SPLIT, "split-KV cases are inference only"),
        ("fp8_dequant_sdpa", "b1h2s8d4-bf16-causal-fp8-cpu", "FP8 cases are inference only"),
    ],
)
def test_inference_only_layouts_skip_backward_naming_why(name, case_id, why):
    case = parse_case_id(case_id)
    assert certain_skip(get_variant(name), case, "forward") is None
    for mode in ("backward", "forward_backward"):
        assert why in certain_skip(get_variant(name), case, mode)
    assert "flex_attention backward on the CPU" in certain_skip(
        get_variant("flex_document"), parse_case_id(PACKED), "backward"
    )


def test_causality_runs_per_sequence_on_packed_cases_and_names_what_moved(variant_of):
    prefill = _varlen_prefill()
    causal = parse_case_id(PACKED)
    correct = variant_of("t_causal", prefill)
    assert applicable("causality", correct, causal) is None
    assert "not a causal mask" in applicable(
        "causality", correct, parse_case_id(PACKED.replace("-causal-", "-noncausal-"))
    )
    assert check_causality(correct, causal, 0) is None
    assert check_causality(get_variant("sdpa"), parse_case_id(PADDED), 0) is None
    dense_dv = parse_case_id("b2h4kv2s8d12-fp32-causal-dv8-cpu")
    assert "a layout case" in applicable("causality", get_variant("sdpa"), dense_dv)

    def no_causal_mask(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        unmasked = dataclasses.replace(mask, is_causal=False)
        return prefill(
            query,
            key,
            value,
            mask=unmasked,
            scale=scale,
            cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=cu_seqlens_kv,
            max_seqlen_q=max_seqlen_q,
            max_seqlen_kv=max_seqlen_kv,
        )

    failure = check_causality(variant_of("t_no_mask", no_causal_mask), causal, 0)
    assert "changing the tokens at positions >= " in failure
    assert "of sequence 0 of 3 (q_len 12, kv_len 12) changed its query rows [" in failure

    def leaks_into_next(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        starts = cu_seqlens_kv.clone()
        starts[1:-1] -= 1  # each later sequence also sees the previous sequence's last key
        return prefill(
            query,
            key,
            value,
            mask=mask,
            scale=scale,
            cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=starts,
            max_seqlen_q=max_seqlen_q,
            max_seqlen_kv=max_seqlen_kv,
        )

    failure = check_causality(variant_of("t_leak", leaks_into_next), causal, 0)
    assert "changed sequence 1 (q_len 10, kv_len 10), another sequence, rows [" in failure


def _merged_by_sums(query, key, value, *, mask, scale, num_splits):
    """Split-KV decode whose merge forgets the max correction (each chunk's sum relative to its own max)."""
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    outputs, sums = [], []
    for start, end in chunk_bounds(key.shape[2], num_splits):
        scores = torch.matmul(query, key[:, :, start:end].transpose(-2, -1)) * scale
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        sums.append(weights.sum(dim=-1, keepdim=True))
        outputs.append(torch.matmul(weights, value[:, :, start:end]) / sums[-1])
    total = sum(sums)
    return sum(o * s / total for o, s in zip(outputs, sums))


def test_a_split_kv_failure_says_the_merge_is_wrong_when_one_split_is_right(variant_of):
    failure = check_matches_reference(
        variant_of("t_sums", _merged_by_sums), parse_case_id(SPLIT), 0
    )
    assert "sequence 0 of 2 (q_len 1, kv_len 32): not within" in failure
    assert (
        "with num_splits=1 the output matches the reference, with num_splits=4 it does not: the "
        "merge across splits is wrong (is the max / log-sum-exp correction applied?" in failure
    )

    def scale_ignored(query, key, value, *, mask, scale, num_splits):
        return F.scaled_dot_product_attention(query, key, value, scale=1.0, enable_gqa=True)

    failure = check_matches_reference(variant_of("t_scale", scale_ignored), parse_case_id(SPLIT), 0)
    assert (
        "with num_splits=1 the output is wrong too: the error is not (only) in the merge" in failure
    )


PAGED = "b2h4kv2q1k12d8-fp32-causal_br-paged4-uniform-cpu"


def _online_over_pages(correct_max: bool):
    """Decode over a paged cache with an online softmax page by page; without ``correct_max`` the
    running sum and output are not rescaled by exp(m_old - m_new) when a page raises the max."""

    def attention(query, key, value, *, mask, scale, block_table, seq_lens_kv):
        batch, heads, _, _ = query.shape
        page_size, groups = key.shape[1], heads // key.shape[2]
        out = torch.empty_like(query)
        for b in range(batch):
            length = int(seq_lens_kv[b])
            top = torch.full((heads, 1, 1), float("-inf"))
            total, acc = torch.zeros(heads, 1, 1), torch.zeros(heads, 1, query.shape[-1])
            for p in range((length + page_size - 1) // page_size):
                rows = slice(0, min(page_size, length - p * page_size))
                page = int(block_table[b, p])
                k = key[page, rows].transpose(0, 1).repeat_interleave(groups, 0)
                v = value[page, rows].transpose(0, 1).repeat_interleave(groups, 0)
                scores = torch.matmul(query[b], k.transpose(-2, -1)) * scale
                new_top = torch.maximum(top, scores.amax(-1, keepdim=True))
                rescale = torch.exp(top - new_top) if correct_max else 1.0
                weights = torch.exp(scores - new_top)
                total = total * rescale + weights.sum(-1, keepdim=True)
                acc = acc * rescale + torch.matmul(weights, v)
                top = new_top
            out[b] = acc / total
        return out

    return attention


def test_a_paged_failure_says_the_merge_across_pages_is_wrong_when_one_page_is_right(variant_of):
    """Before: an online softmax over pages without the max correction got only the element; the
    max / log-sum-exp hint was given on split-KV cases only."""
    case = parse_case_id(PAGED)
    assert check_matches_reference(variant_of("t_pages", _online_over_pages(True)), case, 0) is None
    failure = check_matches_reference(variant_of("t_no_max", _online_over_pages(False)), case, 0)
    assert (
        "with one page per sequence (page_size 12) the output matches the reference, with page_size 4 "
        "it does not: the merge across pages is wrong (is the max / log-sum-exp correction applied?"
        in failure
    ), failure


def _chunked_prefill(shift: int):
    """Packed causal prefill over each sequence's cached prefix (bottom-right): query row i of a
    sequence sees keys j <= i + kv_len - q_len + shift (shift 1: the mask off by one)."""

    def attention(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        out = torch.empty(query.shape[:2] + value.shape[2:], dtype=query.dtype)
        for b in range(len(cu_seqlens_q) - 1):
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            k0, k1 = int(cu_seqlens_kv[b]), int(cu_seqlens_kv[b + 1])
            q, k, v = (t.transpose(0, 1) for t in (query[q0:q1], key[k0:k1], value[k0:k1]))
            rows, cols = torch.arange(q1 - q0)[:, None], torch.arange(k1 - k0)[None, :]
            allowed = cols <= rows + (k1 - k0) - (q1 - q0) + shift
            heads = q.shape[0] // k.shape[0]
            k, v = k.repeat_interleave(heads, 0), v.repeat_interleave(heads, 0)
            out[q0:q1] = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, scale=scale
            ).transpose(0, 1)
        return out

    return attention


def test_causality_on_a_chunked_prefill_perturbs_inside_the_query_block(variant_of):
    """A prefill chunk over a cached prefix: a mask off by one inside the chunk is caught (the
    perturbed position is drawn where it splits the chunk's rows, not in the prefix all rows see)."""
    case = parse_case_id("b2h2kv1q4k24d4-fp32-causal_br-packed-uniform-cpu")
    assert check_causality(variant_of("t_chunk", _chunked_prefill(0)), case, 0) is None
    off_by_one = variant_of("t_chunk_off", _chunked_prefill(1))
    for seed in range(3):
        assert "changed its query rows [" in check_causality(off_by_one, case, seed)


PACKED_PREFILL = "b3h4kv2s24d8-fp32-causal_br-packed-uniform-cpu"


def _online_over_chunks(correct_max: bool, shift: int = 0, chunk: int = 4):
    """Packed (varlen) prefill with an online softmax over chunks of ``chunk`` keys of each sequence;
    without ``correct_max`` the running sum and output are not rescaled by exp(m_old - m_new) when a
    chunk raises the max; ``shift`` 1: the causal mask off by one (each query sees one key too many)."""

    def attention(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        heads, groups = query.shape[1], query.shape[1] // key.shape[1]
        out = torch.empty(query.shape[:2] + value.shape[2:], dtype=query.dtype)
        for b in range(len(cu_seqlens_q) - 1):
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            k0, k1 = int(cu_seqlens_kv[b]), int(cu_seqlens_kv[b + 1])
            q = query[q0:q1].transpose(0, 1)
            k, v = (t[k0:k1].transpose(0, 1).repeat_interleave(groups, 0) for t in (key, value))
            rows = torch.arange(q1 - q0)[:, None] + (k1 - k0) - (q1 - q0) + shift
            top = query.new_full((heads, q1 - q0, 1), float("-inf"))
            total = query.new_zeros(heads, q1 - q0, 1)
            acc = query.new_zeros(heads, q1 - q0, value.shape[-1])
            for start in range(0, k1 - k0, chunk):
                cols = torch.arange(start, min(start + chunk, k1 - k0))
                scores = torch.matmul(q, k[:, cols].transpose(-2, -1)) * scale
                scores = scores.masked_fill(cols[None, :] > rows, float("-inf"))
                new_top = torch.maximum(top, scores.amax(-1, keepdim=True))
                safe = new_top.clamp(min=torch.finfo(scores.dtype).min)  # a chunk it sees no key of
                rescale = torch.exp(top - safe) if correct_max else 1.0
                weights = torch.exp(scores - safe)
                total = total * rescale + weights.sum(-1, keepdim=True)
                acc = acc * rescale + torch.matmul(weights, v[:, cols])
                top = new_top
            out[q0:q1] = (acc / total).transpose(0, 1)
        return out

    return attention


MAX_HINT = "the merge across chunks of keys is wrong (is the max / log-sum-exp correction applied?"


def test_a_packed_failure_says_the_merge_is_wrong_when_falling_scores_are_right(variant_of):
    """Before: an online softmax over a packed batch without the max correction got only the element
    (packed cases have no page size or split count to rerun with); now the same scores falling and
    rising along each sequence's keys tell a merge without the correction apart."""
    case = parse_case_id(PACKED_PREFILL)
    right = variant_of("t_chunks", _online_over_chunks(True))
    assert check_matches_reference(right, case, 0) is None
    failure = check_matches_reference(variant_of("t_no_max", _online_over_chunks(False)), case, 0)
    assert failure is not None and "sequence 0 of 3" in failure, failure
    assert (
        "with scores that fall along each sequence's keys (the first key a row's max) the output "
        "matches the reference, with the same scores rising along the keys it does not: "
        + MAX_HINT
        in failure
    ), failure


def test_another_packed_mistake_gets_no_max_correction_hint(variant_of):
    """A causal mask off by one in the same online softmax (its merge right) fails on falling scores
    too: no word about the max correction."""
    case = parse_case_id(PACKED_PREFILL)
    failure = check_matches_reference(
        variant_of("t_off_by_one", _online_over_chunks(True, shift=1)), case, 0
    )
    assert failure is not None and "sequence 0 of 3" in failure, failure
    assert "max / log-sum-exp" not in failure, failure
