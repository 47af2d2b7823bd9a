"""Nothing fools the A/B gate: replaced clocks and settings named by the worker's guard, a rewritten timing
frame caught by the coordinator's clock, a hung head killed within its limit; nothing of it stored."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfsuite.gate.outside_clock import (
    MIN_BLOCKS,
    ClockCheck,
    inside_disagreement,
    outside_disagreement,
)

HERE = Path(__file__).resolve().parent
CASE = "b2h8s256d64-fp32-causal-cpu"


def reply(times, handled, untimed=0.001, contended=False):
    """A worker's ``time`` reply; ``block_s`` as an honest worker reads it around its rounds."""
    return {
        "times": times,
        "handled_s": handled,
        "untimed_s": untimed,
        "block_s": handled - untimed,
        "contention": {"contended": contended},
    }


def test_an_honest_block_agrees_with_both_clocks():
    honest = reply([0.004] * 5, 0.0215, 0.001)
    assert inside_disagreement(honest) is None
    assert outside_disagreement(0.0235, 0.0015, honest) is None


def test_an_honest_short_block_whose_bookkeeping_took_longer_than_its_rounds_agrees_inside():
    """Two rounds of a tiny case (0.24 ms; ``block_s``, the worker's reading around them, agrees), then
    the contention probe's /proc readings and evidence inside ``handled_s``: 5.6 ms, measured in-process
    on the 2-core machine (``Worker.handle`` of ``naive`` on b1h2s16d8, 2 rounds). Honest code; the inside
    check calls it a rewritten frame, and three such blocks fail the gate (``GateTampered``, exit 1): seen
    in ``test_gate.py::test_ab_run_reports_structure_between_two_variants`` under load, 2 runs of 7, and
    with default blocks in ``validation.calibrate_gate --reps 1 --budget-s 1 --variants naive_inplace`` (5%
    injected, load 8: "timed rounds add up to 18.97 ms of the 32.11 ms"); the rounds are now checked
    against ``block_s``."""
    honest = reply([0.00012, 0.00012], 0.0056 + 0.0001, 0.0001) | {"block_s": 0.00025}
    assert inside_disagreement(honest) is None


def test_rounds_whose_start_was_rewritten_disagree_inside():
    assert "add up to 2.00 ms" in inside_disagreement(reply([0.0004] * 5, 0.021))


def test_a_slow_worker_clock_disagrees_outside():
    scaled = reply([0.0004] * 5, 0.0021)  # everything the worker read ran at a tenth of real time
    assert inside_disagreement(scaled) is None
    assert "coordinator timed at 21.00 ms" in outside_disagreement(0.021, 0.0005, scaled)


def test_a_worker_is_failed_only_when_most_of_its_blocks_disagree():
    check = ClockCheck("head")
    for _ in range(MIN_BLOCKS):
        check.record(
            0.5, 0.001, reply([0.004] * 5, 0.0215)
        )  # a stalled coordinator, once in a while
        check.record(0.0235, 0.001, reply([0.004] * 5, 0.0215))
    assert check.failure() is None
    for _ in range(2 * MIN_BLOCKS):
        check.record(0.0235, 0.001, reply([0.0004] * 5, 0.0215))
    assert "head worker's times disagree" in check.failure()


def test_the_outside_check_skips_contended_blocks_but_the_inside_one_does_not():
    check = ClockCheck("base")
    for _ in range(MIN_BLOCKS):
        check.record(0.5, 0.001, reply([0.004] * 5, 0.0215, contended=True))
    assert check.disagreements == 0
    for _ in range(MIN_BLOCKS + 1):
        check.record(0.0235, 0.001, reply([0.0004] * 5, 0.0215, contended=True))
    assert check.failure()


def test_the_outside_check_skips_blocks_whose_run_queue_held_more_threads_than_cpus(monkeypatch):
    """An honest worker beside a loaded test run: 10 ms queued before each 2 ms block, not contended
    inside its window; three such blocks of four failed the gate as tampered."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    check = ClockCheck("head")
    for queue in (5, 3, 4):
        stalled = reply([0.0018], 0.00195, 0.0001)
        stalled["contention"] |= {"procs_running_before": queue, "procs_running_after": 2}
        check.record(0.01971, 0.00798, stalled)
    assert check.disagreements == 0 and check.failure() is None
    quiet = reply([0.0018], 0.00195, 0.0001)
    quiet["contention"] |= {"procs_running_before": 2, "procs_running_after": 1}
    check.record(0.01971, 0.00798, quiet)  # the same times on a machine that was not busy
    assert check.disagreements == 1


def gate(tmp_path, head: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "perfsuite.cli.main",
            "ab",
            "--variant",
            "cheating_variants:honest",
            "--variant",
            f"cheating_variants:{head}",
            "--base-variant",
            "honest",
            "--head-variant",
            head,
            "--cases",
            CASE,
            "--modes",
            "forward",
            "--workers-per-side",
            "2",
            "--budget-s",
            "2",
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "head, named",
    [
        ("cheat", "replaced time.perf_counter with cheating_variants.cheat.<locals>.<lambda>"),
        ("process_time_cheat", "replaced time.process_time"),
        ("frame_writer", "times disagree with the gate's own clock"),
    ],
)
def test_a_head_that_fools_its_clock_fails_the_gate_named_and_nothing_is_stored(
    tmp_path, head, named
):
    found = gate(tmp_path, head)
    assert found.returncode == 1, found.stderr[-2000:]
    assert "perfsuite gate: FAIL" in found.stderr and named in found.stderr
    assert "the head worker" in found.stderr
    assert not (
        tmp_path / ".perfsuite"
    ).exists()  # the history store (its default place) never opened


def test_a_head_that_hangs_is_named_within_the_limit_and_its_children_end(tmp_path):
    before = time.monotonic()
    found = gate(tmp_path, "hangs", "--call-limit-s", "20")
    assert found.returncode == 1, found.stderr[-2000:]
    assert (
        "the head worker" in found.stderr
        and "hung" in found.stderr
        and "within 20 s" in found.stderr
    )
    assert time.monotonic() - before < 150
    leftover = subprocess.run(
        ["pgrep", "-f", "time.sleep\\(600\\)"], capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""


def test_a_worker_that_crashes_is_named_by_its_signal_not_as_a_missing_install(tmp_path):
    """A worker killed by SIGSEGV was reported as 'is perfsuite installed for that interpreter?'."""
    from perfsuite.errors import WorkerError
    from perfsuite.gate.ab import Side, WorkerProcess

    crasher = tmp_path / "crash.py"
    crasher.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    worker = WorkerProcess(Side(None))
    worker.process.kill()
    worker.process.wait()
    worker.process = subprocess.Popen(
        [sys.executable, str(crasher)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    with pytest.raises(WorkerError, match="crashed: killed by signal SIGSEGV") as found:
        worker.ask({"ping": True})
    assert "is perfsuite installed" not in str(found.value)
