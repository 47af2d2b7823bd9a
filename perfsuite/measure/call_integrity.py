"""A call's work is inside the call, and its answer depends on this call's inputs.

Checks made on a variant's checked (untimed) calls, each failing with its reason named:

* threads a call started and left running (a thread that fills the output after the call returned,
  so the work escapes the timer): ``perfsuite.measure.threads``.
* ``output_settled``: the output does not change after the call returned (work left on a side
  CUDA stream or in a thread); on CUDA the current stream is waited for, then the device.
* ``fresh_input_failures``: the same tensors given other values (another seed, written in place so
  the data pointers stay the same) must give the reference's answer for those values: a cached
  answer (keyed on shapes or data pointers) fails with "the output did not change with the inputs",
  a computation on a subset of the inputs with the element named, and an output that a later
  call overwrites (it aliases the variant's own storage) with that said.
* ``kept_bytes_per_call``: memory a variant keeps across calls, read from the allocator's running
  total at the start of each profiled step (no extra call). Growth there is judged again by
  ``kept_bytes_over_calls`` (``KEPT_MEMORY_CALLS`` more calls, profiled for memory only) before it
  is reported: the profiled steps record shapes, and torch's profiler then keeps some tensors alive
  (eager ``flex_attention``'s, 518 KiB a call on ``b2h8s256d64-fp32-causal-cpu``), and a cache that
  fills in the first calls stops growing; only growth that goes on after the first
  ``KEPT_MEMORY_SETTLE_CALLS`` calls is reported.
* ``reproducibility_failure``: for a variant that declares itself deterministic, N reruns of the
  step compared bitwise with the first.

Cost (outside every timed interval): one more call of the step and one more float64 reference of
the output (and its plain computation in the case's dtype, for the tolerance) for the fresh inputs;
N calls for a variant declaring determinism; ``KEPT_MEMORY_CALLS`` calls when the profiled steps'
level grew.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from perfsuite.attention.inputs import AttentionInputs, make_inputs
from perfsuite.attention.modes import StepResult
from perfsuite.units import format_bytes

FRESH_SEED_OFFSET = 7_919  # the fresh inputs' seed is the suite's seed plus this
KEPT_MEMORY_MIN_BYTES_PER_CALL = 1 << 10  # kept memory below this per call is not reported
DEFAULT_DETERMINISM_RUNS = 10
KEPT_MEMORY_CALLS = 8  # calls a suspected growth is judged again over (kept_bytes_over_calls)
KEPT_MEMORY_SETTLE_CALLS = 3  # growth in this many first calls is a cache filling, not judged

# -- work outside the call ------------------------------------------------------------------


def settle(output: torch.Tensor, device: str, api=None) -> torch.Tensor:
    """A copy of ``output`` as the call's own stream left it; then the whole device is waited for.

    On CUDA the current stream is synchronized first (what CUDA events around the call measure),
    the copy taken, then the device synchronized, so work left on a side stream shows as an output
    that changes afterwards (``changed_after_return``). ``api``: the ``DeviceApi`` (a fake in tests).
    """
    if device == "cuda" or api is not None:
        from perfsuite.measure.device_api import TorchCuda

        api = api or TorchCuda()
        api.synchronize_stream()
        copy = output.detach().clone()
        api.synchronize()
        return copy
    return output.detach().clone()


def changed_after_return(
    output: torch.Tensor, settled: torch.Tensor, variant_name: str, during: str
) -> str | None:
    """The failure when ``output`` differs (bitwise, NaN equal to NaN) from the copy ``settle`` took."""
    if _bitwise_equal(output.detach(), settled):
        return None
    return (
        f"variant {variant_name}'s output changed after {during} returned: work the call started ran on "
        "after it (a side CUDA stream not joined, or a thread), outside its timed interval"
    )


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        same = (a == b) | (torch.isnan(a) & torch.isnan(b))
        return bool(same.all()) and torch.equal(torch.signbit(a), torch.signbit(b))
    return torch.equal(a, b)


# -- fresh inputs ----------------------------------------------------------------------------

_REPLACED = ("query", "key", "value")


@contextlib.contextmanager
def substituted(inputs: AttentionInputs, values: AttentionInputs) -> Iterator[None]:
    """``inputs``' query, key and value hold ``values``' for the block, written in place (same
    tensors, same data pointers), restored after it. Written through ``.data``, so the autograd
    version counters do not move and a stored graph (the backward mode's) stays valid once restored."""
    saved = {name: getattr(inputs, name).detach().clone() for name in _REPLACED}
    with torch.no_grad():
        for name in _REPLACED:
            getattr(inputs, name).data.copy_(getattr(values, name))
    try:
        yield
    finally:
        with torch.no_grad():
            for name in _REPLACED:
                getattr(inputs, name).data.copy_(saved[name])


def fresh_values(case, seed: int, pristine: AttentionInputs) -> AttentionInputs:
    """``pristine`` with query, key and value drawn from ``seed + FRESH_SEED_OFFSET`` (the mask kept)."""
    drawn = make_inputs(case, seed + FRESH_SEED_OFFSET)
    return pristine.replace(query=drawn.query, key=drawn.key, value=drawn.value)


def fresh_input_failures(
    variant_name: str,
    first: StepResult,
    first_copy: torch.Tensor,
    fresh_result: StepResult,
    fresh_comparison_failure: str | None,
    fresh_seed: int,
    stale_gradients: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """What the call on fresh inputs showed: a stale answer, an overwritten earlier output, a wrong answer.

    ``first``: the first call's result on the case's inputs, ``first_copy`` a copy of its output
    taken then; ``fresh_result``: a later call on the same tensors holding other values (seed
    ``fresh_seed``); ``fresh_comparison_failure``: its output's comparison with the reference for those
    values. ``stale_gradients``: names of the gradients (``grad_key``) that were bitwise the first call's
    although the reference's changed (``stale_gradient_names``).
    """
    failures = []
    where = f"inputs of the same case drawn from seed {fresh_seed} (same tensors, new values)"
    if _bitwise_equal(fresh_result.output.detach(), first_copy):
        failures.append(
            f"variant {variant_name}: the output did not change with the inputs: on {where} it returned "
            "exactly the first call's output (a cached or stale answer)"
        )
    elif stale_gradients:
        failures.append(
            f"variant {variant_name}: the gradients did not change with the inputs: on {where} its "
            f"{', '.join(stale_gradients)} were exactly the first call's, though the reference's changed "
            "(a cached or stale answer)"
        )
    elif fresh_comparison_failure:
        failures.append(
            f"variant {variant_name} is wrong on {where}, right on the case's own: "
            f"{fresh_comparison_failure}"
        )
    if not _bitwise_equal(first.output.detach(), first_copy):
        failures.append(
            f"variant {variant_name}: a later call overwrote the output of an earlier one (the output aliases "
            "storage the variant keeps and reuses); every call must return its own tensor"
        )
    return failures


def stale_gradient_names(
    first: StepResult,
    fresh: StepResult,
    reference_changed: Callable[[int], bool],
) -> list[str]:
    """Gradients of ``fresh`` bitwise equal to ``first``'s whose reference changed with the inputs.

    A gradient may legitimately stay the same for other inputs (a query that sees one key has a zero
    query gradient whatever the values), so an equal one is stale only when ``reference_changed(i)``
    (the float64 reference's gradient ``i`` differs between the two inputs) says it had to change;
    that reference is computed only for gradients that did not change."""
    names = ("grad_query", "grad_key", "grad_value")
    same = [
        i
        for i, (a, b) in enumerate(zip(fresh.gradients or (), first.gradients or ()))
        if _bitwise_equal(a.detach(), b.detach()) and bool(torch.isfinite(a).all())
    ]  # a NaN gradient (a variant whose fully masked rows are NaN) is not compared, as in the check
    return [names[i] for i in same if reference_changed(i)]


# -- memory kept across calls ---------------------------------------------------------------


def kept_bytes_per_call(
    levels: list[int | None], least: int = KEPT_MEMORY_MIN_BYTES_PER_CALL
) -> int | None:
    """Bytes a step keeps per call, from the bytes live at the start of consecutive profiled steps
    (``WindowSummary.allocated_level_bytes``: the allocator's own running total, exact on the CPU and
    on CUDA; the outputs of earlier steps are freed by then). Reported when the level grew before every
    step, by ``least`` bytes at least on average: the mean growth; None when it did not, or fewer than
    two levels were read."""
    if len(levels) < 2 or any(level is None for level in levels):
        return None
    growth = [b - a for a, b in zip(levels, levels[1:])]
    if all(g > 0 for g in growth) and sum(growth) >= least * len(growth):
        return sum(growth) // len(growth)
    return None


def continued_growth_per_call(
    levels: list[int | None],
    settle: int = KEPT_MEMORY_SETTLE_CALLS,
    least: int = KEPT_MEMORY_MIN_BYTES_PER_CALL,
) -> int | None:
    """Bytes per call that the live level still grows by after the first ``settle`` calls: the mean
    growth from ``levels[settle]`` to the last level, reported when it is ``least`` bytes per call at
    least; None when it is less (a cache that filled in the first calls and stopped), or fewer than
    two levels are left after ``settle``, or a level is missing. ``levels``: the bytes live at the
    start of consecutive calls (``WindowSummary.allocated_level_bytes``).

    Raises ``ValueError`` for a negative ``settle``.
    """
    if settle < 0:
        raise ValueError(f"settle={settle}; allowed: 0 or more calls")
    later = levels[settle:]
    if len(later) < 2 or any(level is None for level in later):
        return None
    per_call = (later[-1] - later[0]) // (len(later) - 1)
    return per_call if per_call >= least else None


def kept_bytes_over_calls(
    step: Callable[[], object],
    device: str,
    calls: int = KEPT_MEMORY_CALLS,
    settle: int = KEPT_MEMORY_SETTLE_CALLS,
) -> int | None:
    """Bytes per call ``step`` keeps, judged over ``calls`` calls profiled for memory only (no shapes,
    which make torch's profiler keep tensors alive): ``continued_growth_per_call`` of the level at
    each call's start, None when the growth stops within the first ``settle`` calls. On CUDA each
    call is synchronized. Outside every timed interval.

    Raises ``ValueError`` when ``calls`` leaves fewer than two calls after ``settle``.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    from perfsuite.trace.summary import summarize_windows

    if calls - settle < 2:
        raise ValueError(
            f"calls={calls}, settle={settle}: at least two calls must follow the settle calls"
        )
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    annotation = "perfsuite_kept_memory"
    with profile(activities=activities, profile_memory=True, record_shapes=False) as prof:
        for _ in range(calls):
            with record_function(annotation):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
    trace = _chrome_trace(prof)
    levels = [w.allocated_level_bytes.get(device) for w in summarize_windows(trace, annotation)]
    return continued_growth_per_call(levels, settle)


def _chrome_trace(prof) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "trace.json"
        prof.export_chrome_trace(str(raw))
        return json.loads(raw.read_text(encoding="utf-8"))


def kept_memory_warning(variant_name: str, case_id: str, mode: str, bytes_per_call: int) -> str:
    """The warning line for a variant that keeps memory across calls."""
    return (
        f"variant {variant_name} on {case_id} ({mode}) keeps {format_bytes(bytes_per_call)} per call "
        f"({bytes_per_call} bytes): memory it holds on to grows with every call (a cache or a list of outputs); "
        "a long run will run out of memory"
    )


# -- determinism --------------------------------------------------------------------------


def reproducibility_failure(
    step: Callable[[], StepResult], first: StepResult, runs: int, variant_name: str
) -> str | None:
    """For a variant declaring determinism: ``runs`` more calls of ``step``, each compared bitwise
    (output and gradients) with ``first``; the first difference named, or None."""
    expected = [first.output.detach().clone()] + [
        g.detach().clone() for g in (first.gradients or ())
    ]
    names = ["output", "grad_query", "grad_key", "grad_value"]
    for run in range(1, runs + 1):
        result = step()
        got = [result.output] + list(result.gradients or ())
        for name, a, b in zip(names, got, expected):
            if not _bitwise_equal(a.detach(), b):
                differing = int((a.detach() != b).sum())
                return (
                    f"variant {variant_name} declares itself deterministic, but rerun {run} of {runs} differs "
                    f"bitwise from the first call in its {name} ({differing} of {b.numel()} elements)"
                )
    return None
