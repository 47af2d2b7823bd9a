"""Git refs of the current repository as A/B sides: one temporary worktree per ref, removed afterwards."""

from __future__ import annotations

import contextlib
import difflib
import subprocess
import tempfile
from pathlib import Path
from collections.abc import Iterator

from perfsuite.errors import UsageError


def _git(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode:
        raise UsageError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


def ref_commits(refs: dict[str, str | None]) -> tuple[dict[str, str], list[str]]:
    """Short commit ids of the named refs (``{"base": "main", "head": "HEAD"}``), and notes for the
    user: base and head are one commit (an A/A gate), or the head ref is the checked-out commit while the
    working tree has uncommitted changes to tracked files, which a ref does not include (a base ref
    without them, beside ``--head-tree .``, is the usual way to gate them, and gets no note).

    Raises:
        UsageError: not inside a git repository, or a ref that does not resolve.
    """
    wanted = {name: ref for name, ref in refs.items() if ref}
    if not wanted:
        return {}, []
    repo = Path(_git("rev-parse", "--show-toplevel"))
    commits = {name: _resolve(name, ref, repo) for name, ref in wanted.items()}
    notes = []
    if len(set(commits.values())) == 1 and len(commits) == 2:
        notes.append(
            f"base and head are the same commit ({commits['base'][:9]}): this is an A/A gate"
        )
    if commits.get("head") == _git("rev-parse", "HEAD", cwd=repo) and _has_uncommitted(
        repo
    ):  # a base ref without the changes is what the user wants
        notes.append(
            f"--head-ref {wanted['head']} is the checked-out commit, and your uncommitted changes are not "
            "in it; commit them, or gate them as they are with --head-tree . instead of --head-ref"
        )
    return {name: commit[:9] for name, commit in commits.items()}, notes


def repository_root() -> Path:
    """The root of the git repository around the current directory; ``UsageError`` outside one."""
    return Path(_git("rev-parse", "--show-toplevel")).resolve()


def describe_tree(tree: Path) -> str:
    """``tree`` as a report names it: with the commit it is at and whether it has uncommitted changes
    to tracked files (``". (working tree at 26f940372, with uncommitted changes)"``), or as given
    outside a git repository."""
    try:
        commit = _git("rev-parse", "--short=9", "HEAD", cwd=tree)
        dirty = _has_uncommitted(tree)
    except (UsageError, OSError):
        return str(tree)
    return f"{tree} (working tree at {commit}{', with uncommitted changes' if dirty else ''})"


def _has_uncommitted(tree: Path) -> bool:
    """Uncommitted changes to tracked files (untracked files are not part of a commit either way)."""
    return bool(_git("status", "--porcelain", "--untracked-files=no", cwd=tree))


def _resolve(name: str, ref: str, repo: Path) -> str:
    """The full sha ``ref`` names in ``repo``; ``UsageError`` saying the repository has no commit
    yet, or naming the closest branches and tags (``--base-ref 'mian' ... did you mean main?``)."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=repo)
    except UsageError:
        pass
    option = f"--{name}-ref"
    try:
        _git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=repo)
    except UsageError:
        raise UsageError(
            f"{option} {ref!r}: the repository {repo} has no commit yet; commit your code first "
            "(an A/B gate times commits: git add -A && git commit)",
            option,
        ) from None
    names = _git(
        "for-each-ref",
        "--format=%(refname:short)",
        "refs/heads",
        "refs/tags",
        "refs/remotes",
        cwd=repo,
    ).split()
    close = difflib.get_close_matches(ref, names, n=3, cutoff=0.6)
    raise UsageError(
        f"{option} {ref!r}: no such commit, branch or tag in {repo}"
        + (f"; did you mean {' or '.join(close)}?" if close else ""),
        option,
    ) from None


@contextlib.contextmanager
def git_worktrees(refs: dict[str, str | None]) -> Iterator[dict[str, Path]]:
    """Check out each named ref (``{"base": "main", "head": None}``) in a detached temporary worktree
    of the repository around the current directory; yields ``{name: worktree path}`` for the refs
    given and removes the worktrees on exit, whatever happens.

    Raises:
        UsageError: not inside a git repository, or a ref that does not resolve (git's message).
    """
    wanted = {name: ref for name, ref in refs.items() if ref}
    if not wanted:
        yield {}
        return
    repo = Path(_git("rev-parse", "--show-toplevel"))
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="perfsuite-ab-") as scratch:
        try:
            for name, ref in wanted.items():
                commit = _resolve(name, ref, repo)
                path = Path(scratch) / name
                _git("worktree", "add", "--detach", str(path), commit, cwd=repo)
                made.append(path)
            yield dict(zip(wanted, made))
        finally:
            for path in made:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(path)],
                    cwd=repo,
                    capture_output=True,
                )
            subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)
