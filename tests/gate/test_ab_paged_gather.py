"""A paged-decode function that starts copying its KV cache into a dense layout every step fails
``perfsuite ab --fail-on-structure``, the copy named with its shape and bytes."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

CASE = "b2h4kv2q1k12d8-fp32-causal_br-paged4-uniform-cpu"
HEAD = '''import torch
import torch.nn.functional as F


def paged_decode(query, key, value, *, mask, scale, block_table, seq_lens_kv):
    """Decode over a paged cache: each sequence's pages looked up, then SDPA with its lengths."""
    q_len = query.shape[2]
    pages = block_table.long()
    k = key[pages].flatten(1, 2).transpose(1, 2).contiguous()  # gathered into a dense cache
    v = value[pages].flatten(1, 2).transpose(1, 2).contiguous()
    last = (seq_lens_kv.long() - q_len).view(-1, 1, 1) + torch.arange(q_len).view(1, -1, 1)
    allowed = (torch.arange(k.shape[2]).view(1, 1, -1) <= last).unsqueeze(1)
    return F.scaled_dot_product_attention(query, k, v, attn_mask=allowed, scale=scale, enable_gqa=True)
'''
BASE = HEAD.replace(
    ".contiguous()  # gathered into a dense cache", "  # strided views of the pages"
).replace(
    "v = value[pages].flatten(1, 2).transpose(1, 2).contiguous()",
    "v = value[pages].flatten(1, 2).transpose(1, 2)",
)


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
    assert (
        "+2 copy cpu aten::clone [2x2x12x8] (+3.0 KiB per step)" in output
    )  # [B, Hkv, pages*page, D]
