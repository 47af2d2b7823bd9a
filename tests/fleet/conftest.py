"""A throwaway user repository for fleet tests: a git repository with its own attention function
(``killable_attention``, which kills its own process when ``FLEET_TEST_KILL=1``: a shard dying
mid-run) and a pytest configuration selecting it and sdpa on one small case, forward only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ATTENTION = '''"""Softmax attention that can kill its own process (a shard dying mid-run)."""
import os
import signal

import torch


def killable_attention(query, key, value, *, mask, scale):
    if os.environ.get("FLEET_TEST_KILL") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
    if mask.additive is not None:
        scores.add_(mask.additive)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1).nan_to_num(0.0), value)
'''
PYPROJECT = '''[tool.pytest.ini_options]
perfsuite_user_variants = ["myattn:killable_attention"]
perfsuite_variants = "killable_attention sdpa"
perfsuite_cases = "b1h2s16d8-fp32-causal-cpu"
perfsuite_modes = "forward"
perfsuite_isolate = "none"
'''
GIT_ENV = dict(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@example.com", GIT_COMMITTER_NAME="u",
               GIT_COMMITTER_EMAIL="u@example.com")


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "myattn.py").write_text(ATTENTION)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / ".gitignore").write_text("perfsuite-results/\n.perfsuite/\n__pycache__/\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**os.environ, **GIT_ENV})
    return repo


@pytest.fixture
def run_perfsuite():
    """``run_perfsuite(repo, *args, env=...)``: ``perfsuite ARGS`` in ``repo`` (``perfsuite_in``)."""
    return perfsuite_in


def perfsuite_in(repo: Path, *args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """``perfsuite ARGS`` in ``repo`` (its own functions importable there), output as text."""
    environ = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
    environ.update(PYTHONPATH=str(repo), **(env or {}))
    return subprocess.run([sys.executable, "-m", "perfsuite", *args], cwd=repo, env=environ, capture_output=True,
                          text=True, timeout=timeout)
