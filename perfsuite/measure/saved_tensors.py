"""What autograd keeps for backward: tensors saved by one forward, counted with saved-tensor hooks.

The forward of a forward+backward step runs under ``torch.autograd.graph.saved_tensors_hooks``;
the pack hook records each saved tensor (and returns it unchanged). Tensors sharing a storage are
counted once, by storage size. This is why unfused attention needs O(seq_len^2) memory for
training: softmax saves its ``[batch, num_heads, seq_len_q, seq_len_kv]`` output, while a fused
kernel saves query, key, value, output and a logsumexp per row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable

import torch


@dataclasses.dataclass(frozen=True)
class SavedForBackward:
    """Saved tensors of one forward: ``tensors`` distinct storages, ``bytes`` their total size,
    ``score_sized`` how many storages hold exactly ``B * H * Sq * Skv`` elements (a score matrix,
    whatever view of it was saved: matmul saves ``[B*H, Sq, Skv]``), the inputs' own storages
    excluded (a key of ``[B, Hkv, Skv, D]`` can have as many elements as the scores), and so are
    copies of an input (SDPA saves its own copy of a ``[1, H, Sq, Skv]`` bias, as many elements
    as the scores at batch 1)."""

    tensors: int
    bytes: int
    score_sized: int


def measure_saved(
    forward_with_grad: Callable[[], object],
    score_shape: tuple[int, int, int, int],
    inputs: Iterable[torch.Tensor] = (),
) -> SavedForBackward:
    """Run ``forward_with_grad`` once and count what autograd saved for its backward.

    ``inputs``: query, key, value and the mask's tensors, whose storages (and same-valued copies)
    are never counted as score matrices.
    """
    inputs = tuple(inputs)
    input_storages = {(str(t.device), t.untyped_storage().data_ptr()) for t in inputs}
    score_numel = math.prod(score_shape)
    storages: dict[tuple[str, int], tuple[int, int]] = {}
    copies: set[tuple[str, int]] = set()

    def pack(saved: torch.Tensor) -> torch.Tensor:
        # a nested jagged tensor's own storage is a placeholder: its values buffer is what it holds;
        # a strided-layout nested tensor (torch's C++ one) has no storage Python can read: not counted
        tensor = getattr(saved, "_values", None) if saved.is_nested else saved
        if not isinstance(tensor, torch.Tensor):
            return saved
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        storages[key] = (storage.nbytes(), storage.nbytes() // tensor.element_size())
        if (
            tensor.numel() == score_numel
            and key not in input_storages
            and _copies_an_input(tensor, inputs)
        ):
            copies.add(key)
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward_with_grad()
    return SavedForBackward(
        tensors=len(storages),
        bytes=sum(size for size, _ in storages.values()),
        score_sized=sum(
            1
            for key, (_, numel) in storages.items()
            if numel == score_numel and key not in input_storages and key not in copies
        ),
    )


def _copies_an_input(tensor: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> bool:
    """True when ``tensor`` holds exactly the values of an input with as many elements (a cast
    or broadcast-free copy of it, e.g. a bias SDPA converted to the query's dtype)."""
    flat = tensor.detach().reshape(-1)
    for source in inputs:
        if source.numel() == flat.numel() and source.device == flat.device:
            if torch.equal(flat.to(source.dtype), source.detach().reshape(-1)):
                return True
    return False
