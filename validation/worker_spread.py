"""How far apart the worker pairs of one A/B gate measure the same benchmark (docs/validation.md,
"Spread between worker pairs").

Runs one gate (``perfsuite.gate.ab.run_ab``) with a single look after every worker pair's visit
(``SequentialPlan(looks=(worker_pairs,))``: no benchmark stops early), each visit ``--blocks`` block pairs
(default: sized from the step's time), within ``--budget-s`` per benchmark, and prints per benchmark: the
pairs kept, each worker pair's estimate (the Hodges-Lehmann centre of its log ratios,
``intervals.cluster_estimates``), their mean as a ratio, the standard deviation between worker pairs and
the median standard error within one (what the spread would be from pair noise alone). A spread between worker pairs well above the within
standard error is a bias of the processes, which the gate's interval across worker pairs carries.
``--scenario "real change"``: the head loses ``naive_inplace``'s ``masked_fill_``
(``validation.calibrate_gate``); ``A/A``: identical code. Raw blocks go to ``--out`` (``ab --json``'s
document).

    .venv/bin/python -m validation.worker_spread --workers-per-side 12 --blocks 24 --scenario "real change"
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import numpy as np

from perfsuite.gate.ab import Side, ab_payload, run_ab
from perfsuite.gate.intervals import cluster_estimates, pair_log_ratios
from perfsuite.gate.sequential import WORKER_PAIRS, SequentialPlan
from perfsuite.gate.verdicts import GateSettings
from perfsuite.suite.settings import split_list
from validation.calibrate_gate import REAL_CHANGES, changed_tree, smoke_cases

ROOT = Path(__file__).resolve().parent.parent


def spread_rows(payload: dict) -> list[str]:
    """One Markdown row per benchmark of an ``ab_payload`` document (see the module docstring); each
    pair's worker pair is the benchmark's ``clusters`` (all one with a single worker pair)."""
    rows = [
        "| benchmark | pairs kept | mean of worker pairs | sd between worker pairs | median se within one "
        "| worker pairs (log ratio) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for bench in payload["benchmarks"]:
        log_ratios = pair_log_ratios(bench["base_blocks_s"], bench["head_blocks_s"])
        kept = np.array([not c for c in bench["contended_pairs"]], dtype=bool)
        clusters = np.array([-1 if c is None else c for c in bench["clusters"]], dtype=int)
        values, labels = log_ratios[kept], clusters[kept]
        estimates = cluster_estimates(values, labels)
        within = [
            np.std(values[labels == c]) / math.sqrt((labels == c).sum()) for c in np.unique(labels)
        ]
        rows.append(
            f"| `{bench['key']}` | {kept.sum()} | "
            + (f"{math.exp(estimates.mean()):.4f} | " if len(estimates) else "- | ")
            + (f"{estimates.std(ddof=1):.4f} | " if len(estimates) > 1 else "- | ")
            + (f"{np.median(within):.4f} | " if within else "- | ")
            + " ".join(f"{e:+.3f}" for e in estimates)
            + " |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers-per-side", type=int, default=WORKER_PAIRS, help="worker pairs")
    parser.add_argument(
        "--blocks", type=int, default=0, help="block pairs per visit (default: sized from the step)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=60.0, help="the most seconds per benchmark (default 60)"
    )
    parser.add_argument("--scenario", choices=("A/A", "real change"), default="real change")
    parser.add_argument("--case-set", default="smoke")
    parser.add_argument("--variants", default="naive,naive_inplace,sdpa,sdpa_math,flex_eager,mha")
    parser.add_argument("--out", default="perfsuite-results/worker-spread.json")
    args = parser.parse_args()
    plan = SequentialPlan(
        args.workers_per_side,
        looks=(args.workers_per_side,),
        budget_s=args.budget_s,
        max_budget_s=args.budget_s,
        blocks=args.blocks,
    )
    settings = GateSettings()
    with tempfile.TemporaryDirectory(prefix="perfsuite-head-") as scratch:
        head = (
            changed_tree(Path(scratch), REAL_CHANGES["real change"])
            if args.scenario == "real change"
            else ROOT
        )
        results, info = run_ab(
            Side(ROOT),
            Side(head),
            split_list(args.variants),
            smoke_cases(args.case_set),
            plan=plan,
            settings=settings,
        )
    payload = ab_payload(results, info, settings, plan)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload) + "\n")
    print("\n".join(spread_rows(payload)))


if __name__ == "__main__":
    main()
