"""Hypothesis over layouts: packing and paging keep every sequence; the layout properties hold for
the built-ins ("a sequence's output does not depend on the others", "moving pages with the block
table changes nothing") and the per-sequence reference agrees with the dense one."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.attention.layouts import Storage, cu_seqlens, gather_pages, pack, paginate, unpack
from perfsuite.testing.properties import (
    check_matches_reference,
    check_page_permutation,
    check_sequence_independence,
)
from perfsuite.testing.strategies import block_tables, layout_cases, page_layouts
from perfsuite.variants import get_variant

FEW = settings(max_examples=12, derandomize=True, deadline=None)
BUILT_IN = {
    Storage.PADDED: "sdpa",
    Storage.PACKED: "varlen_padded_sdpa",
    Storage.PAGED: "paged_gather",
}


@FEW
@given(page_layouts())
def test_packing_and_paging_give_back_every_sequence(layout):
    lengths, page_size, seed = layout
    dense = torch.randn(len(lengths), 2, max(lengths), 3)
    restored = unpack(pack(dense, lengths), cu_seqlens(lengths), max(lengths))
    cache, table = paginate(dense, lengths, page_size, torch.Generator().manual_seed(seed))
    for b, n in enumerate(lengths):
        assert torch.equal(restored[b, :, :n], dense[b, :, :n])
        assert torch.equal(gather_pages(cache, table, b, n), dense[b, :, :n])


@FEW
@given(block_tables())
def test_a_drawn_block_table_names_each_page_once(drawn):
    lengths, page_size, table = drawn
    used = [int(p) for b, n in enumerate(lengths) for p in table[b, : -(-n // page_size)]]
    assert len(used) == len(set(used))


@FEW
@given(layout_cases(), st.integers(0, 99))
def test_layout_built_ins_hold_the_layout_properties(case, seed):
    variant = get_variant(BUILT_IN[case.layout.storage])
    assert check_matches_reference(variant, case, seed) is None
    assert check_sequence_independence(variant, case, seed) is None
    if case.layout.storage == Storage.PAGED:
        assert check_page_permutation(variant, case, seed) is None
