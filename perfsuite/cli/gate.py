"""``perfsuite compare`` and ``perfsuite ab``: the regression gate on the command line.

Exit codes: 0 no regression; 1 a regression (``slower``, or a structural change that adds work,
unless ``--no-fail-on-structure``); 2 a usage error or a run that cannot be compared.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING

from perfsuite.gate.sequential import WORKER_PAIRS, SequentialPlan
from perfsuite.gate.verdicts import (
    AB_ALPHA,
    DEFAULT_CONTENDED_PAIRS,
    SEPARATE_RUNS_ALPHA,
    SEPARATE_RUNS_MIN_EFFECT,
    ContendedPairs,
    GateSettings,
)
from perfsuite.errors import GateTampered
from perfsuite.storage import write_text_atomic
from perfsuite.suite.command_config import (
    AB_CASE_SET,
    AbOptions,
    gate_settings,
    resolve_ab,
    resolve_compare,
    sequential_plan,
)

if TYPE_CHECKING:  # the gate's modules load torch: imported where a command runs
    from perfsuite.gate.flow import GateOutcome


def at_least(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is below {minimum}")
        return value

    return parse


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help=f"the chance that identical code is called slower, per benchmark (a one-sided level; "
        f"faster is asked apart at the same level; default {AB_ALPHA:g} for ab, {SEPARATE_RUNS_ALPHA:g} "
        "for compare of separate runs)",
    )
    parser.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help=f"smallest change that counts (default {GateSettings.min_effect} for ab, "
        f"{SEPARATE_RUNS_MIN_EFFECT} for compare of separate runs)",
    )
    parser.add_argument(
        "--fail-on-structure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on by default: a structural change that adds work (more copies or casts, device "
        "kernels, Memcpy, score writes, bytes allocated/written/saved, or another SDPA backend) "
        "fails the gate whatever the timing says; one that only removes work, or adds ops that do "
        "none (views, a same-dtype .to), does not. --no-fail-on-structure: timing alone decides",
    )
    parser.add_argument(
        "--require-timing",
        action="store_true",
        help="a gate without failures whose timing of some benchmark was not judged (inconclusive, "
        "or contended by other work on the machine) exits 2 instead of passing: for a runner where "
        "a slowdown that adds no structure must not pass unseen",
    )
    parser.add_argument(
        "--force", action="store_true", help="compare runs from different hardware/software anyway"
    )
    parser.add_argument(
        "--markdown", help="also write the Markdown verdict here (e.g. $GITHUB_STEP_SUMMARY)"
    )


def add_commands(commands) -> None:
    compare = commands.add_parser(
        "compare", help="statistical comparison of two saved runs (pytest-benchmark JSON)"
    )
    compare.add_argument(
        "base",
        help="baseline JSON with per-round data (perfsuite run and scripts/bench.sh save it; "
        "plain pytest-benchmark needs --benchmark-save-data), or a saved run's number "
        "(0001) under .benchmarks/",
    )
    compare.add_argument("head", help="new run JSON, or a saved run's number under .benchmarks/")
    add_gate_options(compare)
    ab = commands.add_parser("ab", help="A/B gate: base and head interleaved in one run")
    ab.add_argument(
        "--base-tree",
        help="source tree put first on the base's PYTHONPATH, with its src/ "
        "(default: the repository's root, found as perfsuite run finds it)",
    )
    ab.add_argument("--head-tree", help="source tree of the head (default: the repository's root)")
    ab.add_argument(
        "--timing-threads",
        type=positive_threads,
        metavar="N",
        help="both workers time with N torch threads (default: torch's, what your code runs with). "
        "1 times single-threaded work: a change that costs only with several threads is not seen",
    )
    ab.add_argument(
        "--contended-pairs",
        choices=[str(c) for c in ContendedPairs],
        default=str(DEFAULT_CONTENDED_PAIRS),
        help="block pairs timed under contention: 'shared' (default) keeps a pair whose two blocks "
        "were both contended (a steady load slows both sides and cancels in their ratio) and sets "
        "aside one with a single contended block; 'set-aside' sets aside every contended pair "
        "(measured: docs, validation page, 'Gate beside a CPU hog')",
    )
    ab.add_argument(
        "--base-ref", help="git ref of the current repository as the base (a temporary worktree)"
    )
    ab.add_argument(
        "--head-ref", help="git ref of the current repository as the head (a temporary worktree)"
    )
    ab.add_argument(
        "--base-python",
        default=sys.executable,
        help="interpreter (a virtualenv's bin/python) of the base",
    )
    ab.add_argument(
        "--head-python",
        default=sys.executable,
        help="interpreter of the head (e.g. a venv with another torch)",
    )
    ab.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="add your own attention function as a variant (repeatable); entry points of the "
        "perfsuite.variants group are always loaded",
    )
    ab.add_argument(
        "--modes",
        help="modes to gate, comma-separated: forward, backward, forward_backward, or all (default: "
        "perfsuite_modes of your pytest configuration, else all; variants without "
        "backward are gated forward only)",
    )
    ab.add_argument("--base-variant", help="run this variant as the base of every benchmark")
    ab.add_argument("--head-variant", help="run this variant as the head of every benchmark")
    ab.add_argument(
        "--variants",
        help="variants to gate (default: perfsuite_variants of your pytest configuration, "
        "else all)",
    )
    ab.add_argument(
        "--case-set",
        help=f"case set (default: perfsuite_case_set of your pytest configuration, else {AB_CASE_SET})",
    )
    ab.add_argument(
        "--cases",
        help="exact case ids instead of a case set (default: perfsuite_cases of your pytest "
        "configuration when --case-set is not given)",
    )
    ab.add_argument("--devices", help="cpu, cuda or auto (default auto: cuda when available)")
    ab.add_argument(
        "--workers-per-side",
        type=at_least(1),
        default=WORKER_PAIRS,
        help=f"worker pairs: base worker i is paired with head worker i, the pairs are timed one at a "
        f"time, and the interval is taken across them, so where one process landed widens the "
        f"interval instead of deciding it (default {WORKER_PAIRS}; 1: pairs pooled, a process's bias "
        f"not covered)",
    )
    ab.add_argument(
        "--budget-s",
        type=non_negative_float,
        default=SequentialPlan.budget_s,
        help=f"seconds of sampling per benchmark before its last look (default "
        f"{SequentialPlan.budget_s:g}; 0: structure only)",
    )
    ab.add_argument(
        "--max-budget-s",
        type=non_negative_float,
        default=SequentialPlan.max_budget_s,
        help=f"under contention, a benchmark whose worker pairs lack kept pairs samples on up to this "
        f"many seconds (default {SequentialPlan.max_budget_s:g})",
    )
    ab.add_argument(
        "--blocks",
        type=at_least(1),
        default=0,
        help="block pairs per worker-pair visit (default: sized from the step's time, about 0.4 s "
        "of calls a visit; below 3 with several worker pairs: structure only)",
    )
    ab.add_argument(
        "--rounds",
        type=at_least(1),
        default=0,
        help="calls per block (default: sized from the step's time, about 2 ms a block: one call for a step of a millisecond or more)",
    )
    ab.add_argument(
        "--call-limit-s",
        type=positive_float,
        default=None,
        help="seconds a worker may take to set a benchmark up (its first calls); a block gets 100x what "
        "its calls took then, at least 30 s. Past it the side is named as hung, its worker killed and the "
        "gate failed (default: the suite's per-call limit, 600 s on the CPU, 120 s on CUDA)",
    )
    ab.add_argument(
        "--noise-floor",
        action="append",
        default=[],
        metavar="AA_JSON",
        help="an A/A run's `perfsuite ab --json` document (repeatable): each benchmark's spread "
        "between worker pairs there is the least the gate assumes (the nightly A/A job of "
        "`perfsuite init-ci` records them). With the history on, the A/A gates recorded in its "
        "store on this machine (the newest 7 per benchmark) set the floor without this option; a "
        "document given here overrides them for its benchmarks",
    )
    ab.add_argument("--json", help="write raw blocks and verdicts here")
    add_gate_options(ab)


def _finish(outcome: GateOutcome, args: argparse.Namespace) -> int:
    """Print the report and verdict line, append it to ``--markdown``, return the exit code."""
    print(outcome.report_md, end="")
    for warning in outcome.warnings:
        print(f"perfsuite: warning (forced): {warning}", file=sys.stderr)
    if args.markdown:
        path = Path(args.markdown)
        previous = path.read_text() if path.exists() else ""
        write_text_atomic(path, previous + outcome.report_md)
    if outcome.judged_nothing:
        print(
            "perfsuite: nothing was compared (no benchmark in both runs): not a pass",
            file=sys.stderr,
        )
    return outcome.exit_code


def positive_threads(text: str) -> int:
    """``--timing-threads``: a whole number of threads, 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count (1 or more)")
    return int(text)


def run_compare(args: argparse.Namespace) -> int:
    from perfsuite.gate.baseline import check_baseline_file
    from perfsuite.gate.compare import load_benchmark_file
    from perfsuite.gate.flow import judge_saved_runs

    config = resolve_compare(args.base, args.head, args.alpha, args.min_effect)
    base = check_baseline_file(config.base)  # a partial run is no baseline
    head = load_benchmark_file(config.head)
    title = f"perfsuite compare: {Path(config.base).name} -> {Path(config.head).name}"
    outcome = judge_saved_runs(
        base,
        head,
        config.base,
        config.head,
        config.settings,
        args.force,
        args.fail_on_structure,
        title,
        args.require_timing,
    )
    return _finish(outcome, args)


class Terminated(Exception):
    """SIGTERM (what CI sends on a timeout), raised where the coordinator runs so that every
    ``finally`` runs: workers are closed and temporary worktrees removed, as on Ctrl-C."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    def handler(signum, frame):
        raise Terminated()

    if (
        threading.current_thread() is not threading.main_thread()
    ):  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_ab_command(args: argparse.Namespace) -> int:
    """``perfsuite ab``; Ctrl-C and SIGTERM end it with one line (exit 130 / 143), worktrees removed."""
    stopped = {
        KeyboardInterrupt: ("interrupted (Ctrl-C)", 130),
        Terminated: ("terminated (SIGTERM)", 143),
    }
    try:
        with sigterm_raises():
            return _run_ab(args)
    except GateTampered as exc:
        print(f"**perfsuite gate: FAIL: {exc}**", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Terminated) as exc:
        what, code = stopped[type(exc)]
        print(
            f"perfsuite ab: {what}: stopped; workers ended and temporary worktrees removed, no verdict",
            file=sys.stderr,
        )
        return code


def ab_settings_and_plan(args: argparse.Namespace):
    """``perfsuite ab``'s level and minimum effect (``GateSettings``), its ``SequentialPlan`` and the
    plan's note (structure only), from its parsed options (``UsageError`` as ``sequential_plan``)."""
    settings = gate_settings(args.alpha, args.min_effect, separate_runs=False)
    plan, note = sequential_plan(
        args.workers_per_side,
        args.blocks,
        args.rounds,
        args.budget_s,
        args.max_budget_s,
        args.fail_on_structure,
    )
    return settings, plan, note


def aa_floor_kept(payload: dict, commits: dict[str, str]) -> str:
    """For a recorded A/A gate (base and head one commit), the line saying its spread between worker
    pairs is now the noise floor of later gates on this machine; "" otherwise."""
    if len(commits) != 2 or len(set(commits.values())) != 1:
        return ""
    from perfsuite.gate.noise_floor import HISTORY_AA_GATES

    kept = [b["key"] for b in payload["benchmarks"] if b.get("between_pairs_sd") is not None]
    if not kept:
        return ""
    return (
        f"perfsuite: note: this A/A gate's spread between worker pairs is kept in the history for "
        f"{len(kept)} benchmark(s): later gates on this machine take it as their noise floor (the "
        f"newest {HISTORY_AA_GATES} A/A gates, pooled)"
    )


def _run_ab(args: argparse.Namespace) -> int:
    from perfsuite.gate.ab import (
        Side,
        ab_method,
        ab_payload,
        ab_title,
        run_ab,
        write_json,
    )
    from perfsuite.gate.noise_floor import (
        HISTORY_AA_GATES,
        floors_from_files,
        floors_from_history,
    )
    from perfsuite.gate.flow import judge
    from perfsuite.gate.worktrees import git_worktrees, ref_commits
    from perfsuite.history.recording import AbSide, aa_spreads_here, record_ab

    contended_pairs = ContendedPairs(args.contended_pairs)  # a choice argparse checked
    settings, plan, note = ab_settings_and_plan(args)
    if note:
        print(f"perfsuite: note: {note}", file=sys.stderr)
    floors = floors_from_files([Path(f) for f in args.noise_floor])
    refs = {"base": args.base_ref, "head": args.head_ref}
    commits, notes = ref_commits(refs)
    for note in notes:
        print(f"perfsuite: note: {note}", file=sys.stderr)
    with git_worktrees(refs) as trees:
        config = resolve_ab(AbOptions.from_args(args), trees, commits)
        for line in config.header_lines():
            print(line, file=sys.stderr)

        def noise_floors(info: dict) -> dict[str, float]:
            """The history's A/A floors on this machine (history on), a --noise-floor document's over them."""
            spreads, line = (
                aa_spreads_here(info, HISTORY_AA_GATES, config.history_url)
                if config.history
                else ({}, "")
            )
            if line:
                print(line, file=sys.stderr)
            return floors_from_history(spreads) | floors

        base = Side(config.base_tree, args.base_variant, python=args.base_python)
        head = Side(config.head_tree, args.head_variant, python=args.head_python)
        results, info = run_ab(
            base,
            head,
            list(config.variants),
            list(config.case_ids),
            settings=settings,
            plan=plan,
            force=args.force,
            progress=lambda text: print(text, file=sys.stderr),
            modes=config.modes,
            specs=config.variant_specs,
            timing_threads=args.timing_threads,
            contended_pairs=contended_pairs,
            noise_floors=noise_floors,
            call_limit_s=args.call_limit_s,
            variant_case_ids=config.variant_case_ids,
        )
    payload = ab_payload(results, info, settings, plan, contended_pairs)
    sides = {
        name: AbSide(ref, side.tree, side.python, bool(variant))
        for name, ref, side, variant in (
            ("base", args.base_ref, base, args.base_variant),
            ("head", args.head_ref, head, args.head_variant),
        )
    }
    recorded = (
        record_ab(payload, info, sides, Path.cwd(), config.history_url) if config.history else None
    )
    if args.json:
        write_json(Path(args.json), payload)
    if recorded:
        print(recorded, file=sys.stderr)
        if floor_line := aa_floor_kept(payload, commits):
            print(floor_line, file=sys.stderr)
    notes = [*notes, f"configuration: {config.describe()}"]  # below the heading
    title = ab_title(base, head, refs, commits, info, notes)
    method = ab_method(
        plan, settings, contended_pairs, args.timing_threads, info.get("worker_start")
    )
    comparisons = [r.comparison for r in results]
    return _finish(
        judge(
            comparisons,
            settings,
            title,
            method,
            args.fail_on_structure,
            require_timing=args.require_timing,
        ),
        args,
    )
