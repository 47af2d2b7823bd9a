"""Measure the A/B gate's error rates on this machine (README: "Regression gating").

Repeats the gate (``perfsuite ab`` on a case set) in three scenarios: identical code (A/A),
and a real slowdown of 10% and of 5% injected into one variant (busy CPU work after each
forward, proportional to its runtime). Reports how often the gate flagged a regression, how
often the slowed variant was caught, and seconds per gate. Timings are noisy: this measures
rates over repetitions; it is not a test.

    .venv/bin/python scripts/calibrate_gate.py --reps 20 --out perfsuite-results/calibration.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from perfsuite.gate.ab import Side, run_ab
from perfsuite.gate.stats import GateSettings
from perfsuite.suite.settings import SETTINGS, RawValue, resolve
from perfsuite.storage import write_text_atomic
from perfsuite.variants import variant_names


def smoke_cases(case_set: str) -> list[str]:
    raw = {n: RawValue(s.default, n, "default") for n, s in SETTINGS.items()}
    raw["case_set"] = RawValue(case_set, "case_set", "option")
    return [c.id for c in resolve(raw, torch.cuda.is_available()).cases]


def one_gate(slowdown: float, args, cases: list[str]) -> dict:
    start = time.perf_counter()
    head = Side(Path("."), slowdown=slowdown, slow_variant=args.slow_variant)
    results, _ = run_ab(Side(Path(".")), head, variant_names(), cases, blocks=args.blocks, rounds=args.rounds,
                        settings=GateSettings(args.alpha, args.min_effect))
    verdicts = {r.key.split("/")[0]: r.comparison.verdict for r in results}
    ratios = {r.key.split("/")[0]: r.comparison.estimate.ratio for r in results}
    return {"seconds": time.perf_counter() - start, "verdicts": verdicts, "ratios": ratios,
            "flagged": any(v == "slower" for v in verdicts.values()),
            "caught": verdicts.get(args.slow_variant) == "slower",
            "false_alarms": sum(v == "slower" for k, v in verdicts.items() if k != args.slow_variant or not slowdown)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--case-set", default="smoke")
    parser.add_argument("--slow-variant", default="sdpa")
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--min-effect", type=float, default=0.05)
    parser.add_argument("--out", default="perfsuite-results/calibration.json")
    args = parser.parse_args()
    cases = smoke_cases(args.case_set)
    scenarios = {"A/A (identical)": 0.0, "10% slowdown": 0.10, "5% slowdown": 0.05}
    runs = {name: [] for name in scenarios}
    for rep in range(args.reps):
        for name, slowdown in scenarios.items():
            runs[name].append(one_gate(slowdown, args, cases))
            print(f"rep {rep + 1}/{args.reps} {name}: {runs[name][-1]['verdicts']}", flush=True)
    write_text_atomic(args.out, json.dumps({"args": vars(args), "cases": cases, "runs": runs}, indent=1) + "\n")
    print(f"\n| scenario | gates flagged | {args.slow_variant} caught | other variants flagged | median s/gate | max s/gate |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, gates in runs.items():
        seconds = sorted(g["seconds"] for g in gates)
        caught = "-" if not scenarios[name] else f"{sum(g['caught'] for g in gates)}/{len(gates)}"
        print(f"| {name} | {sum(g['flagged'] for g in gates)}/{len(gates)} | {caught} | "
              f"{sum(g['false_alarms'] for g in gates)} | {seconds[len(seconds) // 2]:.1f} | {seconds[-1]:.1f} |")


if __name__ == "__main__":
    main()
