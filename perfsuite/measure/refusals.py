"""When a failure is a refusal (torch has no kernel, the machine cannot run it), and the skip reason it gets."""

from __future__ import annotations

import re

import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.warnings_capture import TRIGGERED_RE
from perfsuite.variants import Variant

# Messages with which torch refuses a case it has no kernel for (not a bug of the variant).
UNSUPPORTED_RE = re.compile(
    r"No available kernel|No viable backend|not implemented for '\w+'|does not support backward on"
)
# The host allocator's failure (torch raises RuntimeError, not OutOfMemoryError, on the CPU).
HOST_ALLOCATION_RE = re.compile(
    r"DefaultCPUAllocator: (can't|not enough memory)|can't allocate memory"
)
# Refusals of the machine rather than of torch's dispatch: cuDNN's frontend finding no execution
# plan for the graph (a shape/dtype/GPU combination its heuristics do not cover), and Triton or
# Inductor kernels needing more shared memory or registers than this GPU has, or autotuning
# finding no kernel that fits. Each is a skip whose reason says which, never a pass or a failure.
_MACHINE_LIMITS = (
    (
        re.compile(
            r"No execution plans? (support|supports|found)|cudnn.*no (valid )?execution plan",
            re.IGNORECASE,
        ),
        "cuDNN has no execution plan for this case on this GPU",
    ),
    (
        re.compile(r"OutOfResources|out of resource: (shared memory|registers)", re.IGNORECASE),
        "a Triton kernel needs more shared memory or registers than this GPU has",
    ),
    (
        re.compile(r"NoValidChoicesError|No choices to select", re.IGNORECASE),
        "Inductor's autotuning found no kernel choice that runs on this GPU",
    ),
)


class VariantUnsupported(Exception):
    """The variant cannot run this case on this machine; the message says why (not which pair)."""


def _messages(exc: BaseException) -> str:
    """The exception's type and message and those of its causes (Inductor wraps Triton's errors)."""
    parts, seen, current = [], set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def machine_limit_reason(exc: BaseException) -> str | None:
    """Why ``exc`` is this machine's limit (``_MACHINE_LIMITS``) with the error's first line, or None."""
    text = _messages(exc)
    for pattern, why in _MACHINE_LIMITS:
        match = pattern.search(text)
        if match:
            line = next(
                (part for part in text.splitlines() if pattern.search(part)), match.group(0)
            )
            return f"{why}; torch: '{line.strip()[:300]}'"
    return None


def device_unavailable_reason(device: str) -> str | None:
    if device == "cuda" and not torch.cuda.is_available():
        return "device cuda is not available on this machine (torch.cuda.is_available() is False)"
    return None


def unsupported_reason(variant: Variant, case: AttentionCase, exc: Exception, caught: list) -> str:
    """One line: the backend, the cause torch warned about (else the dtype/device), torch's error (first sentence).

    A backend that refuses a case for its layout (``All fused kernels require the last dimension
    of the input to have stride 1``) is reported with that cause, not as a missing dtype kernel.
    """
    error = str(exc).splitlines()[0].split(". ")[0].rstrip(".")
    if "backward" in error:
        return f"{variant.name} has no backward on {case.device} in torch {torch.__version__}; torch: '{error}'"
    backend = (
        f"SDPBackend.{variant.sdpa_backend}"
        if variant.sdpa_backend
        else f"torch (called by {variant.name})"
    )
    notes = list(
        dict.fromkeys(
            TRIGGERED_RE.sub("", str(w.message)).strip().splitlines()[0]
            for w in caught
            if str(w.message).strip()
        )
    )
    causes = [n for n in notes if not n.rstrip().endswith("because:")]
    if causes:
        return (
            f"{backend} refuses this case on {case.device}: {' | '.join(causes)}; torch: '{error}'"
        )
    return f"{backend} has no kernel for {case.dtype} on {case.device}; torch: '{error}'"
