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
"""

from __future__ import annotations

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.masks import mask_kind
from perfsuite.attention.modes import Mode


def attended_pairs(case: AttentionCase) -> int:
    """(query, key) pairs counted as work for ``case`` (see the module docstring)."""
    kind = mask_kind(case.mask)
    return sum(kind.keys_seen(i, case.seq_len_q, case.seq_len_kv) for i in range(case.seq_len_q))


def forward_flop(case: AttentionCase) -> int:
    """FLOP of one forward of ``case`` (see module docstring for the formula and source)."""
    return 4 * case.batch * case.num_heads * attended_pairs(case) * case.head_dim


def forward_bytes(case: AttentionCase) -> tuple[int, int]:
    """``(bytes_read, bytes_written)``: query+key+value read once, output written once."""
    per_row = case.batch * case.head_dim * case.element_size_bytes
    read = per_row * (case.num_heads * case.seq_len_q + 2 * case.num_kv_heads * case.seq_len_kv)
    written = per_row * case.num_heads * case.seq_len_q
    return read, written


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
