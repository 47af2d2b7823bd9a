"""The per-sequence reference: serving-style functions pass it, and the bugs they are prone to
(a wrong block-table lookup, an off-by-one sequence offset, a split-KV merge without the max
correction) fail with the sequence and the element named."""

import importlib.util
from pathlib import Path

import pytest
import torch

from perfsuite.attention.cases import parse_case_id
from perfsuite.testing.properties import check_matches_reference, check_sequence_independence
from perfsuite.variants import registry
from perfsuite.variants.split_kv import chunk_bounds

SERVING = Path(__file__).parent.parent / "data" / "serving_attention.py"
PAGED = "b3h4kv2q1k20d8-fp32-causal_br-paged4-uniform-cpu"
PACKED = "b3h4kv2s16d8-fp32-causal-packed-uniform-cpu"
SPLIT = "b2h4kv2q1k32d8-fp32-noncausal-split4-cpu"


def _serving():
    spec = importlib.util.spec_from_file_location("serving_attention", SERVING)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_serving_engineers_paged_decode_and_varlen_prefill_match_the_reference(variant_of):
    serving = _serving()
    assert (
        check_matches_reference(
            variant_of("t_paged", serving.paged_decode), parse_case_id(PAGED), 0
        )
        is None
    )
    assert (
        check_matches_reference(
            variant_of("t_varlen", serving.varlen_prefill), parse_case_id(PACKED), 0
        )
        is None
    )


def test_a_wrong_block_table_lookup_fails_naming_the_sequence_and_element(variant_of):
    serving = _serving()

    def logical_pages(query, key, value, *, mask, scale, block_table, seq_lens_kv):
        identity = torch.arange(
            block_table.shape[1], dtype=block_table.dtype
        )  # page p read as page p
        table = identity.expand_as(block_table).contiguous()
        return serving.paged_decode(
            query, key, value, mask=mask, scale=scale, block_table=table, seq_lens_kv=seq_lens_kv
        )

    failure = check_matches_reference(
        variant_of("t_lookup", logical_pages), parse_case_id(PAGED), 0
    )
    assert "sequence 0 of 3 (q_len 1, kv_len 20): not within" in failure
    assert "worst element at [head, query, dim] = [" in failure and "expected" in failure


def test_an_off_by_one_sequence_offset_fails_naming_the_sequence_and_packed_row(variant_of):
    case = parse_case_id(PACKED.replace("-causal-", "-noncausal-"))

    def one_key_too_many(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv
    ):
        ends = cu_seqlens_kv.clone()
        ends[1:-1] += 1  # each sequence's keys run one into the next sequence's
        out = query.new_empty(query.shape[0], query.shape[1], value.shape[-1])
        for b in range(cu_seqlens_q.shape[0] - 1):
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            k0, k1 = int(cu_seqlens_kv[b]), int(ends[b + 1])
            out[q0:q1] = torch.nn.functional.scaled_dot_product_attention(
                query[q0:q1].transpose(0, 1),
                key[k0:k1].transpose(0, 1),
                value[k0:k1].transpose(0, 1),
                scale=scale,
                enable_gqa=True,
            ).transpose(0, 1)
        return out

    variant = variant_of("t_offset", one_key_too_many)
    failure = check_matches_reference(variant, case, 0)
    assert "sequence 0 of 3 (q_len 16, kv_len 16): not within" in failure
    assert "worst element at [head, query, dim] = [" in failure and "(packed row " in failure
    leak = check_sequence_independence(variant, case, 0)
    assert "sequence 0 (q_len 16, kv_len 16) changed when only the other sequences" in leak


def test_a_split_kv_merge_without_the_max_correction_fails_naming_the_element(variant_of):
    def merged_by_sums(query, key, value, *, mask, scale, num_splits):
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
        outputs, sums = [], []
        for start, end in chunk_bounds(key.shape[2], num_splits):
            scores = torch.matmul(query, key[:, :, start:end].transpose(-2, -1)) * scale
            weights = torch.exp(
                scores - scores.amax(dim=-1, keepdim=True)
            )  # each chunk its own max
            sums.append(weights.sum(dim=-1, keepdim=True))
            outputs.append(torch.matmul(weights, value[:, :, start:end]) / sums[-1])
        total = sum(sums)  # the bug: sums relative to different maxima, never rescaled
        return sum(o * s / total for o, s in zip(outputs, sums))

    failure = check_matches_reference(
        variant_of("t_split", merged_by_sums), parse_case_id(SPLIT), 0
    )
    assert "sequence 0 of 2 (q_len 1, kv_len 32): not within" in failure
    assert "worst element at [head, query, dim] = [" in failure


@pytest.mark.parametrize(
    "name, case_id",
    [
        ("varlen_padded_sdpa", "b3h4kv2s12d8-fp32-causal_br-packed-onelong-cpu"),
        ("sdpa_nested", "b3h4kv2s12d8-fp32-noncausal-packed-uniform-cpu"),
        ("flex_document", "b3h4kv2s12d8-fp32-window4-packed-uniform-dv4-cpu"),
        ("paged_gather", "b3h4kv2q3k20d8-fp32-causal_br-paged4-onelong-cpu"),
        ("paged_flex", "b3h4kv2q3k20d8-fp32-window5-paged4-uniform-dv4-cpu"),
        ("split_kv", SPLIT),
        ("fp8_dequant_sdpa", "b2h4kv2s12d8-bf16-causal-fp8-cpu"),
        ("sdpa", "b3h4kv2s12d8-fp32-causal-padded-uniform-cpu"),
        ("naive", "b2h4kv2s12d12-fp32-causal-dv8-cpu"),
    ],
)
def test_the_layout_built_ins_match_the_per_sequence_reference(name, case_id):
    assert check_matches_reference(registry.get_variant(name), parse_case_id(case_id), 0) is None
