"""Chunked prefill over a paged cache (packed queries, keys behind a block table), split-KV over
pages, torch's PagedAttention and flex's decode template: reference, skips, properties."""

import re
import sys
import typing

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.contract import Form, declared_forms, required_forms
from perfsuite.attention.inputs import make_inputs, sequence_allowed
from perfsuite.attention.layouts import Layout, Storage, output_shape, parse_fragment
from perfsuite.attention.reference_layouts import compare_sequences, lengths_of
from perfsuite.suite.generation import certain_skip
from perfsuite.testing.properties import (
    check_matches_reference,
    check_page_permutation,
    check_sequence_independence,
)
from perfsuite.testing.strategies import chunked_prefill_batches, layout_cases
from perfsuite.variants import get_variant, paged
from perfsuite.variants.paged_prefill import paged_mask_mod
from perfsuite.variants.unsupported import CaseUnsupported

CHUNKED = parse_case_id("b3h4kv2q4k20d8-fp32-causal_br-packedpaged4-uniform-cpu")
PAGED = parse_case_id("b3h4kv2q1k20d8-fp32-causal_br-paged4-uniform-cpu")
PAGED_SPLIT = parse_case_id("b3h4kv2q2k20d8-fp32-causal_br-paged4-onelong-split3-cpu")
FEW = settings(max_examples=8, derandomize=True, deadline=None)


def chunked_prefill(
    query,
    key,
    value,
    *,
    mask,
    scale,
    cu_seqlens_q,
    cu_seqlens_kv,
    max_seqlen_q,
    max_seqlen_kv,
    block_table,
    seq_lens_kv,
):
    """As a serving engineer writes it: per sequence, its pages through the block table, its new
    tokens the last of its context (bottom-right causal)."""
    page_size = key.shape[1]
    out = query.new_empty(query.shape[0], query.shape[1], value.shape[-1])
    for b in range(block_table.shape[0]):
        q0, q1, n = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(seq_lens_kv[b])
        pages = block_table[b, : -(-n // page_size)].long()
        k = key[pages].flatten(0, 1)[:n].transpose(0, 1)
        v = value[pages].flatten(0, 1)[:n].transpose(0, 1)
        rows = torch.arange(q1 - q0).unsqueeze(1) + (n - (q1 - q0))
        allowed = rows >= torch.arange(n).unsqueeze(0)
        out[q0:q1] = torch.nn.functional.scaled_dot_product_attention(
            query[q0:q1].transpose(0, 1), k, v, attn_mask=allowed, scale=scale, enable_gqa=True
        ).transpose(0, 1)
    return out


def test_the_chunked_prefill_layout_packs_queries_of_their_own_lengths_over_pages():
    layout = CHUNKED.layout
    assert layout.fragment == "-packedpaged4-uniform" and parse_fragment(layout.fragment) == layout
    assert CHUNKED.forms == {Form.VARLEN, Form.PAGED}
    q_lens, kv_lens = lengths_of(CHUNKED)
    assert q_lens[0] == 4 and len(set(q_lens)) > 1 and all(q <= k for q, k in zip(q_lens, kv_lens))
    same_contexts = parse_case_id(CHUNKED.id.replace("packedpaged", "paged"))
    assert kv_lens == lengths_of(same_contexts)[1]  # the contexts of the paged layout
    inputs = make_inputs(CHUNKED, 0)
    assert inputs.query.shape == (sum(q_lens), 4, 8) and inputs.key.shape[1:] == (4, 2, 8)
    assert inputs.forms["cu_seqlens_q"].diff().tolist() == list(q_lens)
    assert inputs.forms["seq_lens_kv"].tolist() == list(kv_lens)
    assert output_shape(layout, 3, 4, 4, 8, sum(q_lens)) == (sum(q_lens), 4, 8)
    with pytest.raises(ValueError, match="page_size=None with storage packedpaged"):
        Layout(storage=Storage.PACKED_PAGED)


@pytest.mark.parametrize("name", ["paged_prefill_gather", "paged_prefill_flex"])
def test_chunked_prefill_built_ins_match_the_per_sequence_reference(name):
    cases = [CHUNKED, parse_case_id("b2h2s6d4-fp32-causal-packedpaged2-onelong-dv3-cpu")]
    for case in cases[:1] if name.endswith("flex") else cases:  # eager flex: ~0.5 s per shape
        inputs = make_inputs(case, 1)
        out = get_variant(name).for_case(inputs)(
            inputs.query, inputs.key, inputs.value, **inputs.keywords()
        )
        assert compare_sequences(case, inputs, out, name).failure is None


def test_a_serving_engineers_chunked_prefill_declares_the_form_and_old_functions_are_skipped(
    variant_of,
):
    assert required_forms(chunked_prefill) == declared_forms(chunked_prefill) == CHUNKED.forms
    mine = variant_of("t_chunked", chunked_prefill)
    assert certain_skip(mine, CHUNKED, "forward") is None
    assert check_matches_reference(mine, CHUNKED, 0) is None
    assert "paged_gather does not declare varlen" in certain_skip(
        get_variant("paged_gather"), CHUNKED, "forward"
    )
    assert "varlen_padded_sdpa does not declare paged" in certain_skip(
        get_variant("varlen_padded_sdpa"), CHUNKED, "forward"
    )
    assert "sdpa does not declare" in certain_skip(get_variant("sdpa"), CHUNKED, "forward")
    plain = parse_case_id("b1h2s8d4-fp32-causal-cpu")
    assert certain_skip(get_variant("sdpa"), plain, "forward") is None  # old functions keep working
    assert "t_chunked requires paged, varlen" in certain_skip(mine, plain, "forward")


def test_a_wrong_block_table_lookup_in_chunked_prefill_names_the_sequence_and_element(variant_of):
    def next_sequences_pages(
        query, key, value, *, mask, scale, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q,
        max_seqlen_kv, block_table, seq_lens_kv
    ):  # fmt: skip
        return chunked_prefill(
            query, key, value, mask=mask, scale=scale, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=cu_seqlens_kv, max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
            block_table=block_table.roll(1, 0), seq_lens_kv=seq_lens_kv,
        )  # fmt: skip

    failure = check_matches_reference(variant_of("t_roll", next_sequences_pages), CHUNKED, 0)
    assert re.search(r"sequence 0 of 3 \(q_len 4, kv_len 20\): not within atol=", failure)
    assert re.search(
        r"worst element at \[head, query, dim\] = \[\d, \d, \d\] \(packed row \d\)", failure
    )


@FEW
@given(layout_cases(storages=("packedpaged",)), st.integers(0, 99))
def test_chunked_prefill_holds_the_page_permutation_and_sequence_properties(case, seed):
    variant = get_variant("paged_prefill_gather")
    assert check_matches_reference(variant, case, seed) is None
    assert check_page_permutation(variant, case, seed) is None
    assert check_sequence_independence(variant, case, seed) is None


@FEW
@given(chunked_prefill_batches(), st.sampled_from(("causal_br", "causal", "window2", "noncausal")))
def test_the_paged_mask_sees_what_each_sequence_sees_on_its_own(batch, kind):
    q_lens, kv_lens, page_size, table = batch
    num_pages = int(table.max()) + 2
    q_len_t = torch.tensor(q_lens)
    rows = torch.repeat_interleave(torch.arange(len(q_lens)), q_len_t)
    position = torch.arange(len(rows)) - (q_len_t.cumsum(0) - q_len_t)[rows]
    mod = paged_mask_mod(
        kind, table, torch.tensor(kv_lens), num_pages, page_size, rows, position, q_len_t
    )
    seen = mod(
        0, 0, torch.arange(len(rows)).view(-1, 1), torch.arange(num_pages * page_size).view(1, -1)
    )
    for b, (q, n) in enumerate(zip(q_lens, kv_lens)):
        slots = (
            table[b, : -(-n // page_size)].long().view(-1, 1) * page_size + torch.arange(page_size)
        ).flatten()[:n]
        mine = seen[rows == b]
        assert torch.equal(mine[:, slots], sequence_allowed(kind, q, n))
        assert int(mine.sum()) == int(sequence_allowed(kind, q, n).sum())  # nothing else seen


def test_split_kv_over_pages_matches_the_reference_with_and_without_the_split_form(variant_of):
    variant = get_variant("paged_split_kv")
    assert variant.requires == {Form.PAGED} and Form.SPLIT_KV in variant.forms
    for case in (PAGED, PAGED_SPLIT):
        assert certain_skip(variant, case, "forward") is None
        assert check_matches_reference(variant, case, 0) is None
    assert "paged_gather does not declare split_kv" in certain_skip(
        get_variant("paged_gather"), PAGED_SPLIT, "forward"
    )

    def users_split(query, key, value, *, mask, scale, block_table, seq_lens_kv, num_splits):
        return paged.paged_split_kv_attention(
            query, key, value, mask=mask, scale=scale, block_table=block_table,
            seq_lens_kv=seq_lens_kv, num_splits=num_splits,
        )  # fmt: skip

    mine = variant_of("t_split", users_split)
    assert check_matches_reference(mine, PAGED_SPLIT, 0) is None
    assert "t_split requires split_kv" in certain_skip(mine, PAGED, "forward")
    assert paged.page_splits(5, 3) == [(0, 2), (2, 4), (4, 5)] and paged.page_splits(2, 8) == [
        (0, 1),
        (1, 2),
    ]
    with pytest.raises(ValueError, match="num_splits=0; it must be at least 1"):
        paged.page_splits(4, 0)


def test_torch_paged_attention_matches_the_reference_and_its_absence_names_the_torch_version(
    monkeypatch,
):
    """The wiring runs eager here (compiled on the CPU takes seconds; the suite compiles it)."""
    inputs = make_inputs(PAGED, 0)
    out = paged.prepare_torch_paged(inputs, compile=False)(
        inputs.query, inputs.key, inputs.value, **inputs.keywords()
    )
    assert compare_sequences(PAGED, inputs, out, "flex_paged_attention").failure is None
    variant = get_variant("flex_paged_attention")
    assert variant.compiled and not variant.runs_property_tests
    for name in ("paged_attention", "_paged_attention"):
        monkeypatch.setitem(sys.modules, f"torch.nn.attention.experimental.{name}", None)
    with pytest.raises(
        CaseUnsupported, match=rf"torch {re.escape(torch.__version__)} has no .*PagedAttention"
    ):
        variant.for_case(inputs)


def test_flex_decode_template_is_cuda_only_and_names_what_is_missing(monkeypatch):
    assert certain_skip(get_variant("flex_paged_decode"), PAGED, "forward") == (
        "flex_paged_decode runs on cuda only"
    )
    flex = sys.modules["torch.nn.attention.flex_attention"]
    assert paged.flex_decode_missing() is None  # torch 2.13 has BACKEND="TRITON_DECODE"
    assert "ratio of query heads to key/value heads; this case has 40:8 (5)" in (
        paged.flex_decode_refusal(1, 40, 8)
    )
    assert "1 to 127 queries per sequence; this case has 128" in paged.flex_decode_refusal(
        128, 8, 8
    )
    assert paged.flex_decode_refusal(4, 32, 8) is None
    calls = []  # the CUDA path with a fake flex: the decode template is asked for by name
    monkeypatch.setattr(paged, "prepare_torch_paged", lambda i, **kw: calls.append(kw) or len)
    paged.prepare_flex_paged_decode(make_inputs(PAGED, 0))
    assert calls == [{"kernel_options": {"BACKEND": "TRITON_DECODE"}}]
    monkeypatch.setattr(flex, "_Backend", typing.Literal["AUTO", "TRITON"])
    with pytest.raises(CaseUnsupported, match=r"BACKEND takes AUTO, TRITON, not TRITON_DECODE"):
        paged.prepare_flex_paged_decode(make_inputs(PAGED, 0))
    monkeypatch.delattr(flex, "_Backend")
    assert paged.flex_decode_missing() == (
        f"torch {torch.__version__}'s flex_attention has no kernel_options BACKEND: its decode "
        "template (flex_decoding) is chosen by heuristics only"
    )


def test_flex_decode_refusal_holds_every_condition_of_torchs_rule():
    """torch's ``_use_flex_decoding`` also refuses an empty query and a block mask whose head count
    is neither 1 nor (without grouped heads) the query heads; the old rule let both through to an
    error inside Inductor."""
    assert "this case has 0" in paged.flex_decode_refusal(0, 8, 8)
    assert "block mask with 1 head(s) here; this one has 8" in paged.flex_decode_refusal(
        4, 32, 8, block_mask_heads=8
    )
    assert "with 1 or 8 head(s)" in paged.flex_decode_refusal(4, 8, 8, block_mask_heads=2)
    assert paged.flex_decode_refusal(4, 8, 8, block_mask_heads=8) is None


def test_torchs_refusal_of_the_decode_template_is_a_skip_naming_it():
    """The message matched is the one the installed torch raises (read from its source), so a
    torch that rewords it fails here, not on the GPU."""
    import inspect

    from torch._inductor.kernel.flex import flex_attention as lowering

    assert paged.FLEX_DECODE_REFUSED in inspect.getsource(lowering)

    def refused(*_args, **_kwargs):
        try:
            raise RuntimeError(
                "BACKEND='TRITON_DECODE' was specified but " + paged.FLEX_DECODE_REFUSED + "."
            )
        except RuntimeError as inner:  # as Dynamo wraps it: the cause inside another error
            raise ValueError("backend='inductor' raised") from inner

    with pytest.raises(CaseUnsupported, match="torch refused flex's decode template"):
        paged.skip_flex_decode_refusal(refused)()
    with pytest.raises(ZeroDivisionError):
        paged.skip_flex_decode_refusal(lambda: 1 / 0)()
