"""Files on disk never lie, and output folders are checked before the first test."""

import json
import os
from pathlib import Path

import pytest

from perfsuite.storage import unwritable_directory_reason

SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()
ARGS = (
    "--perfsuite-cases=b1h2s16d8-fp32-causal-cpu",
    "--perfsuite-variants=sdpa",
    "--perfsuite-modes=forward",
    "--perfsuite-results=out",
    "--benchmark-max-time=0.01",
    "--benchmark-min-rounds=2",
    "-p",
    "no:randomly",
)

pytestmark = pytest.mark.slow


def test_folder_checks_name_a_file_in_the_way_and_an_unwritable_folder(tmp_path):
    (tmp_path / "f").write_text("")
    assert (
        unwritable_directory_reason(tmp_path / "f") == f"{tmp_path / 'f'} is a file, not a folder"
    )
    assert (
        unwritable_directory_reason(tmp_path / "f" / "sub")
        == f"{tmp_path / 'f'} (a parent of {tmp_path / 'f' / 'sub'}) is a file, not a folder"
    )
    assert unwritable_directory_reason(tmp_path / "new" / "deeper") is None
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert "is not writable" in unwritable_directory_reason(locked / "x")


@pytest.mark.parametrize("where", ["benchmarks", "results"])
def test_an_output_folder_that_is_a_file_is_one_usage_error_before_any_test(pytester, where):
    """Before: a .benchmarks file was found after the whole timed run (an 80-line traceback, no baseline);
    a results path whose parent is a file made every test error."""
    pytester.makepyfile(test_attention=SUITE)
    if where == "benchmarks":
        Path(pytester.path, ".benchmarks").write_text("not a folder")
        args = ("--benchmark-autosave",)
        expected = ".benchmarks is a file, not a folder"
    else:
        Path(pytester.path, "out").write_text("not a folder")
        args = ("--perfsuite-results=out/run",)
        expected = "--perfsuite-results"
    result = pytester.runpytest_subprocess(*ARGS, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert expected in err and "is a file, not a folder" in err and "Traceback" not in err
    assert "passed" not in result.stdout.str()


def test_run_json_names_the_running_check_test_and_an_older_run_is_superseded_at_start(pytester):
    """Before: run.json named the last benchmark as running, so a death in a check test named the wrong test;
    a run killed before its first benchmark left the previous run.json saying complete."""
    pytester.makepyfile(test_attention=SUITE)
    assert pytester.runpytest_subprocess(*ARGS).ret == pytest.ExitCode.OK
    run_json = Path(pytester.path, "out", "run.json")
    assert json.loads(run_json.read_text())["complete"] is True
    pytester.makeconftest("""
import os, json, pathlib

def pytest_runtest_call(item):
    if item.originalname == "test_score_copies_per_step":
        run = json.loads(pathlib.Path("out", "run.json").read_text())
        pathlib.Path("seen.json").write_text(json.dumps(run))
        os._exit(9)  # the process dies inside a check test
""")
    died = pytester.runpytest_subprocess(*ARGS)
    assert died.ret == 9
    seen = json.loads(Path(pytester.path, "seen.json").read_text())
    assert seen["complete"] is False and "test_score_copies_per_step" in seen["running"]
    assert "test_score_copies_per_step" in json.loads(run_json.read_text())["running"]

    pytester.makeconftest("""
import os

def pytest_collection_finish(session):
    os._exit(9)  # dies before its first test
""")
    Path(pytester.path, "out", "run.json").write_text(
        json.dumps({"schema_version": 2, "complete": True, "results": []})
    )
    assert pytester.runpytest_subprocess(*ARGS).ret == 9
    left = json.loads(run_json.read_text())
    assert left["complete"] is False and left["superseded"].startswith("by run ")


@pytest.fixture
def full_disk(tmp_path):
    """A real file system that is full: a 64 KiB tmpfs filled to the last block (needs root)."""
    import subprocess

    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    try:
        try:
            with open(mount / "filler", "wb") as filler:
                while True:
                    filler.write(b"\0" * 4096)
                    filler.flush()
        except OSError:  # full: the write, or the flush at close, says so
            pass
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_results_disk_stops_the_run_with_one_line(pytester, full_disk):
    """Before: every test errored with the same OSError traceback (about 20 of them)."""
    pytester.makepyfile(test_attention=SUITE)
    args = [a for a in ARGS if not a.startswith("--perfsuite-results")]
    result = pytester.runpytest_subprocess(*args, f"--perfsuite-results={full_disk / 'out'}")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, output
    assert output.count("No space left on device") == 1, output
    assert f"perfsuite: no space left to write into {full_disk / 'out'}" in output
    assert "Traceback" not in output and "OSError" not in output
