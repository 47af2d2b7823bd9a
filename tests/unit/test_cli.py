import json
from pathlib import Path

import pytest

from perfsuite.cli import main

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_trace_prints_windows_kernels_and_copies(capsys):
    assert main(["trace", str(TRACES / "a100_train_step_rank0.json.gz"), "--annotation", "## forward ##", "--first"]) == 0
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
    assert "a.pt.trace.json.gz: 1 window(s) named whole trace" in captured.out
    assert main(["trace", str(tmp_path / "run.json")]) == 2
    assert "not a profiler trace" in capsys.readouterr().err


def test_bad_top_is_refused():
    with pytest.raises(SystemExit) as info:
        main(["trace", str(TRACES), "--top", "0"])
    assert info.value.code == 2
