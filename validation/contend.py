"""Reproduce contention on purpose: busy processes beside a command, ended by their own PIDs.

    .venv/bin/python -m validation.contend --busy 2 -- .venv/bin/python -m pytest -c benchmarks.ini ...

``--busy N`` starts N CPU-bound processes (``yes > /dev/null``, one per core for ``N = nproc``)
before the command and kills exactly those PIDs afterwards, whatever the command's outcome.
``--busy 0`` runs the command alone, so quiet and loaded runs use the same script. Prints the
load average before and after (``/proc/loadavg``) on stderr. Exit code: the command's.

``--probe-steal SECONDS`` runs nothing else: it keeps every CPU busy for that long and prints the
share of their time the hypervisor gave to other guests (CPU steal, ``/proc/stat``). On a
virtual machine whose host is busy this is what the contention check flags as "CPU steal", and
no timing taken then is a quiet-machine number.

Other scripts use ``busy_processes(n)`` and ``probe_steal(seconds)``.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import time
from pathlib import Path


def load_average() -> str:
    """The first three fields of ``/proc/loadavg`` ("?" where there is none)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# A busy process that streams memory: 256 MiB read and written per pass, so it takes caches and
# memory bandwidth from the gate as well as a CPU.
MEMORY_HOG = "import numpy as np\na = np.ones(1 << 25)\nwhile True:\n    a += 1.0\n"


@contextlib.contextmanager
def busy_processes(count: int, kind: str = "spin"):
    """``count`` busy processes for the duration of the block: ``kind`` ``spin`` (``yes``, else a
    Python loop: one CPU each) or ``memory`` (``MEMORY_HOG``: a CPU, caches and memory bandwidth).
    ``ValueError`` on a negative count or another kind."""
    if count < 0:
        raise ValueError(f"--busy must be >= 0, got {count}")
    if kind not in ("spin", "memory"):
        raise ValueError(f"busy kind must be 'spin' or 'memory', got {kind!r}")
    command = (
        [sys.executable, "-c", MEMORY_HOG]
        if kind == "memory"
        else [shutil.which("yes")]
        if shutil.which("yes")
        else [sys.executable, "-c", "while True: pass"]
    )
    started = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        if started:
            time.sleep(1.0)  # let the scheduler see them before timing starts
        yield [p.pid for p in started]
    finally:
        for process in started:  # only the processes this block started, by their own PIDs
            process.kill()
        for process in started:
            process.wait()


def probe_steal(seconds: float) -> float | None:
    """CPU steal as a share of all CPU time while one busy process per CPU runs ``seconds`` (None
    where ``/proc/stat`` has no steal field)."""
    import os

    from perfsuite.measure.contention import snapshot

    before = snapshot()
    with busy_processes(os.cpu_count() or 1):
        time.sleep(seconds)
    after = snapshot()
    if None in (before.steal_s, after.steal_s) or after.all_cpu_s <= before.all_cpu_s:
        return None
    return (after.steal_s - before.steal_s) / (after.all_cpu_s - before.all_cpu_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--busy", type=int, default=1, help="busy processes beside the command (default 1)"
    )
    parser.add_argument(
        "--probe-steal",
        type=float,
        metavar="SECONDS",
        help="only measure CPU steal with every CPU busy for SECONDS, then exit",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    if args.probe_steal:
        steal = probe_steal(args.probe_steal)
        print(
            "contend: no CPU steal field in /proc/stat"
            if steal is None
            else f"contend: CPU steal {steal:.1%} of CPU time over {args.probe_steal:g} s with every CPU busy "
            f"(load average now {load_average()})"
        )
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    print(
        f"contend: load average before {load_average()}; {args.busy} busy process(es)",
        file=sys.stderr,
    )
    with busy_processes(args.busy) as pids:
        print(f"contend: busy PIDs {pids}", file=sys.stderr)
        code = subprocess.call(command)
    print(f"contend: load average after {load_average()}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
