"""Layout cases: ids that parse back, lengths a case id fixes, and the packed/paged builders."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase, parse_case_id
from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.layouts import (
    Layout,
    cu_seqlens,
    gather_pages,
    pack,
    paginate,
    parse_fragment,
    sequence_lengths,
    unpack,
)

IDS = [
    "b4h8kv2q1k64d16-fp32-causal_br-paged16-uniform-cpu",
    "b3h4s12d8-fp32-causal-packed-onelong-dv4-cpu",
    "b3h4s12d8-fp32-noncausal-padded-equal-cpu",
    "b2h4kv2q1k32d8-fp32-causal_br-split4-cpu",
    "b2h4kv2s12d8-bf16-causal-fp8-cpu",
    "b1h2s16d8-fp32-causal-cpu",
]


@pytest.mark.parametrize("case_id", IDS)
def test_a_layout_case_id_parses_back_to_the_case(case_id):
    assert parse_case_id(case_id).id == case_id


def test_each_layout_carries_the_forms_a_function_must_declare():
    assert parse_fragment("-paged16-uniform-split2").forms == {Form.PAGED, Form.SPLIT_KV}
    assert parse_fragment("-packed-equal-dv8").forms == {Form.VARLEN, Form.VALUE_HEAD_DIM}
    assert parse_fragment("-padded-uniform").forms == frozenset()  # a padding mask, no form
    assert parse_fragment("").is_plain


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Layout(storage="paged"), "paged storage needs one"),
        (lambda: Layout(lengths="uniform"), "dense sequences all have the case's length"),
        (lambda: Layout(storage="ragged"), "storage 'ragged' is unknown; allowed: dense"),
        (
            lambda: AttentionCase(
                2, 2, 4, 4, 8, "fp32", "cpu", "bool", layout=Layout(num_splits=2)
            ),
            "layout cases take noncausal, causal, causal_br, window<W>",
        ),
        (
            lambda: AttentionCase(
                2, 2, 8, 4, 8, "fp32", "cpu", "causal", layout=Layout(num_splits=2)
            ),
            "seq_len_q=8 > seq_len_kv=4",
        ),
        (
            lambda: AttentionCase(2, 2, 4, 4, 8, "fp32", "cpu", "causal", layout=Layout(fp8=True)),
            "an fp8 case's dtype is bf16",
        ),
    ],
)
def test_an_impossible_layout_is_refused_naming_what_is_wrong(build, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_lengths_are_fixed_by_the_case_and_the_first_sequence_is_the_longest():
    uniform = sequence_lengths(parse_fragment("-packed-uniform"), 6, 32, 32)
    assert uniform == sequence_lengths(parse_fragment("-packed-uniform"), 6, 32, 32)
    assert uniform[0] == uniform[1] and uniform[1][0] == 32 and min(uniform[1]) >= 1
    one_long = sequence_lengths(parse_fragment("-packed-onelong"), 6, 32, 32)[1]
    assert one_long[0] == 32 and max(one_long[1:]) <= 4
    q, kv = sequence_lengths(parse_fragment("-paged8-uniform"), 6, 3, 40)
    assert q == (3,) * 6 and min(kv) >= 3  # decode/chunked prefill: every sequence has its chunk


def test_pack_and_paginate_keep_every_sequence_and_scatter_its_pages():
    dense = torch.randn(3, 2, 10, 4)
    lengths = [10, 3, 7]
    packed = pack(dense, lengths)
    assert packed.shape == (20, 2, 4)
    restored = unpack(packed, cu_seqlens(lengths), 10)
    for b, n in enumerate(lengths):
        assert torch.equal(restored[b, :, :n], dense[b, :, :n])
    cache, table = paginate(dense, lengths, 4, torch.Generator().manual_seed(0))
    assert cache.shape == (3 + 1 + 2 + 1, 4, 2, 4) and table.dtype == torch.int32
    for b, n in enumerate(lengths):
        assert torch.equal(gather_pages(cache, table, b, n), dense[b, :, :n])
    first = table[0, :3].tolist()
    assert first != list(range(first[0], first[0] + 3))  # not contiguous (seeded order)


def test_make_inputs_builds_each_storage_with_its_keywords():
    paged = make_inputs(parse_case_id(IDS[0]), 0)
    assert paged.key.shape[1:] == (16, 2, 16) and set(paged.forms) == {"block_table", "seq_lens_kv"}
    packed = make_inputs(parse_case_id(IDS[1]), 0)
    assert packed.value.shape[-1] == 4 and packed.forms["max_seqlen_q"] == 12
    assert packed.forms["cu_seqlens_q"].dtype == torch.int32
    fp8 = make_inputs(parse_case_id(IDS[4]), 0)
    assert fp8.query.dtype == torch.float8_e4m3fn and fp8.forms["k_descale"].shape == (2, 2)
