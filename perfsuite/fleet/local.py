"""``perfsuite fleet local``: one pytest process per GPU on this machine, each its own shard.

Each child runs the timed suite (``suite.runner.suite_arguments``) with ``--perfsuite-shard i/N``,
one device in its visible-device variable (``fleet.devices``), its own results folder and
pytest-benchmark storage (two processes never number a saved file at once), and the run id
``<fleet id>-shard-<i>-of-<N>`` in ``PERFSUITE_RUN_ID``, so a rerun of a shard records under the
same id (the store keeps one run per id). With more shards than devices, a device takes the next
shard when its process ends. Each child's output goes to ``<results>/shard-<i>-of-<N>/pytest.log``;
the terminal gets a line per 10% of progress per process, and one line per process as it ends.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from perfsuite.measure.conditions import required_env
from perfsuite.suite.runner import suite_arguments
from perfsuite.suite.shards import Shard

RUN_ID_VARIABLE, FLEET_ID_VARIABLE = "PERFSUITE_RUN_ID", "PERFSUITE_FLEET_ID"
PROGRESS_STEP_PERCENT = 10
_PERCENT = re.compile(r"\[\s*(\d+)%\]\s*$")
# pytest's exit codes (pytest.ExitCode), for the end-of-process line
EXIT_MEANINGS = {
    0: "passed",
    1: "tests failed",
    2: "interrupted",
    3: "pytest internal error",
    4: "usage error",
    5: "empty shard (no tests collected)",
}


@dataclasses.dataclass(frozen=True)
class ShardJob:
    """One child process: shard, device (as the visible-device variable spells it), where its files go."""

    shard: Shard
    device: str
    variable: str
    results_dir: Path
    fleet_id: str
    stand_in: bool = False  # no GPU here: a CPU process standing in for the device

    @property
    def name(self) -> str:
        return f"shard-{self.shard.index}-of-{self.shard.count}"

    @property
    def run_id(self) -> str:
        return f"{self.fleet_id}-{self.name}"

    @property
    def log_path(self) -> Path:
        return self.results_dir / "pytest.log"

    @property
    def label(self) -> str:
        if self.stand_in:
            return (
                f"shard {self.shard} on stand-in {self.device} (no GPU here: a CPU process; "
                f"{self.variable}={self.device})"
            )
        return f"shard {self.shard} on GPU {self.device} ({self.variable}={self.device})"


@dataclasses.dataclass(frozen=True)
class ShardExit:
    """How a child ended: its exit code (negative: killed by that signal) and wall seconds."""

    job: ShardJob
    returncode: int
    wall_s: float

    @property
    def ok(self) -> bool:
        """Passed, or an empty shard (pytest's 5: more shards than (variant, case) groups)."""
        return self.returncode in (0, 5)

    @property
    def meaning(self) -> str:
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"crashed: killed by {name}"
        return EXIT_MEANINGS.get(self.returncode, f"exit {self.returncode}")


def child_arguments(job: ShardJob, root: Path, pytest_args: list[str]) -> list[str]:
    """pytest's command line for ``job``: the timed suite in ``root``, the user's arguments, then the shard's own
    (last, so they win: shard, results folder, benchmark storage). The child records nothing itself
    (``perfsuite_history=off``): the launcher records each finished shard once, with its labels (``fleet.record``)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        *suite_arguments(root, True, list(pytest_args)),
        f"--perfsuite-shard={job.shard}",
        f"--perfsuite-results={job.results_dir}",
        f"--benchmark-storage={job.results_dir / 'benchmarks'}",
        "-o",
        "perfsuite_history=off",
    ]


def child_env(job: ShardJob, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment, the timed-run process conditions, one visible device and the run ids."""
    environ = dict(os.environ if environ is None else environ)
    return {
        **environ,
        **required_env(environ),
        job.variable: job.device,
        RUN_ID_VARIABLE: job.run_id,
        FLEET_ID_VARIABLE: job.fleet_id,
    }


def _follow(process: subprocess.Popen, job: ShardJob, say: Callable[[str], None]) -> None:
    """Copy a child's output into its log; say each new PROGRESS_STEP_PERCENT of its progress."""
    shown = -1
    with open(job.log_path, "w", encoding="utf-8") as log:
        for line in process.stdout:
            log.write(line)
            log.flush()
            match = _PERCENT.search(line)
            if match and int(match.group(1)) // PROGRESS_STEP_PERCENT > shown:
                shown = int(match.group(1)) // PROGRESS_STEP_PERCENT
                say(f"{job.label}: {match.group(1)}%")


def run_jobs(
    jobs: list[ShardJob],
    root: Path,
    pytest_args: list[str],
    say: Callable[[str], None] = print,
    environ: dict[str, str] | None = None,
    poll_s: float = 0.2,
) -> list[ShardExit]:
    """Run ``jobs``, at most one process per device at a time (jobs of one device in order); wait for all.

    Returns each job's ``ShardExit`` in the order of ``jobs``. Never raises for a failed child.
    """
    lock = threading.Lock()

    def locked_say(text: str) -> None:
        with lock:
            say(text)

    waiting = {
        device: [j for j in jobs if j.device == device]
        for device in dict.fromkeys(j.device for j in jobs)
    }
    running: dict[str, tuple[ShardJob, subprocess.Popen, threading.Thread, float]] = {}
    exits: dict[ShardJob, ShardExit] = {}
    while waiting or running:
        for device in [d for d in waiting if d not in running]:
            job = waiting[device].pop(0)
            if not waiting[device]:
                del waiting[device]
            job.results_dir.mkdir(parents=True, exist_ok=True)
            process = subprocess.Popen(
                child_arguments(job, root, pytest_args),
                cwd=root,
                env=child_env(job, environ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            follower = threading.Thread(
                target=_follow, args=(process, job, locked_say), daemon=True
            )
            follower.start()
            running[device] = (job, process, follower, time.monotonic())
            locked_say(f"{job.label}: started (pid {process.pid}, log {job.log_path})")
        for device, (job, process, follower, started) in list(running.items()):
            if process.poll() is not None:
                follower.join()
                exits[job] = ShardExit(job, process.returncode, time.monotonic() - started)
                locked_say(f"{job.label}: {exits[job].meaning} after {exits[job].wall_s:.0f} s")
                del running[device]
        time.sleep(poll_s)
    return [exits[job] for job in jobs]


def plan_jobs(
    devices: tuple[str, ...],
    variable: str,
    count: int,
    only: set[int] | None,
    results_root: Path,
    fleet_id: str,
    stand_ins: bool = False,
) -> list[ShardJob]:
    """Shards 1..count (or only those in ``only``) dealt round-robin over ``devices`` (``stand_ins``:
    CPU processes standing in for them, where the driver finds no GPU)."""
    indices = [i for i in range(1, count + 1) if only is None or i in only]
    return [
        ShardJob(
            Shard(i, count),
            devices[n % len(devices)],
            variable,
            results_root / f"shard-{i}-of-{count}",
            fleet_id,
            stand_ins,
        )
        for n, i in enumerate(indices)
    ]
