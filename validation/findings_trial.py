"""A new user's history on a loaded machine: what ``perfsuite history detect`` and the dashboard name.

A throwaway serving repository (``validation.user_repo.myattn_repo``) with seven main-line commits:
initial; a harmless rename merged; a branch that gathers every page into one contiguous cache merged
(a structural change: +2 ``aten::cat``); a docs commit; a branch that adds pure-Python per-page
accounting merged (a timing regression with identical ops and shapes); a README commit; a tidy commit.
Each main commit is timed once by ``perfsuite run`` (recorded in the repository's store); each branch
is gated before its merge (``perfsuite ab --base-ref main --head-ref HEAD``, docs/how-to/gate-a-pull-request.md)
and each merge after it (``perfsuite ab --base-ref HEAD~1 --head-ref HEAD``, docs/how-to/history.md); a CPU
hog (``yes``) runs during the first two commits and is stopped by its pid. Then, in the repository:
``perfsuite history detect`` and ``perfsuite dashboard --out site``.

    python -m validation.findings_trial /tmp/trial/serving       # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from validation.user_repo import ATTENTION_PY, myattn_repo

CASE = "b1h2s64d16-fp32-causal-cpu"

BASE = '''"""Paged attention for serving."""
import torch

{extra}

def {inner}(query, key, value, mask, scale):
{gather}    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, value)


def blocked_attention(query, key, value, *, mask, scale):
    """Softmax attention over the pages of each sequence."""
{book}    return {inner}(query, key, value, mask, scale)
'''
GATHER = (
    "    pages = 16\n"
    "    key = torch.cat([key[:, :, i : i + pages] for i in range(0, key.shape[2], pages)], dim=2)"
    "  # every page into one contiguous cache\n"
    "    value = torch.cat([value[:, :, i : i + pages] for i in range(0, value.shape[2], pages)], dim=2)\n"
)
BOOKKEEPING = '''def _page_bookkeeping(pages):
    """Per-page accounting in pure Python."""
    total = 0
    for page in range(pages):
        total += (page * 2654435761) % 97
    return total
'''
BOOK_CALL = "    _page_bookkeeping(1500)  # per-page accounting: pure Python, no tensor op\n"

state = {"extra": "", "inner": "_attend", "gather": "", "book": ""}


def source() -> str:
    return BASE.format(**state)


def log(text: str) -> None:
    print(text, flush=True)


def sh(repo, *args, **kw):
    return repo.sh(*args, check=False, timeout=None, **kw)


def run(repo, label: str) -> None:
    done = sh(
        repo,
        sys.executable,
        "-m",
        "perfsuite",
        "run",
        "--benchmark-min-rounds=15",
        "--benchmark-max-time=0.2",
        "-q",
    )
    lines = [
        t for t in done.stdout.splitlines() if "perfsuite: history" in t or "contended" in t.lower()
    ]
    log(f"run {label}: exit {done.returncode}: {' | '.join(lines)[:400] or done.stdout[-400:]}")


def gate(repo, base: str, head: str, label: str) -> None:
    done = sh(repo, sys.executable, "-m", "perfsuite", "ab", "--base-ref", base, "--head-ref", head)
    verdicts = [
        t
        for t in done.stdout.splitlines()
        if t.startswith(("- ", "**", "FAIL", "PASS")) or "structure" in t
    ]
    log(f"gate {label} ({base} vs {head}): exit {done.returncode}: " + " / ".join(verdicts)[:900])
    if done.returncode not in (0, 1):
        log(done.stdout[-1500:] + done.stderr[-1500:])


def merge(repo, branch: str, message: str, change) -> str:
    repo.git("checkout", "-q", "-b", branch)
    change()
    tip = repo.commit(f"{branch}: {message}", {ATTENTION_PY: source()})
    gate(repo, "main", "HEAD", f"pull request {branch}")
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "-m", f"Merge {branch}: {message}", branch)
    return tip


def trial(root: Path) -> dict[str, str]:
    """Build and time the repository at ``root``; returns each role's commit sha."""
    repo = myattn_repo(
        root,
        CASE,
        env={"PYTHONPATH": os.pathsep.join(p for p in ("src", os.environ.get("PYTHONPATH")) if p)},
    )
    hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    log(f"hog pid {hog.pid}")
    try:
        shas = {}
        shas["initial"] = repo.commit("initial", {ATTENTION_PY: source()})
        run(repo, "initial (hog running)")
        shas["rename_tip"] = merge(
            repo, "rename", "a harmless rename", lambda: state.update(inner="_attention_pages")
        )
        shas["rename"] = repo.git("rev-parse", "HEAD")
        run(repo, "rename merge (hog running)")
        hog.send_signal(signal.SIGTERM)
        hog.wait()
        log("hog killed")
        shas["gather_tip"] = merge(
            repo, "gather", "one contiguous cache", lambda: state.update(gather=GATHER)
        )
        shas["gather"] = repo.git("rev-parse", "HEAD")
        run(repo, "gather merge")
        gate(repo, "HEAD~1", "HEAD", "after the gather merge")
        shas["docs"] = repo.commit("docs: serving notes", {"NOTES.md": "serving notes\n"})
        run(repo, "docs")
        shas["slow_tip"] = merge(
            repo,
            "per-page",
            "per-page accounting",
            lambda: state.update(extra=BOOKKEEPING, book=BOOK_CALL),
        )
        shas["regression"] = repo.git("rev-parse", "HEAD")
        run(repo, "regression merge")
        gate(repo, "HEAD~1", "HEAD", "after the regression merge")
        shas["readme"] = repo.commit("README", {"README.md": "# serving\n"})
        run(repo, "README")
        shas["tidy"] = repo.commit("tidy comments", {"CHANGES.md": "tidy\n"})
        run(repo, "tidy")
    finally:
        if hog.poll() is None:
            hog.send_signal(signal.SIGTERM)
            hog.wait()
    return shas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repo", type=Path, help="a folder that does not exist yet")
    args = parser.parse_args(argv)
    for role, sha in trial(args.repo).items():
        log(f"{role}: {sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
