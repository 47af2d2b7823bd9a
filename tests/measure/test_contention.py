"""Contention evidence from synthetic /proc snapshots (no timing), and one real probe's shape."""

import os
import time

import pytest

from perfsuite.measure import contention
from perfsuite.measure.contention import ContentionEvidence, Probe, Snapshot, assess, on_tick

TICK = 0.004


@pytest.fixture(autouse=True)
def check_on(monkeypatch):
    """The check as shipped, whatever the caller's environment says."""
    monkeypatch.delenv(contention.CHECK_ENV, raising=False)


def snap(wall, cpu, waits, steal=0.0, total=0.0, load=1.0):
    return Snapshot(wall, cpu, waits, steal, total, 2, load)


def test_threads_waiting_for_a_cpu_flag_the_window_and_say_how_long():
    before = snap(10.0, 5.0, {1: 0.0, 2: 0.0})
    after = snap(
        11.0, 6.2, {1: 0.2, 2: 0.1, 3: 0.05}
    )  # a thread born inside the window counts from 0
    evidence = assess(before, after, tick_s=TICK)
    assert evidence.wait_fraction == pytest.approx(0.35) and evidence.contended
    assert (
        "waited for a CPU 0.35 s/s of wall time (summed over threads, so above 1 s/s when several "
        "wait at once; limit 0.05 s/s)" in evidence.reasons[0]
    )
    assert evidence.cpu_per_wall == pytest.approx(1.2) and evidence.threads == 3


def test_a_quiet_window_is_not_flagged():
    evidence = assess(
        snap(0.0, 0.0, {1: 0.0}), snap(1.0, 2.0, {1: 0.01}), [0.0051] * 20, tick_s=TICK
    )
    assert (
        not evidence.contended
        and evidence.reasons == ()
        and evidence.wait_fraction == pytest.approx(0.01)
    )


def test_steal_is_a_share_of_all_cpu_time():
    before, after = (
        snap(0.0, 0.0, {1: 0.0}, steal=1.0, total=100.0),
        snap(1.0, 1.0, {1: 0.0}, steal=1.5, total=102.0),
    )
    evidence = assess(before, after, tick_s=TICK)
    assert evidence.steal_fraction == pytest.approx(0.25) and evidence.contended
    assert any("steal 25%" in r for r in evidence.reasons)


def test_rounds_stuck_on_several_multiples_of_the_tick():
    assert on_tick([0.0640, 0.0640, 0.0600, 0.0680, 0.0640], TICK)
    assert not on_tick([0.0640] * 5, TICK)  # one value, on a multiple by chance: a quiet benchmark
    assert not on_tick([0.0613, 0.0655, 0.0629, 0.0671], TICK)  # spread, but off the tick
    assert not on_tick([0.004, 0.004, 0.004], TICK)  # one tick is not "stuck"
    with pytest.raises(ValueError, match="-1"):
        on_tick([0.1], -1)
    stuck = assess(
        snap(0.0, 0.0, {1: 0.0}),
        snap(1.0, 1.0, {1: 0.0}),
        [0.064, 0.060, 0.068, 0.064],
        tick_s=TICK,
    )
    assert stuck.contended and stuck.on_tick


def test_evidence_round_trips_through_json_and_names_missing_keys():
    evidence = assess(snap(0.0, 0.0, {1: 0.0}), snap(1.0, 1.0, {1: 0.5}), tick_s=TICK)
    assert ContentionEvidence.from_dict(evidence.as_dict()) == evidence
    with pytest.raises(ValueError, match="wait_fraction"):
        ContentionEvidence.from_dict(
            {k: v for k, v in evidence.as_dict().items() if k != "wait_fraction"}
        )
    with pytest.raises(ValueError, match="positive wall time"):
        assess(snap(1.0, 0.0, {}), snap(1.0, 0.0, {}))


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_a_real_probe_reads_this_process():
    with Probe() as probe:
        sum(range(10000))
    evidence = probe.evidence()
    assert evidence.available and evidence.threads >= 1 and evidence.wait_fraction >= 0
    assert 0 < contention.kernel_tick_s() <= 0.01


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_snapshots_follow_threads_that_start_and_end_and_a_forked_child_reads_its_own():
    """The files stay open between snapshots: a new thread's is opened, an ended thread's closed, and a
    forked child reads its own threads, not its parent's."""
    import threading

    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    assert thread.native_id in contention.snapshot().thread_wait_s
    done.set()
    thread.join()
    # join() returns when Python is done with the thread; the kernel may list its task a moment longer
    gone_by = time.monotonic() + 10
    while os.path.exists(f"/proc/self/task/{thread.native_id}") and time.monotonic() < gone_by:
        time.sleep(0.001)
    waits = contention.snapshot().thread_wait_s
    assert thread.native_id not in waits and threading.get_native_id() in waits
    assert not any(str(thread.native_id) in path for path in contention._FILES.fds)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its one thread only
        os.write(write, repr(sorted(contention.snapshot().thread_wait_s)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1000).decode() == repr([pid])


def test_the_check_can_be_switched_off_but_not_misspelled(monkeypatch):
    loaded = (snap(0.0, 0.0, {1: 0.0}), snap(1.0, 1.0, {1: 0.9}))
    monkeypatch.setenv(contention.CHECK_ENV, "off")
    evidence = assess(*loaded, tick_s=TICK)
    assert not evidence.contended and evidence.wait_fraction == pytest.approx(0.9)
    assert "not flagged: PERFSUITE_CONTENTION_CHECK=off" in evidence.reasons
    monkeypatch.setenv(contention.CHECK_ENV, "maybe")
    with pytest.raises(ValueError, match="PERFSUITE_CONTENTION_CHECK='maybe'"):
        assess(*loaded, tick_s=TICK)


def test_a_wait_summed_over_threads_above_the_wall_time_is_not_called_a_share():
    """Before: ``threads waited 116%``: a sum over threads printed as a share of the wall time."""
    evidence = assess(
        snap(0.0, 0.0, {1: 0.0, 2: 0.0}), snap(1.0, 1.0, {1: 0.6, 2: 0.56}), tick_s=TICK
    )
    assert (
        "threads waited for a CPU 1.16 s each second" in evidence.brief
        and "%" not in evidence.reasons[0]
    )


def test_the_reasons_come_in_one_short_line_too():
    """Terminals and table cells get ``brief``; JSON and the report keep every reason in full."""
    before = snap(0.0, 0.0, {1: 0.0, 2: 0.0}, steal=1.0, total=100.0, load=3.0)
    after = snap(1.0, 1.0, {1: 0.4, 2: 0.2}, steal=1.5, total=102.0, load=3.25)
    evidence = assess(before, after, tick_s=TICK)
    assert (
        evidence.brief
        == "threads waited for a CPU 0.60 s each second (limit 0.05 s), CPU steal 25% (limit 5%), "
        f"2 threads runnable on {os.cpu_count()} CPUs"
    )
    assert "\n" not in evidence.brief and len(evidence.brief) < len("; ".join(evidence.reasons)) / 2
    assert contention.brief_reason(evidence.as_dict()) == evidence.brief
    older = {
        k: v for k, v in evidence.as_dict().items() if k != "brief"
    }  # a run saved before briefs
    assert contention.brief_reason(older) == evidence.reasons[0]
    assert ContentionEvidence.from_dict(older).reasons == evidence.reasons
    quiet = assess(snap(0.0, 0.0, {1: 0.0}), snap(1.0, 2.0, {1: 0.01}), tick_s=TICK)
    assert quiet.brief == ""


def test_the_terminal_names_each_contended_benchmark_in_one_short_line(make_result):
    from perfsuite.report.results import contention_lines

    row = make_result(
        variant="naive",
        case_id="b1h2s16d8-fp32-causal-cpu",
        mode="forward",
        contended=True,
        contention_reasons=(
            "the process's 2 threads waited for a CPU 60% of the wall time, "
            "summed over threads (limit 5%)",
            "load average 3.00 before, ...",
        ),
        contention_brief="threads waited 60% (limit 5%), load 3.2 on 2 CPUs",
    )
    assert contention_lines([row], brief=True) == [
        "naive forward b1h2s16d8-fp32-causal-cpu: threads waited 60% (limit 5%), load 3.2 on 2 CPUs"
    ]
    assert "summed over threads" in contention_lines([row])[0]  # the report: in full


def test_others_fill_every_cpu_when_every_reading_holds_that_many_besides_the_reader(monkeypatch):
    def window(before, after):
        return {"procs_running_before": before, "procs_running_after": after}

    # one busy process on 2 CPUs leaves a CPU to the gate; two fill both at every reading
    assert not contention.others_fill_every_cpu([window(2, 3), window(3, 2)], cpus=2)
    assert contention.others_fill_every_cpu([window(3, 4), window(3, 3)], cpus=2)
    assert not contention.others_fill_every_cpu([window(5, 4), window(2, 4)], cpus=2)  # a burst
    assert (
        contention.overload_reason([window(4, 3)], cpus=2)
        == "other processes filled every CPU (2 runnable threads on 2 CPUs)"
    )
    assert contention.other_runnable([{"procs_running_before": None}]) is None
    assert not contention.others_fill_every_cpu([{"procs_running_before": None}], cpus=2)
    monkeypatch.setenv(contention.CHECK_ENV, "off")
    assert not contention.others_fill_every_cpu([window(3, 3)], cpus=2)


def test_wait_share_is_the_waiting_part_of_runnable_thread_time():
    """``wait / (wait + cpu)``, both per wall second: 0.5 waited beside 1.5 run is a quarter."""
    from perfsuite.measure.contention import wait_share

    assert wait_share({"wait_fraction": 0.5, "cpu_per_wall": 1.5}) == 0.25
    assert wait_share({"wait_fraction": 0.0, "cpu_per_wall": 0.0}) == 0.0
    assert wait_share({"wait_fraction": 0.5}) is None and wait_share({}) is None
