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
import re
from pathlib import Path

import pytest

from validation.user_repo import ATTENTION_PY, BLOCKED_ATTENTION, myattn_repo

pytestmark = pytest.mark.slow

CASE = "b1h2s64d16-fp32-causal-cpu"
COPIES = (
    "    for _ in range(1000):\n        scores = scores.clone()  # planted: score-sized copies\n"
)
TIMED = ("--benchmark-min-rounds=15", "--benchmark-max-time=0.05", "--benchmark-warmup=off")
BENCH = f"blocked_attention/{CASE}/forward"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = myattn_repo(
        tmp_path_factory.mktemp("historyrepo"),
        CASE,
        env={"PYTHONPATH": "src", "PERFSUITE_HISTORY_URL": None},
    )
    repo.install_perfsuite()
    return repo


def test_three_commits_show_three_points_and_the_regression_with_its_cause(
    repo, new_postgresql_url
):
    shas = [repo.commit("base", {ATTENTION_PY: BLOCKED_ATTENTION})]
    timed = repo.perfsuite("run", *TIMED, check=True)
    added = re.search(
        r"perfsuite: history: recorded 1 benchmark\(s\) in (\S+) \(([\d.]+) s\)", timed.stdout
    )
    assert added, timed.stdout[-2000:]
    assert Path(added.group(1)) == repo.path / ".perfsuite" / "history.sqlite"
    assert float(added.group(2)) < 1.0  # the store adds under a second, after the timed windows
    assert repo.git("status", "--porcelain") == ""  # the store is ignored by git

    # a store that cannot be written: a warning, the run passes and its files are saved; the file is untouched
    notes = repo.path.parent / "notes.txt"
    notes.write_text("not a store\n")
    saved_before = len(list((repo.path / ".benchmarks").rglob("*.json")))
    warned = repo.perfsuite("run", *TIMED, "--perfsuite-history-url", notes, check=True)
    assert "perfsuite: warning: the run was not recorded in the history store" in warned.stdout
    assert f"{notes}: not a perfsuite history store" in warned.stdout
    assert len(list((repo.path / ".benchmarks").rglob("*.json"))) == saved_before + 1
    assert notes.read_text() == "not a store\n"

    shas.append(
        repo.commit(
            "a comment only",
            {ATTENTION_PY: BLOCKED_ATTENTION.replace('"""Softmax', '"""Plain softmax')},
        )
    )
    repo.perfsuite("run", *TIMED, check=True)
    identical = repo.perfsuite("history", "detect", "--confirm", "1", "--min-effect", "5")
    assert identical.returncode == 0, identical.stdout + identical.stderr

    shas.append(
        repo.commit(
            "planted: 1000 copies of the scores",
            {
                ATTENTION_PY: BLOCKED_ATTENTION.replace(
                    "    if mask.masked_out", COPIES + "    if mask.masked_out", 1
                )
            },
        )
    )
    failed = repo.perfsuite(
        "run", *TIMED
    )  # the suite's copy check fails the run; it is recorded all the same
    assert (
        failed.returncode == 1 and "perfsuite: history: recorded 1 benchmark(s)" in failed.stdout
    ), failed.stdout

    shown = repo.perfsuite("history", "show", BENCH, "--json", check=True)
    document = json.loads(shown.stdout)
    assert len(document) == 1
    points = document[0]["points"]
    assert [p["sha"] for p in points] == shas  # three points, in commit order
    changes = document[0]["change_points"]
    at_regression = [c for c in changes if c["first_bad"] == shas[2]]
    usable = [i for i, p in enumerate(points) if not p["contended"]]
    text = repo.perfsuite("history", "show", BENCH, check=True).stdout
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

    regressed = repo.perfsuite("history", "detect", "--confirm", "1", "--min-effect", "5")
    # the copies are counted exactly: the newest commit is a regression whatever the timing did (a time
    # point may be contended or the machine's speed may have moved: those say "not judged")
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "score_copies: 0 -> 1000 score copies: the newest point" in regressed.stdout, (
        regressed.stdout
    )
    assert "copy cpu aten::clone" in regressed.stdout

    again = repo.perfsuite(
        "history", "import", ".benchmarks", check=True
    )  # the plugin recorded them already
    assert "1 run(s) added, 3 already in the store" in again.stdout, (
        again.stdout
    )  # the run the broken store missed

    # perfsuite ab records both sides, each under its own commit; its --json file imports as nothing new
    # (the timed blocks are what is recorded: one worker per side, a few short blocks, not structure only)
    ab = repo.perfsuite(
        "ab",
        "--base-ref",
        shas[1],
        "--head-ref",
        shas[2],
        "--cases",
        CASE,
        "--workers-per-side",
        "1",
        "--blocks",
        "2",
        "--rounds",
        "1",
        "--budget-s",
        "1",
        "--fail-on-structure",
        "--json",
        "ab.json",
    )
    assert ab.returncode == 1 and "history: recorded 2 runs of 1 benchmark(s) each" in ab.stderr, (
        ab.stdout + ab.stderr
    )
    sources = repo.perfsuite("history", "show", BENCH, "--json", check=True)
    runs_by_commit = {p["sha"]: len(p["run_uids"]) for p in json.loads(sources.stdout)[0]["points"]}
    assert runs_by_commit == {shas[0]: 2, shas[1]: 2, shas[2]: 2}, runs_by_commit
    again = repo.perfsuite("history", "import", "ab.json", check=True)
    assert "0 run(s) added, 2 already in the store" in again.stdout, again.stdout

    # the same history on a real PostgreSQL server: the saved runs imported, the same points and change points
    on_sqlite = json.loads(repo.perfsuite("history", "show", BENCH, "--json", check=True).stdout)
    detected = repo.perfsuite("history", "detect", "--confirm", "1", "--min-effect", "5")

    url = new_postgresql_url()
    repo.perfsuite("history", "--store", url, "import", ".benchmarks", "ab.json", check=True)
    on_postgresql = json.loads(
        repo.perfsuite("history", "--store", url, "show", BENCH, "--json", check=True).stdout
    )
    assert [p["sha"] for p in on_postgresql[0]["points"]] == shas
    assert on_postgresql[0]["change_points"] == on_sqlite[0]["change_points"]
    assert [sorted(p["values"]) for p in on_postgresql[0]["points"]] == [
        sorted(p["values"]) for p in on_sqlite[0]["points"]
    ]
    again_detected = repo.perfsuite(
        "history", "--store", url, "detect", "--confirm", "1", "--min-effect", "5"
    )
    assert again_detected.returncode == detected.returncode, again_detected.stdout
