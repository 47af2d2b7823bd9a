"""Run one variant on one case: can it run, is it correct, what did the profiler see.

The evidence is gathered once per (variant, case) and shared by the equivalence test,
the profiler test and the benchmark, so none of them repeats the others' work.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Callable

import torch

from perfsuite.cases import AttentionCase
from perfsuite.inputs import AttentionInputs, make_inputs
from perfsuite.masks import fully_masked_rows
from perfsuite.profiling import profile_forwards
from perfsuite.reference import Comparison, compare_with_reference, reference_attention, tolerances
from perfsuite.trace_summary import WindowSummary
from perfsuite.variants import Variant

# Messages with which torch refuses a case it has no kernel for (not a bug of the variant).
_UNSUPPORTED_RE = re.compile(r"No available kernel|No viable backend|not implemented for '\w+'")


class VariantUnsupported(Exception):
    """The variant cannot run this case on this machine; the message says why (not which pair)."""


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Correctness and profiler facts for one variant on one case.

    ``forwards``: one summary per profiled forward; ``trace_path``: the gzip Chrome trace.
    """

    variant: Variant
    case: AttentionCase
    comparison: Comparison
    forwards: tuple[WindowSummary, ...]
    trace_path: Path

    @property
    def expected_score_copies(self) -> int:
        return self.variant.expected_score_copies(self.case.hides_keys)

    def score_copies(self, lane: str) -> list[int]:
        """Score-sized copies per profiled forward on ``lane`` (``"cpu"`` or ``"device"``)."""
        return [f.copies_of_shape(self.case.score_shape, lane) for f in self.forwards]


def bind(variant: Variant, inputs: AttentionInputs) -> Callable[[], torch.Tensor]:
    """A no-argument forward of ``variant`` on ``inputs``, run under ``torch.no_grad()``."""

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return variant.fn(inputs.query, inputs.key, inputs.value, mask=inputs.mask, scale=inputs.scale)

    return forward


def device_unavailable_reason(device: str) -> str | None:
    if device == "cuda" and not torch.cuda.is_available():
        return "device cuda is not available on this machine (torch.cuda.is_available() is False)"
    return None


def run_once(variant: Variant, case: AttentionCase, forward: Callable[[], torch.Tensor]) -> torch.Tensor:
    """First call of the forward; a refusal by torch becomes ``VariantUnsupported`` with its reasons."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return forward()
        except torch.OutOfMemoryError:
            if case.device == "cuda":
                torch.cuda.empty_cache()
            raise VariantUnsupported(
                f"out of {case.device} memory (one score matrix of this case is {case.score_bytes} bytes); "
                "choose smaller shapes with --perfsuite-shapes"
            ) from None
        except (RuntimeError, NotImplementedError) as exc:
            if not _UNSUPPORTED_RE.search(str(exc)):
                raise
            raise VariantUnsupported(unsupported_reason(variant, case, exc, caught)) from None


def unsupported_reason(variant: Variant, case: AttentionCase, exc: Exception, caught: list) -> str:
    """One line: the backend, the dtype/device, torch's error (first sentence) and its warnings."""
    backend = f"SDPBackend.{variant.sdpa_backend}" if variant.sdpa_backend else "its kernels"
    error = str(exc).splitlines()[0].split(". ")[0].rstrip(".")
    notes = sorted({str(w.message).splitlines()[0] for w in caught})
    detail = f"; torch warned: {' | '.join(notes)}" if notes else ""
    return f"{backend} has no kernel for {case.dtype} on {case.device}; torch: '{error}'{detail}"


def check_output(variant: Variant, case: AttentionCase, inputs: AttentionInputs, output: torch.Tensor,
                 label: str) -> Comparison:
    """Compare ``output`` with the float64 reference, holding fully masked rows to the variant's rule."""
    rows = fully_masked_rows(inputs.mask, case.score_shape)
    expected = reference_attention(inputs)
    return compare_with_reference(output, expected, label, rows, variant.fully_masked_rows, tolerances(inputs, expected))


def gather_evidence(variant: Variant, case: AttentionCase, seed: int, trace_dir: Path) -> Evidence:
    """Check support, compare with the float64 reference, and profile the variant on ``case``.

    Raises ``VariantUnsupported`` (a skip, with the reason) when the device or the
    backend cannot run the case; any other error propagates as a test error.
    """
    reason = device_unavailable_reason(case.device)
    if reason:
        raise VariantUnsupported(reason)
    inputs = make_inputs(case, seed)
    forward = bind(variant, inputs)
    output = run_once(variant, case, forward)
    label = f"variant {variant.name} on case {case.id} (seed {seed})"
    comparison = check_output(variant, case, inputs, output, label)
    trace_path = trace_dir / f"{variant.name}-{case.id}.pt.trace.json.gz"
    forwards = profile_forwards(forward, case.device, trace_path)
    return Evidence(variant, case, comparison, tuple(forwards), trace_path)
