"""The one place that synchronizes a device around a timed call."""

from __future__ import annotations

from collections.abc import Callable

import torch

from perfsuite.attention.cases import Device


def synchronized(forward: Callable[[], object], device: str) -> Callable[[], object]:
    """Return a callable that runs ``forward`` and waits for the device to finish.

    On CUDA, kernels are launched asynchronously: timing without ``synchronize`` would
    time launches, not kernels. On the CPU ``forward`` is returned unchanged.
    """
    if device != Device.CUDA:
        return forward

    def forward_and_wait() -> object:
        result = forward()
        torch.cuda.synchronize()
        return result

    return forward_and_wait
