import json
from pathlib import Path

import pytest

from perfsuite.cli.main import main

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_trace_prints_windows_kernels_and_copies(capsys):
    assert (
        main(
            [
                "trace",
                str(TRACES / "a100_train_step_rank0.json.gz"),
                "--annotation",
                "## forward ##",
                "--first",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("a100_train_step_rank0.json.gz: 2 window(s) named ## forward ##")
    assert "device kernels" in out and "launch API: cudaLaunchKernel x" in out


def test_cpu_only_trace_does_not_talk_about_device_kernels(capsys):
    assert main(["trace", str(TRACES / "cpu_only.json.gz"), "--annotation", "ProfilerStep"]) == 0
    assert "device kernels" not in capsys.readouterr().out


def test_unknown_annotation_lists_the_ones_present(capsys):
    assert main(["trace", str(TRACES / "mi250_toy_train.json.gz"), "--annotation", "nosuch"]) == 2
    assert "annotations in it: Optimizer.step#SGD.step, ProfilerStep" in capsys.readouterr().err


def test_folder_skips_non_traces_but_a_named_file_must_be_one(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"results": []}))
    (tmp_path / "a.pt.trace.json.gz").write_bytes((TRACES / "cpu_only.json.gz").read_bytes())
    assert main(["trace", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "skipping" in captured.err and "run.json" in captured.err
    assert captured.out.startswith("a.pt.trace.json.gz:\n  whole trace: 4 CPU ops")
    assert main(["trace", str(tmp_path / "run.json")]) == 2
    assert "not a profiler trace" in capsys.readouterr().err


def test_folder_of_several_modes_reports_the_files_with_that_annotation(tmp_path, capsys):
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.measure.evidence import gather_evidence
    from perfsuite.variants import get_variant

    case = parse_case_id("b1h2s8d4-fp32-causal-cpu")
    for mode in ("forward", "forward_backward"):
        gather_evidence(get_variant("naive"), case, 0, tmp_path, mode)
    assert (
        main(["trace", str(tmp_path), "--annotation", "perfsuite::forward_backward", "--first"])
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out.startswith(
        "naive-b1h2s8d4-fp32-causal-cpu-forward_backward.pt.trace.json.gz: 2 window(s)"
    )
    assert (
        "1 file(s) in" in captured.err
        and "no window named 'perfsuite::forward_backward'" in captured.err
    )
    assert main(["trace", str(tmp_path), "--annotation", "nosuch"]) == 2


def test_bad_top_is_refused():
    with pytest.raises(SystemExit) as info:
        main(["trace", str(TRACES), "--top", "0"])
    assert info.value.code == 2


def test_json_output_has_windows_and_the_whole_trace(capsys):
    assert (
        main(
            [
                "trace",
                str(TRACES / "mi250_toy_train.json.gz"),
                "--annotation",
                "ProfilerStep",
                "--json",
            ]
        )
        == 0
    )
    [report] = json.loads(capsys.readouterr().out)
    assert [w["annotation"] for w in report["windows"]] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert report["whole_trace"]["memcpy_counts"] == {"HtoD": 2}


def test_diff_names_what_changed(tmp_path, capsys):
    from perfsuite.attention.cases import AttentionCase
    from perfsuite.measure.evidence import gather_evidence
    from perfsuite.variants import get_variant

    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    a = gather_evidence(get_variant("naive_inplace"), case, 0, tmp_path).trace_path
    b = gather_evidence(get_variant("naive"), case, 0, tmp_path).trace_path
    assert main(["trace", "diff", str(a), str(b), "--annotation", "perfsuite::forward"]) == 0
    out = capsys.readouterr().out
    assert "CPU ops: +1 aten::clone (added)  [0 -> 1]" in out
    assert "copies: +1 cpu aten::clone [1x2x16x16] (added)" in out
    assert (
        "allocated on cpu: 5.0 KiB -> 9.0 KiB" in out
    )  # + the clone and the out-of-place `* scale`
    assert main(["trace", "diff", str(a), str(a)]) == 0
    assert "no change in kernels, ops, memcpy, copies, gathers or memory" in capsys.readouterr().out
    assert main(["trace", "diff", str(a)]) == 2


def test_rules_list_every_family(capsys):
    from perfsuite.trace.kernel_families import FAMILY_RULES

    assert main(["trace", "--rules"]) == 0
    out = capsys.readouterr().out
    assert all(f"| {family} |" in out for family, _ in FAMILY_RULES)
    assert "| FA3 |" in out  # the flash implementations' table follows


def test_perfsuite_run_starts_pytest_under_the_process_conditions(monkeypatch, tmp_path):
    """The wait policy cannot be set once torch started, so ``perfsuite run`` sets it for its child;
    a thread count the user exported is kept."""
    import perfsuite.cli.run as run_command

    seen = {}
    monkeypatch.setattr(
        run_command,
        "run_forwarding_signals",
        lambda command, env, cwd=None: seen.update(env=env) or 0,
    )
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--check"]) == 0
    assert seen["env"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert seen["env"]["OMP_NUM_THREADS"] == "1"
    assert seen["env"]["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20)


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"perfsuite {version('perfsuite')}"
