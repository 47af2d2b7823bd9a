"""``perfsuite compare`` and ``perfsuite ab``: the regression gate on the command line.

Exit codes: 0 no regression; 1 a regression (``slower``, or a structural change with
``--fail-on-structure``); 2 a usage error or a run that cannot be compared.
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

from perfsuite.errors import UsageError
from perfsuite.gate.stats import (
    BLOCK_ROUNDS,
    DEFAULT_CONTENDED_PAIRS,
    SEPARATE_RUNS_MIN_EFFECT,
    SEQUENTIAL_LOOKS,
    ContendedPairs,
    GateSettings,
    SequentialPlan,
    WORKERS_PER_SIDE,
    min_pairs,
)
from perfsuite.storage import write_text_atomic

if TYPE_CHECKING:  # the gate's modules load torch: imported where a command runs
    from perfsuite.gate.flow import GateOutcome


def at_least(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is below {minimum}")
        return value

    return parse


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def plan_for(blocks: int, budget_s: float) -> SequentialPlan:
    """The sequential plan's looks up to ``blocks`` pairs (the planned looks below it, then ``blocks``)."""
    return SequentialPlan(tuple(n for n in SEQUENTIAL_LOOKS if n < blocks) + (blocks,), budget_s)


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alpha", type=float, default=0.01, help="two-sided level of the interval (default 0.01)"
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
        action="store_true",
        help="a structural change that adds work (more copies or casts, device "
        "kernels, Memcpy, score writes, bytes allocated/written/saved, or another SDPA backend) "
        "fails the gate; one that only removes work, or adds ops that do none (views, a "
        "same-dtype .to), does not",
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
        help="case set (default: perfsuite_case_set of your pytest configuration, else smoke)",
    )
    ab.add_argument(
        "--cases",
        help="exact case ids instead of a case set (default: perfsuite_cases of your pytest "
        "configuration when --case-set is not given)",
    )
    ab.add_argument("--devices", default="auto", help="cpu, cuda or auto")
    ab.add_argument(
        "--blocks",
        type=at_least(2),
        default=SEQUENTIAL_LOOKS[-1],
        help=f"most block pairs per benchmark: the last look of the sequential gate (default "
        f"{SEQUENTIAL_LOOKS[-1]}; looks at {', '.join(map(str, SEQUENTIAL_LOOKS))} pairs up to it)",
    )
    ab.add_argument(
        "--budget-s",
        type=positive_float,
        default=SequentialPlan.budget_s,
        help=f"seconds of sampling per benchmark before the gate stops adding pairs "
        f"(default {SequentialPlan.budget_s:g})",
    )
    ab.add_argument(
        "--rounds",
        type=at_least(1),
        default=BLOCK_ROUNDS,
        help=f"rounds (calls) per block (default {BLOCK_ROUNDS})",
    )
    ab.add_argument(
        "--workers-per-side",
        type=at_least(1),
        default=WORKERS_PER_SIDE,
        help=f"worker processes per side; pairs rotate through them, so where one process landed "
        f"does not decide the ratio (default {WORKERS_PER_SIDE})",
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


SAVED_RUNS = Path(
    ".benchmarks"
)  # where perfsuite run saves, under the repository's root (perfsuite.suite.runner)


def positive_threads(text: str) -> int:
    """``--timing-threads``: a whole number of threads, 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count (1 or more)")
    return int(text)


def saved_run_path(spec: str) -> str:
    """A path as given, or a saved run's number (``0001``, as ``--benchmark-compare=0001`` takes it)
    resolved under the repository's ``.benchmarks/`` (found from a subdirectory as ``perfsuite run``
    finds its root). ``UsageError`` when a number matches no saved run or several, naming the saved runs there."""
    if Path(spec).exists() or not spec.isdigit():
        return spec
    from perfsuite.suite.runner import find_project_root

    folder = find_project_root(Path.cwd()) / SAVED_RUNS
    found = sorted(folder.glob(f"*/{spec}_*.json"))
    if len(found) == 1:
        return str(found[0])
    why = f"several match: {', '.join(map(str, found))}" if found else f"none in {folder}"
    saved = sorted(p.name.split("_")[0] for p in folder.glob("*/*.json"))
    raise UsageError(
        f"saved run {spec!r}: {why}; saved runs there: {', '.join(saved[-10:]) or 'none'} "
        "(or give a file's path)"
    )


def run_compare(args: argparse.Namespace) -> int:
    from perfsuite.gate.baseline import check_baseline_file
    from perfsuite.gate.compare import load_benchmark_file
    from perfsuite.gate.flow import judge_saved_runs

    settings = GateSettings(
        args.alpha, SEPARATE_RUNS_MIN_EFFECT if args.min_effect is None else args.min_effect
    )
    args.base, args.head = saved_run_path(args.base), saved_run_path(args.head)
    base, head = (
        check_baseline_file(args.base),
        load_benchmark_file(args.head),
    )  # a partial run is no baseline
    title = f"perfsuite compare: {Path(args.base).name} -> {Path(args.head).name}"
    return _finish(
        judge_saved_runs(
            base, head, args.base, args.head, settings, args.force, args.fail_on_structure, title
        ),
        args,
    )


def resolve_case_ids(args: argparse.Namespace) -> list[str]:
    import torch

    from perfsuite.suite import settings as suite_settings

    raw = {
        name: suite_settings.RawValue(spec.default, f"default {name}", "default")
        for name, spec in suite_settings.SETTINGS.items()
    }
    case_set = args.case_set or configured(args, "perfsuite_case_set", "smoke")
    raw["case_set"] = suite_settings.RawValue(case_set, f"--case-set={case_set!r}", "option")
    raw["devices"] = suite_settings.RawValue(args.devices, f"--devices={args.devices!r}", "option")
    cases = args.cases or ("" if args.case_set else configured(args, "perfsuite_cases", ""))
    if cases:
        origin = f"--cases={cases!r}" if args.cases else f"perfsuite_cases = {cases!r}"
        raw["cases"] = suite_settings.RawValue(cases, origin, "option")
    resolved = suite_settings.resolve(raw, torch.cuda.is_available())
    return [c.id for c in resolved.cases]


def selected_variants(args: argparse.Namespace) -> list[str]:
    """Register the user's variants here too (names and signatures are checked before any worker
    starts) and return the variants to gate; ``UsageError`` names a bad spec or name."""
    from perfsuite.variants import get_variant, variant_names
    from perfsuite.variants.user import load_entry_point_variants, load_variant_spec

    from perfsuite.suite import settings as suite_settings
    from perfsuite.suite.runner import ini_value

    args.variant = args.variant or ini_value(config_root(args), "perfsuite_user_variants")
    wanted = args.variants or " ".join(ini_value(config_root(args), "perfsuite_variants")) or "all"
    try:
        load_entry_point_variants()
        for spec in args.variant:
            load_variant_spec(spec)
        if args.base_variant or args.head_variant:
            return [get_variant(args.head_variant or args.base_variant).name]
        if wanted == "all":
            return variant_names()
        return [get_variant(v).name for v in suite_settings.split_list(wanted)]
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def config_root(args: argparse.Namespace) -> Path:
    """Where ``ab`` reads its configuration: the repository around the current directory
    (``runner.find_project_root``), unless set on ``args.config_root``."""
    from perfsuite.suite.runner import find_project_root

    if getattr(args, "config_root", None) is None:
        args.config_root = find_project_root(Path.cwd())
    return args.config_root


def configured(args: argparse.Namespace, key: str, default: str) -> str:
    """The value of ini ``key`` in the configuration ``ab`` reads (``config_root``), else ``default``."""
    from perfsuite.suite.runner import ini_value

    return " ".join(ini_value(config_root(args), key)) or default


def selected_modes(text: str) -> tuple[str, ...]:
    from perfsuite.attention.modes import MODES, parse_mode
    from perfsuite.suite import settings as suite_settings

    try:
        return (
            MODES
            if text.strip() == "all"
            else tuple(parse_mode(m) for m in suite_settings.split_list(text))
        )
    except ValueError as exc:
        raise UsageError(f"--modes: {exc}") from None


def record_ab_history(
    args: argparse.Namespace, payload: dict, info: dict, base, head
) -> str | None:
    """Record both sides in the history store (each side that is a commit's code: no --*-variant or
    --head-slowdown override); the history facts go into ``payload`` too, so importing the --json file
    later adds nothing. Returns the line to print, None when recording is off."""
    import dataclasses
    import time
    import uuid

    from perfsuite.history import Commit, capture, importing, recording

    if recording.disabled(configured(args, "perfsuite_history", "on")):
        return None
    repo = Path.cwd()
    commits = {
        "base": capture.commit_of(repo, args.base_ref, dirty=False)
        if args.base_ref
        else capture.commit_of(base.tree)
        if base.tree
        else Commit(),
        "head": capture.commit_of(repo, args.head_ref, dirty=False)
        if args.head_ref
        else capture.commit_of(head.tree)
        if head.tree
        else Commit(),
    }
    payload.update(
        {
            importing.RUN_UID_KEY: uuid.uuid4().hex,
            "recorded_at": time.time(),
            "commits": {side: dataclasses.asdict(c) for side, c in commits.items()},
            importing.TESTBED_KEY: dataclasses.asdict(capture.testbed_now(info)),
            # this interpreter's versions for a side that runs it (the usual case); another
            # interpreter's side keeps the torch/CUDA versions its worker reported
            importing.SOFTWARE_KEY: {
                side: capture.software_versions(side_info)
                for side, side_info, python in (
                    ("base", info["base_machine"], base.python),
                    ("head", info, head.python),
                )
                if python == sys.executable
            },
        }
    )
    overridden = {"base": bool(args.base_variant), "head": bool(args.head_variant)}
    runs = [
        run
        for run in importing.runs_from_ab_json(payload, repository=capture.repository_name(repo))
        if not overridden[run.source.removeprefix("ab-")] and run.benchmarks
    ]
    if not runs:
        return None
    return recording.record_runs(
        runs, ini_value=configured(args, "perfsuite_history_url", "") or None
    ).line()


def ref_config_root(tree: Path) -> Path:
    """Where a ref's temporary worktree keeps the configuration: found from the same subdirectory
    as the current one (``runner.find_project_root``), or from the worktree's root."""
    from perfsuite.gate.worktrees import repository_root
    from perfsuite.suite.runner import find_project_root

    below = tree / Path.cwd().resolve().relative_to(repository_root())
    return find_project_root(below if below.is_dir() else tree)


def describe_config(
    args: argparse.Namespace, trees: dict[str, Path], commits: dict[str, str], side: str | None
) -> str:
    """``pyproject.toml at --base-ref main (3f2a9c1d0)``, or the working tree's file, or none."""
    from perfsuite.suite.runner import find_config

    root = config_root(args)
    config = find_config(root)
    if side:
        where = f"at --{side}-ref {getattr(args, f'{side}_ref')} ({commits[side]})"
        name = config.relative_to(trees[side]).as_posix() if config else None
    else:
        where, name = "in the working tree", str(config) if config else None
    return f"{name} {where}" if name else f"no pytest configuration {where}: perfsuite's defaults"


GATE_KEYS = (
    "perfsuite_variants",
    "perfsuite_user_variants",
    "perfsuite_case_set",
    "perfsuite_cases",
    "perfsuite_modes",
)  # what decides which benchmarks ab gates


def changed_gate_keys(base_root: Path, head_root: Path) -> list[str]:
    """The ``GATE_KEYS`` whose values differ between the base's and the head's configuration."""
    from perfsuite.suite.runner import ini_value

    return [key for key in GATE_KEYS if ini_value(base_root, key) != ini_value(head_root, key)]


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
    except (KeyboardInterrupt, Terminated) as exc:
        what, code = stopped[type(exc)]
        print(
            f"perfsuite ab: {what}: stopped; workers ended and temporary worktrees removed, no verdict",
            file=sys.stderr,
        )
        return code


def _run_ab(args: argparse.Namespace) -> int:
    from perfsuite.gate.ab import (
        PAIRED_METHOD,
        Side,
        ab_payload,
        run_ab,
        workers_phrase,
        write_json,
    )
    from perfsuite.gate.flow import judge
    from perfsuite.gate.worktrees import git_worktrees, ref_commits

    contended_pairs = ContendedPairs(args.contended_pairs)  # a choice argparse checked
    settings = GateSettings(
        args.alpha, GateSettings.min_effect if args.min_effect is None else args.min_effect
    )
    plan = plan_for(args.blocks, args.budget_s)
    needed = min_pairs(plan.alpha_per_look(settings.alpha))
    if args.blocks < needed:
        why = (
            f"--blocks {args.blocks}: at alpha {settings.alpha:g} over {len(plan.looks)} look(s) the interval "
            f"needs at least {needed} block pairs to be finite, so no timing verdict is possible"
        )
        if not args.fail_on_structure:
            raise UsageError(
                f"{why}; use --blocks {needed} or more, or add --fail-on-structure to gate on structure only"
            )
        print(
            f"perfsuite: note: {why}; this gate judges structure only (--fail-on-structure)",
            file=sys.stderr,
        )
    commits, notes = ref_commits({"base": args.base_ref, "head": args.head_ref})
    for note in notes:
        print(f"perfsuite: note: {note}", file=sys.stderr)
    with git_worktrees({"base": args.base_ref, "head": args.head_ref}) as trees:
        # A ref's committed configuration, not the working tree's: the base ref's when there is one,
        # so that a change cannot turn off its own gate by editing what is gated.
        side = "base" if "base" in trees else "head" if "head" in trees else None
        if side:
            args.config_root = ref_config_root(trees[side])
        used = describe_config(args, trees, commits, side)
        print(f"perfsuite ab: configuration: {used}", file=sys.stderr)
        if side == "base" and "head" in trees:
            changed = changed_gate_keys(args.config_root, ref_config_root(trees["head"]))
            if changed:
                print(
                    f"perfsuite ab: note: the head ref changes {', '.join(changed)}; the gate uses the base "
                    "ref's configuration, so the change is gated on what main gates",
                    file=sys.stderr,
                )
        try:
            case_ids = resolve_case_ids(args)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        variants = selected_variants(args)
        modes = selected_modes(args.modes or configured(args, "perfsuite_modes", "all"))
        args.base_tree, args.head_tree = (
            args.base_tree or config_root(args),
            args.head_tree or config_root(args),
        )
        for option, tree in (("--base-tree", args.base_tree), ("--head-tree", args.head_tree)):
            if not Path(tree).is_dir():
                raise UsageError(f"{option} {tree!r}: no such folder")
        base = Side(
            trees.get("base", Path(args.base_tree)), args.base_variant, python=args.base_python
        )
        head = Side(
            trees.get("head", Path(args.head_tree)), args.head_variant, python=args.head_python
        )
        results, info = run_ab(
            base,
            head,
            variants,
            case_ids,
            rounds=args.rounds,
            settings=settings,
            plan=plan,
            force=args.force,
            progress=lambda text: print(text, file=sys.stderr),
            modes=modes,
            specs=tuple(args.variant),
            timing_threads=args.timing_threads,
            contended_pairs=contended_pairs,
            workers_per_side=args.workers_per_side,
        )
    payload = ab_payload(results, info, settings, plan, contended_pairs, args.workers_per_side)
    recording = record_ab_history(args, payload, info, base, head)
    if args.json:
        write_json(Path(args.json), payload)
    if recording:
        print(recording, file=sys.stderr)
    comparisons = [r.comparison for r in results]
    two_pythons = base.python != head.python
    # a ref side is named by its commit: its temporary worktree is gone by now
    named = lambda ref, commit: (
        ref if commit.startswith(ref) or ref.startswith(commit) else f"{ref} ({commit})"
    )
    name = lambda ref, commit, side, variant: (
        (named(ref, commit) if ref else side.label(two_pythons))
        + (f":{variant}" if variant else "")
    )
    title = (
        f"perfsuite A/B: {name(args.base_ref, commits.get('base'), base, args.base_variant)} -> "
        f"{name(args.head_ref, commits.get('head'), head, args.head_variant)}"
    )
    versions = (info["base_machine"].get("torch_version"), info.get("torch_version"))
    if versions[0] != versions[1]:
        title += f" (torch {versions[0]} -> {versions[1]})"
    title += "".join(
        f"\n\nNote: {note}." for note in [*notes, f"configuration: {used}"]
    )  # below the heading
    method = (
        f"{PAIRED_METHOD}; {plan.describe(settings.alpha)}; {workers_phrase(args.workers_per_side)}"
    )
    method += (
        "; pairs with both blocks contended kept, pairs with one contended block set aside"
        if contended_pairs == ContendedPairs.SHARED
        else "; contended pairs set aside"
    )
    if args.timing_threads:
        method += f"; timed with {args.timing_threads} torch thread{'s' if args.timing_threads > 1 else ''} per side"
    return _finish(judge(comparisons, settings, title, method, args.fail_on_structure), args)
