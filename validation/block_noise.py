"""How block length and clock set the A/B gate's noise (docs/validation.md: "Block length").

Starts the gate's two worker processes on one variant (identical code for ``A/A``; the head of
``calibrate_gate``'s ``real change`` for ``real change``), then, for each block length of
``--rounds``, samples block pairs alternately (AB, BA, ...) for ``--seconds`` and reports per
clock (wall ``perf_counter``, and the worker process's CPU time over all threads):

* ``pairs/s``: block pairs sampled per second;
* ``pair sd``: the standard deviation of the pairs' log ratios (median head block / median base block);
* ``sd x sqrt(s/pair)``: the noise per second of sampling. The signed-rank interval's width after
  ``T`` seconds scales as this over ``sqrt(T)``, so it compares block lengths at equal cost;
* ``ratio``: the Hodges-Lehmann estimate of head/base over the pairs;
* ``full-CPU pairs``: the share of pairs the gate sets aside because other processes' threads
  filled every CPU at all four run-queue readings (``contention.others_fill_every_cpu``).

A measurement, not a test; ``--busy N`` runs N busy processes beside it (``validation/contend.py``).

    .venv/bin/python -m validation.block_noise --reps 3 --rounds 1,2,8 --busy 0
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from perfsuite.gate.ab import Side, WorkerProcess
from perfsuite.gate.stats import wilcoxon_interval
from perfsuite.measure.contention import others_fill_every_cpu
from perfsuite.suite.settings import split_list

from validation.calibrate_gate import REAL_CHANGES, changed_tree
from validation.contend import busy_processes, load_average

CLOCKS = {"wall": "times", "cpu": "cpu_times"}
ROOT = Path(__file__).resolve().parent.parent


BLOCK_STATISTICS = {"median": statistics.median, "min": min}


def sample(
    base: WorkerProcess,
    head: WorkerProcess,
    rounds: int,
    seconds: float,
    warmup: int = 0,
    statistic: str = "median",
) -> dict:
    """Block pairs of ``rounds`` timed calls per side (after ``warmup`` untimed ones) for ``seconds``:
    per clock, the pairs' log ratios of the blocks' ``statistic`` (``BLOCK_STATISTICS``)."""
    typical = BLOCK_STATISTICS[statistic]
    logs: dict[str, list[float]] = {clock: [] for clock in CLOCKS}
    full = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        order = (base, head) if len(logs["wall"]) % 2 == 0 else (head, base)
        request = {"time": rounds, "warmup": warmup}
        replies = {id(worker): worker.ask(request) for worker in order}
        b, h = replies[id(base)], replies[id(head)]
        full += others_fill_every_cpu([b["contention"], h["contention"]])
        for clock, field in CLOCKS.items():
            logs[clock].append(math.log(typical(h[field]) / typical(b[field])))
    return {"elapsed_s": time.perf_counter() - start, "logs": logs, "full_cpu_pairs": full}


def describe(rounds: int, found: dict) -> str:
    pairs = len(found["logs"]["wall"])
    line = f"| {rounds} | {pairs / found['elapsed_s']:.0f} |"
    for logs in found["logs"].values():
        sd = float(np.std(logs, ddof=1))
        ratio = math.exp(wilcoxon_interval(logs, 0.01)[0])
        line += f" {sd:.3f} | {sd * math.sqrt(found['elapsed_s'] / pairs):.4f} | {ratio:.3f} |"
    return line + f" {found['full_cpu_pairs'] / pairs:.1%} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="1,2,8", help="block lengths (calls per block)")
    parser.add_argument("--seconds", type=float, default=6.0, help="sampling per block length")
    parser.add_argument(
        "--reps", type=int, default=3, help="worker pairs started, one after another"
    )
    parser.add_argument("--scenario", choices=("A/A", "real change"), default="A/A")
    parser.add_argument("--variant", default="naive_inplace")
    parser.add_argument("--case", default="b2h8s256d64-fp32-causal-cpu")
    parser.add_argument("--mode", default="forward")
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument(
        "--warmup", type=int, default=0, help="untimed calls per block before the timed ones"
    )
    parser.add_argument(
        "--statistic",
        choices=sorted(BLOCK_STATISTICS),
        default="median",
        help="what stands for a block: the median of its calls (the gate's) or the fastest",
    )
    args = parser.parse_args()
    lengths = [int(r) for r in split_list(args.rounds)]
    setup = {"variant": args.variant, "case": args.case, "seed": 0, "mode": args.mode}
    print(
        f"{args.scenario}, {args.variant} {args.mode} on {args.case}, busy {args.busy}, "
        f"{args.warmup} untimed call(s) per block, block {args.statistic}"
    )
    print(
        "| rounds per block | pairs/s | wall: pair sd | wall: sd x sqrt(s/pair) | wall: ratio "
        "| cpu: pair sd | cpu: sd x sqrt(s/pair) | cpu: ratio | full-CPU pairs |"
    )
    print("| --- " * 9 + "|")
    with busy_processes(args.busy), tempfile.TemporaryDirectory() as tmp:
        head_tree = (
            changed_tree(Path(tmp), REAL_CHANGES["real change"])
            if args.scenario == "real change"
            else ROOT
        )
        for _ in range(args.reps):
            base, head = WorkerProcess(Side(ROOT)), WorkerProcess(Side(head_tree))
            try:
                for worker in (base, head):
                    worker.ask({"setup": setup})
                for rounds in lengths:
                    print(
                        describe(
                            rounds,
                            sample(base, head, rounds, args.seconds, args.warmup, args.statistic),
                        ),
                        flush=True,
                    )
            finally:
                base.close()
                head.close()
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
