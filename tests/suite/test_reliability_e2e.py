"""Nothing lost, nothing misleading, end to end: interrupted runs, crashes, setup errors, baselines."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from perfsuite.measure import children

SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()
TINY = "--perfsuite-shapes=1x2x16x8"
TIMED = (
    "[pytest]\naddopts = --benchmark-autosave --benchmark-storage=bench --benchmark-max-time=0.01 "
    "--benchmark-min-rounds=2 --perfsuite-results=out --perfsuite-variants=naive,sdpa\nperfsuite_cpu_dtypes = fp32\n"
)

pytestmark = pytest.mark.slow

INTERRUPT_AT_THIRD_BENCHMARK = textwrap.dedent("""
    import pytest

    timed = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(item):
        if item.originalname == "test_benchmark":
            timed.append(item.nodeid)
            if len(timed) == 3:
                raise KeyboardInterrupt  # Ctrl-C while timing
""")


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_attention=SUITE)
    pytester.makeini(TIMED)
    return pytester


def saved_runs(project):
    return sorted(Path(project.path, "bench").rglob("*.json"))


def test_an_interrupted_timed_run_is_marked_partial_everywhere_and_refused_as_a_baseline(project):
    """Before: a partial baseline (5 of 20), a 4-row run.json/table.md, nothing marked, then used as the baseline."""
    complete = project.runpytest_subprocess(TINY)
    assert complete.ret == pytest.ExitCode.OK, complete.stdout.str()
    project.makeconftest(INTERRUPT_AT_THIRD_BENCHMARK)
    interrupted = project.runpytest_subprocess(TINY)
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    output = interrupted.stdout.str()
    assert (
        "perfsuite: this run is partial (interrupted (KeyboardInterrupt): 2 of 6 benchmarks finished)"
        in output
    )

    first, partial = saved_runs(project)
    marker = json.loads(partial.read_text())["perfsuite_incomplete"]
    assert marker == {"reason": "interrupted (KeyboardInterrupt)", "finished": 2, "expected": 6}
    assert "perfsuite_incomplete" not in json.loads(first.read_text())
    run = json.loads(Path(project.path, "out", "run.json").read_text())
    assert (
        run["complete"] is False and run["incomplete"]["finished"] == 2 and len(run["results"]) == 2
    )
    table = Path(project.path, "out", "table.md").read_text()
    assert table.startswith(
        "**Partial run**: interrupted (KeyboardInterrupt): 2 of 6 benchmarks finished"
    )
    runs = json.loads(Path(project.path, "out", "traces", "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["complete", "interrupted"]
    # the history keeps the benchmarks that finished, labelled with why the run is partial
    assert (
        "perfsuite: history: recorded 2 benchmark(s)" in output
        and "(a partial run: the benchmarks that finished)" in output
    ), output
    from perfsuite.history import open_store

    with open_store(str(Path(project.path, ".perfsuite", "history.sqlite")), create=False) as store:
        stored = store.runs()  # newest first
    assert [(r["benchmarks"], (r["labels"] or {}).get("partial")) for r in stored] == [
        (2, marker),
        (6, None),
    ]

    (Path(project.path) / "conftest.py").unlink()
    compared = project.runpytest_subprocess(
        TINY, "--benchmark-compare"
    )  # the newest saved run is the partial one
    assert compared.ret == pytest.ExitCode.USAGE_ERROR
    err = compared.stderr.str()
    assert (
        partial.name in err and "an incomplete run (interrupted (KeyboardInterrupt): 2 of 6" in err
    )
    assert (
        project.runpytest_subprocess(TINY, f"--benchmark-compare={first.name[:4]}").ret
        == pytest.ExitCode.OK
    )


def test_every_benchmark_compare_use_is_checked_without_the_gate(project):
    """Before: a missing named baseline exited 0; a truncated newest was skipped for an older one; a test path was
    swallowed as the value (and with the gate called 'a corrupt or truncated baseline')."""
    assert project.runpytest_subprocess(TINY, "--perfsuite-modes=forward").ret == pytest.ExitCode.OK

    missing = project.runpytest_subprocess(TINY, "--benchmark-compare=0042")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "no saved run matching '0042'" in missing.stderr.str()

    for gate in ([], ["--perfsuite-gate"]):
        swallowed = project.runpytest_subprocess(
            TINY, *gate, "--benchmark-compare", "test_attention.py"
        )
        assert swallowed.ret == pytest.ExitCode.USAGE_ERROR
        err = swallowed.stderr.str()
        assert "'test_attention.py' as the run to compare with, but it is a test path" in err
        assert "corrupt or truncated" not in err

    few = project.runpytest_subprocess(
        TINY, "--benchmark-compare"
    )  # baseline: forward only; this run: 3 modes
    assert few.ret == pytest.ExitCode.OK
    few.stdout.fnmatch_lines(
        [
            "*perfsuite: baseline 0001_* has 2 of this run's 6 benchmarks (few: under half); "
            "4 are compared with nothing*"
        ]
    )

    newest = saved_runs(project)[-1]
    newest.write_text(newest.read_text()[:100])
    truncated = project.runpytest_subprocess(TINY, "--benchmark-compare")
    assert truncated.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        newest.name in truncated.stderr.str() and "corrupt or truncated" in truncated.stderr.str()
    )


CRASHY = textwrap.dedent('''
    import os
    import torch

    def crashy(query, key, value, *, mask, scale):
        """Aborts the process in backward modes, as a broken compiled kernel would."""
        if torch.is_grad_enabled():
            os.abort()
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
''')


def test_a_crashing_variant_costs_only_its_own_results(project, monkeypatch):
    """Before: the abort killed pytest: no table, no run.json, every other variant's results lost."""
    project.makepyfile(crashy_variants=CRASHY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(project.path)] + sys.path))
    result = project.runpytest_subprocess(
        TINY, "--perfsuite-variant", "crashy_variants:crashy", "--perfsuite-variants=naive,crashy"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    assert (
        "variant crashy crashed the process on case b1h2s16d8-fp32-causal-cpu in mode backward, in an isolated "
        "child (--perfsuite-isolate)"
    ) in output and "signal SIGABRT" in output
    run = json.loads(Path(project.path, "out", "run.json").read_text())
    assert {(r["variant"], r["mode"]) for r in run["results"]} == {
        ("naive", "forward"),
        ("naive", "backward"),
        ("naive", "forward_backward"),
        ("crashy", "forward"),
    }
    assert {(c["variant"], c["mode"]) for c in run["crashed"]} == {
        ("crashy", "backward"),
        ("crashy", "forward_backward"),
    }
    assert (
        "- `crashy` on `b1h2s16d8-fp32-causal-cpu` (backward): signal SIGABRT"
        in Path(project.path, "out", "table.md").read_text()
    )


BROKEN_SETUP = textwrap.dedent("""
    from perfsuite.variants.registry import register_variant

    def broken_prepare(inputs):
        raise RuntimeError("cannot build the block mask\\n" + "".join(f"detail line {i}\\n" for i in range(300)))

    @register_variant("broken_setup", "per-case setup always fails", prepare=broken_prepare)
    def broken(query, key, value, *, mask, scale):
        return query
""")


def test_a_setup_error_is_reported_in_full_once_per_variant_and_case_then_referenced(
    project, monkeypatch
):
    """Before: the whole output re-raised by every test of the case (a 54,000-line log for 4 failing cases)."""
    project.makepyfile(broken_setup=BROKEN_SETUP)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(project.path)] + sys.path))
    result = project.runpytest_subprocess(
        TINY,
        "--perfsuite-variant",
        "broken_setup:broken",
        "--perfsuite-variants=broken_setup",
        "--perfsuite-isolate=none",
        "--benchmark-disable",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    # the failures section, not pytest's summary (which repeats messages untruncated when CI is set)
    reports = output.split("short test summary info")[0]
    assert reports.count("detail line 299") == 1
    assert output.count("(reported in full once, by test_attention.py::") >= 6


def test_a_run_in_which_every_suite_test_skips_tested_nothing_and_exits_5(project):
    """sdpa_nested takes no causal mask: on a causal packed case every test skips at run time. Before,
    such a run passed (exit 0) having checked and timed nothing."""
    result = project.runpytest_subprocess(
        "--perfsuite-variants=sdpa_nested",
        "--perfsuite-cases=b2h2s16d8-fp32-causal-packed-uniform-cpu",
        "--perfsuite-modes=forward",
        "-p",
        "no:randomly",
    )
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, output
    assert "every test of the attention suite was skipped: nothing was checked or timed" in output
    assert " passed" not in output and " failed" not in output


LEAVES_A_CHILD = textwrap.dedent("""
    import subprocess
    import torch.nn.functional as F

    started = []


    def leaves_a_child(query, key, value, *, mask, scale):
        if not started:  # a child that holds pytest's output pipe for 300 s
            started.append(subprocess.Popen(["sleep", "299.53"]))
        return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
""")


def test_a_child_process_a_variant_leaves_is_named_ended_and_the_run_does_not_wait(project):
    """Before: the run stalled without a word (the isolated probe's child, left holding the probe's
    output pipe, made the suite wait for the probe's start-up limit) and left the child running.
    Both the in-process call and the isolated probe end it: no such process is left."""
    project.makepyfile(leaves_child=LEAVES_A_CHILD)
    result = project.runpytest_subprocess(
        TINY,
        "--perfsuite-variant=leaves_child:leaves_a_child",
        "--perfsuite-variants=leaves_a_child",
        "--perfsuite-modes=forward",
        "-p",
        "no:randomly",
        timeout=240,  # below the child's 300 s: a run that waits for it fails here
    )
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    assert "left 1 child process(es) running after the first call" in output
    assert "(sleep 299.53): killed (SIGKILL)" in output
    left = [p.pid for p in children.processes() if p.command == "sleep 299.53" and p.state != "Z"]
    assert left == [], f"left running: {left}"
