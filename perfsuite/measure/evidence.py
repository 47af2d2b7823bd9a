"""Gather the evidence for one variant on one case in one mode: can it run, is it correct, what did the profiler see.

A variant is prepared once per case (inputs drawn, ``prepare`` run: block masks built,
``torch.compile`` set up) and its evidence gathered once per mode; both are shared by the
equivalence test, the profiler tests and the benchmark, so none of them repeats the others'
work and a compiled variant compiles once per case and grad mode.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from collections.abc import Callable

import torch

from perfsuite.measure import compile_stats
from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.compile_stats import CompileActivity
from perfsuite.attention.contract import forms_in
from perfsuite.attention.inputs import AttentionInputs, make_grad_output, make_inputs
from perfsuite.attention.modes import GRADIENT_MODES, Step, make_step
from perfsuite.attention.reference import TOLERANCES, Comparison, reference_gradients
from perfsuite.measure.call_integrity import (
    KEPT_MEMORY_CALLS,
    kept_bytes_over_calls,
    DEFAULT_DETERMINISM_RUNS,
    FRESH_SEED_OFFSET,
    changed_after_return,
    fresh_input_failures,
    fresh_values,
    kept_bytes_per_call,
    reproducibility_failure,
    settle,
    stale_gradient_names,
    substituted,
)
from perfsuite.measure.call_limit import time_limit
from perfsuite.storage import path_inside
from perfsuite.measure.children import ChildWatch, children_failure, end_children
from perfsuite.measure.threads import ThreadWatch, release_at_exit, threads_failure
from perfsuite.attention.reference_layouts import reference_gradients_in_layout
from perfsuite.measure.correctness import check_output, compare_result, contract_checked
from perfsuite.measure.measurement_guard import MeasurementState, MeasurementTampered
from perfsuite.measure.precision_probes import (
    explaining_mask_value,
    large_score_failure,
    large_score_values,
)
from perfsuite.measure.input_guard import check_and_restore, named_input_tensors, pristine_copy
from perfsuite.measure.layout import describe_layout
from perfsuite.measure.memory_budget import does_not_fit_reason
from perfsuite.measure.profiling import (
    ACTIVE_STEPS,
    WAIT_STEPS,
    WARMUP_STEPS,
    record_trace,
    step_annotation,
)
from perfsuite.measure.refusals import (
    HOST_ALLOCATION_RE,
    UNSUPPORTED_RE,
    VariantUnsupported,
    device_unavailable_reason,
    machine_limit_reason,
    unsupported_reason,
)
from perfsuite.measure.score_accounting import ScoreAccounting, account_windows
from perfsuite.measure.saved_tensors import SavedForBackward, measure_saved
from perfsuite.measure.timing import synchronized
from perfsuite.measure.warnings_capture import (
    announce_warnings,
    announced_once,
    recorded_warnings,
    shown_warnings,
)
from perfsuite.trace.summary import WindowSummary, summarize_windows
from perfsuite.variants import Variant
from perfsuite.variants.registry import VariantFn, layout_forward_only
from perfsuite.variants.unsupported import CaseUnsupported


@dataclasses.dataclass(frozen=True)
class PreparedCase:
    """A variant bound to one case: its inputs, the gradient that seeds backward
    (``[B, H, Sq, D]``) and the function ``Variant.for_case`` returned. ``pristine``: copies of
    the inputs taken before the variant saw them (``perfsuite.measure.input_guard``), from
    which the reference is computed and against which the inputs are checked."""

    variant: Variant
    case: AttentionCase
    inputs: AttentionInputs
    grad_output: torch.Tensor
    fn: VariantFn
    pristine: AttentionInputs | None = None

    def check_inputs(self) -> str | None:
        """Which inputs the variant changed in place since the last check (restored), as a failure message."""
        return (
            check_and_restore(self.variant.name, self.inputs, self.pristine)
            if self.pristine is not None
            else None
        )


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
    ``modified_inputs``: the failure naming the inputs the variant changed in place during the
    checked or profiled calls (restored since), else None. ``output_finite``: the first call's
    output held no NaN or infinity. ``prepared``: the preparation the step runs on.
    ``deceptions``: each way the variant's calls misled the measurement, named
    (``perfsuite.measure.call_integrity``, ``measurement_guard``, ``precision_probes``): threads left
    running, an output that changed after the call, an answer that did not follow fresh inputs, a
    replaced timer or changed torch setting (restored), a failed large-score probe, reruns that differ
    bitwise for a variant declaring determinism. ``kept_bytes_per_call``: memory the step keeps
    across calls (None: none measured). ``bitwise_reproducible``: for a variant declaring
    determinism, whether its reruns matched bitwise; None when not checked.
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
    modified_inputs: str | None = None
    output_finite: bool = True
    prepared: PreparedCase | None = None
    deceptions: tuple[str, ...] = ()
    kept_bytes_per_call: int | None = None
    bitwise_reproducible: bool | None = None

    def __repr__(self) -> str:
        """What a traceback shows of it: the variant, case, mode and outcome, never its tensors (whose
        repr can fail: a ``CausalBias`` copy has no ``variant``) or their values."""
        failure = self.comparison.failure if self.comparison else self.not_compared
        return (
            f"Evidence(variant={self.variant.name!r}, case={self.case.id!r}, mode={self.mode!r}, "
            f"{'failure=' + repr(failure) if failure else 'correct'}, trace={str(self.trace_path)!r})"
        )

    @property
    def layout_record(self) -> tuple[str, str, str, str]:
        """``(variant, case_id, mode, output_layout)``: what ``layout_differences`` compares (no tensors)."""
        return self.variant.name, self.case.id, self.mode, self.output_layout

    @property
    def expected_score_copies(self) -> int:
        return self.variant.expected_score_copies(self.case.hides_keys)

    @property
    def expected_accounted_score_copies(self) -> int:
        """Score copies score accounting must count per forward: ``expected_score_copies`` plus a
        copy the variant declares on this case (``Variant.declared_score_copy``)."""
        declared = self.variant.declared_score_copy(self.case) is not None
        return self.expected_score_copies + int(declared)

    def score_copies(self, lane: str) -> list[int]:
        """Score-sized copies per profiled step on ``lane`` (``"cpu"`` or ``"device"``)."""
        return [f.copies_of_shape(self.case.score_shape, lane) for f in self.steps]


def bind(variant: Variant, inputs: AttentionInputs) -> Callable[[], torch.Tensor]:
    """A no-argument forward of ``variant`` on ``inputs`` (prepared for them), run under ``torch.no_grad()``."""

    forms = variant.forms_unsupported(forms_in(inputs.forms), generating=False)
    if forms is not None:  # never prepared for keywords it cannot take, or without those it needs
        raise VariantUnsupported(forms)
    try:
        fn = variant.for_case(inputs)
    except CaseUnsupported as exc:  # the variant's own named limitation, found by its prepare
        raise VariantUnsupported(str(exc)) from None

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return fn(inputs.query, inputs.key, inputs.value, **inputs.keywords())

    return forward


def run_once(
    variant: Variant,
    case: AttentionCase,
    forward: Callable[[], object],
    seen: list[str] | None = None,
) -> object:
    """First call of the forward; a refusal by torch becomes ``VariantUnsupported`` with its reasons.

    A variant lacking a form the case carries, or requiring one it does not, is not called
    (``VariantUnsupported`` with ``Variant.forms_unsupported``'s reason). Warnings raised during the call are recorded (one line each, appended to ``seen`` when
    given) and shown once per variant and message (``announce_warnings``), not dropped.
    """
    forms = variant.forms_unsupported(case.forms, generating=False)
    if forms is not None:  # a form the case carries and the variant lacks, or the reverse
        raise VariantUnsupported(forms)
    with recorded_warnings() as caught:
        try:
            result = forward()
        except CaseUnsupported as exc:  # the variant's own named limitation
            raise VariantUnsupported(str(exc)) from None
        except (torch.OutOfMemoryError, MemoryError):
            if case.device == "cuda":
                torch.cuda.empty_cache()
            raise VariantUnsupported(
                f"out of {case.device} memory (one score matrix of this case is {case.score_bytes} bytes); "
                "choose smaller shapes with --perfsuite-shapes"
            ) from None
        except Exception as exc:
            if isinstance(exc, RuntimeError) and HOST_ALLOCATION_RE.search(str(exc)):
                raise VariantUnsupported(
                    f"out of host memory (one score matrix of this case is {case.score_bytes} "
                    "bytes); choose smaller shapes with --perfsuite-shapes"
                ) from None
            limit = machine_limit_reason(exc)
            if limit:
                raise VariantUnsupported(f"{variant.name} on {case.device}: {limit}") from None
            if not isinstance(
                exc, (RuntimeError, NotImplementedError)
            ) or not UNSUPPORTED_RE.search(str(exc)):
                raise
            raise VariantUnsupported(unsupported_reason(variant, case, exc, caught)) from None
    lines = shown_warnings(caught)
    if seen is not None:
        seen += [line for line in lines if line not in seen]
    announce_warnings(variant, lines)
    return result


def _inputs_and_copies(case: AttentionCase, seed: int) -> tuple[AttentionInputs, AttentionInputs]:
    inputs = make_inputs(case, seed)
    return inputs, pristine_copy(inputs)


def prepare_case(
    variant: Variant, case: AttentionCase, seed: int, call_limit_s: float | None = None
) -> PreparedCase:
    """Draw ``case``'s inputs from ``seed`` and run the variant's per-case ``prepare``.

    ``call_limit_s``: seconds building the inputs may take, and the variant's ``prepare`` after it
    (``perfsuite.measure.call_limit``; a case of millions of pages builds for minutes); None: no limit.
    Raises ``VariantUnsupported`` when the device is missing, the case would not fit in its
    free memory (``perfsuite.measure.memory_budget``), or torch refuses the case;
    ``CallTimeLimitExceeded`` naming which of the two ran past the limit.
    """
    reason = device_unavailable_reason(case.device) or does_not_fit_reason(variant, case)
    if reason:
        raise VariantUnsupported(reason)
    building = f"building the inputs of case {case.id} (perfsuite's work, before any call of {variant.name})"
    with time_limit(call_limit_s, building):
        inputs, pristine = run_once(variant, case, lambda: _inputs_and_copies(case, seed))
    with time_limit(call_limit_s, f"the per-case prepare of {variant.name} on case {case.id}"):
        fn = run_once(variant, case, lambda: variant.for_case(inputs))
    return PreparedCase(variant, case, inputs, make_grad_output(case, seed), fn, pristine)


def input_tensors(inputs: AttentionInputs) -> tuple[torch.Tensor, ...]:
    """Query, key, value and the mask's tensors (selection, bias, SDPA's mask): storages that are
    the case's inputs, never score matrices a forward saved (a ``[1, H, Sq, Skv]`` bias has as many
    elements as the scores at batch 1)."""
    return tuple(named_input_tensors(inputs).values())


def _modified_failure(comparison: Comparison | None, modified: str) -> Comparison:
    """A failed comparison naming the changed inputs, then what the reference check found."""
    found = (
        f"\nand against the reference from the unmodified inputs: {comparison.failure}"
        if comparison and comparison.failure
        else ""
    )
    return Comparison(comparison.max_abs_error if comparison else float("nan"), modified + found)


def gather_evidence(
    variant: Variant,
    case: AttentionCase,
    seed: int,
    trace_dir: Path,
    mode: str = "forward",
    prepared: PreparedCase | None = None,
    call_limit_s: float | None = None,
    determinism_runs: int = DEFAULT_DETERMINISM_RUNS,
) -> Evidence:
    """Check support, compare with the float64 reference, and profile the variant on ``case`` in ``mode``.

    ``prepared`` (from ``prepare_case``) is reused when given, so modes share one preparation.
    ``call_limit_s``: seconds the first call may take, and each profiled call on average
    (``perfsuite.measure.call_limit``); None: no limit. Past it, ``CallTimeLimitExceeded``.
    ``determinism_runs``: reruns compared bitwise for a variant declaring ``deterministic``.
    Besides the reference check, the calls are checked for deceptions (``Evidence.deceptions``).
    Raises ``VariantUnsupported`` (a skip, with the reason) when the device or the backend
    cannot run the case, or the variant has no backward; any other error propagates.
    """
    no_backward = variant.backward_unsupported(case.device)
    layout_reason = layout_forward_only(case.layout) if mode in GRADIENT_MODES else None
    if layout_reason:
        raise VariantUnsupported(f"case {case.id}: {layout_reason}")
    if mode in GRADIENT_MODES and no_backward:
        raise VariantUnsupported(f"{variant.name} has no backward on {case.device}: {no_backward}")
    prepared = prepared or prepare_case(variant, case, seed)
    modified = prepared.check_inputs()  # by prepare, or by an earlier mode's calls
    inputs, fn = prepared.inputs, prepared.fn
    checked_step = make_step(
        mode, contract_checked(fn, variant, case, inputs), inputs, prepared.grad_output
    )
    step = make_step(mode, fn, inputs, prepared.grad_output)  # timed: no check inside
    guard = MeasurementState.capture()
    try:
        before, started = compile_stats.snapshot(), time.perf_counter()
        seen: list[str] = []
        in_mode = f"variant {variant.name} on case {case.id} in mode {mode}"

        def first_call():
            result = checked_step()
            return result, settle(result.output, case.device)

        with (
            time_limit(call_limit_s, f"the first call of {in_mode}"),
            ThreadWatch() as watch,
            ChildWatch() as children,
        ):
            result, settled = run_once(variant, case, first_call, seen)
        first_call_s = time.perf_counter() - started
        compiled = compile_stats.since(before)
        deceptions = _left_running(
            variant, watch, f"the first call of case {case.id} in mode {mode}", children
        )
        modified = prepared.check_inputs() or modified
        reference_inputs = prepared.pristine or inputs
        comparison, not_compared = compare_result(
            variant, case, reference_inputs, prepared.grad_output, mode, result, seed
        )
        if modified:
            comparison, not_compared = _modified_failure(comparison, modified), None
        escaped = changed_after_return(result.output, settled, variant.name, "its first call")
        deceptions += [escaped] if escaped else []
        output_finite = bool(torch.isfinite(result.output).all())
        output_stride, output_layout = tuple(result.output.stride()), describe_layout(result.output)
        checked_calls = CHECKED_CALLS + (determinism_runs if variant.deterministic else 0)
        each = f" (at most {call_limit_s:g} s each)" if call_limit_s else ""
        with (
            announced_once(variant),  # the checked calls repeat the first call's warnings
            time_limit(
                call_limit_s and call_limit_s * checked_calls,
                f"the {checked_calls} checked calls (fresh inputs, large-score probe"
                f"{', determinism reruns' if variant.deterministic else ''}) of {in_mode}{each}",
            ),
        ):
            deceptions += _checked_calls(prepared, mode, result, seed, determinism_runs)
            reproducible = _reproducible(prepared, checked_step, result, determinism_runs)
        if isinstance(reproducible, str):
            deceptions.append(reproducible)
    except BaseException as exc:  # a failure caused by tampering names it; the state is restored
        tampered = guard.check_and_restore(
            variant.name, f"its calls on case {case.id} in mode {mode}"
        )
        if tampered:
            raise MeasurementTampered(tampered) from exc
        raise
    tampered = guard.check_and_restore(variant.name, f"its calls on case {case.id} in mode {mode}")
    deceptions += [tampered] if tampered else []
    del result, settled  # not held while profiling
    suffix = "" if mode == "forward" else f"-{mode}"
    trace_path = path_inside(trace_dir, f"{variant.name}-{case.id}{suffix}.pt.trace.json.gz")
    before = compile_stats.snapshot()
    annotation = step_annotation(mode)
    profiled_calls = WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS + (mode == "forward_backward")
    profiled_limit = call_limit_s * profiled_calls if call_limit_s else None
    each = f" (at most {call_limit_s:g} s each)" if call_limit_s else ""
    with (
        announced_once(variant),
        time_limit(profiled_limit, f"the {profiled_calls} profiled calls of {in_mode}{each}"),
    ):
        # the profiled calls repeat the first call's warnings
        saved = (
            measure_saved(step, case.score_shape, input_tensors(prepared.inputs))
            if mode == "forward_backward"
            else None
        )
        with ThreadWatch() as watch, ChildWatch() as children:
            trace = record_trace(step, case.device, trace_path, annotation)
    steps = summarize_windows(trace, annotation)
    kept = kept_bytes_per_call([s.allocated_level_bytes.get(case.device) for s in steps])
    if kept:  # judged again without recorded shapes, past the first calls (a cache filling)
        confirm_limit = call_limit_s * KEPT_MEMORY_CALLS if call_limit_s else None
        confirming = f"the {KEPT_MEMORY_CALLS} calls judging kept memory{each}"
        with announced_once(variant), time_limit(confirm_limit, confirming):
            kept = kept_bytes_over_calls(step, case.device)
    deceptions += _left_running(
        variant, watch, f"its profiled calls on case {case.id} in mode {mode}", children
    )
    tampered = guard.check_and_restore(variant.name, f"its profiled calls on case {case.id}")
    deceptions += [tampered] if tampered else []
    later = prepared.check_inputs()  # restores what the profiled calls changed
    if later and not modified:  # a variant that changes its inputs only in later calls
        modified = later
        comparison, not_compared = _modified_failure(comparison, modified), None
    accounting = account_windows(trace, annotation, case.score_shape, case.head_dim)
    return Evidence(
        variant=variant,
        case=case,
        mode=mode,
        comparison=comparison,
        not_compared=not_compared,
        steps=tuple(steps),
        trace_path=trace_path,
        step=step,
        first_call_s=first_call_s,
        compile_first_call=compiled,
        compile_while_profiled=compile_stats.since(before),
        saved_for_backward=saved,
        score_accounting=tuple(accounting),
        output_stride=output_stride,
        output_layout=output_layout,
        warnings=tuple(seen),
        modified_inputs=modified,
        output_finite=output_finite,
        prepared=prepared,
        deceptions=tuple(deceptions),
        kept_bytes_per_call=kept,
        bitwise_reproducible=None if reproducible is None else reproducible is True,
    )


# Calls the checks after the first call make at most: fresh inputs 1, large-score probe 2 (determinism
# reruns come on top, for variants that declare determinism).
CHECKED_CALLS = 3


def _left_running(
    variant: Variant, watch: ThreadWatch, during: str, children: ChildWatch | None = None
) -> list[str]:
    """The failures naming threads ``during`` left running (released so they cannot block the exit)
    and child processes it left running (ended, ``perfsuite.measure.children``)."""
    threads = watch.left_running()
    failure = [threads_failure(variant.name, threads, during)] if threads else []
    for thread in threads:
        release_at_exit(thread)
    left = children.left_running() if children is not None else []
    if left:
        failure.append(children_failure(variant.name, end_children(left), during))
    return failure


def _wrong_on_its_own(
    prepared: PreparedCase, reference_inputs: AttentionInputs, output: torch.Tensor
) -> bool:
    """Whether the first call's ``output`` fails the reference on the case's own inputs (asked only
    when the call on fresh inputs failed, so a correct variant pays nothing)."""
    label = f"variant {prepared.variant.name} on case {prepared.case.id}"
    try:
        found = check_output(prepared.variant, prepared.case, reference_inputs, output, label)
    except torch.OutOfMemoryError:
        return False
    return found.failure is not None


def _reference_gradients(
    case: AttentionCase, inputs: AttentionInputs, grad_output: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The float64 reference's gradients, shaped as query/key/value (a layout case: per sequence)."""
    if case.layout.is_plain:
        return reference_gradients(inputs, grad_output)
    return reference_gradients_in_layout(case, inputs, grad_output)


def _checked_calls(
    prepared: PreparedCase, mode: str, first, seed: int, determinism_runs: int
) -> list[str]:
    """Fresh inputs (every mode) and the large-score probe (forward): the named failures."""
    variant, case, inputs = prepared.variant, prepared.case, prepared.inputs
    reference_inputs = prepared.pristine or inputs
    checked_fn = contract_checked(prepared.fn, variant, case, inputs)
    first_copy = first.output.detach().clone()
    fresh = fresh_values(case, seed, reference_inputs)
    failures: list[str] = []
    with substituted(inputs, fresh), ThreadWatch() as watch, ChildWatch() as children:
        fresh_step = make_step(mode, checked_fn, inputs, prepared.grad_output)
        fresh_result = synchronized(fresh_step, case.device)()
        label = f"variant {variant.name} on case {case.id} (seed {seed + FRESH_SEED_OFFSET})"
        try:  # the output against the reference; gradients are checked for staleness only (cost)
            fresh_comparison = check_output(variant, case, fresh, fresh_result.output, label)
        except torch.OutOfMemoryError:
            fresh_comparison = (
                None  # the reference did not fit: as for the first call, not compared
            )
    failures += _left_running(variant, watch, f"a call on fresh inputs of case {case.id}", children)
    references: dict = {}

    def reference_changed(index: int) -> bool:
        if not references:
            references["first"] = _reference_gradients(case, reference_inputs, prepared.grad_output)
            references["fresh"] = _reference_gradients(case, fresh, prepared.grad_output)
        a, b = references["first"][index], references["fresh"][index]
        return bool((a - b).abs().max() > TOLERANCES[inputs.query.dtype][0]) if a.numel() else False

    wrong_fresh = fresh_comparison.failure if fresh_comparison else None
    if wrong_fresh and _wrong_on_its_own(prepared, reference_inputs, first_copy):
        wrong_fresh = None  # wrong on the case's own inputs too: the reference test names that
    failures += fresh_input_failures(
        variant.name,
        first,
        first_copy,
        fresh_result,
        wrong_fresh,
        seed + FRESH_SEED_OFFSET,
        stale_gradient_names(first, fresh_result, reference_changed),
    )
    del fresh_result
    if (
        mode == "forward" and case.layout.is_plain and reference_inputs.scale != 0
    ):  # packed sequences: the probe's layout is [B, H, S, D]; scale 0: no score can be large
        probe = large_score_values(reference_inputs)
        probe_step = synchronized(
            make_step(mode, checked_fn, inputs, prepared.grad_output), case.device
        )
        with substituted(inputs, probe):
            output = probe_step().output
            if not bool(torch.isfinite(output).all()) and bool(
                torch.isfinite(probe_step().output).all()
            ):
                return failures + [
                    f"variant {variant.name} returned non-finite values on some calls only: on the large-score "
                    "probe it gave NaN or infinity, then finite values for the same inputs on the next call"
                ]
            label = f"variant {variant.name} on case {case.id} (large-score probe)"
            try:  # near exact in the plain computation, unless a bias is added to the large scores
                derived = probe.mask.additive is not None
                found = check_output(variant, case, probe, output, label, derived=derived)
            except torch.OutOfMemoryError:
                found = None  # the reference did not fit: the probe is left out, as the check is
        mask_value = (
            explaining_mask_value(probe, output)
            if found and found.failure and case.hides_keys
            else None
        )
        failure = found and large_score_failure(variant.name, found.failure, output, mask_value)
        failures += [failure] if failure else []
    return failures


def _reproducible(
    prepared: PreparedCase, checked_step: Step, first, runs: int
) -> bool | str | None:
    """None (not declared or no reruns), True (bitwise reproducible) or the failure naming the first difference."""
    if not prepared.variant.deterministic or runs < 1:
        return None
    failure = reproducibility_failure(
        synchronized(checked_step, prepared.case.device), first, runs, prepared.variant.name
    )
    return failure or True
