"""How far apart the worker pairs of one A/B gate measure the same benchmark (docs/validation.md,
"Spread between worker pairs").

Runs one gate (``perfsuite.gate.ab.run_ab``) with no look before its budget is spent, so every
benchmark gets ``--budget-s`` of pairs, and prints per benchmark: the pairs kept, each worker pair's
estimate (the Hodges-Lehmann centre of its log ratios, ``stats.cluster_estimates``), their mean as a
ratio, the standard deviation between worker pairs and the median standard error within one (what
the spread would be from pair noise alone). A spread between worker pairs well above the within
standard error is a bias of the processes, which the gate's interval across worker pairs carries.
``--scenario "real change"``: the head loses ``naive_inplace``'s ``masked_fill_``
(``validation.calibrate_gate``); ``A/A``: identical code. Raw blocks go to ``--out`` (``ab --json``'s
document).

    .venv/bin/python -m validation.worker_spread --workers-per-side 12 --budget-s 25 --scenario "real change"
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import numpy as np

from perfsuite.gate import stats
from perfsuite.gate.ab import Side, ab_payload, run_ab
from perfsuite.gate.stats import GateSettings, SequentialPlan, pair_log_ratios
from perfsuite.suite.settings import split_list
from validation.calibrate_gate import REAL_CHANGES, changed_tree, smoke_cases

ROOT = Path(__file__).resolve().parent.parent


def spread_rows(payload: dict) -> list[str]:
    """One Markdown row per benchmark of an ``ab_payload`` document (see the module docstring)."""
    workers = payload["workers_per_side"]
    rows = [
        "| benchmark | pairs kept | mean of worker pairs | sd between worker pairs | median se within one "
        "| worker pairs (log ratio) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for bench in payload["benchmarks"]:
        log_ratios = pair_log_ratios(bench["base_blocks_s"], bench["head_blocks_s"])
        kept = np.array([not c for c in bench["contended_pairs"]], dtype=bool)
        clusters = np.arange(len(log_ratios)) % workers
        values, labels = log_ratios[kept], clusters[kept]
        estimates = stats.cluster_estimates(values, labels)
        within = [
            np.std(values[labels == c]) / math.sqrt(max((labels == c).sum(), 1))
            for c in range(workers)
        ]
        rows.append(
            f"| `{bench['key']}` | {kept.sum()} | {math.exp(estimates.mean()):.4f} | "
            f"{estimates.std(ddof=1):.4f} | {np.median(within):.4f} | "
            + " ".join(f"{e:+.3f}" for e in estimates)
            + " |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers-per-side", type=int, default=stats.WORKERS_PER_SIDE)
    parser.add_argument("--budget-s", type=float, default=25.0)
    parser.add_argument("--scenario", choices=("A/A", "real change"), default="real change")
    parser.add_argument("--case-set", default="smoke")
    parser.add_argument("--variants", default="naive,naive_inplace,sdpa,sdpa_math,flex_eager,mha")
    parser.add_argument("--out", default="perfsuite-results/worker-spread.json")
    args = parser.parse_args()
    plan = SequentialPlan(looks=(10**6,), budget_s=args.budget_s, min_s=0)
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
            workers_per_side=args.workers_per_side,
        )
    payload = ab_payload(results, info, settings, plan, workers_per_side=args.workers_per_side)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload) + "\n")
    print("\n".join(spread_rows(payload)))


if __name__ == "__main__":
    main()
