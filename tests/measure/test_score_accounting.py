"""Score accounting names what it counts: written, of which copies, casts, mask expansions."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import make_inputs
from perfsuite.measure.evidence import bind
from perfsuite.measure.profiling import record_trace
from perfsuite.measure.score_accounting import (
    account_ops,
    account_windows,
    output_dims,
    score_fraction,
)
from perfsuite.trace.summary import summarize_windows
from perfsuite.variants import Variant, get_variant

SCORE = (2, 4, 64, 64)
HEAD_DIM = 32


def op(name, ts, dur, dims, types, strides=None, tid=1):
    args = {"Input Dims": dims, "Input type": types}
    if strides is not None:
        args["Input Strides"] = strides
    return {
        "name": name,
        "cat": "cpu_op",
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "tid": tid,
        "pid": 1,
        "args": args,
    }


def contiguous_strides(dims):
    strides, step = [], 1
    for size in reversed(dims):
        strides.insert(0, step)
        step *= size
    return strides


S = list(SCORE)
COPY = op(
    "aten::copy_",
    2,
    2,
    [S, S, []],
    ["float", "float", "Scalar"],
    [contiguous_strides(S)] * 2 + [[]],
)


def test_out_of_place_masked_fill_counts_one_copy_and_one_in_place_write():
    ops = [
        op("aten::masked_fill", 0, 10, [S, [1, 1, 64, 64], []], ["float", "bool", "Scalar"]),
        op("aten::clone", 1, 4, [S, []], ["float", "Scalar"]),
        COPY,
        op("aten::masked_fill_", 6, 3, [S, [1, 1, 64, 64], []], ["float", "bool", "Scalar"]),
    ]
    found = account_ops(ops, SCORE, HEAD_DIM)
    assert (found.written, found.copies, found.casts, found.mask_expansions) == (2, 1, 0, 0)
    assert found.writes[0].path == ("aten::masked_fill", "aten::clone", "aten::copy_")
    assert found.describe() == "2 written (1 copy, 0 casts, 0 mask expansions)"


def test_a_copy_between_dtypes_is_a_cast_and_a_copy_from_a_broadcast_or_bool_source_a_mask_expansion():
    cast = op("aten::copy_", 0, 1, [S, S, []], ["c10::BFloat16", "float", "Scalar"])
    from_bool = op("aten::copy_", 2, 1, [S, S, []], ["bool", "bool", "Scalar"])
    # nan_to_num's backward turns its isfinite mask into floats: a mask, though the dtypes differ
    bool_to_float = op("aten::copy_", 6, 1, [S, S, []], ["float", "bool", "Scalar"])
    broadcast = op(
        "aten::copy_",
        4,
        1,
        [S, S, []],
        ["float", "float", "Scalar"],
        [contiguous_strides(S), [64, 0, 0, 1], []],
    )
    found = account_ops([cast, from_bool, bool_to_float, broadcast], SCORE, HEAD_DIM)
    assert found.by_kind() == {"copy": 0, "cast": 1, "mask expansion": 3, "computed": 0}


def test_an_autograd_node_record_is_not_a_write_its_aten_ops_are():
    """A backward step's ``ViewBackward0`` (a view: no ATen writer inside) writes nothing, and
    ``MaskedFillBackward0`` counts once, as the ``copy_`` and ``masked_fill_`` it calls."""
    ops = [
        op("ViewBackward0", 0, 2, [[8, 64, 64]], ["float"]),
        op("aten::view", 1, 1, [S, []], ["float", "ScalarList"]),
        op("MaskedFillBackward0", 4, 20, [S], ["float"]),
        op("aten::masked_fill", 5, 18, [S, [1, 1, 64, 64], []], ["float", "bool", "Scalar"]),
        op("aten::clone", 6, 5, [S, []], ["float", "Scalar"]),
        dict(COPY, ts=7, dur=3),
        op("aten::masked_fill_", 12, 3, [S, [1, 1, 64, 64], []], ["float", "bool", "Scalar"]),
    ]
    found = account_ops(ops, SCORE, HEAD_DIM)
    assert [w.op for w in found.writes] == ["aten::copy_", "aten::masked_fill_"]
    assert (found.written, found.copies) == (2, 1)


def test_views_reductions_and_fused_attention_write_no_scores_and_a_scalar_wrapper_hides_nothing():
    ops = [
        op("aten::expand", 0, 1, [[1, 1, 64, 64], [], []], ["bool", "ScalarList", "Scalar"]),
        op("aten::amax", 2, 1, [S, [], []], ["float", "ScalarList", "Scalar"]),
        op(
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            4,
            1,
            [[2, 4, 64, 32]] * 3,
            ["float"] * 3,
        ),
        op("aten::mul", 10, 10, [S, []], ["float", "double"]),
        op("aten::to", 11, 2, [[], [], []], ["double", "Scalar", "Scalar"]),
        op("aten::copy_", 11.5, 1, [[], [], []], ["float", "double", "Scalar"]),
    ]
    found = account_ops(ops, SCORE, HEAD_DIM)
    assert [(w.op, w.kind) for w in found.writes] == [("aten::mul", "computed")]


def test_output_dims_follow_in_place_matmul_and_broadcast_rules():
    assert output_dims(op("aten::bmm", 0, 1, [[8, 64, 32], [8, 32, 64]], ["float", "float"])) == (
        8,
        64,
        64,
    )
    assert output_dims(op("aten::add", 0, 1, [S, [1, 1, 64, 64]], ["float", "float"])) == SCORE
    assert output_dims(op("aten::add_", 0, 1, [[1, 4, 64, 64], S], ["float", "float"])) == (
        1,
        4,
        64,
        64,
    )


def test_chunks_count_their_fraction_and_outputs_or_transposed_keys_do_not():
    assert score_fraction((8, 64, 64), SCORE, HEAD_DIM) == 1.0
    assert score_fraction((2, 4, 16, 64), SCORE, HEAD_DIM) == 0.25  # a query chunk
    assert score_fraction((2, 4, 64, 16), SCORE, HEAD_DIM) == 0.25  # a key chunk
    assert score_fraction((2, 4, 64, 32), SCORE, HEAD_DIM) == 0.0  # the output [B, H, Sq, D]
    assert score_fraction((2, 4, 32, 64), SCORE, HEAD_DIM) == 0.0  # a transposed key [B, H, D, Skv]
    assert score_fraction((2, 4, 64, 1), SCORE, HEAD_DIM) == 0.0  # a row statistic


def test_pieces_of_a_chunked_copy_sum_to_one_matrix():
    chunks = [
        op("aten::copy_", 10 * i, 1, [[2, 4, 16, 64]] * 2 + [[]], ["float", "float", "Scalar"])
        for i in range(4)
    ]
    assert account_ops(chunks, SCORE, HEAD_DIM).copies == 1.0


def test_an_unknown_kind_is_a_value_error_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="'copies'.*allowed: copy, cast, mask expansion, computed"):
        account_ops([], SCORE, HEAD_DIM).total("copies")


# Profiled variants: each "Why" example, old figure (copies of the score's exact shape) against the new one.


def chunked_masked_fill(query, key, value, *, mask, scale, chunk=16):
    """Naive attention over query chunks: each chunk's out-of-place masked_fill copies a piece of the scores."""
    outputs = []
    for start in range(0, query.shape[2], chunk):
        scores = torch.matmul(query[:, :, start : start + chunk], key.transpose(-2, -1)) * scale
        scores = scores.masked_fill(mask.masked_out[..., start : start + chunk, :], float("-inf"))
        outputs.append(torch.matmul(torch.softmax(scores, dim=-1), value))
    return torch.cat(outputs, dim=2)


def softmax_in_fp32(query, key, value, *, mask, scale):
    """A bf16 model's attention with an fp32 softmax: two score-sized casts."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    scores.masked_fill_(mask.masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores.float(), dim=-1).to(query.dtype), value)


def expanded_mask(query, key, value, *, mask, scale):
    """Materialises the mask per head (decode), then masks in place: a mask expansion, not a score copy."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    per_head = mask.masked_out.expand(scores.shape).contiguous()
    scores.masked_fill_(per_head, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), value)


def profiled(fn, case, tmp_path):
    variant = (
        fn
        if isinstance(fn, Variant)
        else Variant(name=fn.__name__, fn=fn, description="test-only variant")
    )
    forward = bind(variant, make_inputs(case, 0))
    forward()
    trace = record_trace(forward, case.device, tmp_path / "trace.json.gz")
    steps = summarize_windows(trace, "perfsuite::forward")
    old = [s.copies_of_shape(case.score_shape, "cpu") for s in steps]
    return old, account_windows(trace, "perfsuite::forward", case.score_shape, case.head_dim)


LONG = AttentionCase(1, 2, 64, 64, 8, "fp32", "cpu", "causal")


@pytest.mark.slow
def test_a_chunked_variant_copies_one_matrix_in_pieces_on_long_sequences(tmp_path):
    old, new = profiled(chunked_masked_fill, LONG, tmp_path)
    assert old == [0, 0]  # the old figure missed every piece
    assert [a.copies for a in new] == [1.0, 1.0] and [a.written for a in new] == [5.0, 5.0]


@pytest.mark.slow
def test_a_chunk_as_long_as_the_sequence_counts_the_same_one_matrix(tmp_path):
    short = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    old, new = profiled(chunked_masked_fill, short, tmp_path)
    assert old == [1, 1] and [a.copies for a in new] == [1.0, 1.0]


@pytest.mark.slow
def test_an_out_of_place_additive_mask_is_a_score_sized_write(tmp_path):
    additive = AttentionCase(1, 2, 32, 32, 8, "fp32", "cpu", "additive")
    old, new = profiled(get_variant("naive"), additive, tmp_path)
    assert old == [0, 0]
    assert new[0].copies == 0 and new[0].written == 4  # bmm, mul, add, softmax
    assert any(w.op == "aten::add" and w.kind == "computed" for w in new[0].writes)


@pytest.mark.slow
def test_an_fp32_softmax_in_a_bf16_model_counts_two_casts(tmp_path):
    case = AttentionCase(1, 2, 32, 32, 8, "bf16", "cpu", "causal")
    old, new = profiled(softmax_in_fp32, case, tmp_path)
    assert old == [0, 0]  # dtype conversions were excluded
    assert [(a.casts, a.copies) for a in new] == [(2.0, 0.0), (2.0, 0.0)]


@pytest.mark.slow
def test_a_per_head_mask_expansion_in_decode_is_labelled_and_not_a_score_copy(tmp_path):
    decode = AttentionCase(2, 4, 1, 48, 8, "fp32", "cpu", "padding")
    old, new = profiled(expanded_mask, decode, tmp_path)
    assert old == [1, 1]  # the old figure blamed the scores
    assert [(a.mask_expansions, a.copies) for a in new] == [(1.0, 0.0), (1.0, 0.0)]


@pytest.mark.slow
@pytest.mark.parametrize("name, copies", [("naive", 1.0), ("naive_inplace", 0.0), ("sdpa", 0.0)])
def test_the_posts_findings_restated_naive_one_copy_in_place_and_sdpa_none(name, copies, tmp_path):
    _, new = profiled(get_variant(name), LONG, tmp_path)
    assert [a.copies for a in new] == [copies, copies]
    if name == "sdpa":
        assert new[0].written == 0  # the fused CPU kernel writes no score matrix


@pytest.mark.slow
@pytest.mark.parametrize(
    "mods, added, gone",
    [
        ("alibi", ["aten::mul", "aten::add"], []),  # the bias materialized, then added
        ("softcap2", ["aten::div", "aten::tanh", "aten::mul"], []),
        ("sinks", ["aten::sub", "aten::exp", "aten::div"], ["aten::_softmax"]),
    ],
)
def test_naive_mods_shows_the_score_sized_writes_each_modification_adds(
    mods, added, gone, tmp_path
):
    from collections import Counter

    from perfsuite.attention.score_mods import parse_score_mods

    plain = AttentionCase(1, 2, 32, 32, 8, "fp32", "cpu", "causal")
    modified = AttentionCase(
        1, 2, 32, 32, 8, "fp32", "cpu", "causal", score_mods=parse_score_mods(mods)
    )
    _, base = profiled(get_variant("naive"), plain, tmp_path)
    _, new = profiled(get_variant("naive_mods"), modified, tmp_path)
    full = lambda a: Counter(w.op for w in a.writes if w.kind == "computed")
    difference = full(new[0]) - full(base[0])
    assert all(difference[op] >= 1 for op in added), difference
    assert all(op not in full(new[0]) for op in gone)
    assert new[0].written >= base[0].written + len(added) - len(gone)


def test_an_integer_tensor_of_score_size_is_no_score_write():
    """Before: a paged decode's int32 -> int64 cast of its ``[4x16]`` block table was listed as a
    ``score write cast`` and a ``clamp`` on it as a ``score write computed`` (a query chunk of
    ``[.., 4, 16]`` scores)."""
    score = (2, 4, 4, 16)
    table = [4, 16]
    ops = [
        op(
            "aten::copy_",
            0,
            2,
            [table, table, []],
            ["long int", "int", "Scalar"],
            [[16, 1], [16, 1], []],
        ),
        op("aten::clamp", 3, 2, [table, [], []], ["long int", "Scalar", "Scalar"]),
        op("aten::mul", 6, 2, [[2, 4, 4, 16], []], ["float", "Scalar"]),
        op("aten::bitwise_or_", 9, 2, [table, table], ["bool", "bool"]),  # a mask built with |=
    ]
    accounting = account_ops(ops, score, 8)
    assert [w.op for w in accounting.writes] == ["aten::mul"], accounting.writes
