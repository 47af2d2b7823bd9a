"""Git refs of the current repository as A/B sides: one temporary worktree per ref, removed afterwards."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from perfsuite.errors import UsageError


def _git(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode:
        raise UsageError(f"git {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip()


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
                commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}", cwd=repo)
                path = Path(scratch) / name
                _git("worktree", "add", "--detach", str(path), commit, cwd=repo)
                made.append(path)
            yield dict(zip(wanted, made))
        finally:
            for path in made:
                subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True)
            subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)
