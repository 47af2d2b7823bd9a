"""Process conditions: one list, used by the A/B workers, scripts/bench.sh and the run header."""

import subprocess
import sys
from pathlib import Path

from perfsuite.gate.ab import WORKER_ENV
from perfsuite.measure import conditions
from perfsuite.measure.conditions import CONDITIONS, header_lines, missing, required_env

ROOT = Path(__file__).resolve().parents[2]
ALL_SET = {c.name: c.value() for c in CONDITIONS}


def test_the_ab_workers_get_every_condition():
    assert set(WORKER_ENV) == {c.name for c in CONDITIONS}
    assert WORKER_ENV["OMP_WAIT_POLICY"] == "PASSIVE"


def test_missing_conditions_are_named_with_their_cost():
    assert missing(ALL_SET) == []
    environ = dict(ALL_SET, OMP_WAIT_POLICY="ACTIVE")
    assert [c.name for c in missing(environ)] == ["OMP_WAIT_POLICY"]
    [line] = header_lines(environ)
    assert (
        "WARNING" in line
        and "OMP_WAIT_POLICY=PASSIVE is missing" in line
        and "scripts/bench.sh" in line
    )


def test_an_explicit_thread_count_is_kept_and_a_bad_one_is_not():
    assert required_env(dict(ALL_SET, OMP_NUM_THREADS="1"))["OMP_NUM_THREADS"] == "1"
    assert [c.name for c in missing(dict(ALL_SET, OMP_NUM_THREADS="zero"))] == ["OMP_NUM_THREADS"]


def test_conditions_applied_after_start_are_said_so():
    environ = {k: v for k, v in ALL_SET.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    [line] = header_lines(environ, applied=["MALLOC_TRIM_THRESHOLD_"])
    assert "applied after start" in line and "WARNING" not in line
    assert header_lines(ALL_SET)[0].startswith(
        "perfsuite: process conditions: OMP_WAIT_POLICY=PASSIVE"
    )


def test_the_wait_policy_is_never_applied_after_start(monkeypatch):
    # the test process itself is left as it is: a thread count changed mid-run made a later test's
    # compiled (Inductor) CPU kernel abort the worker, whose thread count it was compiled for
    import torch

    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(conditions, "_mallopt", lambda parameter, value: True)
    applied = conditions.apply_in_process({})
    assert "OMP_WAIT_POLICY" not in applied and "OMP_NUM_THREADS" in applied and threads


def test_bench_sh_exports_the_same_list():
    exports = subprocess.run(
        [sys.executable, "-m", "perfsuite.measure.conditions"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout
    assert {line.split()[1].split("=")[0] for line in exports.splitlines()} == {
        c.name for c in CONDITIONS
    }
    assert "perfsuite.measure.conditions" in (ROOT / "scripts" / "bench.sh").read_text()
