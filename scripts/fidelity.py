"""Timing fidelity: the suite's medians against torch.utils.benchmark on the same steps.

For every built-in variant on a case set (default: the default CPU set), forward mode:

1. the suite (``pytest -c benchmarks.ini``) times each step as usual (its median per benchmark);
2. for each benchmark, a fresh Python process builds the same step (``evidence.prepare_case`` +
   ``modes.make_step``: same seed, same inputs, ``torch.no_grad()``) and times it with
   ``torch.utils.benchmark.Timer``, with the suite's thread count (Timer's default is ONE
   thread), two ways: ``timeit(1)`` repeated (the median of single calls: the suite's statistic)
   and ``blocked_autorange()`` (the median of per-block MEANS: ``Timer._estimate_block_size`` grows
   a block by 10x until the timer's own overhead is at most 1e-4 of it, so a block of a
   millisecond-scale step holds 10-100 calls, and its mean carries the slow tail that a median of
   single calls leaves out; the table shows the calls per block). Once
   fresh, and once after the suite's own preparation (``gather_evidence``: the reference check
   and the profiled steps), so a difference caused by what ran before the timing shows apart
   from one caused by the timing method.

Every process runs under the same conditions (``perfsuite.measure.conditions.required_env``).
Writes a Markdown table (suite median / Timer median per benchmark, 0.97-1.03 is agreement)
with the load average before and after each measurement, and the raw numbers as JSON.

    .venv/bin/python scripts/fidelity.py --out docs/fidelity
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from perfsuite.measure.conditions import required_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from contend import busy_processes, load_average  # noqa: E402

TIMER_CODE = r"""
import json, sys, tempfile
from pathlib import Path
import torch
import torch.utils.benchmark as tb
from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.modes import make_step
from perfsuite.measure.evidence import gather_evidence, prepare_case
from perfsuite.variants import get_variant

variant, case, after_evidence, seed, min_run_time = sys.argv[1], parse_case_id(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), float(sys.argv[5])
v = get_variant(variant)
if after_evidence:
    with tempfile.TemporaryDirectory() as scratch:
        step = gather_evidence(v, case, seed, Path(scratch)).step
else:
    prepared = prepare_case(v, case, seed)
    step = make_step("forward", prepared.fn, prepared.inputs, prepared.grad_output)
for _ in range(3):
    step()
from perfsuite.measure.contention import Probe
import statistics, time
timer = tb.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
with Probe() as probe:
    m = timer.blocked_autorange(min_run_time=min_run_time)
    per_call, end = [], time.perf_counter() + min_run_time  # one call per measurement, as the suite times
    while time.perf_counter() < end or len(per_call) < 20:
        per_call.append(timer.timeit(1).median)
contention = probe.evidence(per_call).as_dict()
print(json.dumps({"contention": contention, "median_s": m.median, "mean_s": m.mean, "iqr_s": m.iqr, "blocks": len(m.times),
                  "number_per_run": m.number_per_run, "threads": torch.get_num_threads(),
                  "per_call_median_s": statistics.median(per_call), "per_call_mean_s": statistics.fmean(per_call),
                  "per_call_n": len(per_call)}))
"""


def run_suite(args, env) -> dict[str, dict]:
    out = Path(args.out)
    json_path = out / "suite.json"
    command = [sys.executable, "-m", "pytest", "-c", "benchmarks.ini", "-q", "-p", "no:cacheprovider",
               f"--perfsuite-case-set={args.case_set}", "--perfsuite-modes=forward", f"--perfsuite-variants={args.variants}",
               f"--perfsuite-results={out / 'suite-results'}", f"--benchmark-storage={out / 'suite-storage'}",
               f"--benchmark-json={json_path}", "-k", "test_benchmark"]
    subprocess.run(command, cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
    data = json.loads(json_path.read_text())
    return {f"{b['extra_info']['variant']}/{b['extra_info']['case']}": {
        "median_s": b["stats"]["median"], "mean_s": b["stats"]["mean"], "iqr_s": b["stats"]["iqr"],
        "rounds": b["stats"]["rounds"],
        "contention": b["extra_info"].get("contention")} for b in data["benchmarks"]}


def run_timer(key: str, after_evidence: bool, args, env) -> dict:
    variant, case = key.split("/")
    before = load_average()
    found = subprocess.run([sys.executable, "-c", TIMER_CODE, variant, case, "1" if after_evidence else "0",
                            str(args.seed), str(args.min_run_time)], cwd=ROOT, env=env, capture_output=True, text=True)
    if found.returncode:
        return {"error": found.stderr.strip().splitlines()[-1] if found.stderr.strip() else f"exit {found.returncode}"}
    return json.loads(found.stdout.strip().splitlines()[-1]) | {"load_before": before, "load_after": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case-set", default="default")
    parser.add_argument("--variants", default="naive,naive_inplace,naive_compiled,sdpa,sdpa_math,sdpa_flash,"
                                              "flex_eager,flex_compiled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-run-time", type=float, default=1.0, help="blocked_autorange's min_run_time (s)")
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside it (scripts/contend.py)")
    parser.add_argument("--out", default="perfsuite-results/fidelity")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **required_env())
    with busy_processes(args.busy):
        suite_load = load_average()
        suite = run_suite(args, env)
        suite_load += " -> " + load_average()
        rows = {}
        for key in suite:
            rows[key] = {"suite": suite[key], "timer_fresh": run_timer(key, False, args, env),
                         "timer_after_evidence": run_timer(key, True, args, env)}
            print(key, json.dumps(rows[key]), flush=True)
    (Path(args.out) / "fidelity.json").write_text(json.dumps({"args": vars(args), "suite_load": suite_load,
                                                              "conditions": required_env(), "rows": rows}, indent=1))
    lines = [f"Suite run load average: {suite_load}; conditions: "
             + " ".join(f"{k}={v}" for k, v in required_env().items()), "",
             "A ratio is a fidelity check only where no side was contended (last column); elsewhere it measures "
             "the other processes. 'per call': Timer.timeit(1) repeated, the statistic the suite uses (median of "
             "single calls); 'blocked': blocked_autorange's median of per-block means (N calls per block).", "",
             "| benchmark | suite median ms | Timer per-call median ms (fresh) | suite / Timer per call (fresh) | "
             "suite / Timer per call (after evidence) | Timer blocked median ms (calls/block) | suite / Timer blocked | "
             "suite mean / Timer blocked | load during Timer runs | contended |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, row in rows.items():
        suite, fresh, after = row["suite"], row["timer_fresh"], row["timer_after_evidence"]
        ratio = lambda num, t, field: f"{num / t[field]:.3f}" if field in t else t.get("error", "?")
        cells = [f"`{key}`", f"{suite['median_s'] * 1e3:.3f}",
                 f"{fresh['per_call_median_s'] * 1e3:.3f}" if "per_call_median_s" in fresh else fresh.get("error", "?"),
                 ratio(suite["median_s"], fresh, "per_call_median_s"), ratio(suite["median_s"], after, "per_call_median_s"),
                 f"{fresh['median_s'] * 1e3:.3f} ({fresh['number_per_run']})" if "median_s" in fresh else "-",
                 ratio(suite["median_s"], fresh, "median_s"), ratio(suite["mean_s"], fresh, "median_s"),
                 f"{fresh.get('load_before', '?').split()[0]}-{after.get('load_after', '?').split()[0]}"]
        sides = {"suite": suite.get("contention"), "Timer fresh": fresh.get("contention"),
                 "Timer after evidence": after.get("contention")}
        cells.append(", ".join(name for name, c in sides.items() if (c or {}).get("contended")) or "no")
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (Path(args.out) / "fidelity.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
