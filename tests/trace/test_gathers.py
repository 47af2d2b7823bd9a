"""Gathers (cat, stack, index, index_select, gather, take) read as data movement: each with its
result's shape and bytes, on a CPU trace recorded here and on the recorded GPU traces."""

import gzip
import json
from pathlib import Path

import torch

from perfsuite.measure.profiling import profile_steps
from perfsuite.trace.events import gather_output_shape
from perfsuite.trace.structure import (
    added_lines,
    added_work,
    adds_work,
    diff_fingerprints,
    fingerprint,
)
from perfsuite.trace.summary import TraceIndex, _bytes_of_shape, load_trace

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
CACHE = torch.randn(6, 4, 2, 8)  # [num_pages, page_size, kv_heads, head_dim]
TABLE = torch.tensor([[3, 1], [0, 5]], dtype=torch.int32)  # [batch, pages per sequence]
X = torch.randn(4, 8)
INDEX = torch.tensor([[0, 7, 2], [1, 1, 0], [5, 3, 3], [6, 0, 4]])


def every_gather():
    """What a serving engineer writes to make a paged cache dense, and the other ATen gathers."""
    return {
        "aten::index": CACHE[TABLE].reshape(2, 8, 2, 8),  # int32 table: its cast is a copy_
        "aten::cat": torch.cat([CACHE[p] for p in (3, 1)]),
        "aten::stack": torch.stack([CACHE[0], CACHE[5]], dim=1),
        "aten::index_select": CACHE.index_select(0, TABLE.flatten().long()),
        "aten::gather": torch.gather(X, 1, INDEX),
        "aten::take": torch.take(X, INDEX[0]),
    }


def test_each_gather_is_named_with_the_shape_and_bytes_it_wrote(tmp_path):
    expected = every_gather()
    step = profile_steps(every_gather, "cpu", tmp_path / "gathers.json.gz")[0]
    found = {g.kind: g for g in step.gathers}
    assert sorted(found) == sorted(expected) and len(step.gathers) == len(expected)
    for op, out in expected.items():
        shape = out.shape if op != "aten::index" else (2, 2, 4, 2, 8)  # before the reshape
        assert found[op].lane == "cpu" and found[op].shape == tuple(shape), op
        assert found[op].size_bytes == out.numel() * out.element_size(), op
    # stack's inner cat is not counted again; the copies keep their meaning (the table's cast)
    assert step.cpu_ops["aten::cat"] == 2
    assert [(c.kind, c.shape, c.dtype_conversion) for c in step.copies] == [
        ("aten::copy_", (2, 2), True),
        ("aten::copy_", (4,), True),  # TABLE.flatten().long()
    ]


def test_a_gather_added_to_a_step_is_added_work_with_its_bytes(tmp_path):
    query = torch.randn(2, 1, 2, 8)
    in_place = lambda: query @ CACHE[3].transpose(-2, -1)  # a page read where it is
    dense = lambda: query @ CACHE[TABLE.long()].flatten(1, 2).transpose(-2, -1)
    base, head = (
        fingerprint(profile_steps(f, "cpu", tmp_path / f"{n}.json.gz")[0], "cpu")
        for n, f in (("base", in_place), ("head", dense))
    )
    lines = diff_fingerprints(base, head)
    assert "+1 gather cpu aten::index [2x2x4x2x8] (+1.0 KiB per step)" in lines, lines
    assert adds_work(base, head) and not adds_work(head, base)
    # a fingerprint recorded before gathers were read compares without them
    old = {k: v for k, v in head.items() if k not in ("gathers", "gather_bytes")}
    assert not any("gather" in line for line in diff_fingerprints(base, old))


def test_rules_read_records_without_memory_or_with_negative_dims():
    cat = {
        "name": "aten::cat",
        "args": {"Input Dims": [[[2, 3], [2, 5], [0]], []], "Concrete Inputs": ["", "-1"]},
    }
    assert gather_output_shape(cat) == (2, 8)  # legacy empty input skipped
    stack = {"name": "aten::stack", "args": {"Input Dims": [[[2, 3], [2, 3]], []]}}
    assert gather_output_shape(stack) == (2, 2, 3)  # no Concrete Inputs: dim 0
    index = {"name": "aten::index", "args": {"Input Dims": [[6, 4], []]}}
    assert gather_output_shape(index) is None  # its index dims are not recorded
    # cat/stack record no dtype: their bytes come from the allocation, which CUDA rounds to 512
    assert _bytes_of_shape(192, 768) == 768  # [12x2x8] float32 on the CPU
    assert _bytes_of_shape(192, 1024) == 768  # the same, a CUDA block (bf16 would be 384 -> 512)
    assert _bytes_of_shape(64, 512) == 512  # 8 bytes exactly, or smaller ones rounded: as allocated


def test_recorded_gpu_gathers_come_with_the_shape_of_the_op_that_launched_them():
    name = "a100_train_step_rank0.json.gz"
    with gzip.open(TRACES / name, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    index = TraceIndex(load_trace(TRACES / name))
    whole = index.summarize(index.whole_trace())
    device = [g for g in whole.gathers if g.lane == "device"]
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    scatters = [n for n in kernels if "index_put_kernel_impl" in n or "internal_kernel<true" in n]
    assert scatters and not any(g.name in scatters for g in device)  # index_put, scatter_
    selects = [g for g in device if "indexSelectLargeIndex" in g.name]
    gathers = [g for g in device if "internal_kernel<false" in g.name]
    assert len(selects) == 4 and len(gathers) == 2
    for g in selects + gathers:
        assert g.shape and g.size_bytes, g
    # torch.gather's result has its index's dims (computed here from the op records)
    index_dims = [
        tuple(e["args"]["Input Dims"][2])
        for e in events
        if e.get("cat") == "cpu_op" and e["name"] == "aten::gather"
    ]
    assert sorted(g.shape for g in gathers) == sorted(index_dims)


def test_a_wider_gather_in_place_of_one_is_more_work_by_its_bytes():
    """As many gathers, more bytes (the whole pool where the base gathered a sequence's pages)."""
    base = {"gathers": {"cpu aten::index [2x4]": 1}, "gather_bytes": {"cpu aten::index [2x4]": 32}}
    head = {"gathers": {"cpu aten::index [8x4]": 1}, "gather_bytes": {"cpu aten::index [8x4]": 128}}
    assert added_work(base, head) == ["+96 B gathered"] and not added_work(head, base)
    lines = diff_fingerprints(base, head)
    assert lines == [
        "-1 gather cpu aten::index [2x4] (-32 B per step)",
        "+1 gather cpu aten::index [8x4] (+128 B per step)",
        "gathered +96 B per step",
    ]
    assert added_lines(lines) == lines[1:]


def test_gathers_replaced_by_others_of_the_same_bytes_are_one_net_line_and_no_work():
    """Before: ``+2 gather ... (+8.0 MiB per step)`` in the FAIL line and ``-32 gather ... (-8.0 MiB
    per step)`` hidden, and the gate failed on "work added" for equal bytes gathered."""
    page, whole = "cpu aten::index [1x16x4x2x256]", "cpu aten::index [16x64x2x256]"
    base = {
        "gathers": {page: 32},
        "gather_bytes": {page: 8 * 2**20},
        "copies": {},
        "copy_bytes": {},
    }
    head = {
        "gathers": {whole: 2},
        "gather_bytes": {whole: 8 * 2**20},
        "copies": {},
        "copy_bytes": {},
    }
    lines = diff_fingerprints(base, head)
    assert lines == [
        f"gather 8.0 MiB -> 8.0 MiB, 32 -> 2 calls ({whole}: 0 -> 2; {page}: 32 -> 0)"
    ], lines
    assert not added_lines(lines) and not adds_work(base, head) and not adds_work(head, base)
    more = {**head, "gather_bytes": {whole: 9 * 2**20}}  # more bytes: work added, lines as before
    assert adds_work(base, more) and "gathered +1.0 MiB per step" in diff_fingerprints(base, more)
