"""Contention: did other processes take the CPU while a benchmark was timed?

Evidence is read before and after a timed window (never inside it) from Linux's ``/proc``:

* run-queue wait of this process's threads: ``/proc/self/task/<tid>/schedstat`` field 2 is the
  time a thread was runnable but waiting for a CPU (ns; kernel ``Documentation/scheduler/sched-stats.rst``).
  ``wait_fraction`` = the threads' summed wait / wall time. Waiting can stretch the wall time
  by at most that much (a round cannot be delayed by more than its threads waited), so a
  fraction above ``WAIT_LIMIT`` (5%) means the median may be off by more than a change the A/B
  gate reports (its ``GateSettings.min_effect`` is 3%; the gate's calibration on
  docs/validation.md used this 5% limit, so the two are set apart);
* process CPU time against wall time (``time.process_time``): ``cpu_per_wall``, the average
  number of this process's threads that ran, next to the thread count;
* CPU steal from ``/proc/stat`` (a virtual machine's host ran something else): ``steal_fraction``
  of all CPUs' time, flagged above ``STEAL_LIMIT`` for the same reason as the wait;
* the run queue (``procs_running`` in ``/proc/stat``) and the load average (``/proc/loadavg``)
  before and after: recorded, not flagged (they count this process too);
* round times stuck on the scheduler tick (``on_tick``): most rounds sit on whole multiples of the
  kernel's tick and on more than one of them: the signature of rounds that lost their CPU
  for whole ticks. A supporting reason; measured medians 10-30x too slow showed it (issue 12).

A benchmark is ``contended`` when any flagged reason holds; the reasons say why in words.
Where ``/proc`` is missing (not Linux), the evidence is empty and nothing is flagged
(``available`` is False). ``PERFSUITE_CONTENTION_CHECK=off`` in the environment records the
evidence but flags nothing (for tests that must judge a timing whatever the machine's load;
the reasons then say the check was off).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

WAIT_LIMIT = 0.05  # waiting that could explain a change the gate reports (module docstring)
STEAL_LIMIT = 0.05  # same reasoning, for time the hypervisor gave to another guest
TICK_TOLERANCE = 0.02  # a round "on the tick" lies within 2% of a tick of a whole multiple (>= 2)
TICK_SHARE = 0.75  # ... and at least this share of rounds does so
DEFAULT_HZ = 250  # CONFIG_HZ of Debian's and Ubuntu's generic kernels, when the kernel's config is unreadable


CHECK_ENV = "PERFSUITE_CONTENTION_CHECK"


def check_enabled(environ=None) -> bool:
    """False when ``PERFSUITE_CONTENTION_CHECK=off``; ``ValueError`` naming any value but on/off."""
    value = (os.environ if environ is None else environ).get(CHECK_ENV, "on").strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"environment variable {CHECK_ENV}={value!r}: expected 'on' or 'off'")
    return value == "on"


@functools.cache
def kernel_tick_s() -> float:
    """The scheduler tick in seconds: ``1 / CONFIG_HZ`` from ``/boot/config-<release>`` or
    ``/proc/config.gz``, else ``1 / DEFAULT_HZ`` (read once: the running kernel's)."""
    import gzip

    sources = [
        (Path(f"/boot/config-{os.uname().release}"), open),
        (Path("/proc/config.gz"), gzip.open),
    ]
    for path, opener in sources:
        try:
            with opener(path, "rt") as config:
                for line in config:
                    if line.startswith("CONFIG_HZ="):
                        return 1.0 / int(line.split("=", 1)[1])
        except (OSError, ValueError):
            continue
    return 1.0 / DEFAULT_HZ


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What ``/proc`` says at one instant: per-thread CPU and run-queue wait (seconds), the
    machine's steal and total CPU time (seconds over all CPUs), the run queue and the load."""

    wall_s: float
    process_cpu_s: float
    thread_wait_s: dict[int, float]
    steal_s: float | None
    all_cpu_s: float | None
    procs_running: int | None
    load1: float | None


class _ProcFiles:
    """``/proc`` files kept open and read with ``pread`` from their start: a snapshot costs about 40 us
    instead of 260 us of opening each file by path (it is taken twice around every block of the A/B gate).
    A thread's file is opened when its thread first appears and closed when it is gone."""

    def __init__(self):
        self.fds: dict[str, int] = {}
        self.pid = os.getpid()

    def read(self, path: str, size: int = 4096) -> str | None:
        """The file's whole text (read ``size`` bytes at a time), or None when it cannot be read."""
        if os.getpid() != self.pid:  # a forked child: its /proc/self is another process's
            self.fds.clear()
            self.pid = os.getpid()
        fd = self.fds.get(path)
        try:
            if fd is None:
                fd = self.fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            chunks = [os.pread(fd, size, 0)]
            while len(chunks[-1]) == size:  # a large /proc/stat (many CPUs and interrupts)
                chunks.append(os.pread(fd, size, size * len(chunks)))
            return b"".join(chunks).decode()
        except OSError:
            self.close(path)
            return None

    def close(self, path: str) -> None:
        fd = self.fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def forget_except(self, prefix: str, kept: set[str]) -> None:
        """Close the files under ``prefix`` whose path is not in ``kept`` (threads that ended)."""
        for path in [p for p in self.fds if p.startswith(prefix) and p not in kept]:
            self.close(path)


_FILES = _ProcFiles()
_TASKS = "/proc/self/task/"


def _thread_waits() -> dict[int, float]:
    waits = {}
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return {}
    paths = {f"{_TASKS}{tid}/schedstat": tid for tid in tids}
    _FILES.forget_except(_TASKS, set(paths))
    for path, tid in paths.items():
        text = _FILES.read(path, 256)
        try:
            waits[int(tid)] = int(text.split()[1]) / 1e9
        except (AttributeError, ValueError, IndexError):
            continue
    return waits


def _proc_stat() -> tuple[float | None, float | None, int | None]:
    text = _FILES.read("/proc/stat", 1 << 14)
    if text is None:
        return None, None, None
    hz = os.sysconf("SC_CLK_TCK")
    steal = total = running = None
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            total = (
                sum(values[:8]) / hz
            )  # user nice system idle iowait irq softirq steal (guest is in user)
            steal = values[7] / hz if len(values) > 7 else None
        elif line.startswith("procs_running"):
            running = int(line.split()[1])
    return steal, total, running


def _load1() -> float | None:
    text = _FILES.read("/proc/loadavg", 256)
    try:
        return float(text.split()[0])
    except (AttributeError, ValueError, IndexError):
        return None


def snapshot() -> Snapshot:
    """Read ``/proc`` now (about 40 us; call it outside timed windows)."""
    steal, total, running = _proc_stat()
    return Snapshot(
        time.perf_counter(), time.process_time(), _thread_waits(), steal, total, running, _load1()
    )


@dataclasses.dataclass(frozen=True)
class ContentionEvidence:
    """Contention over one timed window (see the module docstring for each field and limit).

    ``wait_fraction``/``steal_fraction``/``cpu_per_wall`` are None where ``/proc`` did not say;
    ``reasons``: one sentence per finding, flagged or supporting; ``contended``: any flagged one;
    ``brief``: the findings in one short line (``threads waited for a CPU 0.60 s each second (limit 0.05 s),
    3 threads runnable on 2 CPUs``: the wait is summed over threads, so it may pass 1 s; the run queue
    at the window's end, this thread included).
    """

    wall_s: float
    cpu_per_wall: float | None
    threads: int
    wait_fraction: float | None
    steal_fraction: float | None
    procs_running_before: int | None
    procs_running_after: int | None
    load1_before: float | None
    load1_after: float | None
    on_tick: bool
    contended: bool
    reasons: tuple[str, ...]
    brief: str = (
        ""  # the reasons as one short line, for terminals and table cells (``reasons`` in full)
    )

    @property
    def available(self) -> bool:
        return self.wait_fraction is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (stored in a benchmark's ``extra_info['contention']``)."""
        # by field, not ``dataclasses.asdict`` (whose deep copies of these scalars cost 35 us a block)
        return {name: getattr(self, name) for name in _EVIDENCE_FIELDS} | {
            "reasons": list(self.reasons)
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContentionEvidence:
        """The inverse of ``as_dict``; ``ValueError`` naming the missing keys otherwise."""
        names = [f.name for f in dataclasses.fields(cls)]
        lacking = [
            n for n in names if n not in data and n != "brief"
        ]  # runs saved before it had one
        if lacking:
            raise ValueError(f"contention evidence lacks {', '.join(lacking)}: {data!r}")
        return cls(**{n: data[n] for n in names if n in data} | {"reasons": tuple(data["reasons"])})


_EVIDENCE_FIELDS = tuple(f.name for f in dataclasses.fields(ContentionEvidence))


def on_tick(round_times_s: Sequence[float], tick_s: float) -> bool:
    """True when at least ``TICK_SHARE`` of the rounds lie within ``TICK_TOLERANCE`` ticks of a whole
    multiple (>= 2) of ``tick_s`` and those rounds sit on more than one multiple.

    A quiet benchmark's rounds cluster on one value, which may by chance be near a multiple; rounds
    spread over several multiples, each exactly on one, lost their CPU for whole ticks.
    """
    if tick_s <= 0:
        raise ValueError(f"tick_s must be positive, got {tick_s!r}")
    multiples = []
    for t in round_times_s:
        k = round(t / tick_s)
        if k >= 2 and abs(t / tick_s - k) <= TICK_TOLERANCE:
            multiples.append(k)
    return (
        bool(round_times_s)
        and len(multiples) >= TICK_SHARE * len(round_times_s)
        and len(set(multiples)) > 1
    )


def wait_text(wait: float) -> str:
    """Thread wait summed over threads per second of wall time, as ``0.60 s/s``: a sum over threads can
    pass 1 (two threads waiting all along: 2 s/s), which a percentage of the wall time would print as
    an impossible ``200%``."""
    return f"{wait:.2f} s/s"


def assess(
    before: Snapshot,
    after: Snapshot,
    round_times_s: Sequence[float] = (),
    tick_s: float | None = None,
    wait_limit: float = WAIT_LIMIT,
    steal_limit: float = STEAL_LIMIT,
) -> ContentionEvidence:
    """Contention between two snapshots of this process (``round_times_s``: the window's rounds, seconds)."""
    wall = after.wall_s - before.wall_s
    if wall <= 0:
        raise ValueError(f"the window must have a positive wall time, got {wall!r} s")
    threads = len(after.thread_wait_s)
    wait = None
    if after.thread_wait_s:
        waited = sum(
            w - before.thread_wait_s.get(tid, 0.0) for tid, w in after.thread_wait_s.items()
        )
        wait = max(0.0, waited) / wall
    steal = None
    if None not in (before.steal_s, after.steal_s, before.all_cpu_s, after.all_cpu_s):
        spent = after.all_cpu_s - before.all_cpu_s
        steal = (after.steal_s - before.steal_s) / spent if spent > 0 else 0.0
    cpu_per_wall = (after.process_cpu_s - before.process_cpu_s) / wall
    tick = on_tick(round_times_s, tick_s if tick_s is not None else kernel_tick_s())
    reasons, flagged = [], False
    if wait is not None and wait > wait_limit:
        flagged = True
        reasons.append(
            f"the process's {threads} threads waited for a CPU {wait_text(wait)} of wall time "
            f"(summed over threads, so above 1 s/s when several wait at once; limit {wait_text(wait_limit)})"
        )
    if steal is not None and steal > steal_limit:
        flagged = True
        reasons.append(f"CPU steal {steal:.0%} of CPU time (limit {steal_limit:.0%})")
    if tick:
        flagged = True
        reasons.append("round times stuck on multiples of the scheduler tick")
    if flagged and not check_enabled():
        flagged = False
        reasons.append(f"not flagged: {CHECK_ENV}=off")
    if reasons and after.load1 is not None and before.load1 is not None:
        reasons.append(
            f"load average {before.load1:.2f} before, {after.load1:.2f} after "
            f"on {os.cpu_count()} CPUs; {cpu_per_wall:.2f} CPU-seconds per second across all "
            f"{threads} threads of this process (torch's operator threads and the rest)"
        )
    brief = [
        f"threads waited for a CPU {wait:.2f} s each second (limit {wait_limit:.2f} s)"
        if wait is not None and wait > wait_limit
        else "",
        f"CPU steal {steal:.0%} (limit {steal_limit:.0%})"
        if steal is not None and steal > steal_limit
        else "",
        "rounds on scheduler ticks" if tick else "",
        # the run queue now, not the 1-minute load average (which still holds, say, a gate's own start-up)
        f"{after.procs_running} thread{'' if after.procs_running == 1 else 's'} runnable on "
        f"{os.cpu_count()} CPUs"
        if reasons and after.procs_running is not None
        else "",
        "not flagged (check off)" if reasons and not flagged and not check_enabled() else "",
    ]
    return ContentionEvidence(
        wall,
        cpu_per_wall,
        threads,
        wait,
        steal,
        before.procs_running,
        after.procs_running,
        before.load1,
        after.load1,
        tick,
        flagged,
        tuple(reasons),
        ", ".join(b for b in brief if b),
    )


def other_runnable(windows: Sequence[dict[str, Any]]) -> int | None:
    """The fewest runnable threads besides the reader's at any run-queue reading of ``windows``
    (``ContentionEvidence.as_dict()`` of consecutive windows, e.g. an A/B pair's two blocks).

    Each window's run queue (``procs_running``) is read at its two ends, and each reading counts
    the reading thread itself: other threads kept at least ``min(readings) - 1`` runnable all the
    while. None where a reading is missing.
    """
    readings = [
        w.get(key) for w in windows for key in ("procs_running_before", "procs_running_after")
    ]
    if not readings or None in readings:
        return None
    return min(readings) - 1


def others_fill_every_cpu(windows: Sequence[dict[str, Any]], cpus: int | None = None) -> bool:
    """True when at every run-queue reading of ``windows`` other runnable threads alone could
    keep all ``cpus`` busy (default ``os.cpu_count()``, the CPUs ``procs_running`` counts over).

    Beside such a load the gate's blocks run only in the scheduler's slices between its threads,
    and a load on both sides of an A/B pair no longer cancels: with two busy processes on 2 CPUs
    the gate called unchanged code slower (docs/validation.md, "Gate beside a CPU hog"). The
    minimum over all readings, not one window's, because a worker's own operator threads may still
    be runnable at a reading: beside one busy process on 2 CPUs, 2% of block pairs or fewer had 2
    others at all four readings, against one block in four at both of its own two.
    False where a reading is missing or the contention check is off.
    """
    others = other_runnable(windows)
    return others is not None and check_enabled() and others >= (cpus or os.cpu_count() or 1)


def overload_reason(windows: Sequence[dict[str, Any]], cpus: int | None = None) -> str:
    """``others_fill_every_cpu``'s finding in one short line."""
    others, cpus = other_runnable(windows), cpus or os.cpu_count()
    return f"other processes filled every CPU ({others} runnable threads on {cpus} CPUs)"


def wait_share(contention: dict[str, Any]) -> float | None:
    """The share of a window's runnable thread time spent waiting for a CPU: ``wait / (wait + cpu)``
    from ``ContentionEvidence.as_dict()`` (``wait_fraction`` and ``cpu_per_wall``, both per wall
    second, summed over threads), in [0, 1]; None where either is missing.

    A thread that shares its CPU fairly with the load and waited this share of its runnable time ran
    ``1 / (1 - share)`` times slower for it (the A/B gate's contended rule, ``stats.contended_verdict``).
    """
    wait, cpu = contention.get("wait_fraction"), contention.get("cpu_per_wall")
    if wait is None or cpu is None:
        return None
    return wait / (wait + cpu) if wait + cpu > 0 else 0.0


def brief_reason(contention: dict[str, Any]) -> str:
    """One short line for a saved ``extra_info['contention']``: its ``brief``, or for runs saved
    before there was one, its first reason."""
    return contention.get("brief") or (contention.get("reasons") or ["no reason recorded"])[0]


class Probe:
    """``with Probe() as probe: <timed window>``, then ``probe.evidence(round_times_s)``."""

    def __enter__(self) -> Probe:
        self.before = snapshot()
        self.after: Snapshot | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.after = snapshot()

    def evidence(self, round_times_s: Sequence[float] = ()) -> ContentionEvidence:
        if self.after is None:
            raise RuntimeError("Probe.evidence() before the with-block ended")
        return assess(self.before, self.after, round_times_s)
