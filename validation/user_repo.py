"""A throwaway user repository: a perfsuite user's checkout, built in a temporary folder for the
end-to-end tests and for ``change_points make-history``.

``UserRepo.init(path, files)`` makes a git repository on ``main`` with the files written and a
committer of its own; ``commit`` writes more, commits everything and returns the commit's sha;
``install_perfsuite`` gives it a ``.venv`` with this checkout's perfsuite installed (non-editable,
so the shipped suite and templates are what runs) and its ``perfsuite`` console script; ``sh`` runs
a command there with the repository's environment. The virtualenv (``borrowing_venv``) has no pip
of its own: torch, pytest, pip, setuptools and the other dependencies come from this interpreter's
site-packages through a ``.pth`` file, instead of a 700 MB reinstall.

``myattn_repo`` is the user repository the demos and ``make-history`` time: a package ``src/myattn``
whose ``attention.py`` their commits write (``BLOCKED_ATTENTION``: a plain softmax attention, or a
variation of it) and perfsuite's configuration for its ``blocked_attention``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import site
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # the perfsuite installed into a repository's .venv
TIMEOUT_S = 600  # per command, unless the caller says otherwise
IDENTITY = {"user.name": "u", "user.email": "u@example.com"}  # git config of every throwaway repo

BLOCKED_ATTENTION = '''"""Plain softmax attention over the whole score matrix."""
import torch


def blocked_attention(query, key, value, *, mask, scale):
    """Softmax attention; a query that sees no key gives zeros."""
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, value)
'''
ATTENTION_PY = "src/myattn/attention.py"  # in myattn_repo: the file the commits write
MYATTN_PYPROJECT = """[project]
name = "myattn"
version = "0.1.0"

[tool.pytest.ini_options]
perfsuite_user_variants = ["myattn.attention:blocked_attention"]
perfsuite_variants = "blocked_attention"
perfsuite_cases = "{case}"
perfsuite_modes = {modes}
"""


# Building perfsuite from this checkout writes build/ and perfsuite.egg-info in it: builds of the tests running
# side by side (xdist workers, scripts/oldest_torch.sh beside the tests in .ci/run) take this lock in turn.
BUILD_LOCK = CHECKOUT / "build" / ".perfsuite-build.lock"


@contextlib.contextmanager
def checkout_build_lock():
    """Hold ``BUILD_LOCK`` (``flock``) while building or installing this checkout's perfsuite."""
    BUILD_LOCK.parent.mkdir(exist_ok=True)
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class CommandFailed(AssertionError):
    """A command in a throwaway repository exited non-zero; the message has its output."""


def borrowing_venv(path: Path) -> Path:
    """A virtualenv at ``path`` without pip of its own that borrows this interpreter's site-packages
    (a ``borrowed.pth`` listing them); returns its ``bin`` folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    venv_site = next((Path(path) / "lib").glob("python*/site-packages"))
    (venv_site / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return Path(path) / "bin"


class UserRepo:
    """A git repository at ``path``. ``env``: variables its commands get on top of ``os.environ``
    (read at each call); a value of None removes that variable."""

    def __init__(self, path: Path, env: Mapping[str, str | None] | None = None):
        self.path = Path(path)
        self.env = dict(env or {})

    @classmethod
    def init(
        cls,
        path: Path,
        files: Mapping[str, str] | None = None,
        *,
        env: Mapping[str, str | None] | None = None,
    ) -> UserRepo:
        """``git init`` on branch ``main`` at ``path`` (made if missing) with ``files`` (relative path ->
        text) written and not committed."""
        repo = cls(path, env)
        repo.path.mkdir(parents=True, exist_ok=True)
        repo.write(files or {})
        repo.git("init", "-q", "-b", "main")
        for key, value in IDENTITY.items():
            repo.git("config", key, value)
        return repo

    def write(self, files: Mapping[str, str]) -> None:
        """Each relative path's text written, its folders made."""
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def sh(
        self,
        *args: object,
        cwd: Path | None = None,
        check: bool = True,
        timeout: float | None = TIMEOUT_S,
    ) -> subprocess.CompletedProcess:
        """``args`` run in the repository (or ``cwd``), output captured as text; raises ``CommandFailed``
        with the output on a non-zero exit when ``check``."""
        env = {**os.environ, **self.env}
        result = subprocess.run(
            [str(a) for a in args],
            cwd=cwd or self.path,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={k: v for k, v in env.items() if v is not None},
        )
        if check and result.returncode != 0:
            raise CommandFailed(
                f"{args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def git(self, *args: object) -> str:
        """``git ARGS`` in the repository; its output, stripped."""
        return self.sh("git", *args).stdout.strip()

    def commit(
        self, message: str, files: Mapping[str, str] | None = None, *, allow_empty: bool = False
    ) -> str:
        """``files`` written, everything added and committed with ``message``; the commit's sha."""
        self.write(files or {})
        self.git("add", "-A")
        self.git("commit", "-q", *(["--allow-empty"] if allow_empty else []), "-m", message)
        return self.git("rev-parse", "HEAD")

    @property
    def bin(self) -> Path:
        """The ``bin`` folder of the repository's ``.venv`` (``install_perfsuite``)."""
        return self.path / ".venv" / "bin"

    def install_perfsuite(self, *editable: str) -> None:
        """A ``.venv`` in the repository (``borrowing_venv``) with this checkout's perfsuite installed,
        then each of ``editable`` (``"."``: the user's own package) installed editable."""
        borrowing_venv(self.path / ".venv")
        pip = (
            self.bin / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
        )
        with checkout_build_lock():
            self.sh(*pip, CHECKOUT)
        for folder in editable:
            self.sh(*pip, "-e", folder)

    def perfsuite(
        self, *args: object, check: bool = False, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        """``perfsuite ARGS``, the ``.venv``'s console script, in the repository (or ``cwd``)."""
        return self.sh(self.bin / "perfsuite", *args, cwd=cwd, check=check)


def myattn_repo(
    path: Path,
    case: str,
    *,
    modes: tuple[str, ...] = ("forward",),
    ignore: tuple[str, ...] = (),
    env: Mapping[str, str | None] | None = None,
) -> UserRepo:
    """``UserRepo.init`` with the package ``src/myattn`` (no ``attention.py`` yet: ``ATTENTION_PY``),
    a pyproject.toml that times its ``blocked_attention`` on ``case`` in ``modes``, and a .gitignore
    of the .venv, perfsuite's outputs and ``ignore``; nothing committed."""
    ignored = (".venv/", ".benchmarks/", "perfsuite-results/", "__pycache__/", *ignore)
    files = {
        "src/myattn/__init__.py": "",
        "pyproject.toml": MYATTN_PYPROJECT.format(case=case, modes=json.dumps(list(modes))),
        ".gitignore": "".join(f"{name}\n" for name in ignored),
    }
    return UserRepo.init(path, files, env=env)
