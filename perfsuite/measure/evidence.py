"""Run one variant on one case in one mode: can it run, is it correct, what did the profiler see.

A variant is prepared once per case (inputs drawn, ``prepare`` run: block masks built,
``torch.compile`` set up) and its evidence gathered once per mode; both are shared by the
equivalence test, the profiler tests and the benchmark, so none of them repeats the others'
work and a compiled variant compiles once per case and grad mode.
"""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from pathlib import Path
from typing import Callable

import torch

from perfsuite.measure import compile_stats
from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.compile_stats import CompileActivity
from perfsuite.attention.inputs import AttentionInputs, make_grad_output, make_inputs
from perfsuite.attention.masks import fully_masked_rows
from perfsuite.attention.modes import GRADIENT_MODES, Step, StepResult, make_step
from perfsuite.measure.profiling import profile_steps, step_annotation
from perfsuite.measure.saved_tensors import SavedForBackward, measure_saved
from perfsuite.attention.reference import (REFERENCE_BLOCK_BYTES, Comparison, compare_gradients, compare_with_reference,
                                          reference_attention, tolerances)
from perfsuite.measure.timing import synchronized
from perfsuite.trace.summary import WindowSummary
from perfsuite.variants import Variant
from perfsuite.variants.registry import VariantFn
from perfsuite.variants.unsupported import CaseUnsupported

# Messages with which torch refuses a case it has no kernel for (not a bug of the variant).
_UNSUPPORTED_RE = re.compile(r"No available kernel|No viable backend|not implemented for '\w+'|does not support backward on")
# Refusals of the machine rather than of torch's dispatch: cuDNN's frontend finding no execution
# plan for the graph (a shape/dtype/GPU combination its heuristics do not cover), and Triton or
# Inductor kernels needing more shared memory or registers than this GPU has, or autotuning
# finding no kernel that fits. Each is a skip whose reason says which, never a pass or a failure.
_MACHINE_LIMITS = (
    (re.compile(r"No execution plans? (support|supports|found)|cudnn.*no (valid )?execution plan", re.IGNORECASE),
     "cuDNN has no execution plan for this case on this GPU"),
    (re.compile(r"OutOfResources|out of resource: (shared memory|registers)", re.IGNORECASE),
     "a Triton kernel needs more shared memory or registers than this GPU has"),
    (re.compile(r"NoValidChoicesError|No choices to select", re.IGNORECASE),
     "Inductor's autotuning found no kernel choice that runs on this GPU"),
)


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
            line = next((part for part in text.splitlines() if pattern.search(part)), match.group(0))
            return f"{why}; torch: '{line.strip()[:300]}'"
    return None


class VariantUnsupported(Exception):
    """The variant cannot run this case on this machine; the message says why (not which pair)."""


@dataclasses.dataclass(frozen=True)
class PreparedCase:
    """A variant bound to one case: its inputs, the gradient that seeds backward
    (``[B, H, Sq, D]``) and the function ``Variant.for_case`` returned."""

    variant: Variant
    case: AttentionCase
    inputs: AttentionInputs
    grad_output: torch.Tensor
    fn: VariantFn


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Correctness and profiler facts for one variant on one case in one mode.

    ``comparison``: outputs (and gradients, in gradient modes) against float64, or None with
    ``not_compared`` saying why. ``steps``: one summary per profiled step; ``trace_path``: the
    gzip Chrome trace. ``step``: the callable the benchmark times. ``first_call_s``: wall time
    of the first call (compilation included, for compiled variants). ``compile_first_call``:
    what ``torch.compile`` did in that call; ``compile_while_profiled``: what it did during the
    profiled calls (should be nothing). ``saved_for_backward``: what one forward of the
    forward_backward step saved for backward (None in other modes).
    """

    variant: Variant
    case: AttentionCase
    mode: str
    comparison: Comparison | None
    not_compared: str | None
    steps: tuple[WindowSummary, ...]
    trace_path: Path
    step: Step
    first_call_s: float
    compile_first_call: CompileActivity
    compile_while_profiled: CompileActivity
    saved_for_backward: SavedForBackward | None = None

    @property
    def expected_score_copies(self) -> int:
        return self.variant.expected_score_copies(self.case.hides_keys)

    def score_copies(self, lane: str) -> list[int]:
        """Score-sized copies per profiled step on ``lane`` (``"cpu"`` or ``"device"``)."""
        return [f.copies_of_shape(self.case.score_shape, lane) for f in self.steps]


def bind(variant: Variant, inputs: AttentionInputs) -> Callable[[], torch.Tensor]:
    """A no-argument forward of ``variant`` on ``inputs`` (prepared for them), run under ``torch.no_grad()``."""

    try:
        fn = variant.for_case(inputs)
    except CaseUnsupported as exc:  # the variant's own named limitation, found by its prepare
        raise VariantUnsupported(str(exc)) from None

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return fn(inputs.query, inputs.key, inputs.value, mask=inputs.mask, scale=inputs.scale)

    return forward


def device_unavailable_reason(device: str) -> str | None:
    if device == "cuda" and not torch.cuda.is_available():
        return "device cuda is not available on this machine (torch.cuda.is_available() is False)"
    return None


def run_once(variant: Variant, case: AttentionCase, forward: Callable[[], object]) -> object:
    """First call of the forward; a refusal by torch becomes ``VariantUnsupported`` with its reasons."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return forward()
        except CaseUnsupported as exc:  # the variant's own named limitation
            raise VariantUnsupported(str(exc)) from None
        except torch.OutOfMemoryError:
            if case.device == "cuda":
                torch.cuda.empty_cache()
            raise VariantUnsupported(
                f"out of {case.device} memory (one score matrix of this case is {case.score_bytes} bytes); "
                "choose smaller shapes with --perfsuite-shapes"
            ) from None
        except Exception as exc:
            limit = machine_limit_reason(exc)
            if limit:
                raise VariantUnsupported(f"{variant.name} on {case.device}: {limit}") from None
            if not isinstance(exc, (RuntimeError, NotImplementedError)) or not _UNSUPPORTED_RE.search(str(exc)):
                raise
            raise VariantUnsupported(unsupported_reason(variant, case, exc, caught)) from None


def unsupported_reason(variant: Variant, case: AttentionCase, exc: Exception, caught: list) -> str:
    """One line: the backend, the dtype/device, torch's error (first sentence) and its warnings."""
    error = str(exc).splitlines()[0].split(". ")[0].rstrip(".")
    if "backward" in error:
        return f"{variant.name} has no backward on {case.device} in torch {torch.__version__}; torch: '{error}'"
    backend = f"SDPBackend.{variant.sdpa_backend}" if variant.sdpa_backend else "its kernels"
    notes = sorted({str(w.message).splitlines()[0] for w in caught})
    detail = f"; torch warned: {' | '.join(notes)}" if notes else ""
    return f"{backend} has no kernel for {case.dtype} on {case.device}; torch: '{error}'{detail}"


def check_output(variant: Variant, case: AttentionCase, inputs: AttentionInputs, output: torch.Tensor,
                 label: str) -> Comparison:
    """Compare ``output`` with the float64 reference, holding fully masked rows to the variant's rule."""
    rows = fully_masked_rows(inputs.mask, case.score_shape)
    expected = reference_attention(inputs)
    return compare_with_reference(output, expected, label, rows, variant.fully_masked_rows, tolerances(inputs, expected))


def prepare_case(variant: Variant, case: AttentionCase, seed: int) -> PreparedCase:
    """Draw ``case``'s inputs from ``seed`` and run the variant's per-case ``prepare``.

    Raises ``VariantUnsupported`` when the device is missing or torch refuses the case.
    """
    reason = device_unavailable_reason(case.device)
    if reason:
        raise VariantUnsupported(reason)
    inputs = make_inputs(case, seed)
    fn = run_once(variant, case, lambda: variant.for_case(inputs))
    return PreparedCase(variant, case, inputs, make_grad_output(case, seed), fn)


def _compare(prepared: PreparedCase, mode: str, result: StepResult, seed: int) -> tuple[Comparison | None, str | None]:
    """The comparison with the float64 reference, or None and why not (NaN rows, out of memory)."""
    try:
        return _compare_with_reference(prepared, mode, result, seed)
    except torch.OutOfMemoryError:
        case = prepared.case
        if case.device == "cuda":
            torch.cuda.empty_cache()
        return None, (f"not compared: the float64 reference of {case.id} ran out of {case.device} memory even in blocks "
                      f"of {REFERENCE_BLOCK_BYTES} bytes of scores (perfsuite.attention.reference)")


def _compare_with_reference(prepared: PreparedCase, mode: str, result: StepResult,
                            seed: int) -> tuple[Comparison | None, str | None]:
    variant, case, inputs = prepared.variant, prepared.case, prepared.inputs
    in_mode = "" if mode == "forward" else f" in mode {mode}"
    label = f"variant {variant.name} on case {case.id}{in_mode} (seed {seed})"
    output = check_output(variant, case, inputs, result.output, label)
    if result.gradients is None or output.failure:
        return output, None
    rows = int(fully_masked_rows(inputs.mask, case.score_shape).sum())
    if variant.fully_masked_rows == "nan" and rows:
        return None, (f"{variant.name} returns NaN for the {rows} query rows of this case that see no key, so its "
                      "gradients are NaN everywhere: nothing to compare (the forward check holds those rows to NaN)")
    if variant.fully_masked_rows == "finite" and rows:
        return None, (f"{variant.name} returns a finite row (not the reference's zeros) for the {rows} query rows of "
                      "this case that see no key, so its gradients differ from the reference's by design: not compared")
    gradients = compare_gradients(result.gradients, inputs, prepared.grad_output, label)
    return Comparison(max(output.max_abs_error, gradients.max_abs_error), gradients.failure), None


def input_tensors(inputs: AttentionInputs) -> tuple[torch.Tensor, ...]:
    """Query, key, value and the mask's tensors (selection, bias, SDPA's mask): storages that are
    the case's inputs, never score matrices a forward saved (a ``[1, H, Sq, Skv]`` bias has as many
    elements as the scores at batch 1)."""
    mask = inputs.mask
    found = [inputs.query, inputs.key, inputs.value, mask.allowed, mask.masked_out, mask.additive, mask.sdpa_mask]
    return tuple(t for t in found if isinstance(t, torch.Tensor))


def gather_evidence(variant: Variant, case: AttentionCase, seed: int, trace_dir: Path, mode: str = "forward",
                    prepared: PreparedCase | None = None) -> Evidence:
    """Check support, compare with the float64 reference, and profile the variant on ``case`` in ``mode``.

    ``prepared`` (from ``prepare_case``) is reused when given, so modes share one preparation.
    Raises ``VariantUnsupported`` (a skip, with the reason) when the device or the backend
    cannot run the case, or the variant has no backward; any other error propagates.
    """
    if mode in GRADIENT_MODES and variant.forward_only:
        raise VariantUnsupported(f"{variant.name} has no backward: {variant.forward_only}")
    prepared = prepared or prepare_case(variant, case, seed)
    step = make_step(mode, prepared.fn, prepared.inputs, prepared.grad_output)
    before, started = compile_stats.snapshot(), time.perf_counter()
    result = run_once(variant, case, synchronized(step, case.device))
    first_call_s = time.perf_counter() - started
    compiled = compile_stats.since(before)
    comparison, not_compared = _compare(prepared, mode, result, seed)
    suffix = "" if mode == "forward" else f"-{mode}"
    trace_path = trace_dir / f"{variant.name}-{case.id}{suffix}.pt.trace.json.gz"
    before = compile_stats.snapshot()
    saved = measure_saved(step, case.score_shape, input_tensors(prepared.inputs)) if mode == "forward_backward" else None
    steps = profile_steps(step, case.device, trace_path, step_annotation(mode))
    return Evidence(variant, case, mode, comparison, not_compared, tuple(steps), trace_path, step,
                    first_call_s, compiled, compile_stats.since(before), saved)
