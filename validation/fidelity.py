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

``--interleaved`` measures the two timing methods on the same step in ONE process instead, so
that what differs between processes and over minutes (memory placement, the host's other
tenants, CPU steal) cannot pass for a difference of method: after the suite's preparation
(``gather_evidence``), it alternates blocks of pytest-benchmark's own loop (a
``BenchmarkFixture`` with benchmarks.ini's time and warmup, ``--block-rounds`` rounds at least) and of ``Timer.timeit(1)``
calls (as many), in ABBA order, ``--pairs`` block pairs per benchmark. The statistic is the
suite median / Timer median per pair, its Hodges-Lehmann estimate and exact 95% signed-rank
interval over the pairs (``perfsuite.gate.stats.wilcoxon_interval``), the same statistic the A/B
gate uses; the interval inside 0.97-1.03 is agreement.

``--interleaved --alternate calls`` pairs single timed calls instead of blocks: pytest-benchmark's
own round (the fixture's runner, with the iterations per round its calibration picks) and one
``Timer.timeit(1)``, adjacent, alternating which goes first; the statistic is the same over the
per-call ratios. On this VM a step's speed changes from one half-second block to the next by up to
25%, so block pairs leave intervals 3-8% wide; adjacent calls share the machine's state, so the
pairs measure the two instruments, not the moment (docs/validation.md, "Fidelity against torch.utils.benchmark.Timer").

    .venv/bin/python -m validation.fidelity --out docs/fidelity
    .venv/bin/python -m validation.fidelity --interleaved --out docs/fidelity
    .venv/bin/python -m validation.fidelity --interleaved --alternate calls --pairs 200 --out docs/fidelity
"""

from __future__ import annotations

import argparse
import configparser
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from perfsuite.gate.stats import wilcoxon_interval
from perfsuite.measure.conditions import required_env

from validation.contend import busy_processes, load_average

ROOT = Path(__file__).resolve().parents[1]

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

INTERLEAVED_CODE = r"""
import json, math, statistics, sys, tempfile, time, types
from pathlib import Path
import torch
import torch.utils.benchmark as tb
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.utils import NameWrapper
from perfsuite.attention.cases import parse_case_id
from perfsuite.gate.stats import wilcoxon_interval
from perfsuite.measure.contention import Probe
from perfsuite.measure.evidence import gather_evidence
from perfsuite.variants import get_variant

variant, case, seed, pairs = sys.argv[1], parse_case_id(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
options, mode = json.loads(sys.argv[5]), sys.argv[6]
with tempfile.TemporaryDirectory() as scratch:
    step = gather_evidence(get_variant(variant), case, seed, Path(scratch)).step
quiet = types.SimpleNamespace(debug=lambda *a, **k: None, info=lambda *a, **k: None, warning=lambda *a, **k: None)

def make_fixture():
    return BenchmarkFixture(types.SimpleNamespace(name="fidelity", nodeid="fidelity"), disable_gc=False,
        timer=NameWrapper(time.perf_counter), min_rounds=options["min_rounds"], min_time=options["min_time"],
        max_time=options["max_time"], precision=None, confidence=None, warmup=True,
        warmup_iterations=options["warmup_iterations"], calibration_precision=10, add_stats=lambda s: None,
        logger=quiet, warner=lambda *a, **k: None, disabled=False, cprofile=False, cprofile_loops=None,
        cprofile_dump=False)

def suite_block():
    fixture = make_fixture()
    fixture(step)
    return list(fixture.stats.stats.data)

timer = tb.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
def timer_block(calls):
    for _ in range(options["warmup_iterations"]):
        step()
    return [timer.timeit(1).median for _ in range(calls)]

def blocks():
    ratios, suite_all, timer_all, contended = [], [], [], 0
    for pair in range(pairs):
        with Probe() as probe:
            if pair % 2 == 0:  # ABBA: neither method always runs first
                suite = suite_block(); timer_times = timer_block(len(suite))
            else:
                timer_times = timer_block(len(suite_all[-1]) if suite_all else options["min_rounds"]); suite = suite_block()
        if probe.evidence(suite + timer_times).contended:
            contended += 1
            continue
        suite_all.append(suite); timer_all.append(timer_times)
        ratios.append(math.log(statistics.median(suite) / statistics.median(timer_times)))
    return ratios, suite_all, timer_all, contended, {
        "rounds_per_block": [len(b) for b in suite_all],
        "block_medians_ms": [[round(statistics.median(a) * 1e3, 4), round(statistics.median(b) * 1e3, 4)]
                             for a, b in zip(suite_all, timer_all)]}

def calls(chunk=20):
    # pytest-benchmark's own round (its runner, the iterations its calibration picks) and one
    # Timer.timeit(1), adjacent, alternating which goes first; a Probe per chunk of pairs
    fixture = make_fixture()
    runner = fixture._make_runner(step, (), {})
    _, iterations, loops = fixture._calibrate_timer(runner)
    for _ in range(options["warmup_iterations"]):
        step()
    ratios, suite_all, timer_all, contended = [], [], [], 0
    for start in range(0, pairs, chunk):
        suite, timer_times = [], []
        with Probe() as probe:
            for pair in range(start, min(start + chunk, pairs)):
                if pair % 2 == 0:
                    suite.append(runner(loops) / iterations); timer_times.append(timer.timeit(1).median)
                else:
                    timer_times.append(timer.timeit(1).median); suite.append(runner(loops) / iterations)
        if probe.evidence(suite + timer_times).contended:
            contended += len(suite)
            continue
        suite_all.append(suite); timer_all.append(timer_times)
        ratios += [math.log(a / b) for a, b in zip(suite, timer_times)]
    return ratios, suite_all, timer_all, contended, {"iterations_per_round": iterations}

ratios, suite_all, timer_all, contended, extra = blocks() if mode == "blocks" else calls()
result = {"pairs": len(ratios), "contended_pairs": contended,
          "suite_median_s": statistics.median(x for b in suite_all for x in b) if suite_all else None,
          "timer_median_s": statistics.median(x for b in timer_all for x in b) if timer_all else None,
          "pair_ratios": [round(math.exp(r), 4) for r in ratios]} | extra
if len(ratios) >= 6:
    estimate, low, high = wilcoxon_interval(ratios, 0.05)
    result |= {"ratio": math.exp(estimate), "low": math.exp(low), "high": math.exp(high)}
print(json.dumps(result))
"""


POOLED_PAIRS_MAX = 1000  # the exact signed-rank distribution costs O(n^3) time beyond that


def benchmark_keys(args) -> list[str]:
    """``variant/case`` for the variants of ``--variants`` on the CPU cases of ``--case-set``."""
    from perfsuite.suite.settings import SETTINGS, RawValue, resolve, split_list

    raw = {n: RawValue(setting.default, n, "default") for n, setting in SETTINGS.items()}
    raw["case_set"] = RawValue(args.case_set, "case_set", "option")
    cases = [c.id for c in resolve(raw, False).cases if c.device == "cpu"]
    return [f"{variant}/{case}" for variant in split_list(args.variants) for case in cases]


def benchmark_options() -> dict:
    """benchmarks.ini's pytest-benchmark settings that shape its loop (rounds, time, warmup)."""
    addopts = configparser.ConfigParser(interpolation=None)
    addopts.read(ROOT / "benchmarks.ini")
    found = dict(
        opt.lstrip("-").split("=", 1) for opt in addopts["pytest"]["addopts"].split() if "=" in opt
    )
    return {
        "min_rounds": int(found["benchmark-min-rounds"]),
        "max_time": float(found["benchmark-max-time"]),
        "min_time": float(found.get("benchmark-min-time", "0.000005")),
        "warmup_iterations": int(found["benchmark-warmup-iterations"]),
    }


def run_interleaved(key: str, args, env) -> dict:
    variant, case = key.split("/")
    before = load_average()
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            INTERLEAVED_CODE,
            variant,
            case,
            str(args.seed),
            str(args.pairs),
            json.dumps(benchmark_options() | {"min_rounds": args.block_rounds}),
            args.alternate,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if found.returncode:
        return {
            "error": found.stderr.strip().splitlines()[-1]
            if found.stderr.strip()
            else f"exit {found.returncode}"
        }
    return json.loads(found.stdout.strip().splitlines()[-1]) | {
        "load_before": before,
        "load_after": load_average(),
    }


def interleaved_table(rows: dict[str, dict]) -> str:
    lines = [
        "| benchmark | suite median ms | Timer median ms | suite / Timer (Hodges-Lehmann) | 95% interval | "
        "estimate in 0.97-1.03 | interval inside 0.97-1.03 | interval contains 1 | "
        "pairs used (contended, set aside) | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    yes = lambda holds: "yes" if holds else "no"
    for key, r in rows.items():
        if "ratio" not in r:
            lines.append(
                f"| `{key}` | {r.get('error', 'fewer than 6 uncontended pairs')} | | | | | | | "
                f"{r.get('pairs', 0)} ({r.get('contended_pairs', 0)}) | |"
            )
            continue
        lines.append(
            f"| `{key}` | {r['suite_median_s'] * 1e3:.3f} | {r['timer_median_s'] * 1e3:.3f} | {r['ratio']:.3f} | "
            f"[{r['low']:.3f}, {r['high']:.3f}] | {yes(0.97 <= r['ratio'] <= 1.03)} | "
            f"{yes(0.97 <= r['low'] and r['high'] <= 1.03)} | {yes(r['low'] <= 1 <= r['high'])} | "
            f"{r['pairs']} ({r['contended_pairs']}) | "
            f"{r['load_before'].split()[0]}-{r['load_after'].split()[0]} |"
        )
    logs = [math.log(ratio) for r in rows.values() for ratio in r.get("pair_ratios", [])]
    if 6 <= len(logs) <= POOLED_PAIRS_MAX:
        estimate, low, high = (math.exp(x) for x in wilcoxon_interval(logs, 0.05))
        lines += [
            "",
            f"All benchmarks' pairs pooled ({len(logs)} pairs): suite / Timer = {estimate:.3f}, "
            f"95% interval [{low:.3f}, {high:.3f}].",
        ]
    estimates = [math.log(r["ratio"]) for r in rows.values() if "ratio" in r]
    if len(logs) > POOLED_PAIRS_MAX and len(estimates) >= 6:
        estimate, low, high = (math.exp(x) for x in wilcoxon_interval(estimates, 0.05))
        lines += [
            "",
            f"Across the {len(estimates)} benchmarks' estimates: suite / Timer = {estimate:.3f}, "
            f"95% interval [{low:.3f}, {high:.3f}] (Hodges-Lehmann and signed-rank interval over "
            f"the per-benchmark estimates).",
        ]
    return "\n".join(lines) + "\n"


def main_interleaved(args, env, keys: list[str]) -> None:
    rows = {}
    for key in keys:
        rows[key] = run_interleaved(key, args, env)
        print(key, json.dumps(rows[key]), flush=True)
    out, name = Path(args.out), "interleaved" if args.alternate == "blocks" else "interleaved-calls"
    (out / f"{name}.json").write_text(
        json.dumps(
            {
                "args": vars(args),
                "options": benchmark_options(),
                "conditions": required_env(),
                "rows": rows,
            },
            indent=1,
        )
    )
    table = interleaved_table(rows)
    (out / f"{name}.md").write_text(table)
    print(table)


def run_suite(args, env) -> dict[str, dict]:
    out = Path(args.out)
    json_path = out / "suite.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        "benchmarks.ini",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--perfsuite-case-set={args.case_set}",
        "--perfsuite-modes=forward",
        f"--perfsuite-variants={args.variants}",
        f"--perfsuite-results={out / 'suite-results'}",
        f"--benchmark-storage={out / 'suite-storage'}",
        f"--benchmark-json={json_path}",
        "-k",
        "test_benchmark",
    ]
    subprocess.run(command, cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
    data = json.loads(json_path.read_text())
    return {
        f"{b['extra_info']['variant']}/{b['extra_info']['case']}": {
            "median_s": b["stats"]["median"],
            "mean_s": b["stats"]["mean"],
            "iqr_s": b["stats"]["iqr"],
            "rounds": b["stats"]["rounds"],
            "contention": b["extra_info"].get("contention"),
        }
        for b in data["benchmarks"]
    }


def run_timer(key: str, after_evidence: bool, args, env) -> dict:
    variant, case = key.split("/")
    before = load_average()
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            TIMER_CODE,
            variant,
            case,
            "1" if after_evidence else "0",
            str(args.seed),
            str(args.min_run_time),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if found.returncode:
        return {
            "error": found.stderr.strip().splitlines()[-1]
            if found.stderr.strip()
            else f"exit {found.returncode}"
        }
    return json.loads(found.stdout.strip().splitlines()[-1]) | {
        "load_before": before,
        "load_after": load_average(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case-set", default="default")
    parser.add_argument(
        "--variants",
        default="naive,naive_inplace,naive_compiled,sdpa,sdpa_math,sdpa_flash,"
        "flex_eager,flex_compiled",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--min-run-time", type=float, default=1.0, help="blocked_autorange's min_run_time (s)"
    )
    parser.add_argument(
        "--busy", type=int, default=0, help="busy processes beside it (validation/contend.py)"
    )
    parser.add_argument("--out", default="perfsuite-results/fidelity")
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="both methods in one process, alternating blocks (module docstring)",
    )
    parser.add_argument(
        "--alternate",
        choices=("blocks", "calls"),
        default="blocks",
        help="--interleaved: alternate blocks of each method's loop, or single timed calls",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=20,
        help="--interleaved: block pairs (or call pairs) per benchmark",
    )
    parser.add_argument(
        "--block-rounds",
        type=int,
        default=5,
        help="--interleaved: pytest-benchmark's min_rounds per block (benchmarks.ini's max_time "
        "still applies: a fast step gets more rounds); fewer than the suite's 15 so that a "
        "300 ms step's pair takes 3 s, not 9",
    )
    parser.add_argument(
        "--summarize", metavar="JSON", help="only reprint the table of a saved interleaved.json"
    )
    args = parser.parse_args()
    if args.summarize:
        print(interleaved_table(json.loads(Path(args.summarize).read_text())["rows"]), end="")
        return
    Path(args.out).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **required_env())
    if args.interleaved:
        with busy_processes(args.busy):
            main_interleaved(args, env, benchmark_keys(args))
        return
    with busy_processes(args.busy):
        suite_load = load_average()
        suite = run_suite(args, env)
        suite_load += " -> " + load_average()
        rows = {}
        for key in suite:
            rows[key] = {
                "suite": suite[key],
                "timer_fresh": run_timer(key, False, args, env),
                "timer_after_evidence": run_timer(key, True, args, env),
            }
            print(key, json.dumps(rows[key]), flush=True)
    (Path(args.out) / "fidelity.json").write_text(
        json.dumps(
            {
                "args": vars(args),
                "suite_load": suite_load,
                "conditions": required_env(),
                "rows": rows,
            },
            indent=1,
        )
    )
    lines = [
        f"Suite run load average: {suite_load}; conditions: "
        + " ".join(f"{k}={v}" for k, v in required_env().items()),
        "",
        "A ratio is a fidelity check only where no side was contended (last column); elsewhere it measures "
        "the other processes. 'per call': Timer.timeit(1) repeated, the statistic the suite uses (median of "
        "single calls); 'blocked': blocked_autorange's median of per-block means (N calls per block).",
        "",
        "| benchmark | suite median ms | Timer per-call median ms (fresh) | suite / Timer per call (fresh) | "
        "suite / Timer per call (after evidence) | Timer blocked median ms (calls/block) | suite / Timer blocked | "
        "suite mean / Timer blocked | load during Timer runs | contended |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, row in rows.items():
        suite, fresh, after = row["suite"], row["timer_fresh"], row["timer_after_evidence"]
        ratio = lambda num, t, field: f"{num / t[field]:.3f}" if field in t else t.get("error", "?")
        cells = [
            f"`{key}`",
            f"{suite['median_s'] * 1e3:.3f}",
            f"{fresh['per_call_median_s'] * 1e3:.3f}"
            if "per_call_median_s" in fresh
            else fresh.get("error", "?"),
            ratio(suite["median_s"], fresh, "per_call_median_s"),
            ratio(suite["median_s"], after, "per_call_median_s"),
            f"{fresh['median_s'] * 1e3:.3f} ({fresh['number_per_run']})"
            if "median_s" in fresh
            else "-",
            ratio(suite["median_s"], fresh, "median_s"),
            ratio(suite["mean_s"], fresh, "median_s"),
            f"{fresh.get('load_before', '?').split()[0]}-{after.get('load_after', '?').split()[0]}",
        ]
        sides = {
            "suite": suite.get("contention"),
            "Timer fresh": fresh.get("contention"),
            "Timer after evidence": after.get("contention"),
        }
        cells.append(
            ", ".join(name for name, c in sides.items() if (c or {}).get("contended")) or "no"
        )
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    (Path(args.out) / "fidelity.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
