"""Variance components of a benchmark's time: between blocks inside one process, and between processes
(Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013).

For every eager built-in on the smoke cases, ``--processes`` worker processes (``perfsuite.gate.ab_worker``,
the A/B gate's own, one at a time: only the process being timed is busy) each time ``--blocks`` blocks of
the benchmark's step, in two ways:

* ``warm``: a block is ``--calls`` steps after one untimed step, its statistic the median; the process's
  blocks follow each other;
* ``cold``: a block is one step, and the processes take turns block by block (what the gate did when it
  rotated one-call blocks through its worker processes);

each with the inputs' placement re-drawn per block (``placement on``, ``perfsuite.measure.placement``) and
without (``off``). Per benchmark and way it prints, on log times (so the components are relative): the
within-process standard deviation of a block ``S_w``, the between-process standard deviation ``S_b`` (one-way
random-effects ANOVA: ``S_b^2 = (MS_between - MS_within) / r``, 0 when negative), the intraclass share
``S_b^2 / (S_b^2 + S_w^2)``, a process's start-up cost ``c1`` (seconds, measured: start, import, set up,
warm up) and a block's cost ``c2``, and the paper's choices: blocks per process
``r* = sqrt(c1 S_w^2 / (c2 S_b^2))`` (cost ``n (c1 + r c2)`` for a variance ``S_b^2/n + S_w^2/(n r)``), and
the number of worker pairs for a one-sided 3% change at the gate's level (a pair's log ratio carries both
processes' effects: variance ``2 (S_b^2 + S_w^2 / r)``).

Run it with nothing else on the machine (its numbers are the point):

    .venv/bin/python -m validation.variance_components --processes 6 --blocks 12 --out perfsuite-results/variance.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from perfsuite.gate.ab import Side, WorkerProcess
from perfsuite.suite.settings import SETTINGS, RawValue, resolve, split_list

ROOT = Path(__file__).resolve().parent.parent
EAGER_BUILTINS = "naive,naive_inplace,sdpa,sdpa_math,flex_eager,mha"


def smoke_cases(case_set: str) -> list[str]:
    """The case ids of ``case_set`` as the suite resolves it on this machine."""
    raw = {n: RawValue(s.default, n, "default") for n, s in SETTINGS.items()}
    raw["case_set"] = RawValue(case_set, "case_set", "option")
    return [c.id for c in resolve(raw, False).cases]


def components(log_blocks: np.ndarray) -> dict[str, float]:
    """``S_w``, ``S_b`` and the intraclass share of a ``[processes, blocks]`` array of log block times
    (one-way random-effects ANOVA, balanced; Kalibera & Jones 2013, section 3)."""
    n, r = log_blocks.shape
    means = log_blocks.mean(axis=1)
    ms_within = float(((log_blocks - means[:, None]) ** 2).sum() / (n * (r - 1)))
    ms_between = float(r * ((means - means.mean()) ** 2).sum() / (n - 1))
    s_b2 = max(0.0, (ms_between - ms_within) / r)
    return {
        "s_within": math.sqrt(ms_within),
        "s_between": math.sqrt(s_b2),
        "intraclass": s_b2 / (s_b2 + ms_within) if s_b2 + ms_within > 0 else 0.0,
    }


def plan_for(parts: dict[str, float], c1_s: float, c2_s: float, z: float) -> dict[str, float]:
    """Kalibera & Jones's blocks per process (at least 1) and the worker pairs a 3% one-sided change
    needs at critical value ``z`` with 80% power (normal approximation)."""
    s_w2, s_b2 = parts["s_within"] ** 2, parts["s_between"] ** 2
    r = max(1, round(math.sqrt(c1_s * s_w2 / (c2_s * s_b2)))) if s_b2 > 0 else 64
    pair_var = 2 * (s_b2 + s_w2 / r)
    pairs = math.ceil(pair_var * ((z + 0.84) / math.log(1.03)) ** 2)
    return {"blocks_per_process": r, "worker_pairs": max(2, pairs)}


def time_benchmark(variant: str, case: str, args, placement: bool, warm: bool) -> dict:
    """``[processes, blocks]`` block times of one benchmark, and the measured costs."""
    workers, starts = [], []
    blocks = np.zeros((args.processes, args.blocks))
    block_costs = []
    setup = {
        "variant": variant,
        "case": case,
        "seed": 0,
        "mode": "forward",
        "specs": [],
        "slowdown": 0.0,
        "fingerprint": False,
    }
    for _ in range(args.processes if not warm else 0):  # cold: every process up first, then turns
        start = time.perf_counter()
        worker = WorkerProcess(Side(ROOT))
        worker.ask({"setup": setup})
        workers.append(worker)
        starts.append(time.perf_counter() - start)
    seed = 0
    try:
        if warm:
            for p in range(args.processes):
                start = time.perf_counter()
                worker = WorkerProcess(Side(ROOT))
                worker.ask({"setup": setup})
                worker.ask({"time": args.calls, "warmup": 3})
                starts.append(time.perf_counter() - start)
                for b in range(args.blocks):
                    seed += 1
                    t0 = time.perf_counter()
                    reply = worker.ask(
                        {"time": args.calls, "warmup": 1, "placement": seed if placement else None}
                    )
                    block_costs.append(time.perf_counter() - t0)
                    blocks[p, b] = float(np.median(reply["times"]))
                worker.close()
        else:
            for b in range(args.blocks):
                for p, worker in enumerate(workers):
                    seed += 1
                    t0 = time.perf_counter()
                    reply = worker.ask({"time": 1, "placement": seed if placement else None})
                    block_costs.append(time.perf_counter() - t0)
                    blocks[p, b] = reply["times"][0]
    finally:
        for worker in workers:
            worker.close()
    parts = components(np.log(blocks))
    c1, c2 = float(np.median(starts)), float(np.median(block_costs))
    return {
        **parts,
        **plan_for(parts, c1, c2, args.z),
        "c1_s": c1,
        "c2_s": c2,
        "median_ms": 1e3 * float(np.median(blocks)),
        "blocks_s": blocks.tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--calls", type=int, default=5, help="steps per warm block")
    parser.add_argument("--variants", default=EAGER_BUILTINS)
    parser.add_argument("--case-set", default="smoke")
    parser.add_argument("--ways", default="warm,cold", help="warm, cold or both")
    parser.add_argument("--placement", default="on,off", help="on, off or both")
    parser.add_argument(
        "--z", type=float, default=3.09, help="critical value (default: one-sided 0.001)"
    )
    parser.add_argument("--out", default="perfsuite-results/variance-components.json")
    args = parser.parse_args()
    rows, found = [], []
    print(
        "| benchmark | way | placement | median ms | S_w | S_b | intraclass | c1 s | c2 s | r* | worker pairs for 3% |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for variant in split_list(args.variants):
        for case in smoke_cases(args.case_set):
            for way in split_list(args.ways):
                for placement in split_list(args.placement):
                    got = time_benchmark(variant, case, args, placement == "on", way == "warm")
                    found.append(
                        {
                            "variant": variant,
                            "case": case,
                            "way": way,
                            "placement": placement,
                            **got,
                        }
                    )
                    row = (
                        f"| `{variant}` {case} | {way} | {placement} | {got['median_ms']:.3f} | {got['s_within']:.4f} | "
                        f"{got['s_between']:.4f} | {got['intraclass']:.2f} | {got['c1_s']:.2f} | {got['c2_s']:.4f} | "
                        f"{got['blocks_per_process']} | {got['worker_pairs']} |"
                    )
                    rows.append(row)
                    print(row, flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(found) + "\n")


if __name__ == "__main__":
    main()
