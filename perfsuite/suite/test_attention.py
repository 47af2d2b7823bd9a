"""The attention suite: every variant x case x mode is checked, profiled and timed.

Parametrized by the perfsuite plugin over the selected variants, cases and modes; a variant
that cannot run a case (or has no backward) is skipped with the reason torch gave.
"""

import pytest
import torch

from perfsuite.attention.cases import Device
from perfsuite.attention.modes import Mode
from perfsuite.measure import compile_stats, contention, speed_reference
from perfsuite.trace.kernel_families import (
    FLEX_FUSED_FAMILY,
    SDPA_BACKEND_FAMILIES,
    fused_kernel_failure,
    is_unfused_attention_work,
    kernel_family,
    pinned_backend_failure,
)
from perfsuite.suite.record import benchmark_extra_info
from perfsuite.suite.reliability import (
    float64_check_of,
    headline,
    refer_copy,
    score_copies_failure,
)
from perfsuite.measure.children import ChildWatch, children_failure, end_children
from perfsuite.measure.threads import ThreadWatch, release_at_exit, threads_failure
from perfsuite.measure.call_limit import time_limit
from perfsuite.measure.measurement_guard import MeasurementState, RecordingTimer
from perfsuite.measure.correctness import nonfinite_after_timing
from perfsuite.measure.precision_probes import restates_wrong_output
from perfsuite.measure.profiling import ACTIVE_STEPS
from perfsuite.measure.score_accounting import copy_count_words, copy_labels
from perfsuite.measure.device_api import CAPTURE_WARMUPS
from perfsuite.measure.device_timing import (
    DISPATCH_PROBES,
    KERNEL_BLOCK,
    SIZING_SAMPLES,
    benchmark_step,
)
from perfsuite.measure.sampling import SamplingRule

UNFUSED_OPS = (
    "aten::bmm",
    "aten::mm",
    "aten::matmul",
    "aten::baddbmm",
    "aten::_softmax",
    "aten::_safe_softmax",
)


def test_matches_float64_reference(mode_evidence, perfsuite_run, request):
    """Outputs, and in backward modes dq/dk/dv, against float64 (perfsuite.attention.reference).
    A wrong forward output fails here in full, whatever ran first; the pair's other checks that find
    the same mistake skip, referring to this test (``refer_wrong_output``)."""
    if mode_evidence.not_compared:
        pytest.skip(mode_evidence.not_compared)
    failure = mode_evidence.comparison.failure
    if failure is not None and mode_evidence.mode == Mode.FORWARD:
        key = (mode_evidence.variant.name, mode_evidence.case.id)
        perfsuite_run.output_failures.note(key, request.node.nodeid, failure)
    elif failure is not None:
        _refer_to_forward_output(perfsuite_run, request, mode_evidence, failure)
    assert failure is None, failure


def _refer_to_forward_output(perfsuite_run, request, evidence, failure: str) -> None:
    """In a gradient mode: when the output is wrong in forward mode too, the forward check reports that
    mistake in full: skip, referring to it. Returns when it is not collected or its output is right
    (a gradient's own failure)."""
    key = (evidence.variant.name, evidence.case.id)
    twin = float64_check_of(request.session.items, *key)
    if twin is None:
        return
    try:
        forward = perfsuite_run.evidence(evidence.variant, evidence.case, Mode.FORWARD)
    except (pytest.skip.Exception, pytest.fail.Exception):
        return  # forward mode's own skip or error is reported by its own tests
    wrong = forward.comparison.failure if forward.comparison is not None else None
    if wrong is not None:
        what = f"the float64 check in mode {evidence.mode} fails too: {headline(failure)}"
        perfsuite_run.output_failures.refer_to(key, twin, wrong, what)


def test_calls_cannot_fool_the_measurement(mode_evidence, perfsuite_run, request):
    """The calls depend on this call's inputs (fresh inputs), finish inside the call (no thread left
    running, no output changing afterwards), leave the timers and torch's settings alone, hold on the
    large-score probe, and rerun bitwise when the variant declares determinism
    (``perfsuite.measure.call_integrity``, ``measurement_guard``, ``precision_probes``). A probe
    failure of an output already wrong on the case's own inputs is that mistake again: the first of
    the pair's checks to fail explains it, the others skip with one line referring to it."""
    deceptions = mode_evidence.deceptions
    if deceptions and all(map(restates_wrong_output, deceptions)):
        refer_wrong_output(
            perfsuite_run, request, mode_evidence, "the large-score probe fails too", deceptions
        )
    assert not deceptions, "\n".join(deceptions)


def refer_wrong_output(
    perfsuite_run, request, evidence, what: str, failures: list[str], note: bool = True
) -> None:
    """Skip with one line (``what``, and the check that reports the mistake in full) when ``evidence``'s
    output is wrong on the case's own inputs (``failures`` restate it): the pair's forward float64 check
    reports it whenever it is collected (whatever ran first, on whichever xdist worker), else the first
    check of the pair that failed in this process. Returns when this check is that first one (noted,
    when ``note``)."""
    comparison = evidence.comparison
    key = (evidence.variant.name, evidence.case.id)
    if comparison is None or comparison.failure is None:
        return
    twin = float64_check_of(request.session.items, *key)
    if twin is not None and twin != request.node.nodeid:
        perfsuite_run.output_failures.refer_to(key, twin, comparison.failure, what)
    perfsuite_run.output_failures.refer(key, what)
    if note:
        perfsuite_run.output_failures.note(key, request.node.nodeid, "\n".join(failures))


def output_is_score_sized(variant, case, mode=None) -> str | None:
    """Cases with head_dim == seq_len_kv, for variants that must not copy: a copy of the output would count."""
    if case.head_dim == case.seq_len_kv and variant.expected_score_copies(case.hides_keys) == 0:
        return "head_dim == seq_len_kv: a copy of the output has the score matrix's shape"
    return None


@pytest.mark.perfsuite_applies.with_args(output_is_score_sized)
def test_score_copies_per_step(attention_evidence, perfsuite_run, request):
    """naive copies the masked score matrix once per forward; the others never copy it. The first of
    the pair's score-copy checks to fail explains the copy; the others refer to it in one line."""
    evidence = attention_evidence
    assert len(evidence.steps) == ACTIVE_STEPS, (
        f"profiler recorded {len(evidence.steps)} forwards in {evidence.trace_path}"
    )
    failure = score_copies_failure(evidence)
    if failure is not None:
        _one_copy_failure(perfsuite_run, request, evidence, "score copies per step fail", failure)
    assert failure is None, failure


def _one_copy_failure(perfsuite_run, request, evidence, what: str, failure: str) -> None:
    """A pair's score copy is one mistake: skip in one line referring to the check that reports it in
    full (``refer_copy``), else note this check as that one (``SuiteSession.copy_failures``)."""
    refer_copy(perfsuite_run, request, evidence, f"{what} too")
    key = (evidence.variant.name, evidence.case.id)
    perfsuite_run.copy_failures.note(key, request.node.nodeid, failure)


def accounting_applies(variant, case, mode=None) -> str | None:
    """Compiled variants (accounting reads ATen ops, not Inductor's kernels), and the cases above."""
    if variant.compiled:
        return "Inductor runs its own kernels, not ATen ops: score accounting sees only its extern calls"
    return output_is_score_sized(variant, case)


@pytest.mark.perfsuite_applies.with_args(accounting_applies)
def test_score_accounting_per_step(attention_evidence, perfsuite_run, request):
    """The post's findings on score accounting: per forward, naive writes one score copy when the
    mask hides keys; naive_inplace and SDPA none (``perfsuite.measure.score_accounting``); a copy a
    variant declares on the case (``register_variant(score_copy=...)``) is expected. A copy another
    score-copy check of the pair reported first is referred to in one line."""
    failure = score_accounting_failure(attention_evidence)
    if failure is not None:
        what = "score accounting fails"
        _one_copy_failure(perfsuite_run, request, attention_evidence, what, failure)
    assert failure is None, failure


def score_accounting_failure(evidence) -> str | None:
    """Why ``evidence``'s accounted score copies per forward are not the expected ones, naming the copy
    writes first (``score_copies_failure``'s form); None when they are."""
    accounting = evidence.score_accounting
    copies = [a.copies for a in accounting]
    expected = [float(evidence.expected_accounted_score_copies)] * ACTIVE_STEPS
    if copies == expected:
        return None
    declared = evidence.variant.declared_score_copy(evidence.case)
    worst = max(copies, key=lambda n: abs(n - expected[0]), default=0.0)
    where = copy_labels(accounting[0] if accounting else None) or ["no copy write"]
    return (
        f"{evidence.variant.name} on {evidence.case.id}: {copy_count_words(worst, expected[0])}: "
        f"{', '.join(where)} (score copies per forward {copies}, expected {expected}"
        + (f", one declared: {declared}" if declared else "")
        + "); "
        f"score-sized writes: {[w.label for w in accounting[0].writes] if accounting else []}; "
        f"trace: {evidence.trace_path}"
    )


def declares_saved_scores(variant):
    """variants that declare saves_scores_for_backward"""
    return variant.saves_scores_for_backward is not None


def scores_distinguishable(variant, case, mode=None) -> str | None:
    """Cases with head_dim == seq_len_kv: the output has as many elements as the scores."""
    if case.head_dim == case.seq_len_kv:
        return "head_dim == seq_len_kv: the output has as many elements as the scores"
    return None


@pytest.mark.perfsuite_only.with_args(
    declares_saved_scores
)  # with_args: a lone callable would be decorated
@pytest.mark.perfsuite_applies.with_args(scores_distinguishable)
def test_scores_saved_for_backward(variant, case, perfsuite_run):
    """Unfused softmax saves a [B, H, Sq, Skv] score matrix for backward; fused kernels never do.

    Variants that depend on the case (sdpa's dispatch, Inductor's pattern matching, users' own
    functions by default) declare nothing and are only reported (``saved for bwd`` column)."""
    if Mode.FORWARD_BACKWARD not in perfsuite_run.settings.modes:
        pytest.skip("mode forward_backward is not selected (--perfsuite-modes)")
    evidence = perfsuite_run.evidence(variant, case, Mode.FORWARD_BACKWARD)
    saved, expected = evidence.saved_for_backward, variant.saves_scores_for_backward
    assert (saved.score_sized > 0) == expected, (
        f"{variant.name} on {case.id}: saved for backward {saved}; expected "
        f"{'at least one' if expected else 'no'} score-sized tensor ({case.score_bytes} bytes each)"
    )


@pytest.mark.perfsuite_only("fused")
def test_fused_variant_runs_no_unfused_matmul_or_softmax(attention_evidence):
    """One fused kernel: no ATen matmul/softmax op on the CPU lane, no GEMM/softmax kernel on CUDA."""
    evidence = attention_evidence
    for step in evidence.steps:
        unfused_ops = sorted(op for op in step.cpu_ops if op in UNFUSED_OPS)
        unfused_kernels = sorted(
            k for k in step.kernels if is_unfused_attention_work(kernel_family(k))
        )
        assert not unfused_ops and not unfused_kernels, (
            f"{evidence.variant.name} on {evidence.case.id}: unfused work in a forward: ops {unfused_ops}, "
            f"kernels {unfused_kernels}; trace: {evidence.trace_path}"
        )


def pinned_to_a_fused_sdpa_backend(variant):
    """variants pinned to SDPA's flash, efficient or cudnn backend"""
    return variant.sdpa_backend in SDPA_BACKEND_FAMILIES


def on_a_device_lane(variant, case, mode=None) -> str | None:
    """CPU cases: kernel families are read from the trace's device lane."""
    if case.device != Device.CUDA:
        return "kernel families are read from the device lane; this case runs on the CPU"
    return None


@pytest.mark.perfsuite_only.with_args(pinned_to_a_fused_sdpa_backend)
@pytest.mark.perfsuite_applies.with_args(on_a_device_lane)
def test_pinned_backend_runs_its_own_fused_kernel(attention_evidence):
    """On CUDA a pinned SDPA backend runs its own fused kernel family (flash, cutlass, cuDNN; AOTriton
    or CK on ROCm) and nothing unfused: a silent fallback fails with the kernel names. A flash variant
    runs the flash implementation it claims (``Variant.flash_impl``: FA2, FA3, FA4; not on ROCm)."""
    evidence, variant = attention_evidence, attention_evidence.variant
    rocm = torch.version.hip is not None
    for step in evidence.steps:
        failure = pinned_backend_failure(
            step.kernels, variant.sdpa_backend, variant.flash_impl, rocm=rocm
        )
        assert failure is None, (
            f"{evidence.variant.name} on {evidence.case.id}: {failure}; trace: {evidence.trace_path}"
        )


def compiled_flex(variant):
    """flex_compiled"""
    return variant.name == "flex_compiled"


@pytest.mark.perfsuite_only.with_args(compiled_flex)
@pytest.mark.perfsuite_applies.with_args(
    on_a_device_lane
)  # on the CPU Inductor's flex_attention is C++
def test_compiled_flex_runs_its_fused_triton_kernel(attention_evidence):
    """On CUDA compiled flex_attention runs Inductor's fused attention template (``triton_tem_*``)."""
    evidence = attention_evidence
    for step in evidence.steps:
        failure = fused_kernel_failure(step.kernels, (FLEX_FUSED_FAMILY,))
        assert failure is None, (
            f"{evidence.variant.name} on {evidence.case.id}: {failure}; trace: {evidence.trace_path}"
        )


@pytest.mark.perfsuite_only("compiled")
def test_compiled_once_without_graph_breaks(mode_evidence):
    """A compiled variant compiles in one graph (at the first call of its grad mode; forward_backward
    reuses backward's), never while profiled, and its profiled steps run Inductor's compiled graphs."""
    evidence, where = (
        mode_evidence,
        f"{mode_evidence.variant.name} on {mode_evidence.case.id} ({mode_evidence.mode})",
    )
    first, profiled = evidence.compile_first_call, evidence.compile_while_profiled
    assert first.graph_breaks == {}, f"{where}: graph breaks {first.graph_breaks}"
    assert profiled.graphs_compiled == 0, (
        f"{where}: {profiled.graphs_compiled} graph(s) recompiled while profiled"
    )
    graph_calls = [f.compiled_graph_calls for f in evidence.steps]
    assert all(graph_calls), (
        f"{where}: no '## Call CompiledFxGraph' range in the profiled steps of {evidence.trace_path}"
    )
    work = {(f.cpu_op_count, f.kernel_count) for f in evidence.steps}
    assert len(work) == 1, (
        f"{where}: ops/kernels differ between profiled steps after compile: {work}"
    )


def test_benchmark(mode_evidence, benchmark, perfsuite_run, request):
    """Times the step: pytest-benchmark's host timer, or on CUDA the device clock of
    ``--perfsuite-timer`` (``perfsuite.measure.device_timing``), with wall and device time kept."""
    evidence = mode_evidence
    case = evidence.case
    run = perfsuite_run.settings
    benchmark.group = case.id
    if evidence.modified_inputs or evidence.deceptions:
        _not_timed(evidence, perfsuite_run, request)
    benchmark.extra_info.update(benchmark_extra_info(evidence))
    before = compile_stats.snapshot()
    # the machine's speed beside the rounds, on the CPU, when they are timed (not in a check run)
    on_cpu = case.device == Device.CPU and not benchmark.disabled
    speed_before = speed_reference.reference_ms() if on_cpu else None
    rounds = request.config.getoption("benchmark_min_rounds")
    guard, timer = MeasurementState.capture(), RecordingTimer(benchmark._timer)
    benchmark._timer = (
        timer  # every reading kept: a rewritten start in the runner's frame is caught
    )
    with (
        ThreadWatch() as watch,
        ChildWatch() as children,
        contention.Probe() as probe,
        time_limit(
            _timing_limit_s(run.call_limit_s(case.device), rounds, request),
            f"the timing of {evidence.variant.name} on case {case.id} in mode {evidence.mode}",
        ),
    ):  # /proc is read before and after, never inside
        timing, info = benchmark_step(
            benchmark,
            evidence.step,
            case.device,
            run.timer,
            rule=sampling_rule(request.config),
            flush_l2=run.l2_flush,
            cuda_graph=run.cuda_graphs,
        )
    benchmark.extra_info.update(info)
    _check_timing_untouched(evidence, guard, (watch, children), timer, benchmark)
    if on_cpu:
        benchmark.extra_info["speed_reference"] = speed_reference.record(
            speed_before, speed_reference.reference_ms()
        )
    recompiled = compile_stats.since(before).graphs_compiled
    benchmark.extra_info["graphs_compiled_while_timed"] = recompiled
    stats = benchmark.stats.stats if benchmark.stats else None  # None when timing is disabled
    stats_s = {"median": stats.median, "rounds": stats.rounds, "iqr": stats.iqr} if stats else None
    if stats:
        benchmark.extra_info["contention"] = probe.evidence(stats.data).as_dict()
    result = perfsuite_run.record(
        dict(benchmark.extra_info), stats_s
    )  # wall/device times come from extra_info
    benchmark.extra_info["achieved_tflops"] = result.achieved_tflops
    benchmark.extra_info["achieved_gbps"] = result.achieved_gbps
    assert recompiled == 0, (
        f"{evidence.variant.name} on {case.id} ({evidence.mode}): {recompiled} graph(s) compiled while timed"
    )
    _check_after_timing(evidence, timed=stats is not None)


def _not_timed(evidence, perfsuite_run, request) -> None:
    """A step that changed its inputs or misled the measurement is not timed: a skip that names the
    test failing for it in this run (one failure per mistake, and no unused-fixture warning), or the
    check that found the output wrong when the probe's failure only restates that, else a failure
    saying why."""
    test, why = (
        ("test_matches_float64_reference", evidence.modified_inputs)
        if evidence.modified_inputs
        else ("test_calls_cannot_fool_the_measurement", evidence.deceptions[0])
    )
    if not evidence.modified_inputs and all(map(restates_wrong_output, evidence.deceptions)):
        what = f"not timed: {headline(why)}"
        refer_wrong_output(perfsuite_run, request, evidence, what, evidence.deceptions, note=False)
    twin = request.node.nodeid.replace("::test_benchmark[", f"::{test}[", 1)
    reason = f"not timed: {headline(why)}"
    if any(item.nodeid == twin for item in request.session.items):
        pytest.skip(f"{reason} ({test} fails for it)")
    pytest.fail(reason, pytrace=False)


def _check_timing_untouched(evidence, guard, watches, timer, benchmark) -> None:
    """After the timed rounds: no timer replaced, every round pytest-benchmark recorded the clock's own
    (``RecordingTimer``), no torch function or setting changed (restored), no thread or child process
    left running (the children ended);
    else the timing fails, naming what the variant did."""
    where = f"{evidence.variant.name} on {evidence.case.id} ({evidence.mode})"
    problems = []
    if evidence.case.device == Device.CPU and benchmark._timer is not timer:
        problems.append(f"replaced pytest-benchmark's timer with {benchmark._timer!r}")
    stats = benchmark.stats.stats if benchmark.stats else None
    if stats is not None and benchmark.extra_info.get("timer") == "host":
        unrecorded = timer.unrecorded_rounds(list(stats.data), benchmark.stats.iterations)
        problems += [f"timed rounds not the clock's: {unrecorded}"] if unrecorded else []
    tampered = guard.check_and_restore(evidence.variant.name, "its timed calls")
    problems += [tampered] if tampered else []
    watch, children = watches
    threads = watch.left_running()
    if threads:
        problems.append(threads_failure(evidence.variant.name, threads, "its timed calls"))
    for thread in threads:
        release_at_exit(thread)
    left = children.left_running()
    if left:
        ended = end_children(left)
        problems.append(children_failure(evidence.variant.name, ended, "its timed calls"))
    if problems:
        pytest.fail(
            f"{where}: the timing is not the suite's: " + "; ".join(problems), pytrace=False
        )


def sampling_rule(config) -> SamplingRule:
    """The device timer's stopping rule from pytest-benchmark's options: ``--benchmark-min-rounds``
    is the minimum number of samples, ``--benchmark-max-time`` the sampling's time limit (seconds);
    the target spread of the median is the rule's default (1%)."""
    default = SamplingRule()
    min_rounds = int(config.getoption("benchmark_min_rounds", 0) or default.min_samples)
    max_time = float(config.getoption("benchmark_max_time", 0) or default.max_wall_s)
    return SamplingRule(
        min_samples=max(min_rounds, 3), max_wall_s=max_time, max_samples=max(min_rounds, 5000)
    )


def _timing_limit_s(call_limit_s: float | None, rounds: int, request) -> float | None:
    """The timing's limit: the per-call limit for each round and warm-up call, plus pytest-benchmark's
    ``--benchmark-max-time`` (its rounds may run that long in all). None: no limit."""
    if not call_limit_s:
        return None
    warmup = request.config.getoption("benchmark_warmup_iterations", 0) or 0
    # a device timer also probes dispatch, sizes and warms up its graph (the warm-up itself within
    # the time limit; a replay of several steps lasts about 1 ms) and runs a kernel block
    extra_calls = DISPATCH_PROBES + SIZING_SAMPLES + CAPTURE_WARMUPS + KERNEL_BLOCK + 1
    return call_limit_s * (rounds + warmup + 2 + extra_calls) + 2 * float(
        request.config.getoption("benchmark_max_time", 0) or 0
    )


def _check_after_timing(evidence, timed: bool) -> None:
    """Outside the timed window: the inputs unchanged (else restored, and the timing fails) and,
    in a timed run whose first output was finite, the outputs of further calls finite."""
    where = f"{evidence.variant.name} on {evidence.case.id} ({evidence.mode})"
    changed = evidence.prepared.check_inputs() if evidence.prepared else None
    if changed:
        pytest.fail(f"{where}: timings ran on drifting inputs: {changed}", pytrace=False)
    if timed and evidence.output_finite:
        nonfinite = nonfinite_after_timing(evidence.step)
        if nonfinite:
            pytest.fail(f"{where}: {nonfinite}", pytrace=False)
