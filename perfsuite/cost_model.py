"""Work and traffic of one attention forward: FLOP and bytes.

FLOP: the two matmuls ``Q K^T`` and ``P V`` each cost ``2 * head_dim`` FLOP per
(query, key) pair, so a forward costs ``4 * batch * num_heads * pairs * head_dim``,
where ``pairs`` counts the (query, key) pairs that are not masked out. This is the
count of FlashAttention's benchmarks (``benchmarks/benchmark_flash_attention.py``:
``4 * batch * seqlen**2 * nheads * headdim``, halved for causal) and of
``torch.utils.flop_counter`` for SDPA without a mask; for causal we count the exact
unmasked pairs of a top-left causal mask instead of halving. Softmax and scaling
(O(pairs) FLOP, not ``O(pairs * head_dim)``) are left out, as both sources do.

Bytes: the minimum a fused kernel must move: read query, key and value once and write
the output once, ``element_size * batch * num_heads * head_dim * (2*seq_len_q + 2*seq_len_kv)``.
Unfused variants move far more (the score matrix, several times); GB/s against this
minimum shows how close a variant comes to the ideal.
"""

from __future__ import annotations

from perfsuite.cases import AttentionCase


def attended_pairs(seq_len_q: int, seq_len_kv: int, causal: bool) -> int:
    """(query, key) pairs that take part in softmax; causal is top-left aligned (key j <= query i)."""
    if not causal:
        return seq_len_q * seq_len_kv
    return sum(min(i + 1, seq_len_kv) for i in range(seq_len_q))


def forward_flop(case: AttentionCase) -> int:
    """FLOP of one forward of ``case`` (see module docstring for the formula and source)."""
    pairs = attended_pairs(case.seq_len_q, case.seq_len_kv, case.causal)
    return 4 * case.batch * case.num_heads * pairs * case.head_dim


def forward_bytes(case: AttentionCase) -> tuple[int, int]:
    """``(bytes_read, bytes_written)``: query+key+value read once, output written once."""
    per_row = case.batch * case.num_heads * case.head_dim * case.element_size_bytes
    read = per_row * (case.seq_len_q + 2 * case.seq_len_kv)
    written = per_row * case.seq_len_q
    return read, written
