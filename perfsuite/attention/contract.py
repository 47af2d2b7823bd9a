"""The attention-function contract every variant provides.

``fn(query, key, value, *, mask, scale) -> output``:

- ``query``: ``[batch, num_heads, seq_len_q, head_dim]``; ``key``/``value``:
  ``[batch, num_kv_heads, seq_len_kv, head_dim]`` (GQA when ``num_kv_heads < num_heads``).
- ``mask``: a ``perfsuite.attention.masks.AttentionMask`` (``mask.is_causal`` is the causal flag).
- ``scale``: the softmax scale (float, usually ``head_dim ** -0.5``).
- returns ``[batch, num_heads, seq_len_q, head_dim]`` in the inputs' dtype and device.
"""

from __future__ import annotations

from typing import Any, Protocol
from collections.abc import Callable

import torch


class AttentionFn(Protocol):
    """An attention implementation as the suite calls it (see the module docstring for shapes)."""

    def __call__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        mask: Any,
        scale: float,
    ) -> torch.Tensor: ...


VariantFn = Callable[
    ..., torch.Tensor
]  # an AttentionFn; Callable so wrappers (torch.compile) type-check
PrepareFn = Callable[[Any], VariantFn]  # (AttentionInputs) -> the variant function for that case
