"""Placement randomised inside a process: inputs re-created per block at random aligned offsets.

Where a process's buffers land (cache sets, pages, the heap's state) biases every block it times
(Mytkowicz et al., "Producing wrong data without doing anything obviously wrong!", ASPLOS 2009;
Curtsinger & Berger, "Stabilizer", ASPLOS 2013). Re-drawing that placement for every block turns
the bias of one process into noise that averages out over its blocks, instead of a fixed offset
that only more processes can average. Freezing one layout (ASLR off) would keep one sample of the
bias for every process: it is never done.

What is re-drawn per block: query, key and value copied into fresh storages at a random offset (a
multiple of ``ALIGNMENT_BYTES`` within ``MAX_OFFSET_BYTES``), and a spacer of random size allocated
before the block and held through it, so the step's own intermediate buffers come from other
places of the heap. ``python -m validation.variance_components`` measures what it removes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from perfsuite.attention.inputs import AttentionInputs

# 64 bytes: a cache line, the alignment torch's CPU allocator gives (c10::alignment is 64 on x86).
ALIGNMENT_BYTES = 64
# Offsets span a 4 KiB page: every cache-set and page-offset alias of a buffer is drawn.
MAX_OFFSET_BYTES = 4096
# The spacer spans up to 1 MiB: intermediates of a step move across L2-sized regions of the heap.
MAX_SPACER_BYTES = 2**20


def relocated(tensor: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """A copy of ``tensor`` (same shape, strides, dtype, device, values) in a fresh storage whose
    data starts a random multiple of ``ALIGNMENT_BYTES`` past the storage's start."""
    item = tensor.element_size()
    offset_items = (
        int(rng.integers(0, MAX_OFFSET_BYTES // ALIGNMENT_BYTES)) * ALIGNMENT_BYTES // item
    )
    span = (
        tensor.storage_offset()
        + sum((s - 1) * st for s, st in zip(tensor.shape, tensor.stride()))
        + 1
    )
    storage = torch.empty(offset_items + span, dtype=tensor.dtype, device=tensor.device)
    moved = storage.as_strided(
        tensor.shape, tensor.stride(), offset_items + tensor.storage_offset()
    )
    moved.copy_(tensor)
    return moved


def relocated_inputs(inputs: AttentionInputs, rng: np.random.Generator) -> AttentionInputs:
    """``inputs`` with query, key and value relocated (``relocated``); the mask and forms are kept."""
    return dataclasses.replace(
        inputs,
        query=relocated(inputs.query, rng),
        key=relocated(inputs.key, rng),
        value=relocated(inputs.value, rng),
    )


def spacer(rng: np.random.Generator, device: str | torch.device) -> torch.Tensor:
    """A byte tensor of random size (a multiple of ``ALIGNMENT_BYTES`` up to ``MAX_SPACER_BYTES``),
    to hold through a block so the step's own allocations land elsewhere."""
    size = int(rng.integers(0, MAX_SPACER_BYTES // ALIGNMENT_BYTES)) * ALIGNMENT_BYTES
    return torch.empty(size, dtype=torch.uint8, device=device)
