"""A paged-decode function that starts gathering its KV cache into a dense layout every step
(``cache[block_table]``, ``torch.cat`` of pages) fails ``perfsuite ab --fail-on-structure``, each
gather and copy named with its shape and bytes."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

CASE = "b2h4kv2q1k12d8-fp32-causal_br-paged4-uniform-cpu"
HEAD = '''import torch
import torch.nn.functional as F


def paged_decode(query, key, value, *, mask, scale, block_table, seq_lens_kv):
    """Decode over a paged cache: each sequence's pages gathered into a dense cache, then SDPA."""
    q_len = query.shape[2]
    pages = block_table.long()
    k = key[pages].flatten(1, 2).transpose(1, 2).contiguous()  # index, then a dense copy
    v = torch.stack([torch.cat([value[p] for p in row]) for row in pages.tolist()]).transpose(1, 2)
    last = (seq_lens_kv.long() - q_len).view(-1, 1, 1) + torch.arange(q_len).view(1, -1, 1)
    allowed = (torch.arange(k.shape[2]).view(1, 1, -1) <= last).unsqueeze(1)
    return F.scaled_dot_product_attention(query, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)
'''
BASE = '''import torch
import torch.nn.functional as F


def paged_decode(query, key, value, *, mask, scale, block_table, seq_lens_kv):
    """Decode (one query) over a paged cache read in place: every slot of the pool is a key, and
    the block table goes into the mask (a slot of a page the sequence does not own is hidden)."""
    num_pages, page_size = key.shape[0], key.shape[1]
    pool = num_pages * page_size
    slot_page = torch.arange(pool) // page_size
    owned = block_table.long().unsqueeze(-1) == slot_page  # [batch, table, pool]
    first = torch.arange(block_table.shape[1]).view(1, -1, 1) * page_size
    position = (owned * first).sum(1) + torch.arange(pool) % page_size  # in its sequence
    allowed = owned.any(1) & (position < seq_lens_kv.long().view(-1, 1))
    k, v = (x.view(1, pool, *x.shape[2:]).transpose(1, 2) for x in (key, value))
    k, v = (x.expand(query.shape[0], -1, -1, -1) for x in (k, v))
    return F.scaled_dot_product_attention(
        query, k, v, attn_mask=allowed[:, None, None, :], scale=scale, enable_gqa=True
    )
'''


def test_a_dense_copy_of_the_cache_added_to_a_paged_function_fails_the_structure_gate(tmp_path):
    assert BASE != HEAD
    for side, text in (("base", BASE), ("head", HEAD)):
        (tmp_path / side).mkdir()
        (tmp_path / side / "mypaged.py").write_text(text)
    (tmp_path / "head" / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nperfsuite_history = "off"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "perfsuite", "ab", "--base-tree", str(tmp_path / "base")]
        + ["--head-tree", str(tmp_path / "head"), "--variant", "mypaged:paged_decode"]
        + ["--variants", "paged_decode", "--cases", CASE, "--modes", "forward"]
        + ["--blocks", "2", "--rounds", "1", "--budget-s", "1", "--workers-per-side", "1"]
        + ["--fail-on-structure"],
        cwd=tmp_path / "head",
        env={
            **__import__("os").environ,
            "PYTHONPATH": str(tmp_path / "head"),
            "OMP_NUM_THREADS": "1",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "structure adds work:" in output
    # cache[block_table]: [B, pages, page, Hkv, D] float32, the key's dense copy of it, and the
    # value's pages concatenated per sequence and stacked: each a gather with its bytes
    assert "+1 gather cpu aten::index [2x3x4x2x8] (+1.5 KiB per step)" in output, output
    assert "+2 gather cpu aten::cat [12x2x8] (+1.5 KiB per step)" in output, output
    assert "+1 gather cpu aten::stack [2x12x2x8] (+1.5 KiB per step)" in output, output
    assert "+1 copy cpu aten::clone [2x2x12x8] (+1.5 KiB per step)" in output, output
