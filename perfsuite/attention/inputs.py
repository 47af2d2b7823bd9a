"""Random attention inputs for a case, reproducible from a seed."""

from __future__ import annotations

import dataclasses
from typing import Any
from collections.abc import Mapping

import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.masks import AttentionMask, build_mask
from perfsuite.attention.score_mods import form_values


@dataclasses.dataclass(frozen=True)
class AttentionInputs:
    """Tensors one forward consumes.

    ``query``: ``[batch, num_heads, seq_len_q, head_dim]``; ``key``/``value``:
    ``[batch, num_kv_heads, seq_len_kv, head_dim]``, in the case's dtype and device
    (strided views of a ``[batch, seq, heads, head_dim]`` layout for non-contiguous cases).
    ``mask``: the case's ``AttentionMask``, built once outside the timed call.
    ``scale``: the softmax scale.
    ``forms``: the keyword arguments of the forms the case carries (``perfsuite.attention.contract.FORMS``:
    ``alibi_slopes``, ``softcap``, ...), empty for a plain case.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: AttentionMask
    scale: float
    forms: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def replace(self, **changes) -> AttentionInputs:
        return dataclasses.replace(self, **changes)

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of a call under the contract: ``mask``, ``scale`` and the forms'."""
        return {"mask": self.mask, "scale": self.scale, **self.forms}


def draw_tensor(
    generator: torch.Generator,
    batch: int,
    heads: int,
    seq_len: int,
    head_dim: int,
    case: AttentionCase,
) -> torch.Tensor:
    """Standard normal ``[batch, heads, seq_len, head_dim]`` drawn in float32 on the CPU, then
    converted, so the values are identical on every device; non-contiguous when the case says so
    (``strided``: a transposed ``[batch, seq, heads, head_dim]``; ``transposed``: a transposed
    ``[batch, heads, head_dim, seq]``, ``stride(-1) == seq_len``)."""
    if case.transposed:
        sample = torch.randn(batch, heads, head_dim, seq_len, generator=generator).transpose(-2, -1)
    elif case.contiguous:
        sample = torch.randn(batch, heads, seq_len, head_dim, generator=generator)
    else:
        sample = torch.randn(batch, seq_len, heads, head_dim, generator=generator).transpose(1, 2)
    return sample.to(device=case.device, dtype=case.torch_dtype)


def make_inputs(case: AttentionCase, seed: int) -> AttentionInputs:
    """Query/key/value, mask and the forms' keyword values (``case.score_mods``:
    ``perfsuite.attention.score_mods.form_values``) for ``case`` from ``seed``; the forms' values
    are drawn last, so a plain case's tensors do not change with them."""
    generator = torch.Generator().manual_seed(seed)
    query = draw_tensor(generator, case.batch, case.num_heads, case.seq_len_q, case.head_dim, case)
    key = draw_tensor(
        generator, case.batch, case.num_kv_heads, case.seq_len_kv, case.head_dim, case
    )
    value = draw_tensor(
        generator, case.batch, case.num_kv_heads, case.seq_len_kv, case.head_dim, case
    )
    mask = build_mask(
        case.mask,
        case.score_shape,
        case.torch_dtype,
        case.device,
        generator,
        case.score_mods.query_offset,
    )
    forms = form_values(
        case.score_mods,
        batch=case.batch,
        num_heads=case.num_heads,
        seq_len_q=case.seq_len_q,
        seq_len_kv=case.seq_len_kv,
        offset=case.query_offset,
        device=case.device,
        generator=generator,
    )
    return AttentionInputs(query, key, value, mask, case.softmax_scale, forms)


GRAD_OUTPUT_SEED_OFFSET = 1_000_003  # a stream of its own, so inputs do not change with modes


def make_grad_output(case: AttentionCase, seed: int) -> torch.Tensor:
    """Standard normal ``[batch, num_heads, seq_len_q, head_dim]`` that seeds backward, from ``seed``."""
    generator = torch.Generator().manual_seed(seed + GRAD_OUTPUT_SEED_OFFSET)
    sample = torch.randn(
        case.batch, case.num_heads, case.seq_len_q, case.head_dim, generator=generator
    )
    return sample.to(device=case.device, dtype=case.torch_dtype)
