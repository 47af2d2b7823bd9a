"""The dashboard as a user gets it: a throwaway git repository with its own attention function and perfsuite
installed into its virtualenv, the timed suite (``perfsuite run``) on three commits (a base, a comment-only
change, then 30 extra copies of the score matrix), then ``perfsuite dashboard``: the site's first screen names
the planted regression's commits and its structural cause, in Debian's headless chromium, with no console error
and no network request. The planted change is large and the outcome does not depend on the machine's speed
(the structural cause is counted, not timed); the contention check is off so a loaded machine is judged too."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CASE = "b1h2s64d16-fp32-causal-cpu"
ATTENTION = '''"""Plain softmax attention over the whole score matrix."""
import torch


def blocked_attention(query, key, value, *, mask, scale):
    """Softmax attention; a query that sees no key gives zeros."""
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, value)
'''
PYPROJECT = f'''[project]
name = "myattn"
version = "0.1.0"

[tool.pytest.ini_options]
perfsuite_user_variants = ["myattn.attention:blocked_attention"]
perfsuite_variants = "blocked_attention"
perfsuite_cases = "{CASE}"
perfsuite_modes = ["forward"]
'''
COPIES = (
    "    for _ in range(300):\n        scores = scores.clone()  # planted: score-sized copies\n"
)
TIMED = (
    "--benchmark-min-rounds=15",
    "--benchmark-max-time=0.05",
    "--benchmark-warmup=on",
    "--benchmark-warmup-iterations=3",
)


def sh(*args, cwd):
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="u",
        GIT_AUTHOR_EMAIL="u@example.com",
        GIT_COMMITTER_NAME="u",
        GIT_COMMITTER_EMAIL="u@example.com",
        PERFSUITE_CONTENTION_CHECK="off",
        PYTHONPATH="src",
    )
    env.pop("PERFSUITE_HISTORY_URL", None)
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


def commit(repo: Path, message: str, attention: str) -> str:
    (repo / "src" / "myattn" / "attention.py").write_text(attention)
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", message, cwd=repo)
    return sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()


def test_three_timed_commits_give_a_site_whose_first_screen_names_the_regression(tmp_path, page):
    repo = tmp_path / "repo"
    (repo / "src" / "myattn").mkdir(parents=True)
    (repo / "src" / "myattn" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / ".gitignore").write_text(
        ".venv/\n.benchmarks/\nperfsuite-results/\n__pycache__/\nsite/\n"
    )
    sh("git", "init", "-q", "-b", "main", cwd=repo)
    sh(sys.executable, "-m", "venv", "--without-pip", repo / ".venv", cwd=repo)
    venv_site = next((repo / ".venv" / "lib").glob("python*/site-packages"))
    (venv_site / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    installed = sh(
        repo / ".venv" / "bin" / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        ROOT,
        cwd=repo,
    )
    assert installed.returncode == 0, installed.stderr
    perfsuite = repo / ".venv" / "bin" / "perfsuite"
    shas = []
    for message, code in (
        ("base", ATTENTION),
        ("a comment only", ATTENTION.replace('"""Softmax', '"""Plain softmax')),
        (
            "planted: 300 copies of the scores",
            ATTENTION.replace("    if mask.masked_out", COPIES + "    if mask.masked_out", 1),
        ),
    ):
        shas.append(commit(repo, message, code))
        timed = sh(
            perfsuite, "run", *TIMED, cwd=repo
        )  # the planted commit fails the suite's copy check
        assert "perfsuite: history: recorded 1 benchmark(s)" in timed.stdout, (
            timed.stdout[-3000:] + timed.stderr
        )
    written = sh(
        perfsuite,
        "dashboard",
        "--out",
        "site",
        "--repo-url",
        "https://github.com/example/myattn",
        cwd=repo,
    )
    assert written.returncode == 0, written.stderr
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto((repo / "site" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready]", timeout=20_000)
    row = page.locator("#changes tbody tr").first
    assert row.is_visible() and row.bounding_box()["y"] < 900  # on the first screen
    text = row.inner_text()
    assert "blocked_attention" in text and "slower" in text, text
    assert shas[1][:8] in text and shas[2][:8] in text, text  # last good, first bad
    assert "copy cpu aten::clone [1x2x64x64]" in text, text
    if os.environ.get("PERFSUITE_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["PERFSUITE_SCREENSHOTS"]) / "three-commits.png"))
