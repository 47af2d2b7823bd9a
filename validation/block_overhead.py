"""The A/B gate's time between blocks (docs/validation.md, "Gate timing, warm worker pairs").

Starts one worker pair per source tree and variant, sets it up as the gate does, then runs ``--blocks``
block pairs (``perfsuite.gate.ab.block_pair``: base and head in turn, one call each, inputs re-placed
every ``PLACEMENT_PAIRS`` block pairs, the coordinator's clock checks on) and prints, per run, the
milliseconds per block beyond its timed calls: the request and the reply, the contention readings, the
worker's guard check and the placements. With several ``--tree`` the trees are alternated run by run
(A B B A ...), so that a drift of the machine falls on both. Run it with nothing else on the machine.

    .venv/bin/python -m validation.block_overhead --tree . --tree ../perfsuite-before --runs 4
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from perfsuite.gate.ab import (
    Side,
    WorkerProcess,
    block_pair,
    close_workers,
    setup_pair,
    setup_request,
)
from perfsuite.gate.outside_clock import ClockCheck
from perfsuite.gate.sequential import PLACEMENT_PAIRS, WARMUP_STEPS
from perfsuite.gate.verdicts import ContendedPairs
from perfsuite.suite.settings import split_list

CASE = "b2h8s256d64-fp32-causal-cpu"
SKIPPED_PAIRS = 10  # the first block pairs of a fresh pair start slow (validation page, Limits)


def overhead_ms(tree: Path, variant: str, blocks: int) -> float:
    """Milliseconds per block beyond its timed calls, over ``blocks`` block pairs of one fresh worker
    pair running ``tree``'s code (the first ``SKIPPED_PAIRS`` not counted)."""
    base, head = (WorkerProcess(Side(tree), None, role) for role in ("base", "head"))
    try:
        requests = tuple(
            setup_request(w, variant, CASE, 0, "forward", (), False) for w in (base, head)
        )
        setup_pair(base, head, requests, 600.0)
        checks = {id(w): ClockCheck(w.role) for w in (base, head)}
        for worker in (base, head):
            worker.transport_s()  # measured once, at the first block, in a gate
        wall = timed = 0.0
        for j in range(SKIPPED_PAIRS + blocks):
            placements = (j // PLACEMENT_PAIRS, 1000 + j // PLACEMENT_PAIRS)
            start = time.perf_counter()
            sample, _ = block_pair(
                base,
                head,
                j % 2 == 0,
                1,
                placements,
                ContendedPairs.SHARED,
                0,
                [],
                None,
                checks,
                WARMUP_STEPS if j == 0 else 0,
            )
            if j >= SKIPPED_PAIRS:
                wall += time.perf_counter() - start
                timed += sum(sample.base_s) + sum(sample.head_s)
        return 1e3 * (wall - timed) / (2 * blocks)
    finally:
        close_workers([base, head])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree", action="append", type=Path, help="source tree (repeatable; default: .)"
    )
    parser.add_argument("--variants", default="naive_inplace,sdpa")
    parser.add_argument("--blocks", type=int, default=140, help="block pairs counted per run")
    parser.add_argument("--runs", type=int, default=4, help="runs per tree and variant")
    args = parser.parse_args()
    trees = args.tree or [Path(".")]
    found: dict[Path, list[float]] = {tree: [] for tree in trees}
    for run in range(args.runs):
        for tree in trees if run % 2 == 0 else trees[::-1]:
            for variant in split_list(args.variants):
                found[tree].append(overhead_ms(tree, variant, args.blocks))
                print(f"{tree} {variant}: {found[tree][-1]:.3f} ms per block", flush=True)
    print(
        "\n| tree | ms per block beyond its timed calls: median (min-max) | runs |\n| --- | --- | --- |"
    )
    for tree, values in found.items():
        print(
            f"| {tree} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) | "
            f"{len(values)} |"
        )


if __name__ == "__main__":
    main()
