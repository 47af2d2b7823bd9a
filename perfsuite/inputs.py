"""Random attention inputs for a case, reproducible from a seed."""

from __future__ import annotations

import dataclasses
import math

import torch

from perfsuite.cases import AttentionCase


@dataclasses.dataclass(frozen=True)
class AttentionInputs:
    """Tensors one forward consumes.

    ``query``: ``[batch, num_heads, seq_len_q, head_dim]``; ``key``/``value``:
    ``[batch, num_heads, seq_len_kv, head_dim]``, all in the case's dtype and device.
    ``causal_masked_out``: bool ``[seq_len_q, seq_len_kv]``, True where a key is hidden
    from a query (``j > i``, top-left alignment), built once per case outside the timed
    call as the post does; ``None`` for non-causal cases.
    ``scale``: the softmax scale, ``1 / sqrt(head_dim)`` as in "Attention Is All You Need".
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    causal: bool
    causal_masked_out: torch.Tensor | None
    scale: float


def causal_masked_out(seq_len_q: int, seq_len_kv: int, device: str) -> torch.Tensor:
    """Bool ``[seq_len_q, seq_len_kv]``, True above the diagonal (keys after the query)."""
    ones = torch.ones(seq_len_q, seq_len_kv, dtype=torch.bool, device=device)
    return ones.triu(diagonal=1)


def make_inputs(case: AttentionCase, seed: int) -> AttentionInputs:
    """Standard-normal query/key/value for ``case``, drawn on the CPU from ``seed``.

    Drawing on the CPU in float32 and then converting makes the values identical on
    every device, so CPU and CUDA runs of one seed compare the same numbers.
    """
    generator = torch.Generator().manual_seed(seed)
    q_shape = (case.batch, case.num_heads, case.seq_len_q, case.head_dim)
    kv_shape = (case.batch, case.num_heads, case.seq_len_kv, case.head_dim)

    def draw(shape: tuple[int, ...]) -> torch.Tensor:
        sample = torch.randn(shape, generator=generator, dtype=torch.float32)
        return sample.to(device=case.device, dtype=case.torch_dtype)

    query, key, value = draw(q_shape), draw(kv_shape), draw(kv_shape)
    mask = causal_masked_out(case.seq_len_q, case.seq_len_kv, case.device) if case.causal else None
    return AttentionInputs(query, key, value, case.causal, mask, 1.0 / math.sqrt(case.head_dim))
