"""Ctrl-C and SIGTERM on ``perfsuite run``: pytest stops, saves a partial baseline marked as such, exits 2; no orphan."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SLOW = '''
import pathlib, sys, time
import torch


def _timed():
    """Called from pytest-benchmark's timing loop."""
    frame = sys._getframe(1)
    while frame is not None:
        if "pytest_benchmark" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def slow_sdpa(query, key, value, *, mask, scale):
    """sdpa that sleeps in the second case; marks when that case's timing is under way and holds that
    call until the test's signal ends it (perfsuite run times a case for about 0.5 s: a signal sent after
    the marker must not depend on the machine's speed to land inside it)."""
    if query.shape[2] == 32:
        time.sleep(0.02)
        marker = pathlib.Path("timing-started")
        if _timed() and not marker.exists():
            marker.write_text("")
            time.sleep(120)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
'''
CONFIG = """[tool.pytest.ini_options]
perfsuite_user_variants = ["slowattn:slow_sdpa"]
perfsuite_variants = "slow_sdpa"
perfsuite_cases = "b1h2s16d8-fp32-causal-cpu b1h2s32d8-fp32-causal-cpu"
perfsuite_modes = "forward"
addopts = "-p no:randomly"
"""


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to find pytest's process")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_perfsuite_run_saves_a_marked_partial_baseline_and_leaves_no_orphan(
    tmp_path, signum
):
    """Before: the wrapper killed pytest 0.25 s after Ctrl-C (no baseline, a traceback, exit 130);
    SIGTERM left pytest running as an orphan."""
    (tmp_path / "slowattn.py").write_text(SLOW)
    (tmp_path / "pyproject.toml").write_text(CONFIG)
    perfsuite = Path(sys.executable).with_name("perfsuite")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    wrapper = subprocess.Popen(
        [str(perfsuite), "run"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (tmp_path / "timing-started").exists():
        assert wrapper.poll() is None, wrapper.stdout.read()
        assert time.monotonic() < deadline, "the second case's timing never started"
        time.sleep(0.1)
    pytest_pids = _children(wrapper.pid)
    assert pytest_pids
    wrapper.send_signal(signum)
    output, _ = wrapper.communicate(timeout=120)
    assert wrapper.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "Traceback" not in output.split("short test summary")[0] or "KeyboardInterrupt" in output
    assert not any(_alive(pid) for pid in pytest_pids), "pytest outlived perfsuite run"
    [saved] = list((tmp_path / ".benchmarks").rglob("*.json"))
    data = json.loads(saved.read_text())
    marker = data["perfsuite_incomplete"]
    assert marker == {"reason": "interrupted (KeyboardInterrupt)", "finished": 1, "expected": 2}, (
        output
    )
    assert [b["extra_info"]["case"] for b in data["benchmarks"]][:1] == [
        "b1h2s16d8-fp32-causal-cpu"
    ], output
    run = json.loads((tmp_path / "perfsuite-results" / "run.json").read_text())
    assert run["complete"] is False


IGNORES_CTRL_C = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"
WRAPPER = (
    "import os, sys; from perfsuite.cli.run import run_forwarding_signals; "
    "sys.exit(run_forwarding_signals([sys.executable, '-c', sys.argv[1]], dict(os.environ)))"
)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to find the child")
def test_a_second_interrupt_forces_the_child_to_stop():
    wrapper = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, IGNORES_CTRL_C],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert wrapper.stdout.readline().strip() == "ready"
    [child] = _children(wrapper.pid)
    wrapper.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert wrapper.poll() is None and _alive(
        child
    )  # the first one is a request the child may finish
    wrapper.send_signal(signal.SIGINT)
    assert wrapper.wait(timeout=30) == 128 + signal.SIGKILL
    assert "second interrupt" in wrapper.stderr.read()
    assert not _alive(child)
