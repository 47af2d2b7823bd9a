"""A reference kernel timed beside each CPU benchmark: how fast was the machine just then?

On a virtual machine the CPU's speed can change with no trace in ``/proc``: another guest on the
same physical core (an SMT sibling) or the host's clock. Neither is CPU steal nor run-queue wait,
so ``perfsuite.measure.contention`` cannot see it. Measured on the 2-core CI VM (docs/validation.md, "Separate
runs and the speed reference"): with 0% steal, a 384x384 fp32 matmul's median over 10 calls moved by up to 4x
within 3 s, one-second windows of ``sdpa`` moved by 2.3x within a minute with a correlation of 0.85
to the matmul timed beside them, and identical code compared across two quiet separate runs was
called ``slower`` in 2 of 6 comparisons.

So every CPU benchmark records the reference's median just before and just after its rounds
(``extra_info['speed_reference']``), and a comparison of two separate runs
(``perfsuite.gate.compare``) does not judge a benchmark whose reference differs between the runs by
more than ``SPEED_LIMIT``: the machine, not the code, may have changed. The A/B gate does not need
it (its pairs share the machine's state).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from perfsuite.measure.contention import WAIT_LIMIT, check_enabled

REFERENCE_SIZE = 384  # square fp32 matmul: about 0.1 GFLOP, about 1 ms on two cores of the CI VM
REFERENCE_CALLS = 20  # median of this many calls: about 20 ms before and 20 ms after each benchmark
SPEED_LIMIT = (
    WAIT_LIMIT  # as for run-queue wait: a change of machine speed that could explain a 5% change
)
SPEED_CHANGED = "the machine ran at another speed"  # how a speed_change sentence starts
REFERENCE = f"fp32 matmul {REFERENCE_SIZE}x{REFERENCE_SIZE}x{REFERENCE_SIZE}, median of {REFERENCE_CALLS} calls"

_operands: tuple[Any, Any] | None = None


def reference_ms(calls: int = REFERENCE_CALLS) -> float:
    """Median wall time (ms) of ``calls`` CPU matmuls of ``REFERENCE_SIZE`` (torch's current thread
    count), after one untimed call. ``ValueError`` when ``calls < 1``."""
    import torch

    global _operands
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls!r}")
    if _operands is None:
        generator = torch.Generator().manual_seed(0)
        _operands = tuple(
            torch.randn(REFERENCE_SIZE, REFERENCE_SIZE, generator=generator) for _ in range(2)
        )
    a, b = _operands
    torch.mm(a, b)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def record(before_ms: float, after_ms: float) -> dict[str, Any]:
    """What a benchmark stores: the reference's median before and after its rounds (ms)."""
    return {"reference": REFERENCE, "before_ms": before_ms, "after_ms": after_ms}


def reference_of(extra_info: dict[str, Any]) -> float | None:
    """The geometric mean (ms) of a benchmark's before/after reference, or None where it has none
    (CUDA benchmarks, runs saved before it existed)."""
    found = (extra_info or {}).get("speed_reference") or {}
    before, after = found.get("before_ms"), found.get("after_ms")
    if (
        not isinstance(before, (int, float))
        or not isinstance(after, (int, float))
        or before <= 0
        or after <= 0
    ):
        return None
    return math.sqrt(before * after)


def speed_change(
    base_info: dict[str, Any], head_info: dict[str, Any], limit: float = SPEED_LIMIT
) -> str | None:
    """A sentence when the machine's speed differed between two runs of a benchmark by more than
    ``limit`` (by the reference beside each), else None: also when either run lacks a reference, and
    under ``PERFSUITE_CONTENTION_CHECK=off`` (``contention.check_enabled``), which judges timings
    whatever the machine did."""
    base, head = reference_of(base_info), reference_of(head_info)
    if base is None or head is None or not check_enabled():
        return None
    ratio = head / base
    if abs(math.log(ratio)) <= math.log1p(limit):
        return None
    return (
        f"{SPEED_CHANGED}: the reference ({REFERENCE}) took {base:.3f} ms in the base run "
        f"and {head:.3f} ms in the head run (x{ratio:.2f}, limit {limit:.0%}); on a virtual machine another "
        "guest on the same core or the host's clock, which CPU steal does not show"
    )


def run_spread(references_ms: list[float], limit: float = SPEED_LIMIT) -> str | None:
    """A sentence when the reference beside a run's benchmarks (ms each) spread by more than ``limit``
    over the run, else None (also with fewer than two references)."""
    if len(references_ms) < 2:
        return None
    low, high = min(references_ms), max(references_ms)
    if high / low <= 1 + limit:
        return None
    return (
        f"the machine's speed changed during this run: the reference ({REFERENCE}) beside its "
        f"{len(references_ms)} CPU benchmarks took {low:.3f}-{high:.3f} ms (x{high / low:.2f}, limit {limit:.0%}); "
        "compared with a separate run its timings may show the machine, not the code (perfsuite compare "
        "withholds those verdicts; perfsuite ab pairs base and head in time)"
    )
