"""Each A/B block timed from outside: the coordinator's clock against what a worker reports.

A worker runs the code under test in its own process, so anything it reports could be forged by that
code: a replaced clock, a write into the timing loop's frame, a reporter that sleeps. The coordinator runs
no user code. It times every request from sending it to reading the reply; the worker reports, on the
clocks it took before user code ran, how long it handled the request (``handled_s``), how much of that was
untimed (``untimed_s``: placement, warm-up) and each timed round. Two checks per block:

* **outside**: the coordinator's time less the measured transport (``WorkerProcess.transport_s``: the
  slowest of a few empty round trips) must be accounted for by ``handled_s``: a worker whose clock runs
  slow (``time.perf_counter`` scaled, or this module's clock replaced) reports less;
* **inside**: ``block_s`` (the worker's clock from the first timed round's start to the last one's end)
  must be accounted for by the timed rounds: rounds whose start was rewritten in the frame add up to
  less than the time they took.

"Accounted for" means at least ``SHARE`` of it, after ``SLACK_S`` of bookkeeping. A stall of the
coordinator between sending and reading, or of the worker before it reads the request (a busy machine),
can break the outside check, so it is made only on blocks that were not contended and whose run queue, at
the block's start and end, held no more runnable threads than the machine has CPUs (a gate's test beside
a loaded test run saw 10 ms queued before a 2 ms block: "the worker's clock counted 1.95 ms of a block the
coordinator timed at 19.71 ms", 3 of 4 blocks, an honest worker failed); the inside check compares two
readings of the worker's own clock around its rounds and holds on a busy machine too. Only a worker that
disagrees in ``MIN_BLOCKS`` blocks or more and in more than half of its checked blocks of a benchmark is
reported, naming the side and both clocks. ``tests/gate/test_outside_clock.py`` has a head that scales
its clock and one that rewrites the timing frame.
"""

from __future__ import annotations

import dataclasses
import os

SHARE = 0.7
SLACK_S = 0.002
MIN_BLOCKS = 3


def inside_disagreement(reply: dict) -> str | None:
    """Why a ``time`` reply's rounds do not account for the time the worker's own clock saw them take
    (``block_s``: from the first timed round's start to the last one's end), or None."""
    block = float(reply.get("block_s", 0.0))
    timed = float(sum(reply.get("times") or ()))
    if SHARE * block - SLACK_S > timed:
        return (
            f"its timed rounds add up to {1e3 * timed:.2f} ms of the {1e3 * block:.2f} ms "
            "they took on the worker's own clock"
        )
    return None


def outside_disagreement(outside_s: float, transport_s: float, reply: dict) -> str | None:
    """Why a reply's ``handled_s`` does not account for the coordinator's ``outside_s`` less the
    worker's measured ``transport_s``, or None."""
    handled = float(reply.get("handled_s", 0.0))
    if SHARE * (outside_s - transport_s) - SLACK_S > handled:
        return (
            f"the worker's clock counted {1e3 * handled:.2f} ms of a block the coordinator timed at "
            f"{1e3 * outside_s:.2f} ms (transport {1e3 * transport_s:.2f} ms)"
        )
    return None


def busy(reply: dict) -> bool:
    """Whether other work may have held up a block's request outside the worker's timed window: the
    block was contended, or the run queue at its start or end (``procs_running``, this worker's threads
    included) held more runnable threads than the machine has CPUs."""
    evidence = reply.get("contention") or {}
    cpus = os.cpu_count() or 1
    queued = (evidence.get(k) or 0 for k in ("procs_running_before", "procs_running_after"))
    return bool(evidence.get("contended")) or any(n > cpus for n in queued)


@dataclasses.dataclass
class ClockCheck:
    """One worker's blocks of one benchmark against the outside clock."""

    side: str
    blocks: int = 0
    disagreements: int = 0
    last: str = ""

    def record(self, outside_s: float, transport_s: float, reply: dict) -> None:
        """Check one block: inside always, outside unless the machine was busy (``busy``)."""
        self.blocks += 1
        # device clocks time the kernels, not the host's wall: only the outside check applies there
        found = inside_disagreement(reply) if reply.get("clock", "host") == "host" else None
        if found is None and not busy(reply):
            found = outside_disagreement(outside_s, transport_s, reply)
        if found:
            self.disagreements += 1
            self.last = found

    def failure(self) -> str | None:
        """The gate's failure when this worker disagreed in most of its blocks, else None."""
        if self.disagreements >= MIN_BLOCKS and 2 * self.disagreements > self.blocks:
            return (
                f"the {self.side} worker's times disagree with the gate's own clock in "
                f"{self.disagreements} of {self.blocks} blocks ({self.last}): its code changed how it is "
                "timed (a replaced or rewritten clock, or a reporter that lies); nothing of it was kept"
            )
        return None
