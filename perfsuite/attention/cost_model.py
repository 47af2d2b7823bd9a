"""Work and traffic of one attention forward: FLOP and bytes.

FLOP: the two matmuls ``Q K^T`` and ``P V`` each cost ``2 * head_dim`` FLOP per
(query, key) pair, so a forward costs ``4 * batch * num_heads * pairs * head_dim``,
where ``pairs`` counts the (query, key) pairs that are not masked out. This is the
count of FlashAttention's benchmarks (``benchmarks/benchmark_flash_attention.py``:
``4 * batch * seqlen**2 * nheads * headdim``, halved for causal) and of
``torch.utils.flop_counter`` for SDPA without a mask. For masks with a structure a kernel
can skip (top-left and bottom-right causal, sliding window) we count the exact attended
pairs instead of halving; for masks without one (boolean, padding, additive) every pair
is counted, since fused kernels compute them all. Softmax and scaling
(O(pairs) FLOP, not ``O(pairs * head_dim)``) are left out, as both sources do.

Bytes: the minimum a fused kernel must move: read query, key and value once and write
the output once, ``element_size * batch * num_heads * head_dim * (2*seq_len_q + 2*seq_len_kv)``.
Unfused variants move far more (the score matrix, several times); GB/s against this
minimum shows how close a variant comes to the ideal.

Modes: backward costs 2.5x the forward FLOP and forward+backward 3.5x, the convention of
FlashAttention's ``benchmarks/benchmark_flash_attention.py`` (``flops(..., mode)``) and
tritonbench: five matmuls in backward (``dV = P^T dO``, ``dP = dO V^T``, ``dQ = dS K``,
``dK = dS^T Q``, and ``S = Q K^T`` recomputed by fused kernels) against two in forward.
``torch.utils.flop_counter`` counts 2x for an unfused backward, which keeps ``P`` and recomputes
nothing (``tests/attention/test_modes.py`` checks both counts). Minimum backward bytes: read query,
key, value, output and the output's gradient, write the three input gradients.

Layout cases (``perfsuite.attention.layouts``): pairs, FLOP and bytes are summed over the batch's
sequences on their own lengths (the useful work), with ``2 * (head_dim + head_dim_v)`` FLOP per
pair when the value head dim differs. **Padding**: what a padded batch (``padded`` storage) spends
beyond that by padding every sequence to the longest (``padding_flop``, ``padding_bytes``), shown
beside the useful work in the table; a packed or paged batch holds none. **KV read**: bytes of key and value the
sequences hold (``kv_read_bytes``; FP8 elements are one byte): decode reads each once per step,
so KV GB/s against the measured bandwidth peak says how near a decode kernel comes to the roof
(tritonbench's ``decoding_attention`` reports the same).
"""

from __future__ import annotations

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.layouts import Storage, sequence_lengths
from perfsuite.attention.masks import mask_kind
from perfsuite.attention.modes import Mode


def _pairs(mask: str, seq_len_q: int, seq_len_kv: int) -> int:
    kind = mask_kind(mask)
    return sum(kind.keys_seen(i, seq_len_q, seq_len_kv) for i in range(seq_len_q))


def attended_pairs(case: AttentionCase) -> int:
    """(query, key) pairs counted as work for ``case`` (see the module docstring): per batch row,
    or for a layout case summed over its sequences divided by the batch (so ``batch *
    attended_pairs`` is the batch's useful pairs)."""
    if case.layout.is_plain:
        return _pairs(case.mask, case.seq_len_q, case.seq_len_kv)
    return _layout_pairs(case) // case.batch


def _layout_pairs(case: AttentionCase) -> int:
    q_lens, kv_lens = _lengths(case)
    return sum(_pairs(case.mask, q, kv) for q, kv in zip(q_lens, kv_lens))


def _lengths(case: AttentionCase) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return sequence_lengths(case.layout, case.batch, case.seq_len_q, case.seq_len_kv)


def _flop_per_pair(case: AttentionCase) -> int:
    return 2 * case.num_heads * (case.head_dim + (case.layout.head_dim_v or case.head_dim))


def forward_flop(case: AttentionCase) -> int:
    """FLOP of one forward of ``case`` (see module docstring for the formula and source)."""
    if case.layout.is_plain:
        return 4 * case.batch * case.num_heads * attended_pairs(case) * case.head_dim
    return _flop_per_pair(case) * _layout_pairs(case)


def _input_element_bytes(case: AttentionCase) -> int:
    return 1 if case.layout.fp8 else case.element_size_bytes


def _bytes(case: AttentionCase, q_tokens: int, kv_tokens: int) -> tuple[int, int]:
    dim_v = case.layout.head_dim_v or case.head_dim
    element = _input_element_bytes(case)
    read = element * (
        q_tokens * case.num_heads * case.head_dim
        + kv_tokens * case.num_kv_heads * (case.head_dim + dim_v)
    )
    return read, case.element_size_bytes * q_tokens * case.num_heads * dim_v


def forward_bytes(case: AttentionCase) -> tuple[int, int]:
    """``(bytes_read, bytes_written)``: query+key+value read once, output written once (layout
    cases: each sequence's own tokens)."""
    if case.layout.is_plain:
        per_row = case.batch * case.head_dim * case.element_size_bytes
        read = per_row * (case.num_heads * case.seq_len_q + 2 * case.num_kv_heads * case.seq_len_kv)
        written = per_row * case.num_heads * case.seq_len_q
        return read, written
    q_lens, kv_lens = _lengths(case)
    return _bytes(case, sum(q_lens), sum(kv_lens))


def padding_flop(case: AttentionCase) -> int:
    """FLOP a padded batch (``padded`` storage) spends beyond its sequences' own, by padding them
    to the longest: ``flop_per_pair * (batch * pairs(Sq, Skv) - sum of each sequence's pairs)``;
    0 for other storages (a packed or paged batch holds no padding)."""
    if case.layout.storage != Storage.PADDED:
        return 0
    padded = case.batch * _pairs(case.mask, case.seq_len_q, case.seq_len_kv)
    return _flop_per_pair(case) * (padded - _layout_pairs(case))


def padding_bytes(case: AttentionCase) -> int:
    """Bytes a padded batch reads and writes beyond its sequences' own (0 for other storages)."""
    if case.layout.storage != Storage.PADDED:
        return 0
    padded = _bytes(case, case.batch * case.seq_len_q, case.batch * case.seq_len_kv)
    return sum(padded) - sum(forward_bytes(case))


def kv_read_bytes(case: AttentionCase) -> int:
    """Bytes of key and value the case's sequences hold: what one decode step reads at least."""
    if case.layout.is_plain:
        kv_tokens = case.batch * case.seq_len_kv
    else:
        kv_tokens = sum(_lengths(case)[1])
    dim_v = case.layout.head_dim_v or case.head_dim
    return _input_element_bytes(case) * kv_tokens * case.num_kv_heads * (case.head_dim + dim_v)


# FLOP of a mode relative to one forward (see the module docstring for the source).
MODE_FLOP_FACTOR = {Mode.FORWARD: 1.0, Mode.BACKWARD: 2.5, Mode.FORWARD_BACKWARD: 3.5}


def mode_flop(case: AttentionCase, mode: str) -> int:
    """FLOP of one step of ``mode`` (``perfsuite.attention.modes.MODES``) on ``case``."""
    return round(MODE_FLOP_FACTOR[mode] * forward_flop(case))


def backward_bytes(case: AttentionCase) -> tuple[int, int]:
    """``(bytes_read, bytes_written)`` of a backward: q, k, v, output and its gradient read; dq, dk, dv written."""
    read, written = forward_bytes(case)
    return read + 2 * written, read


def mode_bytes(case: AttentionCase, mode: str) -> tuple[int, int]:
    """``(bytes_read, bytes_written)`` at minimum for one step of ``mode``."""
    if mode == Mode.FORWARD:
        return forward_bytes(case)
    if mode == Mode.BACKWARD:
        return backward_bytes(case)
    (fr, fw), (br, bw) = forward_bytes(case), backward_bytes(case)
    return fr + br, fw + bw
