"""Run one variant on one case in one mode: can it run, is it correct, what did the profiler see.

A variant is prepared once per case (inputs drawn, ``prepare`` run: block masks built,
``torch.compile`` set up) and its evidence gathered once per mode; both are shared by the
equivalence test, the profiler tests and the benchmark, so none of them repeats the others'
work and a compiled variant compiles once per case and grad mode.
"""

from __future__ import annotations

import contextlib
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
from perfsuite.measure.profiling import record_trace, step_annotation
from perfsuite.measure.score_accounting import ScoreAccounting, account_windows
from perfsuite.measure.saved_tensors import SavedForBackward, measure_saved
from perfsuite.attention.reference import (REFERENCE_BLOCK_BYTES, Comparison, compare_gradients, compare_with_reference,
                                          UNDEFINED_ROW_RESULTS, reference_attention, tolerances)
from perfsuite.measure.timing import synchronized
from perfsuite.trace.summary import WindowSummary, summarize_windows
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Evidence:
    """Correctness and profiler facts for one variant on one case in one mode.

    ``comparison``: outputs (and gradients, in gradient modes) against float64, or None with
    ``not_compared`` saying why. ``steps``: one summary per profiled step; ``trace_path``: the
    gzip Chrome trace. ``step``: the callable the benchmark times. ``first_call_s``: wall time
    of the first call (compilation included, for compiled variants). ``compile_first_call``:
    what ``torch.compile`` did in that call; ``compile_while_profiled``: what it did during the
    profiled calls (should be nothing). ``saved_for_backward``: what one forward of the
    forward_backward step saved for backward (None in other modes). ``score_accounting``: per
    profiled step, the score-sized tensors written, of which copies, casts and mask expansions
    (``perfsuite.measure.score_accounting``). ``output_stride``: the strides of the output
    ``[B, H, Sq, D]`` in elements, ``output_layout`` their description (``describe_layout``).
    ``warnings``: what the variant warned on its first call of this mode, one line each.
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
    score_accounting: tuple[ScoreAccounting, ...] = ()
    output_stride: tuple[int, ...] = ()
    output_layout: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def layout_record(self) -> tuple[str, str, str, str]:
        """``(variant, case_id, mode, output_layout)``: what ``layout_differences`` compares (no tensors)."""
        return self.variant.name, self.case.id, self.mode, self.output_layout

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


class VariantWarning(UserWarning):
    """A warning a variant raised on its first call, re-issued once per process with the variant named."""


_ANNOUNCED: set[tuple[str, str]] = set()
_TRIGGERED_RE = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")


def warning_line(caught: warnings.WarningMessage) -> str:
    """``UserWarning: <first line of the message> (file.py:12)``, without torch's ``Triggered internally`` note."""
    text = _TRIGGERED_RE.sub("", str(caught.message)).strip().splitlines()
    where = f"{Path(caught.filename).name}:{caught.lineno}"
    return f"{caught.category.__name__}: {text[0] if text else ''} ({where})"


def shown_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """Lines of the warnings worth showing: not our own ``VariantWarning``s, and not torch's deprecation
    notices about its own internals (``torch.jit.script_method`` while ``torch.compile`` sets up)."""
    lines = []
    for found in caught:
        if issubclass(found.category, VariantWarning):
            continue
        if issubclass(found.category, (DeprecationWarning, PendingDeprecationWarning)) and "torch" in Path(found.filename).parts:
            continue
        lines.append(warning_line(found))
    return list(dict.fromkeys(lines))


def announce_warnings(variant: Variant, lines: list[str]) -> None:
    """Re-issue each warning line as a ``VariantWarning`` naming the variant, once per process."""
    for line in lines:
        if (variant.name, line) not in _ANNOUNCED:
            _ANNOUNCED.add((variant.name, line))
            warnings.warn(VariantWarning(f"variant {variant.name} warned on its first call: {line}"), stacklevel=3)


@contextlib.contextmanager
def announced_once(variant: Variant):
    """Record warnings raised inside; show each once per variant and message (``announce_warnings``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    announce_warnings(variant, shown_warnings(caught))


def run_once(variant: Variant, case: AttentionCase, forward: Callable[[], object],
             seen: list[str] | None = None) -> object:
    """First call of the forward; a refusal by torch becomes ``VariantUnsupported`` with its reasons.

    Warnings raised during the call are recorded (one line each, appended to ``seen`` when
    given) and shown once per variant and message (``announce_warnings``), not dropped.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = forward()
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
    lines = shown_warnings(caught)
    if seen is not None:
        seen += [line for line in lines if line not in seen]
    announce_warnings(variant, lines)
    return result


def unsupported_reason(variant: Variant, case: AttentionCase, exc: Exception, caught: list) -> str:
    """One line: the backend, the cause torch warned about (else the dtype/device), torch's error (first sentence).

    A backend that refuses a case for its layout (``All fused kernels require the last dimension
    of the input to have stride 1``) is reported with that cause, not as a missing dtype kernel.
    """
    error = str(exc).splitlines()[0].split(". ")[0].rstrip(".")
    if "backward" in error:
        return f"{variant.name} has no backward on {case.device} in torch {torch.__version__}; torch: '{error}'"
    backend = f"SDPBackend.{variant.sdpa_backend}" if variant.sdpa_backend else "its kernels"
    notes = list(dict.fromkeys(_TRIGGERED_RE.sub("", str(w.message)).strip().splitlines()[0] for w in caught
                               if str(w.message).strip()))
    causes = [n for n in notes if not n.rstrip().endswith("because:")]
    if causes:
        return f"{backend} refuses this case on {case.device}: {' | '.join(causes)}; torch: '{error}'"
    return f"{backend} has no kernel for {case.dtype} on {case.device}; torch: '{error}'"


_DIM_NAMES = ("B", "H", "Sq", "D")


def describe_layout(tensor: torch.Tensor) -> str:
    """``contiguous``; ``dense as [B, Sq, H, D]`` for a dense tensor in another dimension order
    (outermost first, as a transposed ``[B, S, H, D]`` buffer); else ``strides (a, b, c, d)``."""
    if tensor.is_contiguous():
        return "contiguous"
    order = sorted(range(tensor.dim()), key=lambda d: (-tensor.stride(d), -tensor.shape[d]))
    names = _DIM_NAMES if tensor.dim() == 4 else tuple(f"d{i}" for i in range(tensor.dim()))
    if tensor.permute(order).is_contiguous():
        return f"dense as [{', '.join(names[d] for d in order)}]"
    return f"strides {tuple(tensor.stride())}"


def layout_differences(layouts_seen: list[tuple[str, str, str, str]]) -> list[str]:
    """Lines naming the cases and modes where variants returned outputs of different layouts.

    ``layouts_seen``: ``(variant, case_id, mode, output_layout)`` per evidence (``Evidence.layout_record``).
    ``b1h2s8d4-fp32-causal-strided-cpu (forward): contiguous (sdpa_math); dense as [B, Sq, H, D] (sdpa_flash)``.
    """
    groups: dict[tuple[str, str], dict[str, list[str]]] = {}
    for variant, case_id, mode, layout in layouts_seen:
        if layout:
            layouts = groups.setdefault((case_id, mode), {})
            layouts.setdefault(layout, []).append(variant)
    return [f"{case_id} ({mode}): " + "; ".join(f"{layout} ({', '.join(names)})" for layout, names in layouts.items())
            for (case_id, mode), layouts in groups.items() if len(layouts) > 1]


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
    if variant.fully_masked_rows in UNDEFINED_ROW_RESULTS and rows:
        return None, (f"{variant.name} declares fully_masked_rows={variant.fully_masked_rows!r}: the {rows} query rows "
                      "of this case that see no key may hold any value the reference does not define, so neither are "
                      "the gradients: nothing to compare")
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
    no_backward = variant.backward_unsupported(case.device)
    if mode in GRADIENT_MODES and no_backward:
        raise VariantUnsupported(f"{variant.name} has no backward on {case.device}: {no_backward}")
    prepared = prepared or prepare_case(variant, case, seed)
    step = make_step(mode, prepared.fn, prepared.inputs, prepared.grad_output)
    before, started = compile_stats.snapshot(), time.perf_counter()
    seen: list[str] = []
    result = run_once(variant, case, synchronized(step, case.device), seen)
    first_call_s = time.perf_counter() - started
    compiled = compile_stats.since(before)
    comparison, not_compared = _compare(prepared, mode, result, seed)
    output_stride, output_layout = tuple(result.output.stride()), describe_layout(result.output)
    del result  # not held while profiling
    suffix = "" if mode == "forward" else f"-{mode}"
    trace_path = trace_dir / f"{variant.name}-{case.id}{suffix}.pt.trace.json.gz"
    before = compile_stats.snapshot()
    annotation = step_annotation(mode)
    with announced_once(variant):  # the profiled calls repeat the first call's warnings
        saved = measure_saved(step, case.score_shape, input_tensors(prepared.inputs)) if mode == "forward_backward" else None
        trace = record_trace(step, case.device, trace_path, annotation)
    steps = summarize_windows(trace, annotation)
    accounting = account_windows(trace, annotation, case.score_shape, case.head_dim)
    return Evidence(variant=variant, case=case, mode=mode, comparison=comparison, not_compared=not_compared,
                    steps=tuple(steps), trace_path=trace_path, step=step, first_call_s=first_call_s,
                    compile_first_call=compiled, compile_while_profiled=compile_stats.since(before),
                    saved_for_backward=saved, score_accounting=tuple(accounting), output_stride=output_stride,
                    output_layout=output_layout, warnings=tuple(seen))
