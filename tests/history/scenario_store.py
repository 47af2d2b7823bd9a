"""A new user's serving repository on a shared 2-core machine, as issue 52 found it: a real git
repository with five main-line commits (initial; a harmless rename merged; a branch that gathers every
sequence's pages into one contiguous cache merged after its pull request gate FAILED on that structure;
a branch that adds pure-Python per-page work, about +7%, identical ops and shapes, merged; a README
commit), one separately timed run per commit (the first under load: contended), the interleaved gate
``perfsuite ab --base-ref HEAD~1 --head-ref HEAD`` after the regression's merge, and the pull request's
gate. The separate runs' levels move as a shared machine's speed does (0.5x-1.7x) on code that never
changed, which separate runs cannot tell from a change of the code."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, Testbed
from perfsuite.history.importing import runs_from_ab_json

PAGED = "paged_attention/b2h4s64d32-fp32-causal-cpu/forward"
SINK = "sink_attention/b2h4s64d32-fp32-causal-cpu/forward"
TESTBED = Testbed({"cpu": "x86_64"}, 0, "shared cpu", 8 * 2**30, 2, host="shared")
SOFTWARE = Software({"python": "3.11", "torch": "2.13.0"})
ROUNDS_S = (1.0e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3, 1.0e-3, 1.005e-3)
BASE_STRUCTURE = {
    "cpu_ops": {"aten::bmm": 2, "aten::softmax": 1},
    "work_ops": {"aten::bmm": 2, "aten::softmax": 1},
    "no_work_ops": {},
    "copies": {},
    "gathers": {"cpu aten::index_select [1x4x16x32]": 2},
    "gather_bytes": {"cpu aten::index_select [1x4x16x32]": 16384},
    "allocated_bytes": 1 << 20,
}
# the gather branch: every sequence's pages into one contiguous cache, +2 gathers and 8 MiB per step
GATHER_STRUCTURE = {
    **BASE_STRUCTURE,
    "cpu_ops": {**BASE_STRUCTURE["cpu_ops"], "aten::cat": 2},
    "work_ops": {**BASE_STRUCTURE["work_ops"], "aten::cat": 2},
    "gathers": {**BASE_STRUCTURE["gathers"], "cpu aten::cat [2x4x4096x32]": 2},
    "gather_bytes": {**BASE_STRUCTURE["gather_bytes"], "cpu aten::cat [2x4x4096x32]": 8 << 20},
    "allocated_bytes": (1 << 20) + (8 << 20),
}
# each main commit's separate run: (machine speed factor, contended); the code's own cost on top
SEPARATE_RUNS = {
    "initial": {PAGED: (2.75, True), SINK: (2.5, True)},
    "rename": {PAGED: (1.0, False), SINK: (1.0, False)},
    "gather": {PAGED: (1.10, False), SINK: (1.66, False)},
    "regression": {PAGED: (1.20, False), SINK: (1.0, False)},
    "readme": {PAGED: (0.55, False), SINK: (0.5, False)},
}
REGRESSION = 1.07  # the pure-Python per-page work


@dataclasses.dataclass(frozen=True)
class Scenario:
    """The repository and its commits: ``main`` the five main-line shas oldest first (``names`` their
    roles), ``gather_tip`` the gather branch's head (its pull request gate's head)."""

    repo: Path
    main: list[str]
    gather_tip: str

    @property
    def names(self) -> dict[str, str]:
        return dict(zip(SEPARATE_RUNS, self.main))


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "user",
        "GIT_AUTHOR_EMAIL": "user@example.com",
        "GIT_COMMITTER_NAME": "user",
        "GIT_COMMITTER_EMAIL": "user@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def _commit(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).write_text(text)
    _git(repo, "add", name)
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _merge(repo: Path, branch: str, name: str, text: str) -> tuple[str, str]:
    """A branch with one commit merged into main with a merge commit: (branch tip, merge commit)."""
    _git(repo, "checkout", "-q", "-b", branch)
    tip = _commit(repo, name, text, f"{branch}: {name}")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", f"Merge {branch}", branch)
    return tip, _git(repo, "rev-parse", "HEAD")


def make_repository(repo: Path) -> Scenario:
    """The five main-line commits (and three merged branches) in a new repository at ``repo``."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    first = _commit(repo, "serve.py", "def attend(q, k, v): ...\n", "initial")
    _, rename = _merge(repo, "rename", "serve.py", "def attention(q, k, v): ...\n")
    tip, gather = _merge(repo, "gather", "cache.py", "def gather(pages): ...\n")
    _, slow = _merge(repo, "per-page", "pages.py", "def per_page(p): ...\n")
    readme = _commit(repo, "README.md", "# serving\n", "README")
    return Scenario(repo, [first, rename, gather, slow, readme], tip)


def _record(bench: str, factor: float, contended: bool, structure: dict) -> BenchmarkRecord:
    parts = bench.split("/")
    times = tuple(t * factor for t in ROUNDS_S)
    return BenchmarkRecord(
        name=bench,
        variant=parts[0],
        case_id=parts[1],
        mode=parts[2],
        device="cpu",
        rounds_s=times,
        median_s=sorted(times)[len(times) // 2],
        score_copies=0.0,
        structure=structure,
        contended=contended,
        state="contended" if contended else None,
    )


def structure_at(role: str, bench: str) -> dict:
    """The paged benchmark gathers from the gather merge on; the sink benchmark never changes."""
    after = list(SEPARATE_RUNS).index(role) >= list(SEPARATE_RUNS).index("gather")
    return GATHER_STRUCTURE if bench == PAGED and after else BASE_STRUCTURE


def separate_run(scenario: Scenario, role: str) -> RunRecord:
    """``perfsuite run`` at the main-line commit of ``role``, recorded in the store."""
    sha = scenario.names[role]
    position = scenario.main.index(sha) + 1
    slower = list(SEPARATE_RUNS).index(role) >= list(SEPARATE_RUNS).index("regression")
    benches = tuple(
        _record(
            bench,
            factor * (REGRESSION if slower and bench == PAGED else 1.0),
            contended,
            structure_at(role, bench),
        )
        for bench, (factor, contended) in SEPARATE_RUNS[role].items()
    )
    return RunRecord(
        uid=f"run-{role}",
        source="run",
        commit=Commit(sha=sha, branch="main", commit_time=1.7e9 + position, position=position),
        testbed=TESTBED,
        software=SOFTWARE,
        benchmarks=benches,
        recorded_at=1.8e9 + position,
    )


def gate_runs(
    base: tuple[str, int | None, str],
    head: tuple[str, int | None, str],
    verdicts: dict[str, tuple[str, float, float, float]],
    structures: dict[str, tuple[dict, dict]],
    uid: str,
    recorded_at: float,
) -> list[RunRecord]:
    """The two sides of a ``perfsuite ab --json`` gate as the store records them: ``base``/``head``
    (sha, position, branch), per benchmark its (verdict, ratio, low, high) and (base, head) structures."""
    commit = lambda c: {"sha": c[0], "branch": c[2], "position": c[1], "dirty": False}
    payload = {
        "machine": {"base_machine": {"torch": "2.13.0"}, "torch": "2.13.0"},
        "benchmarks": [
            {
                "key": bench,
                "base_blocks_s": [list(ROUNDS_S)] * 4,
                "head_blocks_s": [[t * ratio for t in ROUNDS_S]] * 4,
                "contended_pairs": [False] * 4,
                "verdict": verdict,
                "ratio": {"ratio": ratio, "low": low, "high": high, "method": "paired sequential"},
                "base_fingerprint": structures[bench][0],
                "head_fingerprint": structures[bench][1],
            }
            for bench, (verdict, ratio, low, high) in verdicts.items()
        ],
        "commits": {"base": commit(base), "head": commit(head)},
        "perfsuite_run_uid": uid,
        "recorded_at": recorded_at,
        "perfsuite_software": {side: dict(SOFTWARE.versions) for side in ("base", "head")},
    }
    return runs_from_ab_json(payload, testbed=TESTBED)


def pull_request_gate(scenario: Scenario) -> list[RunRecord]:
    """The gather branch's pull request gate (base: main before the merge): structure FAIL."""
    rename = scenario.names["rename"]
    return gate_runs(
        (rename, 2, "main"),
        (scenario.gather_tip, None, "gather"),
        {PAGED: ("no change", 1.01, 0.98, 1.04), SINK: ("no change", 1.0, 0.98, 1.02)},
        {PAGED: (BASE_STRUCTURE, GATHER_STRUCTURE), SINK: (BASE_STRUCTURE, BASE_STRUCTURE)},
        "gate-pull-request",
        1.8e9 + 2.5,
    )


def regression_gate(scenario: Scenario) -> list[RunRecord]:
    """``perfsuite ab --base-ref HEAD~1 --head-ref HEAD`` after the regression's merge."""
    gather, slow = scenario.names["gather"], scenario.names["regression"]
    return gate_runs(
        (gather, 3, "main"),
        (slow, 4, "main"),
        {PAGED: ("slower", 1.068, 1.041, 1.097), SINK: ("no change", 1.003, 0.985, 1.02)},
        {PAGED: (GATHER_STRUCTURE, GATHER_STRUCTURE), SINK: (BASE_STRUCTURE, BASE_STRUCTURE)},
        "gate-regression",
        1.8e9 + 4.5,
    )


def record_scenario(store, scenario: Scenario, through: str = "readme") -> None:
    """Record what the user ran, in order, up to the main-line commit ``through``."""
    for role in SEPARATE_RUNS:
        store.record(separate_run(scenario, role))
        if role == "gather":
            for run in pull_request_gate(scenario):
                store.record(run)
        if role == "regression":
            for run in regression_gate(scenario):
                store.record(run)
        if role == through:
            return
