"""A/B gate: base and head timed in alternating blocks (ABAB...) in one time window.

Each side runs in its own worker process (``perfsuite.gate.ab_worker``) with its own source
tree first on ``PYTHONPATH`` (and its own interpreter), so base and head can be two git checkouts
of your repository (your attention code, or perfsuite itself), two virtualenvs (a torch
upgrade), two variants, or the same code with an injected slowdown (calibration). Only one side
runs at a time; block order alternates (AB, BA, AB, ...) so neither side always goes first. Pairs
are added until the verdict is decisive or the time budget is spent
(``perfsuite.gate.stats.sequential_paired``). Contention (``perfsuite.measure.contention``) is judged
per pair by ``ContendedPairs``: by default (``shared``) a pair is set aside when only one of its
blocks was contended; with ``set-aside``, whenever either was. Under either policy a pair is set
aside when other processes' threads alone filled every CPU all through it
(``contention.others_fill_every_cpu``): that load does not cancel between the sides.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.modes import Mode
from perfsuite.errors import IncomparableRuns, UsageError, WorkerError
from perfsuite.gate.compare import BenchmarkComparison, BenchmarkKey
from perfsuite.measure.conditions import required_env
from perfsuite.measure.contention import (
    brief_reason,
    others_fill_every_cpu,
    overload_reason,
    wait_share,
)
from perfsuite.measure.machine import MUST_MATCH, machine_differences
from perfsuite.trace.structure import adds_work, diff_fingerprints
from perfsuite.gate.worktrees import describe_tree
from perfsuite.gate.stats import (
    BLOCK_ROUNDS,
    DEFAULT_CONTENDED_PAIRS,
    WORKERS_PER_SIDE,
    ContendedPairs,
    GateSettings,
    PairSample,
    SequentialPlan,
    Verdict,
    below_min_effect,
    min_pairs,
    sequential_paired,
)

# The same, fixed process conditions for both sides, and for every timed run: the list and the
# reason for each live in perfsuite.measure.conditions.
WORKER_ENV = required_env()
# ``--timing-threads N``: both workers time with N torch threads (``torch.set_num_threads``), so a busy
# process beside the gate shares a core with fewer of them (calibrated: docs/validation.md).
TIMING_THREADS_ENV = "PERFSUITE_AB_TIMING_THREADS"

PAIRED_METHOD = "per-block-pair log ratios, base and head interleaved ABAB in one run"


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of the comparison.

    ``tree``: a source tree put first on the worker's ``PYTHONPATH`` (with its ``src/`` when it
    has one), so its modules shadow installed ones; None adds nothing. ``python``: the
    interpreter (a virtualenv's ``bin/python``) whose torch and perfsuite the worker uses.
    ``variant``: run this variant instead of the benchmark's own. ``slowdown``: an injected
    slowdown fraction, for ``slow_variant`` only when set: calibration only, set by the validation
    tool through this API (``perfsuite ab`` has no option for it).
    """

    tree: Path | None
    variant: str | None = None
    slowdown: float = 0.0
    slow_variant: str | None = None  # the slowdown applies to this variant only (None: all)
    python: str = sys.executable

    def slowdown_for(self, variant: str) -> float:
        return self.slowdown if self.slow_variant in (None, variant) else 0.0

    def python_path(self) -> list[str]:
        """The folders this side puts first on ``PYTHONPATH``."""
        if self.tree is None:
            return []
        tree = self.tree.resolve()
        return [str(tree)] + ([str(tree / "src")] if (tree / "src").is_dir() else [])

    def label(self, with_python: bool = False) -> str:
        """``tree`` (and ``python`` when asked, or when it is not this interpreter) as a header shows them."""
        where = describe_tree(self.tree) if self.tree is not None else "installed code"
        return (
            f"{where} with {self.python}" if with_python or self.python != sys.executable else where
        )


def no_aslr_prefix() -> list[str]:
    """``setarch <arch> -R`` where available: both workers get the same address-space layout,
    so cache-set aliasing of the big buffers does not differ at random between them."""
    setarch = shutil.which("setarch")
    if (
        not setarch
        or subprocess.run(
            [setarch, platform.machine(), "-R", "true"], capture_output=True
        ).returncode
    ):
        return []
    return [setarch, platform.machine(), "-R"]


class WorkerProcess:
    """A running ``perfsuite.gate.ab_worker`` for one side."""

    def __init__(self, side: Side, timing_threads: int | None = None):
        paths = side.python_path() + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
        ]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **WORKER_ENV)
        if timing_threads is not None:
            env |= {TIMING_THREADS_ENV: str(timing_threads), "OMP_NUM_THREADS": str(timing_threads)}
        self.side = side
        self._broken = False  # the pipe to the worker broke on send: receive reports it exited
        if shutil.which(side.python) is None:
            raise UsageError(
                f"interpreter {side.python!r} (--base-python / --head-python) does not exist or is not "
                "executable; give a virtualenv's bin/python"
            )
        self.process = subprocess.Popen(
            no_aslr_prefix() + [side.python, "-m", "perfsuite.gate.ab_worker"],
            cwd=side.tree or ".",
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send ``request`` and wait for the worker's reply (``WorkerError`` when it exited or failed)."""
        self.send(request)
        return self.receive()

    def send(self, request: dict[str, Any]) -> None:
        """Send ``request`` without waiting; ``receive`` reads the reply (a worker answers in order)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            self._broken = True

    def receive(self) -> dict[str, Any]:
        """The reply to the oldest request not yet received; ``WorkerError`` when the worker exited
        or answered with an error."""
        line = "" if self._broken else self.process.stdout.readline()
        if not line:
            raise WorkerError(
                f"A/B worker for {self.side.label()} exited (exit code {self.process.poll()}); "
                "is perfsuite installed for that interpreter?"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise WorkerError(f"A/B worker for {self.side.label()}: {reply['error']}")
        return reply

    def close(self) -> None:
        """Ask the worker to quit; kill it when it cannot be asked (it died, or an interrupt broke
        the pipe) or does not quit within 30 s."""
        if self.process.poll() is not None:
            return
        try:
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.close()
            self.process.wait(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


@dataclasses.dataclass
class AbBenchmark:
    """Samples and outcome of one benchmark: blocks of round times (seconds) per side, which
    pairs were set aside as contended, how many kept pairs had both blocks contended
    (``shared_load``, ``ContendedPairs``), the sequential gate's outcome, and per pair the head
    block's and the base block's wait shares (``wait_shares``: ``[base, head]`` per pair,
    ``contention.wait_share``; None where unknown)."""

    key: str
    base_blocks: list[list[float]]
    head_blocks: list[list[float]]
    comparison: BenchmarkComparison
    contended: list[bool] = dataclasses.field(default_factory=list)
    looks: int = 0
    stopped: str = ""
    seconds: float = 0.0
    fingerprints: tuple[dict | None, dict | None] = (
        None,
        None,
    )  # base's and head's structural fingerprints
    shared_load: int = 0
    clock: str = "host"  # the workers' clock: host, cuda_graph or blocked_event (ab_worker)
    wait_shares: list = dataclasses.field(default_factory=list)
    cpu_seconds: list = dataclasses.field(default_factory=list)  # [base, head] block CPU s per pair


def pair_schedule(count: int, workers_per_side: int) -> tuple[int, int, bool]:
    """Which workers time pair number ``count`` (0-based): ``(base index, head index, base first)``.

    Base worker ``i`` is always paired with head worker ``i``: each worker pair is one cluster of
    the interval (``stats.clustered_interval``), and clusters share no process, so they are
    independent. With several worker pairs, the pairs visit the worker pairs in turn, one pair per
    visit, so no block ever follows a block of its own worker (a worker timing twice in a row ran
    several percent apart from its other blocks, and on whichever side got those repeats that
    decided verdicts). Which side goes first is a checkerboard: worker pair ``c`` in round of visits
    ``r`` has base first when ``c + r`` is even, so every round has both orders (in equal numbers for
    an even count of worker pairs) and each worker pair alternates its order from round to round.
    With one worker per side it is plain alternation (AB, BA, AB, ...).
    """
    if workers_per_side == 1:
        return 0, 0, count % 2 == 0
    visit_round, cluster = divmod(count, workers_per_side)
    return cluster, cluster, (cluster + visit_round) % 2 == 0


def workers_phrase(workers_per_side: int) -> str:
    """How the pairs were spread over processes, for the report's method line."""
    if workers_per_side == 1:
        return "one worker process per side (pairs taken as independent: a process's bias is not covered)"
    return (
        f"{workers_per_side} worker processes per side, base worker i paired with head worker i: "
        f"{workers_per_side} clusters"
    )


def pair_sampler(
    bases: list[WorkerProcess],
    heads: list[WorkerProcess],
    rounds: int,
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
):
    """``next_pair()`` for ``sequential_paired``: one block per side, from the workers that
    ``pair_schedule`` picks out of ``bases`` and ``heads`` (equally many); returns a ``PairSample``:
    both blocks' round times (seconds), whether the pair is set aside (by ``contended_pairs``), its
    worker pair as the cluster (None with one worker per side) and both blocks' wait shares
    (``contention.wait_share``). A pair timed beside other threads that filled every CPU
    (``others_fill_every_cpu``) is set aside whatever the policy. ``next_pair.reasons`` collects
    each contended block's reasons in one short line, for the report; ``next_pair.shared`` counts
    the kept pairs whose two blocks were contended."""
    if not bases or len(bases) != len(heads):
        raise ValueError(
            f"need equally many base and head workers, got {len(bases)} and {len(heads)}"
        )
    count = [0]
    reasons: list[str] = []

    def next_pair() -> PairSample:
        b_index, h_index, base_first = pair_schedule(count[0], len(bases))
        base, head = bases[b_index], heads[h_index]
        count[0] += 1
        order = (base, head) if base_first else (head, base)
        replies = {id(worker): worker.ask({"time": rounds}) for worker in order}
        b, h = replies[id(base)], replies[id(head)]
        found = [r.get("contention") or {} for r in (b, h)]
        flagged = [f for f in found if f.get("contended")]
        overloaded = others_fill_every_cpu(found)
        reasons.extend(brief_reason(f) for f in flagged)
        reasons.extend([overload_reason(found)] if overloaded else [])
        shared = len(flagged) == 2 and contended_pairs == ContendedPairs.SHARED and not overloaded
        next_pair.shared += shared
        host = b.get("clock", "host") == "host" and h.get("clock", "host") == "host"
        return PairSample(
            b["times"],
            h["times"],
            bool(flagged or overloaded) and not shared,
            b_index if len(bases) > 1 else None,
            wait_share(found[1]),
            wait_share(found[0]),
            b.get("cpu_times") if host else None,
            h.get("cpu_times") if host else None,
        )

    next_pair.reasons = reasons
    next_pair.shared = 0
    return next_pair


def median_of_rounds(blocks: list[list[float]]) -> float | None:
    """Median of every round of every block (seconds); None without rounds."""
    rounds = sorted(t for block in blocks for t in block)
    return rounds[len(rounds) // 2] if rounds else None


def setup_workers(
    bases: list[WorkerProcess],
    heads: list[WorkerProcess],
    variant: str,
    case_id: str,
    seed: int,
    mode: str,
    specs: tuple[str, ...],
) -> list[dict]:
    """Set up both sides' workers for a benchmark; returns the first base and first head worker's
    replies (their structural fingerprints, or ``missing``/``unsupported``).

    The first worker of each side answers before any other is asked (a side that cannot run the
    benchmark costs one setup). The others then set up all at once, both sides together, their
    replies read after all were sent (setup is not timed): memory a side's workers allocate one after
    the other lands in neighbouring physical pages, and a placement shared by one side's processes is
    a bias of that side, which no interval across worker pairs covers. With an injected slowdown
    (sized from the step's time at setup) they set up one at a time, base and head alternating."""

    def request(index: int, worker: WorkerProcess) -> dict:
        return {
            "setup": {
                "variant": worker.side.variant or variant,
                "case": case_id,
                "seed": seed,
                "mode": mode,
                "specs": list(specs),
                "slowdown": worker.side.slowdown_for(variant),
                "fingerprint": index == 0,
            }
        }

    firsts = [workers[0].ask(request(0, workers[0])) for workers in (bases, heads)]
    if any("missing" in f or "unsupported" in f for f in firsts):
        return firsts
    others = [
        (index, worker) for index in range(1, len(bases)) for worker in (bases[index], heads[index])
    ]
    if any(worker.side.slowdown_for(variant) for _, worker in others):
        for index, worker in others:
            worker.ask(request(index, worker))
        return firsts
    for index, worker in others:
        worker.send(request(index, worker))
    for _, worker in others:
        worker.receive()
    return firsts


def run_benchmark(
    bases: list[WorkerProcess],
    heads: list[WorkerProcess],
    variant: str,
    case_id: str,
    seed: int,
    rounds: int,
    settings: GateSettings,
    plan: SequentialPlan,
    mode: str = Mode.FORWARD,
    specs: tuple[str, ...] = (),
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
    clock: Callable[[], float] = time.monotonic,
) -> AbBenchmark | None:
    """A/B one variant on one case in one mode, sequentially (``stats.sequential_paired``, its
    budget read on ``clock``) over the workers of each side (``pair_sampler``), contended pairs kept
    or set aside by ``contended_pairs``; None when either side cannot run it. The first worker of
    each side records the structural fingerprint; the others only set up."""
    setups = setup_workers(bases, heads, variant, case_id, seed, mode, specs)
    key = str(BenchmarkKey(variant, case_id, mode))
    missing = {side: s["missing"] for side, s in zip(("base", "head"), setups) if "missing" in s}
    for side, worker in (("base", bases[0]), ("head", heads[0])):
        if side in missing and (worker.side.variant or len(missing) == 2):  # a typo, not a rename
            raise WorkerError(
                f"{f'--{side}-variant' if worker.side.variant else side}: {missing[side]}"
            )
    if missing:  # renamed or removed by the change: reported, not timed
        present = "head" if "base" in missing else "base"
        comparison = BenchmarkComparison(
            key, None, None, None, Verdict.MISSING, [], f"only in the {present} tree"
        )
        return AbBenchmark(key, [], [], comparison)
    if any("unsupported" in s for s in setups):
        return None
    sampler = pair_sampler(bases, heads, rounds, contended_pairs)
    outcome = sequential_paired(sampler, settings, plan, clock)
    clean = [i for i, c in enumerate(outcome.contended) if not c]
    note = (
        f"{len(clean)} pairs{' kept' if len(clean) < len(outcome.contended) else ''}"
        + (f" ({sampler.shared} under a load on both sides)" if sampler.shared else "")
        + (
            f", {len(outcome.contended) - len(clean)} contended set aside"
            if len(clean) < len(outcome.contended)
            else ""
        )
    )
    if outcome.contended_note:
        note += f"; {outcome.contended_note}"
    if small := below_min_effect(outcome.estimate, outcome.verdict, settings):
        note += f"; {small}"
    if sampler.reasons:
        note += f"; last contended block: {sampler.reasons[-1]}"
    comparison = BenchmarkComparison(
        key,
        median_of_rounds([outcome.base_blocks[i] for i in clean])
        or median_of_rounds(outcome.base_blocks),
        median_of_rounds([outcome.head_blocks[i] for i in clean])
        or median_of_rounds(outcome.head_blocks),
        outcome.estimate,
        outcome.verdict,
        diff_fingerprints(setups[0]["fingerprint"], setups[1]["fingerprint"]),
        note,
        adds_work(setups[0]["fingerprint"], setups[1]["fingerprint"]),
    )
    return AbBenchmark(
        key,
        outcome.base_blocks,
        outcome.head_blocks,
        comparison,
        outcome.contended,
        outcome.looks,
        outcome.stopped,
        outcome.seconds,
        (setups[0].get("fingerprint"), setups[1].get("fingerprint")),
        sampler.shared,
        " / ".join(dict.fromkeys(s.get("clock", "host") for s in setups)),
        outcome.wait_shares,
        outcome.cpu_seconds,
    )


# Between two interpreters, other software is what is being compared; the hardware must still match.
SOFTWARE_FIELDS = ("torch_version", "cuda_version", "cudnn_version")


def check_same_machine(
    base: WorkerProcess, head: WorkerProcess, devices: list[str], force: bool
) -> dict:
    """Both workers must match in ``machine.MUST_MATCH`` (else ``IncomparableRuns`` unless ``force``);
    with two interpreters, torch/CUDA/cuDNN versions may differ (that is the comparison). The other
    workers of a side run the same interpreter and tree as the one checked.

    Returns the head's machine info with ``base_machine`` (the base's) added."""
    infos = [w.ask({"info": devices}) for w in (base, head)]
    two_pythons = base.side.python != head.side.python
    fields = tuple(f for f in MUST_MATCH if not (two_pythons and f in SOFTWARE_FIELDS))
    problems = machine_differences(infos[0], infos[1], fields=fields)
    if problems and not force:
        raise IncomparableRuns(
            "base and head run different software or hardware: " + "; ".join(problems)
        )
    return dict(infos[1], base_machine=infos[0])


def workers_needed(plan: SequentialPlan, settings: GateSettings, workers_per_side: int) -> int:
    """``workers_per_side``, or 1 when ``plan`` can never reach a finite interval (a structure-only
    gate: ``--blocks`` below ``min_pairs``), where more workers would only cost start-up time."""
    if plan.looks[-1] < min_pairs(plan.alpha_per_look(settings.alpha)):
        return 1
    return workers_per_side


def run_ab(
    base_side: Side,
    head_side: Side,
    variants: list[str],
    case_ids: list[str],
    seed: int = 0,
    rounds: int = BLOCK_ROUNDS,
    settings: GateSettings = GateSettings(),
    force: bool = False,
    progress=None,
    plan: SequentialPlan = SequentialPlan(),
    modes: tuple[str, ...] = (Mode.FORWARD,),
    specs: tuple[str, ...] = (),
    timing_threads: int | None = None,
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
    workers_per_side: int = WORKERS_PER_SIDE,
) -> tuple[list[AbBenchmark], dict]:
    """A/B every variant x case x mode (``plan``: looks and time budget per benchmark); returns the
    benchmarks both sides could run and machine info.

    ``specs``: users' ``module:function`` variants, registered in both workers (each imports
    them from its own tree). A variant without backward is gated in forward only. ``timing_threads``:
    the torch thread count of both workers (``TIMING_THREADS_ENV``; None: the machine's default).
    ``contended_pairs``: which contended block pairs are kept (``ContendedPairs``).
    ``workers_per_side``: worker processes started per side (``WORKERS_PER_SIDE``); ``ValueError``
    below 1.
    """
    if workers_per_side < 1:
        raise ValueError(f"workers_per_side must be 1 or more, got {workers_per_side!r}")
    bases: list[WorkerProcess] = []
    heads: list[WorkerProcess] = []
    try:
        for _ in range(workers_per_side):
            bases.append(WorkerProcess(base_side, timing_threads))
            heads.append(WorkerProcess(head_side, timing_threads))
        devices = sorted({parse_case_id(c).device for c in case_ids})
        info = check_same_machine(bases[0], heads[0], devices, force)
        results = []
        for variant in variants:
            for case_id in case_ids:
                for mode in modes:
                    if progress:
                        progress(f"A/B {variant} on {case_id} ({mode})")
                    found = run_benchmark(
                        bases,
                        heads,
                        variant,
                        case_id,
                        seed,
                        rounds,
                        settings,
                        plan,
                        mode,
                        specs,
                        contended_pairs,
                    )
                    if found:
                        results.append(found)
        return results, info
    finally:
        for worker in bases + heads:
            worker.close()


def ab_payload(
    results: list[AbBenchmark],
    info: dict,
    settings: GateSettings,
    plan: SequentialPlan = SequentialPlan(),
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
    workers_per_side: int = WORKERS_PER_SIDE,
) -> dict:
    """The raw blocks, fingerprints and verdicts of an A/B run (``--json``; the history store reads it).
    Per benchmark, ``contended_pairs`` lists which pairs were set aside and ``wait_shares`` the base
    and head blocks' wait shares per pair; block pair ``k`` was timed by the workers
    ``pair_schedule(k, workers_per_side)`` names (worker pair ``k % workers_per_side``)."""
    return {
        "schema_version": 2,
        "contended_pair_policy": str(contended_pairs),
        "workers_per_side": workers_per_side,
        "machine": info,
        "alpha": settings.alpha,
        "min_effect": settings.min_effect,
        "looks": list(plan.looks),
        "budget_s": plan.budget_s,
        "benchmarks": [
            {
                "key": r.key,
                "base_blocks_s": r.base_blocks,
                "head_blocks_s": r.head_blocks,
                "contended_pairs": r.contended,
                "shared_load_pairs": r.shared_load,
                "wait_shares": r.wait_shares,
                "cpu_blocks_s": r.cpu_seconds,
                "clock": r.clock,
                "looks": r.looks,
                "stopped": r.stopped,
                "seconds": r.seconds,
                "verdict": r.comparison.verdict,
                "note": r.comparison.note,
                "structure": r.comparison.structure,
                "ratio": dataclasses.asdict(r.comparison.estimate)
                if r.comparison.estimate
                else None,
                "base_fingerprint": r.fingerprints[0],
                "head_fingerprint": r.fingerprints[1],
            }
            for r in results
        ],
    }


def write_json(path: Path, payload: dict) -> None:
    """``ab_payload``'s document (for artifacts), written atomically."""
    from perfsuite.storage import write_text_atomic

    write_text_atomic(path, json.dumps(payload, indent=1) + "\n")


def ab_title(
    base: Side,
    head: Side,
    refs: dict[str, str | None],
    commits: dict[str, str],
    info: dict,
    notes: list[str],
) -> str:
    """The A/B report's heading: each side by its ref (with its commit: the temporary worktree is gone
    by now), else its tree (and interpreter when the sides' differ), with ``:variant`` when a variant
    replaced the code; the torch versions when they differ; each of ``notes`` below it."""
    two_pythons = base.python != head.python

    def name(which: str, side: Side) -> str:
        ref, commit = refs.get(which), commits.get(which, "")
        shown = side.label(two_pythons)
        if ref:
            same = commit.startswith(ref) or ref.startswith(commit)
            shown = ref if same else f"{ref} ({commit})"
        return shown + (f":{side.variant}" if side.variant else "")

    title = f"perfsuite A/B: {name('base', base)} -> {name('head', head)}"
    versions = (info["base_machine"].get("torch_version"), info.get("torch_version"))
    if versions[0] != versions[1]:
        title += f" (torch {versions[0]} -> {versions[1]})"
    return title + "".join(f"\n\nNote: {note}." for note in notes)


def ab_method(
    plan: SequentialPlan,
    settings: GateSettings,
    workers_per_side: int,
    contended_pairs: ContendedPairs,
    timing_threads: int | None,
) -> str:
    """The report's method line: the paired statistic, the sequential plan, the workers, the
    contended-pair policy and, when set, the torch threads each side timed with."""
    method = (
        f"{PAIRED_METHOD}; {plan.describe(settings.alpha, clustered=workers_per_side > 1)}; "
        f"{workers_phrase(workers_per_side)}"
    )
    method += (
        "; pairs with both blocks contended kept, pairs with one contended block set aside"
        if contended_pairs == ContendedPairs.SHARED
        else "; contended pairs set aside"
    )
    if timing_threads:
        plural = "s" if timing_threads > 1 else ""
        method += f"; timed with {timing_threads} torch thread{plural} per side"
    return method
