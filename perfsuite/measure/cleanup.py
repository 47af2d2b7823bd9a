"""Memory hygiene between cases: exceptions cached without the tensors their frames hold, and
the CUDA caching allocator emptied so one case's blocks do not shape the next one's peak.

The suite's session (``perfsuite.suite.plugin``) caches each (variant, case) outcome, errors
included, so every test of the pair sees it. A cached exception keeps its traceback, and the
traceback's frames keep their local variables: the case's query/key/value, outputs and score
matrices stay alive until the session ends. ``release_exception_frames`` clears those frames.
"""

from __future__ import annotations

import gc
import traceback
from typing import Any

import torch

from perfsuite.attention.cases import Device


def _chain(exc: BaseException):
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]
        pending += list(getattr(current, "exceptions", ()))  # an ExceptionGroup's members


def release_exception_frames(exc: BaseException) -> BaseException:
    """Clear the local variables of every finished frame in ``exc``'s traceback, and in those of
    its ``__cause__``/``__context__`` chain, so a cached exception holds no tensors. The traceback
    itself (files, lines, function names) is kept for the report. Returns ``exc``.

    Frames still running (the caller's own) are left as they are (``traceback.clear_frames``
    skips them). Call it on an exception before caching it.
    """
    for current in _chain(exc):
        if current.__traceback__ is not None:
            traceback.clear_frames(current.__traceback__)
    return exc


def release_device_memory(device: str, cuda: Any = None) -> bool:
    """On ``device == "cuda"``: collect garbage, wait for the device and return the caching
    allocator's unused blocks to the driver (``torch.cuda.empty_cache``), so the next case's
    allocations and peak are its own. ``cuda`` defaults to ``torch.cuda`` (tests pass a fake).

    Returns True when memory was released; False on the CPU or without a CUDA device.
    """
    cuda = torch.cuda if cuda is None else cuda
    if device != Device.CUDA or not cuda.is_available():
        return False
    gc.collect()
    cuda.synchronize()
    cuda.empty_cache()
    return True
