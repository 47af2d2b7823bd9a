"""perfsuite history on a store written through the record API: list, show (text and JSON), detect's exit
code, export, and import of pytest-benchmark files (idempotent; a file that is not a run is skipped)."""

from __future__ import annotations

import csv
import io
import json

import pytest

from history_records import make_run
from perfsuite.cli.main import main
from perfsuite.history import open_store
from validation.user_repo import UserRepo

BENCH = "naive/b2h4s64d32-fp32-causal-cpu/forward"


def _series(store_url, last_times, copies_at=None):
    with open_store(store_url) as store:
        for position in range(1, 9):
            times = (1.0e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3) if position <= 6 else last_times
            copies = 1 if copies_at and position >= copies_at else 0
            store.record(
                make_run(
                    f"r{position}",
                    f"{position:x}" * 40,
                    position,
                    tuple(t * (1 + 0.003 * (position % 3)) for t in times),
                    copies=copies,
                )
            )


def test_detect_exits_1_on_a_confirmed_regression_and_names_its_cause(store_url, capsys):
    _series(store_url, (1.5e-3, 1.52e-3, 1.49e-3, 1.51e-3, 1.5e-3), copies_at=7)
    assert main(["history", "--store", store_url, "detect"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "+1 copy cpu aten::clone [2x4x64x64]" in out
    assert "last good 6666666666, first bad 7777777777, newest 8888888888" in out
    assert main(["history", "--store", store_url, "show", BENCH]) == 0
    shown = capsys.readouterr().out
    assert ">> 7777777777" in shown and "6666666666 -> 7777777777: x1.5" in shown


def test_detect_exits_0_on_identical_code(store_url, capsys):
    _series(store_url, (1.0e-3, 1.01e-3, 0.99e-3, 1.02e-3, 0.98e-3))
    assert main(["history", "--store", store_url, "detect"]) == 0
    assert "0 confirmed regression(s)" in capsys.readouterr().out
    assert main(["history", "--store", store_url, "show", BENCH, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)[0]
    assert len(document["points"]) == 8 and document["change_points"] == []


def test_list_and_export(store_url, capsys):
    _series(store_url, (1.0e-3,) * 5)
    assert main(["history", "--store", store_url, "list", "--measure", "time_s"]) == 0
    assert BENCH in capsys.readouterr().out
    assert main(["history", "--store", store_url, "export", "--measure", "time_s"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 8 and len(rows[0]["values"].split()) == 5


def test_the_store_may_follow_the_action_as_the_dashboard_takes_it(store_url, tmp_path, capsys):
    """A new user wrote `history show --store URL SERIES` (argparse refused it: 'unrecognized
    arguments'); after the action it also overrides one given before it."""
    _series(store_url, (1.0e-3,) * 5)
    elsewhere = str(tmp_path / "not-made.sqlite")
    assert main(["history", "show", "--store", store_url, BENCH]) == 0
    assert BENCH in capsys.readouterr().out
    assert main(["history", "--store", elsewhere, "list", "--store", store_url]) == 0
    assert BENCH in capsys.readouterr().out
    assert main(["history", "--store", elsewhere, "list"]) == 2
    assert "no history store yet" in capsys.readouterr().err


def test_show_names_the_known_benchmarks_for_an_unknown_one(store_url, capsys):
    _series(store_url, (1.0e-3,) * 5)
    assert main(["history", "--store", store_url, "show", "nothing-like-it"]) == 2
    assert BENCH in capsys.readouterr().err


def test_import_is_idempotent_and_skips_files_that_are_not_runs(tmp_path, capsys):
    saved = {
        "datetime": "2026-01-01T00:00:00",
        "commit_info": {
            "id": "a" * 40,
            "dirty": False,
            "branch": "main",
            "time": "2026-01-01T00:00:00+00:00",
        },
        "machine_info": {
            "node": "n",
            "cpu": {"brand_raw": "cpu"},
            "python_version": "3.11.7",
            "perfsuite": {
                "device_names": {"cpu": "x86_64"},
                "num_threads": 2,
                "torch_version": "2.13.0",
            },
        },
        "benchmarks": [
            {
                "fullname": "t[x]",
                "stats": {"median": 1e-3, "data": [1e-3, 1.1e-3]},
                "extra_info": {
                    "variant": "naive",
                    "case": "c-cpu",
                    "mode": "forward",
                    "case_fields": {"device": "cpu"},
                    "flop": 10,
                    "bytes_read": 4,
                    "bytes_written": 4,
                    "score_copies_per_step": 1,
                },
            }
        ],
    }
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "0001_run.json").write_text(json.dumps(saved))
    (tmp_path / "runs" / "notes.json").write_text("[1, 2]")
    store = str(tmp_path / "h.sqlite")
    # a skipped file is a run not recorded: exit 2, what was recorded stays
    assert main(["history", "--store", store, "import", str(tmp_path / "runs")]) == 2
    assert "1 run(s) added, 0 already in the store, 1 file(s) skipped" in capsys.readouterr().out
    (tmp_path / "runs" / "notes.json").unlink()
    assert main(["history", "--store", store, "import", str(tmp_path / "runs")]) == 0
    assert "0 run(s) added, 1 already in the store" in capsys.readouterr().out
    with open_store(store) as opened:
        (point,) = opened.points(opened.list_series(measure="time_s")[0].key)
        assert point.values == (1e-3, 1.1e-3) and point.sha == "a" * 40


def test_a_store_that_is_not_one_is_an_error_naming_it(tmp_path, capsys):
    target = tmp_path / "x.txt"
    target.write_text("hello")
    assert main(["history", "--store", str(target), "list"]) == 2
    assert f"{target}: not a perfsuite history store" in capsys.readouterr().err


def test_record_takes_the_newest_saved_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    for number in (1, 2):
        (saved / f"000{number}_run.json").write_text(
            json.dumps(
                {
                    "datetime": f"2026-01-0{number}T00:00:00",
                    "commit_info": {"id": f"{number}" * 40},
                    "machine_info": {"node": "n"},
                    "benchmarks": [{"fullname": "t[x]", "stats": {"median": 1e-3}}],
                }
            )
        )
    store = str(tmp_path / "h.sqlite")
    assert main(["history", "--store", store, "record"]) == 0
    assert "1 run(s) added" in capsys.readouterr().out
    with open_store(store) as opened:
        assert [r["commit_sha"] for r in opened.runs()] == ["2" * 40]


def test_the_default_branch_first_parent_line_leaves_a_sibling_branch_out(
    tmp_path, monkeypatch, capsys
):
    """By default (and with --rev main) only main's first-parent commits, in order; --branch reads the runs
    recorded on a branch in their stored positions (the sibling's commit among them); a bad --rev exits 2."""
    repo = UserRepo.init(tmp_path)
    shas = [repo.commit(f"main {n}", allow_empty=True) for n in range(3)]
    repo.git("checkout", "-q", "-b", "feature", shas[0])
    sibling = repo.commit("feature", allow_empty=True)
    store_url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    with open_store(store_url) as store:
        for uid, sha, position in (
            ("a", shas[0], 1),
            ("b", shas[1], 2),
            ("f", sibling, 2),
            ("c", shas[2], 3),
        ):
            store.record(make_run(uid, sha, position))
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--rev", "main"]):
        assert main(["history", "--store", store_url, "show", BENCH, "--json", *extra]) == 0
        assert [p["sha"] for p in json.loads(capsys.readouterr().out)[0]["points"]] == shas
    assert main(["history", "--store", store_url, "show", BENCH, "--json", "--branch", "main"]) == 0
    assert sibling in [p["sha"] for p in json.loads(capsys.readouterr().out)[0]["points"]]
    assert main(["history", "--store", store_url, "show", BENCH, "--rev", "nosuch"]) == 2
    assert "--rev 'nosuch': not a revision" in capsys.readouterr().err


def test_a_run_of_uncommitted_changes_is_said_so_when_recorded_and_not_counted_by_list(
    store_url, capsys, tmp_path
):
    """A new user's dirty run was recorded like a clean one and ``history list`` counted it as a 7th point
    of 6 commits (and drew its value into the sparkline)."""
    from perfsuite.history.recording import record_runs

    _series(store_url, (1.0e-3,) * 5)
    dirty = make_run("r9", "8" * 40, 8, (5.0e-3,) * 5, dirty=True)
    line = record_runs([dirty], url=store_url, root=tmp_path).line()
    assert "from a tree with uncommitted changes: shown, never used" in line, line
    assert main(["history", "--store", store_url, "list", "--measure", "time_s"]) == 0
    out = capsys.readouterr().out
    assert "8 point(s)" in out and "(1 from uncommitted trees, not counted)" in out, out


def test_the_recorded_line_counts_runs_apart_from_benchmarks(store_url, tmp_path):
    """A new user's 2-benchmark gate said "recorded 4 benchmark(s)": its base and head runs, summed."""
    from perfsuite.history.recording import record_runs

    names = ("naive/b2h4s64d32-fp32-causal-cpu/forward", "sdpa/b2h4s64d32-fp32-causal-cpu/forward")
    base, head = (
        make_run(uid, c * 40, i, benchmarks=names) for i, (uid, c) in enumerate(("ab", "cd"))
    )
    assert (
        "recorded 2 runs of 2 benchmark(s) each in"
        in record_runs([base, head], url=store_url).line()
    )
    single = make_run("ef", "e" * 40, 3, benchmarks=names[:1])
    assert "recorded 1 benchmark(s) in" in record_runs([single], url=store_url).line()
    assert "already in" in record_runs([single], url=store_url).line()


@pytest.mark.parametrize(
    ("benchmarks", "said"),
    [
        ([{"name": 1}], "benchmarks[0]: name 1; allowed: a non-empty string"),
        ([{"name": "t"}], "benchmarks[0] (t): no timing"),
        ([{"name": "t", "stats": {"median": "fast"}}], "benchmarks[0] (t): no timing"),
        (["t"], "benchmarks[0] is str, not a benchmark object"),
    ],
)
def test_a_file_whose_benchmarks_are_not_pytest_benchmark_entries_is_refused(
    tmp_path, capsys, benchmarks, said
):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    store = f"sqlite:///{tmp_path / 'h.sqlite'}"
    main(["history", "--store", store, "import", str(path)])
    err = capsys.readouterr().err
    assert said in err, err
    with open_store(store) as opened:
        assert opened.runs() == []
