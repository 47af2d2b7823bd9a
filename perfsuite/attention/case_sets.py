"""Named case sets for the timed suite, chosen with ``--perfsuite-case-set NAME``.

Each set gives, per device, shapes (``B x H[:Hkv] x S[:Skv] x D``), dtypes and masks; the
suite runs their product. CPU sets are sized for a 2-core machine; CUDA sets for one
datacenter GPU (the post's case is ``8x16x1024x64`` bf16 causal).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DeviceCases:
    """Shapes, dtypes and masks of a set on one device (strings as the ini keys take them)."""

    shapes: str
    dtypes: str
    masks: str


@dataclasses.dataclass(frozen=True)
class CaseSet:
    """A named set: what it is for, and its cases on each device."""

    description: str
    cpu: DeviceCases
    cuda: DeviceCases


CASE_SETS: dict[str, CaseSet] = {
    "smoke": CaseSet(
        "one small causal case per device: a fast end-to-end check",
        DeviceCases("2x8x256x64", "fp32", "causal"),
        DeviceCases("8x16x1024x64", "bf16", "causal"),
    ),
    "default": CaseSet(
        "the post's causal self-attention at two lengths (CPU: fp32; bf16 is 10x slower on CPUs without bf16 matmul)",
        DeviceCases("2x8x256x64 1x8x1024x64", "fp32", "causal"),
        DeviceCases("8x16x1024x64 4x16x4096x64 2x16x8192x64", "bf16", "causal"),
    ),
    "llm-decode": CaseSet(
        "one new token against a KV cache (seq_len_q=1, bottom-right causal), grouped-query heads",
        DeviceCases("8x16:4x1:2048x64 1x16:4x16:2048x64", "fp32 bf16", "causal_br"),
        DeviceCases("32x32:8x1:4096x128 8x32:8x1:32768x128 1x32:8x128:8192x128", "bf16", "causal_br"),
    ),
    "long-context": CaseSet(
        "long sequences, causal and sliding window",
        DeviceCases("1x4x4096x64", "fp32", "causal window512"),
        DeviceCases("1x16x16384x64 1x16x32768x64", "bf16", "causal window4096"),
    ),
    "gqa": CaseSet(
        "grouped-query (4 and 8 query heads per kv head) and multi-query attention",
        DeviceCases("2x8:2x512x64 2x8:1x512x64", "fp32 bf16", "causal"),
        DeviceCases("4x32:8x2048x128 4x32:1x2048x128", "bf16", "causal"),
    ),
    "masks": CaseSet(
        "every mask kind on one shape, prefill with a cached prefix (seq_len_q < seq_len_kv)",
        DeviceCases("2x4x256:384x64", "fp32", "noncausal causal causal_br bool additive padding window128"),
        DeviceCases("4x16x1024:2048x64", "bf16", "noncausal causal causal_br bool additive padding window512"),
    ),
}


def get_case_set(name: str) -> CaseSet:
    """The set called ``name``; ``ValueError`` lists the known sets otherwise."""
    if name not in CASE_SETS:
        raise ValueError(f"case set {name!r} is unknown; known: {', '.join(CASE_SETS)}")
    return CASE_SETS[name]
