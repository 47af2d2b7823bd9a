"""A/B gate: base and head timed in alternating blocks, warm worker pair by warm worker pair.

Each side runs in worker processes (``perfsuite.gate.ab_worker``) with its own source tree first on
``PYTHONPATH`` (and its own interpreter), so base and head can be two git checkouts of your repository
(your attention code, or perfsuite itself), two virtualenvs (a torch upgrade), two variants, or the
same code with an injected slowdown (calibration). Base worker ``i`` and head worker ``i`` form worker
pair ``i``, one cluster of the interval. For each benchmark the worker pairs are visited one after
another (``perfsuite.gate.sequential``): only the pair being timed is busy, it sets the benchmark up,
warms up, then times a run of alternating blocks of about ``sequential.BLOCK_S`` (one call for a step of a
millisecond or more: base and head take turns call by call; which side goes first alternates block pair by
block pair), the inputs re-placed at random aligned offsets (``perfsuite.measure.placement``) every
``sequential.PLACEMENT_PAIRS`` block pairs. Contention (``perfsuite.measure.contention``) is judged per block pair by
``ContendedPairs``; a pair is also set aside when other processes' threads alone filled every CPU
through it (``contention.others_fill_every_cpu``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.modes import Mode
from perfsuite.errors import GateTampered, IncomparableRuns, UsageError, WorkerError
from perfsuite.gate.compare import (
    NOT_TIMED_NOTE,
    BenchmarkComparison,
    BenchmarkKey,
    format_ratio_interval,
)
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
from perfsuite.gate.forkserver import ForkServer, can_fork, requested_start, shadowed
from perfsuite.gate.intervals import PairSample
from perfsuite.gate.noise_floor import FLOOR_MIN_WORKER_PAIRS, between_pairs_sd
from perfsuite.gate.outside_clock import ClockCheck
from perfsuite.measure.call_limit import default_limit_s
from perfsuite.gate.sequential import (
    BLOCK_WARMUP_STEPS,
    PLACEMENT_PAIRS,
    WARMUP_STEPS,
    Progress,
    SequentialPlan,
    sequential_visits,
)
from perfsuite.gate.verdicts import (
    DECISIVE,
    DEFAULT_CONTENDED_PAIRS,
    ContendedPairs,
    GateSettings,
    Verdict,
    below_min_effect,
    why_inconclusive,
)

# The same, fixed process conditions for both sides, and for every timed run: the list and the
# reason for each live in perfsuite.measure.conditions.
WORKER_ENV = required_env()
# ``--timing-threads N``: both workers time with N torch threads (``torch.set_num_threads``), so a busy
# process beside the gate shares a core with fewer of them (calibrated: docs/validation.md).
TIMING_THREADS_ENV = "PERFSUITE_AB_TIMING_THREADS"

# How the workers started, as the method line says it (``fork_server``).
WORKER_START_WORDS = {
    "fork": "both sides' workers forked from one process that imported torch",
    "exec": "each worker its own interpreter",
}
PAIRED_METHOD = "per-block-pair log ratios, base and head blocks alternating (ABBA) in one run"


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
    slow_variant: str | None = (
        None  # the slowdown applies to these variants only (comma-separated; None: all)
    )
    python: str = sys.executable

    def slowdown_for(self, variant: str) -> float:
        chosen = self.slow_variant is None or variant in self.slow_variant.split(",")
        return self.slowdown if chosen else 0.0

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


# Requests and their time limits: set-up runs the variant's first calls (a compiled variant compiles),
# so it gets the suite's per-call limit (``measure.call_limit``); a block gets HANG_FACTOR times what its
# calls took at set-up, at least BLOCK_LIMIT_FLOOR_S, at most the per-call limit per call.
HANG_FACTOR = 100
BLOCK_LIMIT_FLOOR_S = 30.0
TRANSPORT_PINGS = 5


def extra_python_path() -> list[str]:
    """This process's ``PYTHONPATH`` folders: every worker has them after its side's."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def worker_env(timing_threads: int | None) -> dict[str, str]:
    """A worker's environment, but for its side's ``PYTHONPATH``: this one's with ``WORKER_ENV`` and,
    when set, the timing threads (``TIMING_THREADS_ENV``)."""
    env = dict(os.environ, **WORKER_ENV)
    if timing_threads is not None:
        env |= {TIMING_THREADS_ENV: str(timing_threads), "OMP_NUM_THREADS": str(timing_threads)}
    return env


def fork_server(
    base: Side, head: Side, timing_threads: int | None, devices: list[str]
) -> ForkServer | None:
    """A fork server both sides' workers start from (``perfsuite.gate.forkserver``), or None where
    each worker must be its own interpreter: a device other than the CPU in ``devices`` (a process
    forked after the CUDA driver was touched cannot use it), the sides' interpreters differ, a side's
    tree holds a module the server imported, a relative ``PYTHONPATH`` folder (each worker reads it from
    its own tree), no fork on this platform, ``WORKER_START_ENV`` set to ``exec``, or the server did not
    start (the workers' own start then says why). ``UsageError`` for a bad ``WORKER_START_ENV``."""
    try:
        wanted = requested_start()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    extra = extra_python_path()
    if (
        wanted != "fork"
        or any(device != "cpu" for device in devices)
        or not can_fork()
        or base.python != head.python
        or not all(os.path.isabs(p) for p in extra)
    ):
        return None
    env = worker_env(timing_threads)
    env["PYTHONPATH"] = os.pathsep.join(extra)
    try:
        server = ForkServer(base.python, env)
    except (OSError, RuntimeError):
        return None
    if shadowed(base.python_path() + head.python_path(), server.modules):
        server.close()
        return None
    return server


class WorkerProcess:
    """A running ``perfsuite.gate.ab_worker`` for one side (``role``: base or head), in its own process
    group so that a hung worker and any child it started are ended together."""

    def __init__(
        self,
        side: Side,
        timing_threads: int | None = None,
        role: str = "head",
        server: ForkServer | None = None,
    ):
        pythonpath = os.pathsep.join(side.python_path() + extra_python_path())
        self.side, self.role = side, role
        self._broken = False  # the pipe to the worker broke on send: receive reports it exited
        self._transport_s: float | None = None
        if shutil.which(side.python) is None:
            raise UsageError(
                f"interpreter {side.python!r} (--base-python / --head-python) does not exist or is not "
                "executable; give a virtualenv's bin/python"
            )
        if server is not None:  # forked from a process that imported torch (``forkserver``)
            cwd = str(Path(side.tree or ".").resolve())
            self.process = server.start(cwd, [cwd, *side.python_path()], pythonpath)
            return
        self.process = subprocess.Popen(
            [side.python, "-m", "perfsuite.gate.ab_worker"],
            cwd=side.tree or ".",
            env=worker_env(timing_threads) | {"PYTHONPATH": pythonpath},
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own group: ended whole (children too); Ctrl-C is the coordinator's
        )

    def ask(
        self, request: dict[str, Any], limit_s: float | None = None, what: str = ""
    ) -> dict[str, Any]:
        """Send ``request`` and wait for the worker's reply (``WorkerError`` when it exited or failed,
        ``GateTampered`` when it tampered with its timing or took longer than ``limit_s``)."""
        self.send(request)
        return self.receive(limit_s, what)

    def send(self, request: dict[str, Any]) -> None:
        """Send ``request`` without waiting; ``receive`` reads the reply (a worker answers in order)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            self._broken = True

    def receive(self, limit_s: float | None = None, what: str = "") -> dict[str, Any]:
        """The reply to the oldest request not yet received; ``WorkerError`` when the worker exited
        or answered with an error, ``GateTampered`` when it reported tampering or gave no reply within
        ``limit_s`` seconds (``what``: the request, for the message; the worker is then killed)."""
        if not self._broken and limit_s is not None:
            ready, _, _ = select.select([self.process.stdout], [], [], limit_s)
            if not ready:
                self.kill()
                raise GateTampered(
                    f"the {self.role} worker ({self.side.label()}) hung: {what or 'a request'} gave no "
                    f"answer within {limit_s:g} s; the worker and its children were killed"
                )
        line = "" if self._broken else self.process.stdout.readline()
        if not line:
            raise WorkerError(f"A/B worker for {self.side.label()} {self._exit_reason()}")
        reply = json.loads(line)
        if "tampered" in reply:
            raise GateTampered(
                f"the {self.role} worker ({self.side.label()}) tampered with its measurement: "
                f"{reply['tampered']}; nothing of it was kept"
            )
        if "error" in reply:
            raise WorkerError(f"A/B worker for {self.side.label()}: {reply['error']}")
        return reply

    def _exit_reason(self) -> str:
        code = self.process.wait(timeout=10) if self.process.poll() is None else self.process.poll()
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return (
                f"crashed: killed by signal {name} while running the {self.role}'s code (a crash in "
                "that code or a library it calls, not in the gate)"
            )
        return f"exited (exit code {code}); is perfsuite installed for that interpreter?"

    def transport_s(self) -> float:
        """The slowest of ``TRANSPORT_PINGS`` empty round trips (seconds), measured once: what the
        coordinator's clock adds to a request beyond the worker's handling of it."""
        if self._transport_s is None:
            trips = []
            for _ in range(TRANSPORT_PINGS):
                start = time.perf_counter()
                self.ask({"ping": True}, BLOCK_LIMIT_FLOOR_S, "a ping")
                trips.append(time.perf_counter() - start)
            self._transport_s = max(trips)
        return self._transport_s

    def kill(self) -> None:
        """End the worker's process group (the worker and any child it left) at once."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self._broken = True

    def close(self) -> None:
        """Ask the worker to quit; kill its process group when it cannot be asked (it died, or an
        interrupt broke the pipe) or does not quit within 30 s; children it left are ended too."""
        close_workers([self])

    def ask_to_quit(self) -> None:
        """Send ``quit`` and close the worker's input (nothing when it already exited)."""
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"quit": True}) + "\n")
                self.process.stdin.close()
            except (OSError, ValueError):
                pass

    def end(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the worker to exit, then kill its process group (what its
        code left running too)."""
        try:
            self.process.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.wait()


def close_workers(workers: list[WorkerProcess], timeout_s: float = 30.0) -> None:
    """Ask every worker to quit at once, then end each within ``timeout_s`` in all: they exit in
    parallel (a gate's 24 workers one after another took 15 s, each unloading torch)."""
    for worker in workers:
        worker.ask_to_quit()
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        worker.end(deadline - time.monotonic())


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
    clusters: list = dataclasses.field(
        default_factory=list
    )  # per pair, its worker pair (None: pooled)
    rounds: int = 0  # calls per block


def block_pair(
    base: WorkerProcess,
    head: WorkerProcess,
    base_first: bool,
    rounds: int,
    placements: tuple[int, int],
    contended_pairs: ContendedPairs,
    cluster: int | None,
    reasons: list[str],
    limits: dict[int, float] | None = None,
    checks: dict[int, ClockCheck] | None = None,
    warmup: int = BLOCK_WARMUP_STEPS,
) -> tuple[PairSample, bool]:
    """Time one block per side (``base_first`` says which goes first), each after ``warmup`` untimed
    steps on inputs re-placed from its seed in ``placements``; returns the ``PairSample`` and whether both blocks
    were contended and the pair kept (``ContendedPairs.SHARED``). Each contended block's reasons are
    appended to ``reasons`` in one short line. Each block is bounded by its worker's entry in ``limits``
    (seconds, by ``id``; none: unbounded) and checked against the coordinator's clock (its ``ClockCheck``
    in ``checks``; none: unchecked); ``GateTampered`` when a worker hangs or its times disagree with that
    clock."""
    order = (base, head) if base_first else (head, base)
    seeds = {id(base): placements[0], id(head): placements[1]}
    replies = {}
    for worker in order:
        request = {"time": rounds, "warmup": warmup, "placement": seeds[id(worker)]}
        start = time.perf_counter()
        reply = worker.ask(request, (limits or {}).get(id(worker)), f"a block of {rounds} calls")
        if checks is not None:
            checks[id(worker)].record(time.perf_counter() - start, worker.transport_s(), reply)
        replies[id(worker)] = reply
    for worker in order if checks is not None else ():
        if failure := checks[id(worker)].failure():
            raise GateTampered(failure)
    b, h = replies[id(base)], replies[id(head)]
    found = [r.get("contention") or {} for r in (b, h)]
    flagged = [f for f in found if f.get("contended")]
    overloaded = others_fill_every_cpu(found)
    reasons.extend(brief_reason(f) for f in flagged)
    reasons.extend([overload_reason(found)] if overloaded else [])
    shared = len(flagged) == 2 and contended_pairs == ContendedPairs.SHARED and not overloaded
    host = b.get("clock", "host") == "host" and h.get("clock", "host") == "host"
    sample = PairSample(
        b["times"],
        h["times"],
        bool(flagged or overloaded) and not shared,
        cluster,
        wait_share(found[1]),
        wait_share(found[0]),
        b.get("cpu_times") if host else None,
        h.get("cpu_times") if host else None,
    )
    return sample, shared


def setup_request(
    worker: WorkerProcess,
    variant: str,
    case_id: str,
    seed: int,
    mode: str,
    specs: tuple[str, ...],
    fingerprint: bool,
) -> dict:
    """The ``setup`` request of one worker for one benchmark (``ab_worker``)."""
    return {
        "setup": {
            "variant": worker.side.variant or variant,
            "case": case_id,
            "seed": seed,
            "mode": mode,
            "specs": list(specs),
            "slowdown": worker.side.slowdown_for(variant),
            "fingerprint": fingerprint,
        }
    }


def setup_pair(
    base: WorkerProcess, head: WorkerProcess, requests: tuple[dict, dict], limit_s: float
) -> list[dict]:
    """Set up one worker pair: both requests sent, then both replies read, each within ``limit_s``
    (set-up is not timed, and only this pair is busy)."""
    for worker, request in zip((base, head), requests):
        worker.send(request)
    return [w.receive(limit_s, "setting the benchmark up (its first calls)") for w in (base, head)]


class Visits:
    """``visit(c)`` for ``sequential.sequential_visits``: worker pair ``c`` sets the benchmark up (once
    per benchmark; pair 0 already did, with the fingerprints), then times ``plan.blocks_for`` block
    pairs of ``plan.rounds_for`` calls, the first side alternating block pair by block pair and visit by
    visit. Set-up is bounded by ``call_limit_s``; a block by ``block_limit_s`` (``HANG_FACTOR`` times its
    calls' time at set-up, within ``BLOCK_LIMIT_FLOOR_S`` and the per-call limit). ``reasons``: each
    contended block's reasons; ``shared``: kept pairs with both blocks contended."""

    def __init__(
        self,
        bases,
        heads,
        plan: SequentialPlan,
        step_s: float,
        request,
        seed: int,
        contended_pairs: ContendedPairs,
        call_limit_s: float,
    ):
        import numpy as np

        self.bases, self.heads, self.plan = bases, heads, plan
        self.rounds, self.blocks = plan.rounds_for(step_s), plan.blocks_for(step_s)
        calls = self.rounds + WARMUP_STEPS
        self.block_limit_s = min(
            call_limit_s * calls, max(BLOCK_LIMIT_FLOOR_S, HANG_FACTOR * calls * step_s)
        )
        self.call_limit_s = call_limit_s
        self.request = request  # (worker, fingerprint) -> its setup request
        self.ready = {0}
        self.rng = np.random.default_rng(seed)
        self.contended_pairs = contended_pairs
        self.checks = {id(w): ClockCheck(w.role) for w in bases + heads}
        self.reasons: list[str] = []
        self.shared = 0
        self.visits = 0
        self.timed: list[float] = []  # every timed call's seconds, for ``_resize``

    def __call__(self, cluster: int) -> list[PairSample]:
        base, head = self.bases[cluster], self.heads[cluster]
        if cluster not in self.ready:
            requests = (self.request(base, False), self.request(head, False))
            setup_pair(base, head, requests, self.call_limit_s)
            self.ready.add(cluster)
        label = cluster if self.plan.clustered else None
        limits = {id(base): self.block_limit_s, id(head): self.block_limit_s}
        samples = []
        for j in range(self.blocks):
            if j % PLACEMENT_PAIRS == 0:
                placements = tuple(int(x) for x in self.rng.integers(0, 2**31, size=2))
            sample, shared = block_pair(
                base,
                head,
                (self.visits + j) % 2 == 0,
                self.rounds,
                placements,
                self.contended_pairs,
                label,
                self.reasons,
                limits,
                self.checks,
                WARMUP_STEPS if j == 0 else BLOCK_WARMUP_STEPS,
            )
            self.shared += shared
            samples.append(sample)
        self.visits += 1
        self._resize(samples)
        return samples

    def _resize(self, samples: list[PairSample]) -> None:
        """Block pairs per visit from the calls timed so far (the set-up's few steps may have met a
        slow moment): the median call's seconds, when the plan sizes visits (``plan.blocks`` 0)."""
        self.timed.extend(t for s in samples for t in (*s.base_s, *s.head_s))
        if not self.plan.blocks and self.timed:
            self.blocks = self.plan.blocks_for(statistics.median(self.timed), self.rounds)


def median_of_rounds(blocks: list[list[float]]) -> float | None:
    """Median of every round of every block (seconds); None without rounds."""
    rounds = sorted(t for block in blocks for t in block)
    return rounds[len(rounds) // 2] if rounds else None


def run_benchmark(
    bases: list[WorkerProcess],
    heads: list[WorkerProcess],
    variant: str,
    case_id: str,
    seed: int,
    settings: GateSettings,
    plan: SequentialPlan,
    mode: str = Mode.FORWARD,
    specs: tuple[str, ...] = (),
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
    clock: Callable[[], float] = time.monotonic,
    floor_sd: float = 0.0,
    call_limit_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    setups_s: dict[str, float] | None = None,
) -> AbBenchmark | None:
    """A/B one variant on one case in one mode: worker pair 0 records both structural fingerprints,
    then the worker pairs are visited (``Visits``, ``sequential.sequential_visits``, its budget read on
    ``clock``; ``floor_sd``: the benchmark's A/A noise floor); None when either side cannot run it. A
    plan that can decide nothing (``SequentialPlan.can_decide``) times nothing: structure only.
    ``call_limit_s``: seconds a set-up may take (default: the suite's per-call limit for the case's
    device, ``measure.call_limit``); blocks are bounded from it and the step's time (``Visits``).
    ``setups_s``: per variant, the seconds of its set-up in a fresh worker (inputs, ``prepare``, first
    call), recorded at its first benchmark (pair 0's) and read by its later ones: a costly set-up narrows
    the plan (``SequentialPlan.for_setup``)."""

    def request(worker: WorkerProcess, fingerprint: bool) -> dict:
        return setup_request(worker, variant, case_id, seed, mode, specs, fingerprint)

    limit_s = call_limit_s or default_limit_s(parse_case_id(case_id).device)
    setups = setup_pair(
        bases[0], heads[0], (request(bases[0], True), request(heads[0], True)), limit_s
    )
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
    if progress:
        progress(f"A/B {variant} on {case_id} ({mode})")
    structure = diff_fingerprints(setups[0]["fingerprint"], setups[1]["fingerprint"])
    added = adds_work(setups[0]["fingerprint"], setups[1]["fingerprint"])
    fingerprints = (setups[0].get("fingerprint"), setups[1].get("fingerprint"))
    clock_name = " / ".join(dict.fromkeys(s.get("clock", "host") for s in setups))
    if not plan.can_decide():
        comparison = BenchmarkComparison(
            key,
            None,
            None,
            None,
            Verdict.INCONCLUSIVE,
            structure,
            NOT_TIMED_NOTE,
            added,
        )
        return AbBenchmark(key, [], [], comparison, fingerprints=fingerprints, clock=clock_name)
    step_s = setups[0].get("step_s") or 1e-3
    setups_s = {} if setups_s is None else setups_s
    setup_s = setups_s.setdefault(variant, max(s.get("setup_s", 0.0) for s in setups))
    narrowed = plan.for_setup(setup_s)
    note = (
        f"its set-up in a fresh worker took {setup_s:.1f} s: {narrowed.worker_pairs} worker "
        f"pairs, not {plan.worker_pairs}"
        if narrowed is not plan
        else ""
    )
    plan = narrowed
    visits = Visits(
        bases, heads, plan, step_s, request, placement_seed(seed, key), contended_pairs, limit_s
    )

    def on_progress(moment: Progress) -> None:
        progress(progress_line(moment, plan))

    outcome = sequential_visits(
        visits, settings, plan, clock, floor_sd, on_progress if progress else None
    )
    return AbBenchmark(
        key,
        outcome.base_blocks,
        outcome.head_blocks,
        BenchmarkComparison(
            key,
            *kept_medians(outcome),
            outcome.estimate,
            outcome.verdict,
            structure,
            benchmark_note(outcome, visits, settings, note),
            added,
        ),
        outcome.contended,
        outcome.looks,
        outcome.stopped,
        outcome.seconds,
        fingerprints,
        visits.shared,
        clock_name,
        outcome.wait_shares,
        outcome.cpu_seconds,
        outcome.clusters,
        visits.rounds,
    )


def progress_line(moment: Progress, plan: SequentialPlan) -> str:
    """A look or the contended extension as one indented progress line (the gate's stderr)."""
    unit = "worker pairs" if plan.clustered else "visits"
    if moment.estimate is None:
        return (
            f"  {moment.contended} of {moment.pairs} block pairs set aside as contended (other processes "
            f"took the CPU): sampling on past the {plan.budget_s:g} s budget, up to "
            f"{plan.max_budget_s:g} s"
        )
    e = moment.estimate
    if not e.units:
        return (
            f"  look at {moment.complete} of {moment.planned} {unit}, {moment.seconds:.0f} s: no block "
            f"pair kept ({moment.contended} set aside as contended){': ' + moment.verdict if moment.final else ''}"
        )
    # a decisive or last look says its verdict (the contended pairs' rule may still change a last one)
    decided = (
        f": {moment.verdict}" if moment.verdict in DECISIVE or moment.final else ", sampling on"
    )
    return (
        f"  look at {moment.complete} of {moment.planned} {unit}, {moment.seconds:.0f} s: head/base "
        f"{format_ratio_interval(e.ratio, e.low, e.high, e.clusters or e.units)}{decided}"
    )


def placement_seed(seed: int, key: str) -> int:
    """The seed of a benchmark's placements: from the gate's ``seed`` and the benchmark's key (stable
    across runs, unlike ``hash``)."""
    import zlib

    return seed * 1_000_003 + zlib.crc32(key.encode())


def kept_medians(outcome) -> tuple[float | None, float | None]:
    """Base and head medians of the kept pairs' rounds (of all pairs when none was kept)."""
    clean = [i for i, c in enumerate(outcome.contended) if not c]
    return tuple(
        median_of_rounds([blocks[i] for i in clean]) or median_of_rounds(blocks)
        for blocks in (outcome.base_blocks, outcome.head_blocks)
    )


def benchmark_note(outcome, visits: Visits, settings: GateSettings, narrowed: str = "") -> str:
    """The benchmark's note: pairs kept and set aside, worker pairs (``narrowed``: why fewer than the
    gate's), how contended pairs decided, a change below the minimum effect, the A/A floor when it
    widened the interval, the last contended block."""
    kept = outcome.contended.count(False)
    set_aside = len(outcome.contended) - kept
    note = f"{kept} pairs{' kept' if set_aside else ''}"
    note += f" ({visits.shared} under a load on both sides)" if visits.shared else ""
    note += f", {set_aside} contended set aside" if set_aside else ""
    if outcome.estimate is not None and outcome.estimate.clusters:
        note += f", {outcome.estimate.clusters} worker pair{'s' if outcome.estimate.clusters > 1 else ''}"
    if narrowed:
        note += f" ({narrowed})"
    if outcome.floor_used:
        note += "; interval widened to the A/A noise floor"
    if outcome.contended_note:
        note += f"; {outcome.contended_note}"
    if small := below_min_effect(outcome.estimate, outcome.verdict, settings):
        note += f"; {small}"
    if why := why_inconclusive(outcome.estimate, outcome.verdict, settings):
        note += f"; {why}{undecided_advice(outcome, visits.plan, visits.shared)}"
    if visits.reasons:
        note += f"; last contended block: {visits.reasons[-1]}"
    return note


# Share of a benchmark's block pairs touched by other work (set aside, or kept with both blocks under a
# load) from which an undecided benchmark's note blames the load, not the spread between worker processes.
LOADED_SHARE = 0.25


def undecided_advice(outcome, plan: SequentialPlan, shared: int = 0) -> str:
    """What would decide an undecided benchmark: more time when sampling stopped at the budget before
    the last planned look; a quieter machine when other work touched ``LOADED_SHARE`` of its block pairs
    or more (``shared``: pairs kept with both blocks under a load); else nothing a rerun changes (the
    spread between worker processes sets the width)."""
    pairs = len(outcome.contended)
    loaded = sum(outcome.contended) + shared
    if outcome.stopped in ("budget", "cap"):
        clusters = outcome.estimate.clusters if outcome.estimate else 0
        limit = plan.max_budget_s if outcome.stopped == "cap" else plan.budget_s
        option = "--max-budget-s" if outcome.stopped == "cap" else "--budget-s"
        done = (
            f"with {clusters} of {plan.looks[-1]} worker pairs"
            if plan.clustered
            else "before its last planned look"
        )
        return f" (sampling stopped at {limit:g} s {done}: a larger {option} times the rest)"
    if pairs and loaded >= LOADED_SHARE * pairs:
        return (
            f" (other processes took the CPU during {loaded} of {pairs} block pairs: their load widens "
            "the interval; a quieter machine narrows it)"
        )
    return (
        " (every worker pair was timed: the spread between worker processes on this machine sets the "
        "width, and a smaller change is left to the structural half)"
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


def run_ab(
    base_side: Side,
    head_side: Side,
    variants: list[str],
    case_ids: list[str],
    seed: int = 0,
    settings: GateSettings = GateSettings(),
    force: bool = False,
    progress=None,
    plan: SequentialPlan = SequentialPlan(),
    modes: tuple[str, ...] = (Mode.FORWARD,),
    specs: tuple[str, ...] = (),
    timing_threads: int | None = None,
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
    noise_floors: dict[str, float] | Callable[[dict], dict[str, float]] | None = None,
    call_limit_s: float | None = None,
    variant_case_ids: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[list[AbBenchmark], dict]:
    """A/B every variant x case x mode (``plan``: worker pairs, looks and time budget per benchmark);
    returns the benchmarks both sides could run and machine info.

    ``specs``: users' ``module:function`` variants, registered in both workers (each imports
    them from its own tree). A variant without backward is gated in forward only. ``timing_threads``:
    the torch thread count of both workers (``TIMING_THREADS_ENV``; None: the machine's default).
    ``contended_pairs``: which contended block pairs are kept (``ContendedPairs``). ``noise_floors``:
    per benchmark key, the A/A noise floor (``noise_floor.floors_from_payloads``), or a function of the
    head worker's machine info that returns them (the history's floors are this machine's). ``call_limit_s``: the
    seconds a worker's set-up may take (``run_benchmark``). ``variant_case_ids``: a variant bound to its
    model's case sets -> its own cases (the others run ``case_ids``). ``progress`` hears of each benchmark
    that runs, once both sides set it up (a variant that cannot run a case prints nothing). All worker processes
    start together before any timing, forked from one process that imported torch where ``fork_server``
    allows (``info["worker_start"]``: ``fork`` or ``exec``); one worker per side when the plan cannot
    decide (structure only).
    """
    workers_per_side = plan.worker_pairs if plan.can_decide() else 1
    bases: list[WorkerProcess] = []
    heads: list[WorkerProcess] = []
    devices = sorted({parse_case_id(c).device for c in case_ids})
    every_case = [*case_ids, *(c for ids in (variant_case_ids or {}).values() for c in ids)]
    server = fork_server(
        base_side, head_side, timing_threads, sorted({parse_case_id(c).device for c in every_case})
    )
    try:
        for _ in range(workers_per_side):
            bases.append(WorkerProcess(base_side, timing_threads, "base", server))
            heads.append(WorkerProcess(head_side, timing_threads, "head", server))
        info = check_same_machine(bases[0], heads[0], devices, force)
        info["worker_start"] = "fork" if server else "exec"
        floors = noise_floors(info) if callable(noise_floors) else (noise_floors or {})
        results, setups_s = [], {}
        for variant in variants:
            for case_id in (variant_case_ids or {}).get(variant, case_ids):
                for mode in modes:
                    key = str(BenchmarkKey(variant, case_id, mode))
                    found = run_benchmark(
                        bases,
                        heads,
                        variant,
                        case_id,
                        seed,
                        settings,
                        plan,
                        mode,
                        specs,
                        contended_pairs,
                        floor_sd=floors.get(key, 0.0),
                        call_limit_s=call_limit_s,
                        progress=progress,
                        setups_s=setups_s,
                    )
                    if found:
                        results.append(found)
        return results, info
    finally:
        close_workers(bases + heads)
        if server:
            server.close()


def ab_payload(
    results: list[AbBenchmark],
    info: dict,
    settings: GateSettings,
    plan: SequentialPlan = SequentialPlan(),
    contended_pairs: ContendedPairs = DEFAULT_CONTENDED_PAIRS,
) -> dict:
    """The raw blocks, fingerprints and verdicts of an A/B run (``--json``; the history store reads it).
    Per benchmark, ``contended_pairs`` lists which pairs were set aside, ``wait_shares`` the base
    and head blocks' wait shares per pair, and ``clusters`` the worker pair that timed each pair
    (None: pooled, one worker per side); ``between_pairs_sd`` the spread between worker pairs
    (``noise_floor.between_pairs_sd``, log units; None with fewer than ``FLOOR_MIN_WORKER_PAIRS``: too few
    for a noise floor)."""
    payload = {
        "schema_version": 3,
        "contended_pair_policy": str(contended_pairs),
        "workers_per_side": plan.worker_pairs,
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
                "clusters": r.clusters,
                "rounds": r.rounds,
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
    for benchmark in payload["benchmarks"]:  # an A/A gate's is the noise floor of later ones
        benchmark["between_pairs_sd"] = between_pairs_sd(benchmark, FLOOR_MIN_WORKER_PAIRS)
    return payload


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
    contended_pairs: ContendedPairs,
    timing_threads: int | None,
    worker_start: str | None = None,
) -> str:
    """The report's method line: the paired statistic, the sequential plan and its workers, how the
    workers started (``worker_start``, ``run_ab``'s ``info``), the contended-pair policy and, when set,
    the torch threads each side timed with."""
    method = f"{PAIRED_METHOD}; {plan.describe(settings)}"
    if worker_start in WORKER_START_WORDS:
        method += f"; {WORKER_START_WORDS[worker_start]}"
    method += (
        "; pairs with both blocks contended kept, pairs with one contended block set aside"
        if contended_pairs == ContendedPairs.SHARED
        else "; contended pairs set aside"
    )
    if timing_threads:
        plural = "s" if timing_threads > 1 else ""
        method += f"; timed with {timing_threads} torch thread{plural} per side"
    return method
