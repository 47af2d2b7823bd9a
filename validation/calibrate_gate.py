"""Measure the sequential A/B gate's error rates on this machine (docs/validation.md: "Gate error rates").

Repeats the gate (``perfsuite ab`` on a case set) in these scenarios:

* ``A/A``: identical code on both sides;
* ``10% injected`` / ``5% injected`` / ``3% injected``: busy CPU work after each forward of the
  variants ``--slow-variant`` names (comma-separated), that fraction of its runtime;
* ``real change``: a real code change, gated as a pull request is: the head is a copy of this
  source tree whose ``naive_inplace`` lost its in-place ``masked_fill_`` (``scores =
  scores.masked_fill(...)``: one extra score-sized copy per forward, the Hugging Face post's
  finding); every other variant is identical code in the same gate;
* ``real change x2``: the same, and ``mul_`` lost too (``scores = scores * scale``: a second
  score-sized tensor allocated and written per forward);
* ``output round trip``: a small real change, ``naive_inplace``'s output round-tripped through
  float32 (two elementwise passes over the output in bf16/fp16 cases; nothing in fp32);
* ``slower backward``: ``naive_inplace`` checkpoints its softmax (backward recomputes it);
* ``score copies x8``: ``naive_inplace`` copies its score matrix eight times per forward (about a
  2x change on the smoke case: the change beside two busy processes);
* ``gqa materialized``: ``sdpa`` and its pinned backends expand K/V to every query head
  (``repeat_interleave``) instead of ``enable_gqa``: the issue's decoder change, for a GQA or decode
  case set (``--case-set llm-decode``); on a case without GQA the edit changes nothing.

Every eager built-in is gated by default (``naive``, ``naive_inplace``, ``sdpa``, ``sdpa_math``,
``flex_eager``, ``mha``); a benchmark the scenario does not change counts as unchanged.
``--busy N`` runs N busy processes beside every gate (``validation/contend.py``; ``--busy-kind``:
``spin`` CPU loops, or ``memory`` loops streaming a 256 MiB array, which also take the caches and
memory bandwidth). The gate runs as ``perfsuite ab`` does (``SequentialPlan``: ``--workers-per-side``
worker pairs visited one at a time, ``--budget-s`` and ``--max-budget-s`` per benchmark, ``--blocks``
and ``--rounds`` sized from the step's time unless given; ``--noise-floor`` A/A documents). Reports, per
scenario: gates with any "slower", how often the changed variant was caught, false "slower" and "faster"
on unchanged benchmarks with the 95% Clopper-Pearson upper bound of the false-verdict rate over the
unchanged benchmark-gates (either verdict), how many benchmarks ended decisive / "no change" /
contended, seconds per benchmark (median, max) and per gate; with the load average. A second table,
"contended pairs", checks the contended rule's margin (``verdicts.CONTENDED_MIN_EFFECT``): for each unchanged
benchmark with enough contended pairs, the lower bound of its wait-adjusted interval, which must stay
below ``1 + CONTENDED_MIN_EFFECT`` (then identical code is never called slower from contended pairs).
Rates over repetitions are what count: this is a measurement, not a test.

    .venv/bin/python -m validation.calibrate_gate --reps 20 --out docs/gate-calibration.json
    .venv/bin/python -m validation.calibrate_gate --reps 1 --budget-s 1 --variants naive_inplace  # smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats as scipy_stats

from perfsuite.errors import GateTampered
from perfsuite.gate.ab import Side, run_ab
from perfsuite.gate.intervals import PairSample, pair_log_ratios, wilcoxon_interval
from perfsuite.gate.noise_floor import floors_from_files
from perfsuite.gate.sequential import WORKER_PAIRS, SequentialPlan
from perfsuite.gate.verdicts import (
    AB_ALPHA,
    CONTENDED_CPU_MIN_EFFECT,
    CONTENDED_MIN_EFFECT,
    CONTENDED_VERDICT,
    CONTENDED_WAIT_CAP,
    DECISIVE,
    DEFAULT_CONTENDED_PAIRS,
    MIN_UNITS,
    ContendedPairs,
    GateSettings,
    contended_cpu_ratios,
    wait_adjusted,
)
from perfsuite.measure.contention import snapshot
from perfsuite.storage import write_text_atomic
from perfsuite.suite.settings import SETTINGS, RawValue, resolve, split_list
from perfsuite.variants import variant_names

from validation.contend import busy_processes, load_average


def smoke_cases(case_set: str) -> list[str]:
    raw = {n: RawValue(s.default, n, "default") for n, s in SETTINGS.items()}
    raw["case_set"] = RawValue(case_set, "case_set", "option")
    return [c.id for c in resolve(raw, torch.cuda.is_available()).cases]


LOST_MASKED_FILL_ = (
    "scores.masked_fill_(mask.masked_out,",
    "scores = scores.masked_fill(mask.masked_out,",
)
LOST_MUL_ = ("scores.mul_(scale)", "scores = scores * scale")
# activation checkpointing of the softmax: the same forward, and backward recomputes the softmax
RECOMPUTED_SOFTMAX = (
    "weights = torch.softmax(scores, dim=-1)",
    "weights = torch.utils.checkpoint.checkpoint(torch.softmax, scores, -1, use_reentrant=False)",
)
# A small real change: the output round-tripped through float32, two elementwise passes over the
# output (in bf16/fp16 cases; a no-op in fp32 ones): on the post's case in bf16, 96 MiB of memory
# traffic beside naive_inplace's ~1 ms forward, a few percent.
OUTPUT_ROUND_TRIP = (
    "    return torch.matmul(weights, value)\n",
    "    return torch.matmul(weights, value).float().to(value.dtype)\n",
)
SCORE_COPIES_X8 = (
    "weights = torch.softmax(scores, dim=-1)",
    "weights = torch.softmax(" + "".join([".clone()"] * 8).join(["scores", ""]) + ", dim=-1)",
)
GQA_MATERIALIZED = (
    """        key,
        value,
        attn_mask=mask.sdpa_mask,
        is_causal=mask.is_causal,
        scale=scale,
        enable_gqa=key.shape[1] != query.shape[1],""",
    """        key.repeat_interleave(query.shape[1] // key.shape[1], dim=1),
        value.repeat_interleave(query.shape[1] // value.shape[1], dim=1),
        attn_mask=mask.sdpa_mask,
        is_causal=mask.is_causal,
        scale=scale,""",
)


@dataclasses.dataclass(frozen=True)
class RealChange:
    """A head tree: ``edits`` (``(old, new)`` pairs) applied to ``module`` (under ``perfsuite/``),
    which changes ``variants`` in ``modes``; their other modes run the same work on both sides."""

    module: str
    edits: tuple[tuple[str, str], ...]
    variants: tuple[str, ...]
    modes: tuple[str, ...] = ("forward",)


NAIVE_INPLACE = "variants/naive_inplace.py"
# The real-change scenarios (source edits in the head's tree).
REAL_CHANGES = {
    "real change": RealChange(NAIVE_INPLACE, (LOST_MASKED_FILL_,), ("naive_inplace",)),
    "output round trip": RealChange(NAIVE_INPLACE, (OUTPUT_ROUND_TRIP,), ("naive_inplace",)),
    "real change x2": RealChange(NAIVE_INPLACE, (LOST_MASKED_FILL_, LOST_MUL_), ("naive_inplace",)),
    "slower backward": RealChange(
        NAIVE_INPLACE, (RECOMPUTED_SOFTMAX,), ("naive_inplace",), ("backward",)
    ),
    "score copies x8": RealChange(NAIVE_INPLACE, (SCORE_COPIES_X8,), ("naive_inplace",)),
    "gqa materialized": RealChange(
        "variants/sdpa.py", (GQA_MATERIALIZED,), ("sdpa", "sdpa_math"), ("forward", "backward")
    ),
}


def changed_keys(scenario: str, slow_variant: str, modes) -> set[str]:
    """``variant/mode`` keys the head of ``scenario`` changes (none for A/A; ``slow_variant``
    forward for the injected slowdowns)."""
    if scenario == "A/A":
        return set()
    if scenario in REAL_CHANGES:
        change = REAL_CHANGES[scenario]
        return {f"{v}/{m}" for v in change.variants for m in change.modes if m in modes}
    return {f"{v}/forward" for v in slow_variant.split(",")} if "forward" in modes else set()


def changed_tree(root: Path, change: RealChange) -> Path:
    """A copy of this source tree's ``perfsuite/`` under ``root`` with ``change``'s edits applied to
    its module; ``RuntimeError`` if a line to change is no longer there."""
    shutil.copytree(
        Path(__file__).resolve().parent.parent / "perfsuite",
        root / "perfsuite",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    module = root / "perfsuite" / change.module
    source = module.read_text()
    for old, new in change.edits:
        if old not in source:
            raise RuntimeError(f"{module}: {old!r} not found; update REAL_CHANGES")
        source = source.replace(old, new)
    module.write_text(source)
    return root


def contended_check(result, alpha_look: float) -> dict | None:
    """The contended rule on one benchmark's contended pairs (``verdicts.contended_verdict``'s
    statistic at two-sided level ``alpha_look``, each clause at half of it): the wait-adjusted
    interval's estimate and lower bound (ratios), the median head wait share, and how many pairs; None
    with fewer than ``MIN_UNITS`` contended pairs with a wait."""
    judged = [
        i
        for i, (c, w) in enumerate(zip(result.contended, result.wait_shares))
        if c and w[1] is not None
    ]
    if len(judged) < MIN_UNITS:
        return None
    raw = pair_log_ratios(
        [result.base_blocks[i] for i in judged], [result.head_blocks[i] for i in judged]
    )
    shares = [result.wait_shares[i] for i in judged]
    adjusted = wait_adjusted(raw, [w[0] for w in shares], [w[1] for w in shares])
    waits = np.array([min(max(w[1], 0.0), CONTENDED_WAIT_CAP) for w in shares])
    centre, low, _ = wilcoxon_interval(adjusted, alpha_look / 2)
    found = {
        "pairs": len(judged),
        "adjusted_ratio": math.exp(centre),
        "adjusted_low": math.exp(low),
        "median_wait_share": float(np.median(waits)),
    }
    cpu = contended_cpu_ratios(
        [
            PairSample(
                [],
                [],
                True,
                base_cpu_s=result.cpu_seconds[i][0],
                head_cpu_s=result.cpu_seconds[i][1],
            )
            for i in judged
        ]
    )
    if cpu is not None:
        cpu_centre, cpu_low, _ = wilcoxon_interval(cpu, alpha_look / 2)
        found |= {"cpu_ratio": math.exp(cpu_centre), "cpu_low": math.exp(cpu_low)}
    return found


def _variant_mode(key: str) -> str:
    """``variant[case]/mode`` of a benchmark key (``variant/case``, or ``variant/case/mode`` beyond
    forward): one entry per case of a case set (``changed_key`` drops the case)."""
    parts = key.split("/")
    return f"{parts[0]}[{parts[1]}]/{parts[2] if len(parts) > 2 else 'forward'}"


def changed_key(key: str) -> str:
    """``variant/mode`` of a ``_variant_mode`` key, as ``changed_keys`` names what a head changed
    (saved calibrations without the ``[case]`` part pass through)."""
    variant, _, mode = key.partition("/")
    return f"{variant.partition('[')[0]}/{mode}"


def gate_plan(args) -> SequentialPlan:
    """The gate's plan from the options, as ``perfsuite ab`` makes it (a cap below the budget is
    raised to it)."""
    return SequentialPlan(
        args.workers_per_side,
        budget_s=args.budget_s,
        max_budget_s=max(args.budget_s, args.max_budget_s),
        rounds=args.rounds,
        blocks=args.blocks,
    )


def false_verdict_bound(false: int, unchanged: int, confidence: float = 0.95) -> float:
    """The upper end of the two-sided ``confidence`` Clopper-Pearson interval of a rate observed as
    ``false`` of ``unchanged`` (Clopper & Pearson, Biometrika 26(4), 1934: the ``1 - (1 - confidence)
    / 2`` quantile of Beta(false + 1, unchanged - false)); 1 when ``false == unchanged``, nan with no
    trials. 0 of 300 gives 1.2%."""
    if unchanged <= 0:
        return math.nan
    if false >= unchanged:
        return 1.0
    return float(scipy_stats.beta.ppf(1 - (1 - confidence) / 2, false + 1, unchanged - false))


def gate_once(scenario: str, args, variants: list[str], cases: list[str]) -> dict:
    """One gate of ``scenario`` over ``variants`` x ``cases``; a dict of verdicts, counts and seconds."""
    settings, plan = GateSettings(args.alpha, args.min_effect), gate_plan(args)
    modes = tuple(split_list(args.modes))
    load_before, start, before = load_average(), time.perf_counter(), snapshot()
    gate = functools.partial(
        run_ab,
        variants=variants,
        case_ids=cases,
        settings=settings,
        plan=plan,
        modes=modes,
        timing_threads=args.timing_threads,
        contended_pairs=ContendedPairs(args.contended_pairs),
        noise_floors=floors_from_files([Path(f) for f in args.noise_floor]),
    )
    # the clock checks failed the gate (GateTampered): code here is honest, so a false failure
    tampered = ""
    try:
        if scenario in REAL_CHANGES:
            with tempfile.TemporaryDirectory(prefix="perfsuite-head-") as head:
                head_tree = changed_tree(Path(head), REAL_CHANGES[scenario])
                results = gate(Side(Path(__file__).resolve().parent.parent), Side(head_tree))[0]
        else:
            slowdowns = {"A/A": 0.0, "10% injected": 0.10, "5% injected": 0.05, "3% injected": 0.03}
            head = Side(Path("."), slowdown=slowdowns[scenario], slow_variant=args.slow_variant)
            results = gate(Side(Path(".")), head)[0]
    except GateTampered as exc:
        results, tampered = [], str(exc)
    after = snapshot()
    verdicts = {_variant_mode(r.key): r.comparison.verdict for r in results}
    changed = changed_keys(scenario, args.slow_variant, modes)
    # the contended rule is asked at the kept pairs' last level, doubled (two-sided): at most alpha;
    # checking at alpha gives the narrower interval, so the margin check errs on the safe side
    alpha_look = settings.alpha
    gate = {
        "seconds": time.perf_counter() - start,
        "load_before": load_before,
        "load_after": load_average(),
        # the hypervisor's share: CPU time stolen from this VM over the gate, of all its CPUs' time
        "steal": (after.steal_s - before.steal_s) / max(after.all_cpu_s - before.all_cpu_s, 1e-9),
        "verdicts": verdicts,
        "tampered": tampered,
        "ratios": {_variant_mode(r.key): r.comparison.estimate.ratio for r in results},
        "pairs": {_variant_mode(r.key): len(r.contended) for r in results},
        # sampling seconds per benchmark (the sequential rule's clock, worker pairs' set-up included)
        "benchmark_seconds": {_variant_mode(r.key): r.seconds for r in results},
        "stopped": {_variant_mode(r.key): r.stopped for r in results},
        # the structural half: what the gate as run (--fail-on-structure, the default) fails besides timing
        "structure_adds_work": {
            _variant_mode(r.key): r.comparison.structure_adds_work for r in results
        },
        "contended_pairs": {_variant_mode(r.key): sum(r.contended) for r in results},
        "contended_check": {_variant_mode(r.key): contended_check(r, alpha_look) for r in results},
        "clusters": {
            _variant_mode(r.key): r.comparison.estimate.clusters
            for r in results
            if r.comparison.estimate
        },
    }
    gate["changed"] = sorted(changed)
    gate |= counts(verdicts, changed)
    # the same counts per mode: the tables are reported for forward and backward apart
    return recount({"args": vars(args), "runs": {scenario: [gate]}})[scenario][0]


def counts(verdicts: dict[str, str], changed: set[str]) -> dict:
    """A gate's outcome over ``verdicts`` (``variant[case]/mode`` -> verdict); ``changed``: the
    ``variant/mode`` keys the head changed (``caught``: every changed benchmark of the gate was
    ``slower``; ``changed_caught`` counts them one by one)."""
    unchanged = {k: v for k, v in verdicts.items() if changed_key(k) not in changed}
    hit = [v for k, v in verdicts.items() if changed_key(k) in changed]
    return {
        "flagged": any(v == "slower" for v in verdicts.values()),
        "caught": bool(hit) and all(v == "slower" for v in hit),
        "changed_benchmarks": len(hit),
        "changed_caught": sum(v == "slower" for v in hit),
        "false_alarms": sum(v == "slower" for v in unchanged.values()),
        "false_faster": sum(v == "faster" for v in unchanged.values()),
        "unchanged": len(unchanged),
        "unchanged_no_change": sum(v == "no change" for v in unchanged.values()),
        "decisive": sum(v in DECISIVE for v in verdicts.values()),
        "contended": sum(v == CONTENDED_VERDICT for v in verdicts.values()),
        "benchmarks": len(verdicts),
    }


def benchmark_seconds(gates: list[dict]) -> str:
    """Sampling seconds per benchmark over ``gates``: median and max (``-`` for calibrations saved
    before they were recorded)."""
    seconds = sorted(s for g in gates for s in (g.get("benchmark_seconds") or {}).values())
    return f"{seconds[len(seconds) // 2]:.1f} | {seconds[-1]:.1f}" if seconds else "- | -"


def summary(runs: dict[str, list[dict]], busy: int) -> str:
    rows = [
        f"| scenario (busy processes: {busy}) | gates with a 'slower' | gates failed by the clock checks "
        "(tampered: none of their benchmarks counted) | changed variant caught by timing (by "
        "the structural half) | changed: "
        "measured ratio (min, median, max) | false 'slower' on unchanged | false 'faster' on unchanged | "
        "false-verdict rate on unchanged: 95% Clopper-Pearson upper bound | "
        "unchanged confirmed 'no change' | decisive | contended | median s/benchmark | max s/benchmark | "
        "median s/gate | max s/gate | load before-after | CPU steal per gate |",
        "| --- " * 17 + "|",
    ]
    for name, gates in runs.items():
        if not gates:
            continue
        seconds = sorted(g["seconds"] for g in gates)
        # gates whose head changed a benchmark they ran (a slowdown of a variant not gated changes none)
        with_change = [
            g for g in gates if g.get("changed", name != "A/A") and g.get("changed_benchmarks", 1)
        ]
        caught = (
            f"{sum(g['caught'] for g in with_change)}/{len(with_change)}" if with_change else "-"
        )
        if with_change and all("structure_adds_work" in g for g in with_change):
            by_structure = sum(
                all(
                    adds
                    for k, adds in g["structure_adds_work"].items()
                    if changed_key(k) in g["changed"]
                )
                for g in with_change
            )
            caught += f" (structure: {by_structure}/{len(with_change)})"
        total = sum(g["benchmarks"] for g in gates)
        unchanged = sum(g["unchanged"] for g in gates)
        loads = f"{gates[0]['load_before'].split()[0]}-{gates[-1]['load_after'].split()[0]}"
        steal = sorted(g.get("steal", float("nan")) for g in gates)
        steals = f"{steal[0]:.0%}-{steal[-1]:.0%} (median {steal[len(steal) // 2]:.0%})"
        ratios = (
            sorted(  # of benchmarks that kept a pair (with none, the estimate is a placeholder)
                g["ratios"][k]
                for g in with_change
                for k in g["ratios"]
                if changed_key(k) in g.get("changed", ())
                and g["pairs"][k] > g["contended_pairs"][k]
            )
        )
        measured = (
            f"{ratios[0]:.3f}, {ratios[len(ratios) // 2]:.3f}, {ratios[-1]:.3f}" if ratios else "-"
        )
        false_slower = sum(g["false_alarms"] for g in gates)
        false_faster = sum(g.get("false_faster", 0) for g in gates)
        bound = false_verdict_bound(false_slower + false_faster, unchanged)
        rows.append(
            f"| {name} | {sum(g['flagged'] for g in gates)}/{len(gates)} | "
            f"{sum(bool(g.get('tampered')) for g in gates)}/{len(gates)} | {caught} | {measured} | "
            f"{false_slower}/{unchanged} | {false_faster}/{unchanged} | "
            + (f"{bound:.2%} |" if unchanged else "- |")
            + f" {sum(g['unchanged_no_change'] for g in gates)}/{unchanged} | "
            f"{sum(g['decisive'] for g in gates)}/{total} | {sum(g['contended'] for g in gates)}/{total} | "
            f"{benchmark_seconds(gates)} | "
            f"{seconds[len(seconds) // 2]:.1f} | {seconds[-1]:.1f} | {loads} | {steals} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--scenarios", default="A/A,10% injected,5% injected,real change")
    parser.add_argument("--case-set", default="smoke")
    parser.add_argument(
        "--cases",
        default="",
        help="comma-separated case ids instead of --case-set (b8h16s1024d64-bf16-causal-cuda: the "
        "post's case on a GPU, where the workers time on the device clock)",
    )
    parser.add_argument(
        "--variants",
        default="naive,naive_inplace,sdpa,sdpa_math,flex_eager,mha",
        help="variants per gate (every eager built-in by default: compiled variants compile per process)",
    )
    parser.add_argument("--slow-variant", default="sdpa")
    parser.add_argument(
        "--modes", default="forward", help="comma-separated: forward, backward (each gated apart)"
    )
    parser.add_argument(
        "--timing-threads",
        type=int,
        default=None,
        help="torch threads of both gate workers (perfsuite ab --timing-threads); default: torch's",
    )
    parser.add_argument(
        "--contended-pairs",
        choices=[str(c) for c in ContendedPairs],
        default=str(DEFAULT_CONTENDED_PAIRS),
        help="which contended block pairs the gate keeps (perfsuite ab --contended-pairs)",
    )
    parser.add_argument(
        "--workers-per-side",
        type=int,
        default=WORKER_PAIRS,
        help=f"worker pairs (perfsuite ab --workers-per-side; default {WORKER_PAIRS})",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=SequentialPlan.budget_s,
        help=f"sampling seconds per benchmark before its last look (perfsuite ab --budget-s; "
        f"default {SequentialPlan.budget_s:g})",
    )
    parser.add_argument(
        "--max-budget-s",
        type=float,
        default=SequentialPlan.max_budget_s,
        help=f"the cap under contention (perfsuite ab --max-budget-s; default "
        f"{SequentialPlan.max_budget_s:g})",
    )
    parser.add_argument(
        "--blocks",
        type=int,
        default=0,
        help="block pairs per worker-pair visit (perfsuite ab --blocks; default 0: sized from the step)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="calls per block (perfsuite ab --rounds; default 0: sized from the step)",
    )
    parser.add_argument(
        "--noise-floor",
        action="append",
        default=[],
        metavar="AA_JSON",
        help="an A/A run's perfsuite ab --json document (perfsuite ab --noise-floor; repeatable)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=AB_ALPHA,
        help=f"one-sided level of slower and of faster (perfsuite ab --alpha; default {AB_ALPHA:g})",
    )
    parser.add_argument("--min-effect", type=float, default=GateSettings.min_effect)
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="busy processes beside every gate (validation/contend.py)",
    )
    parser.add_argument(
        "--busy-kind",
        choices=("spin", "memory"),
        default="spin",
        help="what each busy process does: spin on a CPU, or stream a 256 MiB array (caches and "
        "memory bandwidth too)",
    )
    parser.add_argument("--out", default="perfsuite-results/calibration.json")
    parser.add_argument(
        "--summarize", metavar="JSON", help="only print the tables of a saved calibration"
    )
    parser.add_argument(
        "--quiet-steal",
        type=float,
        default=0.02,
        help="the second table keeps gates whose CPU steal stayed below this share (default 0.02)",
    )
    args = parser.parse_args()
    if args.summarize:
        saved = json.loads(Path(args.summarize).read_text())
        print_summaries(recount(saved), saved["args"]["busy"], args.quiet_steal)
        return
    cases = split_list(args.cases) if args.cases else smoke_cases(args.case_set)
    variants = variant_names() if args.variants == "all" else split_list(args.variants)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    runs: dict[str, list[dict]] = {name: [] for name in scenarios}
    with busy_processes(args.busy, args.busy_kind):
        for rep in range(args.reps):
            for name in scenarios:
                runs[name].append(gate_once(name, args, variants, cases))
                gate = runs[name][-1]
                print(
                    f"rep {rep + 1}/{args.reps} {name}: {gate['seconds']:.0f} s, load {gate['load_after']}, "
                    f"steal {gate['steal']:.0%}: "
                    f"{gate['verdicts']}"
                    + (
                        f"; failed by the clock checks: {gate['tampered']}"
                        if gate["tampered"]
                        else ""
                    ),
                    flush=True,
                )
                write_text_atomic(
                    args.out,
                    json.dumps({"args": vars(args), "cases": cases, "runs": runs}, indent=1) + "\n",
                )
    print_summaries(runs, args.busy, args.quiet_steal)


def recount(saved: dict) -> dict[str, list[dict]]:
    """A saved calibration's gates with their counts computed again from the verdicts, by this
    file's scenario definitions (``changed_keys``), per mode too."""
    args = saved["args"]
    runs = {}
    for name, gates in saved["runs"].items():
        recounted = []
        for gate in gates:
            verdicts = gate["verdicts"]
            modes = sorted({k.split("/")[1] for k in verdicts})
            changed = changed_keys(name, args["slow_variant"], modes)
            by_mode = {
                m: counts(
                    {k: v for k, v in verdicts.items() if k.endswith(f"/{m}")},
                    {k for k in changed if k.endswith(f"/{m}")},
                )
                | {"changed": sorted(k for k in changed if k.endswith(f"/{m}"))}
                for m in modes
            }
            recounted.append(
                gate | counts(verdicts, changed) | {"changed": sorted(changed), "by_mode": by_mode}
            )
        runs[name] = recounted
    return runs


def contended_summary(runs: dict[str, list[dict]], busy: int) -> str:
    """Per scenario, the contended rule on unchanged benchmarks with enough contended pairs: how many,
    the largest lower bound of their wait-adjusted and CPU-time intervals against the floors, the median
    wait share; and, for the changed benchmarks, the lower bounds of both (min, median, max)."""
    floor, cpu_floor = 1 + CONTENDED_MIN_EFFECT, 1 + CONTENDED_CPU_MIN_EFFECT
    rows = [
        f"| scenario (busy processes: {busy}) | unchanged judged on contended pairs | largest wait-adjusted "
        f"lower bound (must stay below x{floor:.2f}) | largest CPU-time lower bound (must stay below "
        f"x{cpu_floor:.2f}) | median head wait share | changed: wait-adjusted lower bound (min, median, "
        "max) | changed: CPU-time lower bound (min, median, max) |",
        "| --- " * 7 + "|",
    ]

    def spread(values: list[float]) -> str:
        values = sorted(values)
        return (
            f"{values[0]:.2f}, {values[len(values) // 2]:.2f}, {values[-1]:.2f}" if values else "-"
        )

    for name, gates in runs.items():
        unchanged, changed = [], []
        for g in gates:
            for key, found in (g.get("contended_check") or {}).items():
                if found:
                    (changed if changed_key(key) in g.get("changed", ()) else unchanged).append(
                        found
                    )
        if not unchanged and not changed:
            continue
        cpu_lows = [c["cpu_low"] for c in unchanged if "cpu_low" in c]
        rows.append(
            f"| {name} | {len(unchanged)} | "
            + (
                f"{max(c['adjusted_low'] for c in unchanged):.3f} | "
                + (f"{max(cpu_lows):.3f} | " if cpu_lows else "- | ")
                + f"{float(np.median([c['median_wait_share'] for c in unchanged])):.0%} | "
                if unchanged
                else "- | - | - | "
            )
            + f"{spread([c['adjusted_low'] for c in changed])} | "
            + f"{spread([c['cpu_low'] for c in changed if 'cpu_low' in c])} |"
        )
    return "\n".join(rows)


def print_summaries(runs: dict[str, list[dict]], busy: int, quiet_steal: float) -> None:
    """Every gate, then only the gates the hypervisor left alone (steal below ``quiet_steal``),
    then the contended rule's check."""
    print()
    print(summary(runs, busy))
    print("\nContended pairs (the rule of verdicts.contended_verdict):\n")
    print(contended_summary(runs, busy))
    quiet = {
        name: [g for g in gates if g.get("steal", 1.0) < quiet_steal]
        for name, gates in runs.items()
    }
    print(f"\nGates with CPU steal below {quiet_steal:.0%}:\n")
    print(summary(quiet, busy))
    modes = sorted({m for gates in runs.values() for g in gates for m in g.get("by_mode", {})})
    for mode in modes if len(modes) > 1 else []:
        print(f"\n{mode} benchmarks only:\n")
        print(
            summary({n: [g | g["by_mode"][mode] for g in gates] for n, gates in runs.items()}, busy)
        )


if __name__ == "__main__":
    main()
