"""The facts of a run taken where it runs: the git commit of a folder, the testbed (hardware) and
the software versions. Nothing here imports torch at module level; ``software_versions`` and
``testbed_now`` read torch only when it is already imported (the suite has it loaded)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

from perfsuite.history.records import Commit, Software, Testbed

GIT_TIMEOUT_S = 10


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit_of(folder: Path, rev: str = "HEAD", dirty: bool | None = None) -> Commit:
    """The commit ``rev`` of the git repository holding ``folder``: sha, branch (None when detached
    or ``rev`` is not HEAD), committer time, first-parent position, first parent, subject; ``dirty``:
    tracked files differ from it (asked of git when None and ``rev`` is HEAD). ``Commit()`` outside git."""
    folder = Path(folder)
    sha = _git(folder, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if not sha:
        return Commit()
    shown = _git(folder, "show", "-s", "--format=%ct%x00%P%x00%s", sha) or ""
    parts = shown.split("\x00")
    branch = _git(folder, "symbolic-ref", "--short", "-q", "HEAD") if rev == "HEAD" else None
    count = _git(folder, "rev-list", "--first-parent", "--count", sha)
    if dirty is None:
        dirty = rev == "HEAD" and bool(
            _git(folder, "status", "--porcelain", "--untracked-files=no")
        )
    return Commit(
        sha=sha,
        branch=branch or None,
        commit_time=float(parts[0]) if parts[0].isdigit() else None,
        dirty=bool(dirty),
        position=int(count) if count and count.isdigit() else None,
        parent_sha=(parts[1].split() or [None])[0] if len(parts) > 1 else None,
        subject=parts[2] if len(parts) > 2 else None,
    )


def first_parent_order(folder: Path, rev: str = "HEAD") -> list[str]:
    """Shas of ``rev``'s first-parent chain, oldest first (for ``query.points(commit_order=...)``)."""
    listed = _git(Path(folder), "rev-list", "--first-parent", "--reverse", rev)
    return listed.split() if listed else []


# Where the default branch is looked for, in order, after ``origin/HEAD``.
DEFAULT_BRANCHES = ("main", "master", "origin/main", "origin/master")


def default_branch(folder: Path) -> str | None:
    """The default branch of the repository holding ``folder``: what ``origin/HEAD`` points at, else
    the first of ``DEFAULT_BRANCHES`` that exists, else ``HEAD``; None outside git (or with no commit)."""
    folder = Path(folder)
    remote = _git(folder, "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD")
    for name in ((remote,) if remote else ()) + DEFAULT_BRANCHES + ("HEAD",):
        if _git(folder, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"):
            return name
    return None


def main_line(folder: Path) -> tuple[str, list[str]] | None:
    """(branch, shas oldest first) of the first-parent history of ``default_branch(folder)``: the
    commits a history follows by default (a pull request's commits and A/B heads are not on it);
    None outside git."""
    branch = default_branch(folder)
    if branch is None:
        return None
    order = first_parent_order(folder, branch)
    return (branch, order) if order else None


def merged_at(folder: Path, heads: Iterable[str], line: Sequence[str]) -> dict[str, str]:
    """Each of ``heads`` (shas, e.g. a pull request gate's head) that is not on ``line`` (a main-line
    history, oldest first) -> the oldest commit of ``line`` that contains it (the commit that merged
    it); heads that no commit of ``line`` contains (not merged), or that git does not know, are left out."""
    rank = {sha: i for i, sha in enumerate(line)}
    found = {}
    for head in heads:
        if head in rank or not line:
            continue
        listed = _git(Path(folder), "rev-list", "--ancestry-path", f"{head}..{line[-1]}")
        merges = [rank[sha] for sha in (listed or "").split() if sha in rank]
        if merges:
            found[head] = line[min(merges)]
    return found


def memory_bytes() -> int | None:
    """MemTotal from ``/proc/meminfo`` (Linux), else None."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def testbed_now(machine_info: Mapping[str, Any]) -> Testbed:
    """This machine as a ``Testbed``, given the suite's ``machine_info['perfsuite']``
    (``measure.machine.torch_machine_info``: device names, threads)."""
    torch = sys.modules.get("torch")
    names = dict(machine_info.get("device_names") or {})
    count = torch.cuda.device_count() if torch is not None and "cuda" in names else 0
    return Testbed(
        device_names=names,
        device_count=count,
        cpu_model=cpu_model(),
        memory_bytes=memory_bytes(),
        num_threads=machine_info.get("num_threads"),
        host=socket.gethostname(),
    )


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def software_versions(machine_info: Mapping[str, Any] | None = None) -> dict[str, str | None]:
    """python, torch, CUDA, HIP, cuDNN, driver (from the suite's ``machine_info['perfsuite']`` when
    given), triton, transformers and perfsuite (installed distributions) as strings."""
    info = dict(machine_info or {})
    torch = sys.modules.get("torch")
    if torch is not None and "torch_version" not in info:
        info.update(
            torch_version=torch.__version__,
            cuda_version=torch.version.cuda,
            hip_version=getattr(torch.version, "hip", None),
        )
    as_text = lambda v: None if v is None else str(v)
    return {
        "python": platform.python_version(),
        "torch": as_text(info.get("torch_version")),
        "cuda": as_text(info.get("cuda_version")),
        "hip": as_text(info.get("hip_version")),
        "cudnn": as_text(info.get("cudnn_version")),
        "driver": as_text(info.get("driver_version")),
        "triton": _version("triton") or _version("pytorch-triton-rocm"),
        "transformers": _version("transformers"),
        "perfsuite": _version("perfsuite"),
    }


def software_now(machine_info: Mapping[str, Any] | None = None) -> Software:
    """``Software(software_versions(machine_info))``."""
    return Software(software_versions(machine_info))


def repository_name(folder: Path) -> str:
    """The repository's top folder (where the run's code lives), as a string."""
    top = _git(Path(folder), "rev-parse", "--show-toplevel")
    return top or str(Path(folder).resolve())


def environment_labels() -> dict[str, str]:
    """CI facts worth keeping with a run: the CI system's job URL parts, when set."""
    keys = (
        "GITHUB_RUN_ID",
        "GITHUB_JOB",
        "GITHUB_REPOSITORY",
        "CI_JOB_ID",
        "SLURM_JOB_ID",
        "SLURM_PROCID",
    )
    return {k.lower(): os.environ[k] for k in keys if os.environ.get(k)}


def saved_run_facts(machine_info: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """What the plugin adds to a saved pytest-benchmark file so the history (and a later import) knows
    the run: the testbed, the software and the commit of ``folder`` (first-parent position included)."""
    import dataclasses

    from perfsuite.history.records import COMMIT_KEY, SOFTWARE_KEY, TESTBED_KEY

    testbed = testbed_now(machine_info)
    return {
        TESTBED_KEY: dataclasses.asdict(testbed),
        SOFTWARE_KEY: software_versions(machine_info),
        COMMIT_KEY: dataclasses.asdict(commit_of(folder)),
    }
