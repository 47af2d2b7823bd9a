"""Every --benchmark-compare use is checked (test path, missing, corrupt, coverage), and partial runs are refused as baselines."""

import json

import pytest
from pytest_benchmark.storage.file import FileStorage

from perfsuite.gate.baseline import (
    INCOMPLETE_KEY,
    Incomplete,
    check_baseline_file,
    coverage_note,
    looks_like_test_path,
    resolve_baseline,
)
from perfsuite.errors import BaselineError

MACHINE = "Linux-CPython-3.11-64bit"


def bench(variant, case, mode="forward"):
    return {
        "name": f"test_benchmark[{variant}-{case}-{mode}]",
        "fullname": f"x::test_benchmark[{variant}-{case}-{mode}]",
        "extra_info": {"variant": variant, "case": case, "mode": mode},
        "stats": {},
    }


@pytest.fixture
def storage(tmp_path):
    return FileStorage(tmp_path / ".benchmarks", logger=None, default_machine_id=MACHINE)


def save(storage, name, data):
    path = storage.path / MACHINE / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


WHOLE = {"benchmarks": [bench("naive", "c1"), bench("sdpa", "c1")]}


def test_the_newest_run_is_chosen_and_a_truncated_newest_is_an_error_not_skipped(storage):
    save(storage, "0001_a.json", WHOLE)
    path, data = resolve_baseline(storage, True)
    assert path.name == "0001_a.json" and data == WHOLE
    truncated = save(storage, "0002_b.json", json.dumps(WHOLE)[:40])
    with pytest.raises(BaselineError, match=f"{truncated}: corrupt or truncated baseline"):
        resolve_baseline(storage, True)


def test_a_named_baseline_that_does_not_exist_is_an_error(storage):
    """Before: without --perfsuite-gate, a warning and exit code 0."""
    save(storage, "0001_a.json", WHOLE)
    with pytest.raises(
        BaselineError, match="no saved run matching '0007' in .*nothing to compare with"
    ):
        resolve_baseline(storage, "0007")
    assert resolve_baseline(storage, "0001")[0].name == "0001_a.json"


def test_an_empty_storage_is_an_error(storage):
    with pytest.raises(BaselineError, match="nothing to compare with"):
        resolve_baseline(storage, True)


def test_a_test_path_swallowed_as_the_value_is_named_as_such(storage, tmp_path, monkeypatch):
    """Before: with the gate, 'a corrupt or truncated baseline' naming the test file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_attention.py").write_text("")
    for value in ("suite/test_attention.py", "suite", "suite/test_attention.py::test_benchmark"):
        assert looks_like_test_path(value)
        with pytest.raises(BaselineError, match="it is a test path.*--benchmark-compare=NUM"):
            resolve_baseline(storage, value)
    assert not looks_like_test_path("0001") and not looks_like_test_path(f"{MACHINE}/0001")


def test_an_incomplete_run_is_refused_as_a_baseline_with_what_it_holds(storage):
    partial = dict(WHOLE, **{INCOMPLETE_KEY: Incomplete("interrupted (Ctrl-C)", 5, 20).to_dict()})
    path = save(storage, "0002_partial.json", partial)
    with pytest.raises(
        BaselineError,
        match=r"incomplete run \(interrupted \(Ctrl-C\): 5 of 20 benchmarks finished\)",
    ):
        resolve_baseline(storage, True)
    with pytest.raises(BaselineError, match=str(path)):
        check_baseline_file(path)


def test_a_baseline_covering_few_of_this_runs_benchmarks_is_named():
    head = ["naive/c1", "sdpa/c1", "naive/c2", "sdpa/c2", "flex/c1"]
    note = coverage_note(WHOLE, head, "0001")
    assert note.startswith(
        "baseline 0001 has 2 of this run's 5 benchmarks (few: under half); 3 are compared with nothing"
    )
    assert coverage_note(WHOLE, ["naive/c1", "sdpa/c1"], "0001") is None


def test_perfsuite_compare_refuses_a_partial_base_run_naming_it(tmp_path, capsys):
    from perfsuite.cli.main import main

    partial = tmp_path / "0002_partial.json"
    partial.write_text(
        json.dumps(
            dict(
                WHOLE,
                **{INCOMPLETE_KEY: Incomplete("interrupted (KeyboardInterrupt)", 1, 2).to_dict()},
            )
        )
    )
    whole = tmp_path / "0001_whole.json"
    whole.write_text(json.dumps(WHOLE))
    assert main(["compare", str(partial), str(whole)]) == 2
    assert (
        f"{partial}: an incomplete run (interrupted (KeyboardInterrupt): 1 of 2"
        in capsys.readouterr().err
    )


@pytest.mark.slow
def test_a_node_id_after_benchmark_compare_is_a_usage_error_not_an_internal_error(tmp_path):
    """pytest-benchmark takes the node id as the run to compare with (its value is optional); exit 4, not 3,
    also where warnings are errors (pytest-benchmark's own warning about it was an INTERNALERROR there)."""
    import subprocess
    import sys

    (tmp_path / "test_small.py").write_text("def test_a():\n    pass\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-W",
            "error",
            "--benchmark-compare",
            "test_small.py::test_a",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 4, output
    assert "INTERNALERROR" not in output and "it is a test path" in output, output
