"""A user's branch that adds pure-Python work to their attention, gated as a pull request is
(docs/validation.md, "A slowdown only timing can see").

Builds a throwaway user repository (``validation.user_repo.myattn_repo``) whose ``blocked_attention``
is a plain softmax attention on the smoke case (3-6 ms per call on a 2-core CPU), and a branch ``slow``
that adds ``--extra-ms`` of pure-Python work per call (a loop over Python integers, calibrated here to that
time): the profiler sees the same ops and shapes, so only timing can fail it. Then ``perfsuite ab
--base-ref main --head-ref slow --no-fail-on-structure`` runs ``--gates`` times, and once more with a
comment-only branch (``same``), and prints each verdict line. Run it with nothing else on the machine.
``--heads`` picks the branches gated; each ``--ab-option`` is added to every gate's command.

    .venv/bin/python -m validation.python_overhead --gates 3
    .venv/bin/python -m validation.python_overhead --gates 6 --heads same \
        --ab-option=--require-timing --ab-option=--min-effect=0.03
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from validation.user_repo import ATTENTION_PY, BLOCKED_ATTENTION, myattn_repo

CASE = "b2h8s256d64-fp32-causal-cpu"


def python_work(extra_ms: float) -> int:
    """Loop iterations of ``_python_work`` (below) that take ``extra_ms`` here (median of 7)."""

    def work(n: int) -> int:
        total = 0
        for i in range(n):
            total += i * i
        return total

    n, times = 10_000, []
    for _ in range(7):
        start = time.perf_counter()
        work(n)
        times.append(time.perf_counter() - start)
    per_iteration = sorted(times)[3] / n
    return max(1, round(extra_ms / 1e3 / per_iteration))


def slow_attention(iterations: int) -> str:
    """``BLOCKED_ATTENTION`` with ``iterations`` of pure-Python work per call (no torch op)."""
    return BLOCKED_ATTENTION.replace(
        '    """Softmax attention; a query that sees no key gives zeros."""\n',
        '    """Softmax attention; a query that sees no key gives zeros."""\n'
        f"    total = 0\n    for i in range({iterations}):  # bookkeeping in Python, no tensor touched\n"
        "        total += i * i\n",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=3)
    parser.add_argument("--extra-ms", type=float, default=0.3)
    parser.add_argument(
        "--heads", default="slow,same", help="branches gated, comma-separated (slow, same)"
    )
    parser.add_argument(
        "--ab-option", action="append", default=[], help="added to each perfsuite ab command"
    )
    args = parser.parse_args()
    heads = [h for h in args.heads.split(",") if h]
    if not heads or set(heads) - {"slow", "same"}:
        parser.error(f"--heads {args.heads!r}: expected slow, same or both, comma-separated")
    with tempfile.TemporaryDirectory(prefix="perfsuite-overhead-") as scratch:
        repo = myattn_repo(Path(scratch) / "repo", CASE)
        repo.commit("attention", {ATTENTION_PY: BLOCKED_ATTENTION})
        repo.install_perfsuite(".")
        iterations = python_work(args.extra_ms)
        repo.git("checkout", "-q", "-b", "slow")
        repo.commit("bookkeeping", {ATTENTION_PY: slow_attention(iterations)})
        repo.git("checkout", "-q", "main")
        repo.git("checkout", "-q", "-b", "same")
        repo.commit("comment", {ATTENTION_PY: BLOCKED_ATTENTION + "# a comment\n"})
        repo.git("checkout", "-q", "main")
        print(f"slow: {iterations} Python iterations per call (about {args.extra_ms} ms here)")
        for head in heads:
            for _ in range(args.gates):
                start = time.monotonic()
                found = repo.perfsuite(
                    "ab",
                    "--base-ref",
                    "main",
                    "--head-ref",
                    head,
                    "--no-fail-on-structure",
                    *args.ab_option,
                )
                lines = [
                    line for line in (found.stdout + found.stderr).splitlines() if line.strip()
                ]
                row = next(
                    (line for line in lines if "blocked_attention/" in line and "|" in line), ""
                )
                print(f"{head}: exit {found.returncode}, {time.monotonic() - start:.0f} s: {row}")
                print(f"    {lines[-1] if lines else ''}")


if __name__ == "__main__":
    main()
