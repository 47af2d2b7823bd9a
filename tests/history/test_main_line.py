"""History on the main line: ``history detect`` and the dashboard follow the default branch's first-parent
history (a pull request's commits recorded by its gates never sit among main's points), ``detect`` names the
last good and the first bad commit of a step, refuses options that mean nothing, and exits 2 when it judged
nothing (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess

import pytest

from history_records import make_run
from perfsuite.cli.history import commit_order
from perfsuite.cli.main import main
from perfsuite.dashboard.from_store import dashboard_from_store
from perfsuite.history import open_store

LOW = (1.0e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3)
HIGH = tuple(t * 1.4 for t in LOW)


def git_repo(folder) -> callable:
    """A git repository in ``folder`` on ``main``; returns ``commit(message) -> sha``."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=folder, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    git("init", "-q", "-b", "main")
    git.commit = lambda message: (
        git("commit", "-q", "--allow-empty", "-m", message),
        git("rev-parse", "HEAD"),
    )[1]
    return git


def test_detect_names_the_first_bad_commit_of_a_step_inside_the_baseline(
    store_url, tmp_path, monkeypatch, capsys
):
    """Seven commits, a 40% step at the fifth: with --confirm 2 the fifth is in the baseline window."""
    monkeypatch.chdir(tmp_path)
    with open_store(store_url) as store:
        for p in range(1, 8):
            store.record(make_run(f"r{p}", f"{p:x}" * 40, p, HIGH if p >= 5 else LOW))
    assert main(["history", "--store", store_url, "detect", "--measure", "time_s"]) == 1
    out = capsys.readouterr().out
    assert "last good 4444444444, first bad 5555555555, newest 7777777777" in out


@pytest.fixture(scope="module")
def branch_repo(tmp_path_factory):
    """main 1..7 and, off main 2, a pull request's commit: (folder, main's shas, the branch commit)."""
    folder = tmp_path_factory.mktemp("repo")
    git = git_repo(folder)
    main_shas = [git.commit(f"main {n}") for n in range(1, 4)]
    git("checkout", "-q", "-b", "feature", main_shas[1])
    feature = git.commit("feature")
    git("checkout", "-q", "main")
    main_shas += [git.commit(f"main {n}") for n in range(4, 8)]
    return folder, main_shas, feature


def test_branch_commits_stay_off_the_main_line(store_url, branch_repo, monkeypatch, capsys):
    """A pull request's commit (recorded by its gate, regressing, with another structure) branched off
    main; main regresses later, with an extra copy: detect and the dashboard name main's step and cause."""
    folder, main_shas, feature = branch_repo
    monkeypatch.chdir(folder)
    with open_store(store_url) as store:
        store.record(make_run("feature", feature, 3, HIGH, copies=0))
        for p, sha in enumerate(main_shas, start=1):
            store.record(make_run(f"m{p}", sha, p, HIGH if p >= 5 else LOW, copies=int(p >= 5)))
        order = commit_order(store, None, None, "dashboard")
        dashboard = dashboard_from_store(store, commit_order=order)
    assert main(["history", "--store", store_url, "detect"]) == 1
    out = capsys.readouterr().out
    assert f"last good {main_shas[3][:10]}, first bad {main_shas[4][:10]}" in out
    assert "+1 copy cpu aten::clone" in out
    assert [c.sha for c in dashboard.commits] == main_shas
    (series,) = [s for s in dashboard.series if s.measure == "time"]
    assert [(c.last_good, c.first_bad) for c in series.change_points] == [
        (main_shas[3], main_shas[4])
    ]


def test_detect_exits_2_when_it_judged_nothing(store_url, tmp_path, monkeypatch, capsys):
    """An empty store, then one point per series, then a newest point that is contended: nothing judged."""
    monkeypatch.chdir(tmp_path)
    detect = ["history", "--store", store_url, "detect", "--measure", "time_s"]
    open_store(store_url).close()  # a store with no run yet
    for uid, position, contended, series in (
        (None, 0, False, 0),
        ("r1", 1, False, 1),
        ("r2", 2, True, 1),
        ("r3", 3, True, 1),
    ):
        if uid:
            with open_store(store_url) as store:
                store.record(
                    make_run(uid, f"{position:x}" * 40, position, LOW, contended=contended)
                )
        assert main(detect) == 2
        assert f"0 of {series} series judged: nothing judged" in capsys.readouterr().out


@pytest.mark.parametrize(
    "option", [["--confirm", "0"], ["--window", "-3"], ["--k", "-5"], ["--min-effect", "-1"]]
)
def test_detect_refuses_options_that_mean_nothing(option, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["history", "detect", *option])
    assert exc.value.code == 2
    assert f"argument {option[0]}: '{option[1]}': give a finite number of at least" in (
        capsys.readouterr().err
    )
