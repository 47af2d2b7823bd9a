"""Child processes a variant's call started and left running: named after the call, and ended.

A variant that starts a process (``subprocess.Popen``, ``os.fork``, a multiprocessing worker) and
returns while it runs leaves work the timing does not see, a process that can hold the run's output
pipes open (the run stalls until it ends), and after ``os.fork`` a second copy of the suite itself.
``ChildWatch`` lists this process's children before and after a block (from ``/proc``: the processes
whose parent is this one); ``end_children`` ends the new ones that still run (their own process
group when they lead one, else the process and its descendants, with SIGKILL) and reaps them, and
``children_failure`` names them. Exited children (zombies) are not running and are left to the code
that started them. Linux only (``/proc``); elsewhere the watch sees no children. No torch import.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


@dataclasses.dataclass(frozen=True)
class ChildProcess:
    """One process: its id, parent, process group and command line (as ``/proc`` shows them)."""

    pid: int
    parent_pid: int
    group_id: int
    command: str
    state: str  # /proc/PID/stat's state letter: R, S, D, Z (exited, not reaped), ...

    def describe(self) -> str:
        """``pid 123 (sleep 100)``."""
        return f"pid {self.pid} ({self.command})"


def _read_process(pid: int) -> ChildProcess | None:
    """The process ``pid`` from ``/proc/PID/stat`` and ``cmdline``, or None when it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        cmdline = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    name_end = stat.rfind(")")  # the command name may hold spaces and parentheses
    fields = stat[name_end + 2 :].split()
    command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    command = command or stat[stat.find("(") + 1 : name_end]
    return ChildProcess(
        pid=pid,
        parent_pid=int(fields[1]),
        group_id=int(fields[2]),
        command=command[:200],
        state=fields[0],
    )


def processes() -> list[ChildProcess]:
    """Every process ``/proc`` lists now (empty where there is no ``/proc``)."""
    if not PROC.is_dir():
        return []
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            process = _read_process(int(entry.name))
            if process is not None:
                found.append(process)
    return found


def descendants(pid: int, everyone: list[ChildProcess] | None = None) -> list[ChildProcess]:
    """The processes below ``pid`` (children, their children, ...), nearest first."""
    everyone = processes() if everyone is None else everyone
    found, frontier = [], {pid}
    while frontier:
        below = [p for p in everyone if p.parent_pid in frontier and p not in found]
        found += below
        frontier = {p.pid for p in below}
    return found


def running_children() -> dict[int, ChildProcess]:
    """This process's children that have not exited, by pid."""
    me = os.getpid()
    return {p.pid: p for p in processes() if p.parent_pid == me and p.state != "Z"}


class ChildWatch:
    """Children alive after a block that were not alive before it: ``with ChildWatch() as w: call()``,
    then ``w.left_running()``."""

    def __enter__(self) -> ChildWatch:
        self._before = set(running_children())
        return self

    def __exit__(self, *exc) -> None:
        self._after = [p for pid, p in running_children().items() if pid not in self._before]

    def left_running(self) -> list[ChildProcess]:
        """The new children still running after the block."""
        return [p for p in self._after if _read_process(p.pid) is not None]


def end_children(children: list[ChildProcess], wait_s: float = 5.0) -> list[str]:
    """End each child and everything below it, and reap the children; one line per child saying how.

    A child that leads its own process group (``start_new_session``, ``process_group=0``) has the
    group killed (``os.killpg``, SIGKILL); one in the suite's own group has itself and its
    descendants killed one by one (the group is the suite's). Waits at most ``wait_s`` seconds for
    each to be reaped.
    """
    lines = []
    own_group = os.getpgrp()
    for child in children:
        below = descendants(child.pid)
        if child.group_id not in (own_group, 0) and child.group_id == child.pid:
            how = f"its process group {child.group_id} killed (SIGKILL)"
            _signal_group(child.group_id)
        else:
            how = "killed (SIGKILL)"
        for process in [child, *below]:
            _signal(process.pid)
        if below:
            how += f" with {len(below)} process(es) it started"
        lines.append(f"{child.describe()}: {how}")
        _reap(child.pid, wait_s)
    return lines


def _signal(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(group_id: int) -> None:
    try:
        os.killpg(group_id, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int, wait_s: float) -> None:
    """Collect the killed child's exit so it leaves no zombie (the code that started it may have
    reaped it already: then there is nothing to collect)."""
    for _ in range(
        max(1, int(wait_s / 0.01))
    ):  # counted, not timed: a variant may have replaced the clocks
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.01)


def children_failure(variant_name: str, ended: list[str], during: str) -> str:
    """The failure naming the child processes ``variant_name`` left running after ``during``."""
    return (
        f"variant {variant_name} left {len(ended)} child process(es) running after {during}: "
        + "; ".join(ended)
        + ". A call must finish its work before it returns; the suite ended them so the run does "
        "not wait on them"
    )
