"""The run's fence around a variant's calls: torch's functions and the process's settings (CPU
affinity), and child processes (a real ``subprocess.Popen`` and a real ``os.fork``) a call leaves."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import time

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.children import ChildWatch, end_children, processes, running_children
from perfsuite.measure.evidence import gather_evidence
from perfsuite.measure.measurement_guard import MeasurementState, RecordingTimer, import_changes
from perfsuite.variants import Variant

F = torch.nn.functional
CASE = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "causal")


def _sdpa(query, key, value, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask.allowed, scale=scale)


def _evidence(fn, tmp_path):
    return gather_evidence(Variant(name=fn.__name__, fn=fn, description="t"), CASE, 0, tmp_path)


def test_a_variant_that_patches_torch_matmul_is_named_and_the_original_restored(tmp_path):
    original = torch.matmul

    def patches_matmul(query, key, value, *, mask, scale):
        torch.matmul = lambda a, b: original(a, b) * 1.0
        return _sdpa(query, key, value, mask, scale)

    try:
        evidence = _evidence(patches_matmul, tmp_path)
    finally:
        patched_after, torch.matmul = torch.matmul, original
    assert patched_after is original  # restored by the suite, not by this test's finally
    assert any("replaced torch.matmul with" in d for d in evidence.deceptions), evidence.deceptions


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity with at least two CPUs",
)
def test_a_variant_that_pins_the_process_to_one_cpu_is_named_and_the_affinity_restored(tmp_path):
    before = os.sched_getaffinity(0)

    def pins_one_cpu(query, key, value, *, mask, scale):
        os.sched_setaffinity(0, {min(before)})
        return _sdpa(query, key, value, mask, scale)

    try:
        evidence = _evidence(pins_one_cpu, tmp_path)
        after = os.sched_getaffinity(0)
    finally:
        os.sched_setaffinity(0, before)
    assert after == before
    assert any("changed os.sched_getaffinity(0)" in d for d in evidence.deceptions), (
        evidence.deceptions
    )


def test_a_module_that_patches_torch_at_import_is_refused_and_restored():
    original = torch.softmax

    def load():
        torch.softmax = lambda *a, **k: original(*a, **k)

    try:
        with pytest.raises(
            ValueError, match=r"importing mod:fn changed .* replaced torch\.softmax"
        ):
            import_changes("mod:fn", load)
        restored = torch.softmax
    finally:
        torch.softmax = original
    assert restored is original
    assert import_changes("mod:fn", lambda: 3) == 3  # an import that changes nothing


def test_an_unchanged_state_has_no_changes_after_torch_work():
    """torch's own lazy imports add attributes; they are not replacements (no false alarm)."""
    state = MeasurementState.capture()
    torch.nn.functional.scaled_dot_product_attention(*(torch.ones(1, 1, 2, 2),) * 3)
    importlib.import_module("torch.nn.attention.flex_attention")

    assert state.changes() == []


def test_a_rewritten_start_is_caught_and_honest_rounds_are_not():
    timer = RecordingTimer(time.perf_counter)
    durations = []
    for _ in range(3):  # honest rounds, timed as pytest-benchmark's runner times them
        start = timer()
        sum(range(1000))
        end = timer()
        durations.append((end - start) / 4)
    assert timer.unrecorded_rounds(durations, 4) is None
    start = timer()
    time.sleep(0.002)
    start = timer.clock()  # what a frame write does: start moved, unseen by the readings
    end = timer()
    message = timer.unrecorded_rounds([*durations, (end - start) / 4], 4)
    assert message and "round 4 of 4" in message and "frame was rewritten" in message
    assert str(timer) == str(
        time.perf_counter
    )  # pytest-benchmark saves the clock's name, as before


def _child_pids() -> set[int]:
    return set(running_children())


def test_a_popen_child_left_running_is_named_and_ended(tmp_path):
    started = []

    def starts_a_child(query, key, value, *, mask, scale):
        if not started:
            started.append(subprocess.Popen(["sleep", "300"]))
        return _sdpa(query, key, value, mask, scale)

    evidence = _evidence(starts_a_child, tmp_path)
    child = started[0]
    assert not os.path.exists(
        f"/proc/{child.pid}"
    )  # ended and reaped by the suite, not by this test
    failure = [d for d in evidence.deceptions if "child process" in d]
    # the child named by its pid and command (its cmdline, or its name from /proc/PID/stat when the
    # cmdline reads empty); the whole message printed when it is not
    assert failure and f"pid {child.pid} (sleep" in failure[0], "\n".join(evidence.deceptions)


def test_a_child_in_its_own_process_group_has_its_group_ended():
    child = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)
    try:
        time.sleep(0.2)
        with ChildWatch() as watch:
            pass
        assert watch.left_running() == []  # started before the block: not the block's
        with ChildWatch() as watch:
            second = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
            time.sleep(0.3)
        left = watch.left_running()
        assert [p.pid for p in left] == [second.pid]
        lines = end_children(left)
        assert f"its process group {second.pid} killed" in lines[0]
        assert not os.path.exists(f"/proc/{second.pid}")  # ended and reaped
        group = [p for p in processes() if p.group_id == second.pid and p.state != "Z"]
        assert group == []  # the grandchild (the backgrounded sleep) went with its group
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_a_forked_copy_of_the_suite_is_ended_and_the_call_does_not_wait_on_it(tmp_path):
    forked = []

    def forks(query, key, value, *, mask, scale):
        if not forked:
            pid = os.fork()
            if pid == 0:  # the child: a copy of this pytest, which must not go on running it
                time.sleep(300)
                os._exit(0)
            forked.append(pid)
        return _sdpa(query, key, value, mask, scale)

    before = _child_pids()
    evidence = _evidence(forks, tmp_path)
    assert forked[0] not in _child_pids() - before
    with pytest.raises(ChildProcessError):  # reaped by the suite
        os.waitpid(forked[0], os.WNOHANG)
    assert any(f"pid {forked[0]}" in d for d in evidence.deceptions), evidence.deceptions


def test_a_traversal_name_writes_its_trace_inside_the_traces_folder(tmp_path):
    """A variant built without the registry's name check (``Variant(name=...)``): its trace stays in
    the folder; nothing appears above it."""
    traces = tmp_path / "a" / "b" / "c" / "traces"
    traces.mkdir(parents=True)
    variant = Variant(
        name="../../../x/ESCAPED",
        fn=lambda q, k, v, *, mask, scale: _sdpa(q, k, v, mask, scale),
        description="t",
    )
    evidence = gather_evidence(variant, CASE, 0, traces)
    assert evidence.trace_path.parent == traces and evidence.trace_path.is_file()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [evidence.trace_path], written
    assert not (tmp_path / "a" / "x").exists()


def test_a_case_with_scale_0_is_checked_without_the_large_score_probe(tmp_path):
    """``-scale0``: every score is 0; the probe (which divides by the scale) is left out and the
    variant is judged by the reference alone (before: ZeroDivisionError blamed on the variant)."""
    from perfsuite.attention.cases import parse_case_id

    case = parse_case_id("b1h2s8d4-fp32-causal-scale0-cpu")
    evidence = gather_evidence(
        Variant(
            name="sdpa_plain",
            fn=lambda q, k, v, *, mask, scale: _sdpa(q, k, v, mask, scale),
            description="t",
        ),
        case,
        0,
        tmp_path,
    )
    assert evidence.comparison.failure is None and evidence.deceptions == ()


def test_building_the_inputs_of_a_huge_paged_case_is_bounded_by_the_call_limit():
    """100,000 pages of one key each: building them takes seconds (millions: minutes); the build
    runs under the call limit (1 ms here, far below any machine's time for it) and is named."""
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.measure.call_limit import CallTimeLimitExceeded
    from perfsuite.measure.evidence import prepare_case

    case = parse_case_id("b1h1s100000d4-fp32-noncausal-paged1-uniform-cpu")
    from perfsuite.variants import get_variant

    with pytest.raises(CallTimeLimitExceeded, match=r"building the inputs of case b1h1s100000d4"):
        prepare_case(get_variant("paged_gather"), case, 0, call_limit_s=0.001)
