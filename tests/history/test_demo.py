"""The history end to end, as a user lives it: a throwaway git repository with its own attention
package and perfsuite installed into its virtualenv; the timed suite (``perfsuite run``) on three
commits (a base, a comment-only change, then an extra copy of the score matrix 1000 times over);
``perfsuite history show`` names the planted regression's commit with its structural cause, and
``perfsuite history detect`` exits 1 on it and 0 on identical code.

The machine may be loaded (identical code was timed 4x and 14x slower here under other jobs' load), so
the planted regression is very large (1000 score-sized copies per forward, tens of times slower),
detect's --min-effect wide (5: a 6x step), and the contention check and speed reference stay on: a time
point they flag is shown and not judged, while the score copies are counted exactly, so detect exits 1 at the
planted commit either way. Exit codes on recorded timings, both engines: test_cli_history.py. The detector's
accuracy on realistic steps is measured by validation/change_points.py, not here."""

from __future__ import annotations

import json
import os
import re
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
    "    for _ in range(1000):\n        scores = scores.clone()  # planted: score-sized copies\n"
)
TIMED = ("--benchmark-min-rounds=15", "--benchmark-max-time=0.05", "--benchmark-warmup=off")
BENCH = f"blocked_attention/{CASE}/forward"


def sh(*args, cwd, check=True):
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="u",
        GIT_AUTHOR_EMAIL="u@example.com",
        GIT_COMMITTER_NAME="u",
        GIT_COMMITTER_EMAIL="u@example.com",
        PYTHONPATH="src",
    )
    env.pop("PERFSUITE_HISTORY_URL", None)
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )
    if check:
        assert result.returncode == 0, (
            f"{args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


def commit(repo: Path, message: str, attention: str) -> str:
    (repo / "src" / "myattn" / "attention.py").write_text(attention)
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", message, cwd=repo)
    return sh("git", "rev-parse", "HEAD", cwd=repo).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("historyrepo")
    (repo / "src" / "myattn").mkdir(parents=True)
    (repo / "src" / "myattn" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / ".gitignore").write_text(".venv/\n.benchmarks/\nperfsuite-results/\n__pycache__/\n")
    sh("git", "init", "-q", "-b", "main", cwd=repo)
    sh(sys.executable, "-m", "venv", "--without-pip", repo / ".venv", cwd=repo)
    venv_site = next((repo / ".venv" / "lib").glob("python*/site-packages"))
    (venv_site / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    sh(
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
    return repo


def perfsuite(repo, *args, check=False):
    return sh(repo / ".venv" / "bin" / "perfsuite", *args, cwd=repo, check=check)


def test_three_commits_show_three_points_and_the_regression_with_its_cause(
    repo, new_postgresql_url
):
    shas = [commit(repo, "base", ATTENTION)]
    timed = perfsuite(repo, "run", *TIMED, check=True)
    added = re.search(
        r"perfsuite: history: recorded 1 benchmark\(s\) in (\S+) \(([\d.]+) s\)", timed.stdout
    )
    assert added, timed.stdout[-2000:]
    assert Path(added.group(1)) == repo / ".perfsuite" / "history.sqlite"
    assert float(added.group(2)) < 1.0  # the store adds under a second, after the timed windows
    assert sh("git", "status", "--porcelain", cwd=repo).stdout == ""  # the store is ignored by git

    # a store that cannot be written: a warning, the run passes and its files are saved; the file is untouched
    notes = repo.parent / "notes.txt"
    notes.write_text("not a store\n")
    saved_before = len(list((repo / ".benchmarks").rglob("*.json")))
    warned = sh(
        repo / ".venv" / "bin" / "perfsuite",
        "run",
        *TIMED,
        "--perfsuite-history-url",
        notes,
        cwd=repo,
    )
    assert "perfsuite: warning: the run was not recorded in the history store" in warned.stdout
    assert f"{notes}: not a perfsuite history store" in warned.stdout
    assert len(list((repo / ".benchmarks").rglob("*.json"))) == saved_before + 1
    assert notes.read_text() == "not a store\n"

    shas.append(commit(repo, "a comment only", ATTENTION.replace('"""Softmax', '"""Plain softmax')))
    perfsuite(repo, "run", *TIMED, check=True)
    identical = perfsuite(repo, "history", "detect", "--confirm", "1", "--min-effect", "5")
    assert identical.returncode == 0, identical.stdout + identical.stderr

    shas.append(
        commit(
            repo,
            "planted: 1000 copies of the scores",
            ATTENTION.replace("    if mask.masked_out", COPIES + "    if mask.masked_out", 1),
        )
    )
    failed = perfsuite(
        repo, "run", *TIMED
    )  # the suite's copy check fails the run; it is recorded all the same
    assert (
        failed.returncode == 1 and "perfsuite: history: recorded 1 benchmark(s)" in failed.stdout
    ), failed.stdout

    shown = perfsuite(repo, "history", "show", BENCH, "--json", check=True)
    document = json.loads(shown.stdout)
    assert len(document) == 1
    points = document[0]["points"]
    assert [p["sha"] for p in points] == shas  # three points, in commit order
    changes = document[0]["change_points"]
    at_regression = [c for c in changes if c["first_bad"] == shas[2]]
    usable = [i for i, p in enumerate(points) if not p["contended"]]
    text = perfsuite(repo, "history", "show", BENCH, check=True).stdout
    if 2 in usable and usable[0] < 2:  # the regression and a point before it were timed quietly
        assert (
            at_regression
            and at_regression[0]["last_good"] == shas[usable[-2]]
            and at_regression[0]["worse"]
        ), changes
        assert any(
            "copy cpu aten::clone [1x2x64x64]" in line for line in at_regression[0]["structure"]
        ), at_regression
        assert at_regression[0]["structure_adds_work"]
        assert (
            f"{shas[usable[-2]][:10]} -> {shas[2][:10]}" in text and "copy cpu aten::clone" in text
        ), text
    else:  # a contended point is shown, marked and not used: no change point can rest on it
        assert not at_regression and "(contended: shown, not used)" in text, text

    regressed = perfsuite(repo, "history", "detect", "--confirm", "1", "--min-effect", "5")
    # the copies are counted exactly: the newest commit is a regression whatever the timing did (a time
    # point may be contended or the machine's speed may have moved: those say "not judged")
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "score_copies: the newest 1 point(s) (1000 against 0)" in regressed.stdout, (
        regressed.stdout
    )
    assert "copy cpu aten::clone" in regressed.stdout

    again = perfsuite(
        repo, "history", "import", ".benchmarks", check=True
    )  # the plugin recorded them already
    assert "1 run(s) added, 3 already in the store" in again.stdout, (
        again.stdout
    )  # the run the broken store missed

    # perfsuite ab records both sides, each under its own commit; its --json file imports as nothing new
    ab = perfsuite(
        repo,
        "ab",
        "--base-ref",
        shas[1],
        "--head-ref",
        shas[2],
        "--cases",
        CASE,
        "--blocks",
        "2",
        "--rounds",
        "1",
        "--fail-on-structure",
        "--json",
        "ab.json",
    )
    assert ab.returncode == 1 and "perfsuite: history: recorded 2 benchmark(s)" in ab.stderr, (
        ab.stdout + ab.stderr
    )
    sources = perfsuite(repo, "history", "show", BENCH, "--json", check=True)
    runs_by_commit = {p["sha"]: len(p["run_uids"]) for p in json.loads(sources.stdout)[0]["points"]}
    assert runs_by_commit == {shas[0]: 2, shas[1]: 2, shas[2]: 2}, runs_by_commit
    again = perfsuite(repo, "history", "import", "ab.json", check=True)
    assert "0 run(s) added, 2 already in the store" in again.stdout, again.stdout

    # the same history on a real PostgreSQL server: the saved runs imported, the same points and change points
    on_sqlite = json.loads(perfsuite(repo, "history", "show", BENCH, "--json", check=True).stdout)
    detected = perfsuite(repo, "history", "detect", "--confirm", "1", "--min-effect", "5")

    url = new_postgresql_url()
    perfsuite(repo, "history", "--store", url, "import", ".benchmarks", "ab.json", check=True)
    on_postgresql = json.loads(
        perfsuite(repo, "history", "--store", url, "show", BENCH, "--json", check=True).stdout
    )
    assert [p["sha"] for p in on_postgresql[0]["points"]] == shas
    assert on_postgresql[0]["change_points"] == on_sqlite[0]["change_points"]
    assert [sorted(p["values"]) for p in on_postgresql[0]["points"]] == [
        sorted(p["values"]) for p in on_sqlite[0]["points"]
    ]
    again_detected = perfsuite(
        repo, "history", "--store", url, "detect", "--confirm", "1", "--min-effect", "5"
    )
    assert again_detected.returncode == detected.returncode, again_detected.stdout
