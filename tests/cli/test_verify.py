"""The GPU verification report, on this CPU: the no-CUDA report, and a CUDA run's report built
from a JUnit file and results written here."""

import dataclasses

import torch


from perfsuite.cli import verify
from perfsuite.cli.main import main
from perfsuite.report.results import BenchmarkResult, write_run

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="perfsuite.suite.test_attention" name="test_pinned_backend_runs_its_own_fused_kernel[sdpa_flash-b8h16s1024d64-bf16-causal-cuda]" time="0.1"/>
<testcase classname="perfsuite.suite.test_attention" name="test_pinned_backend_runs_its_own_fused_kernel[sdpa_cudnn-b8h16s1024d64-bf16-causal-cuda]" time="0.1">{failure}</testcase>
<testcase classname="perfsuite.suite.test_attention" name="test_score_copies_per_step[flex_eager-b8h16s1024d64-bf16-causal-cuda]" time="0.1"><skipped type="pytest.skip" message="no kernel | here"/></testcase>
</testsuite></testsuites>
"""
FAILURE = '<failure message="sdpa_cudnn on b8h16s1024d64-bf16-causal-cuda: no kernel of fused attention: cuDNN ran">trace</failure>'
ENV = {
    "torch": "2.13.0",
    "torch.version.cuda": "12.6",
    "torch.version.hip": None,
    "torch.cuda.is_available()": True,
}


def result(**changes):
    base = BenchmarkResult(
        variant="sdpa_flash",
        case_id="b8h16s1024d64-bf16-causal-cuda",
        device="cuda",
        flop=2 * 10**12,
        bytes_moved=10**9,
        median_s=0.010,
        rounds=10,
        work_per_step=1,
        work_unit="kernels",
        score_copies_per_step=0,
        allocated_bytes=0,
        peak_bytes=0,
        max_abs_error=1e-3,
        correct=True,
        timer="cuda_event",
        clock="cuda_graph",
        device_median_s=0.010,
        event_median_s=0.010,
        kernel_median_s=0.008,
        dispatch_median_s=0.002,
        rel_spread=0.004,
    )
    return dataclasses.replace(base, **changes)


def test_without_cuda_the_report_says_so_and_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["verify", "--results", str(tmp_path)]) == 0
    report = (tmp_path / "verification.md").read_text()
    assert "**Result: NO CUDA DEVICE**" in report
    assert "torch.version.cuda" in report and "torch.version.hip" in report and "driver" in report
    assert "PERFSUITE_TORCH=" in report and "download.pytorch.org/whl/rocm" in report
    assert "NO CUDA DEVICE" in capsys.readouterr().out
    assert main(["verify", "--results", str(tmp_path), "--require-cuda"]) == 1


def test_a_failed_check_fails_the_report_and_is_listed_first(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT.format(failure=FAILURE))
    checks = verify.read_junit(tmp_path / "junit.xml")
    assert [c.outcome for c in checks] == ["passed", "failed", "skipped"]
    report, passed = verify.verification_report(
        ENV, checks, [result()], {"matmul_tflops": {"bf16": 400.0}, "memory_gbps": 4000.0}, 1, 420
    )
    assert not passed and "**Result: FAIL: 1 check(s) failed**" in report
    rows = [line for line in report.splitlines() if line.startswith("| test_")]
    assert (
        rows[0].startswith("| test_pinned_backend_runs_its_own_fused_kernel | sdpa_cudnn")
        and "| FAILED |" in rows[0]
    )
    assert "no kernel \\| here" in rows[2]  # a pipe in a message cannot break the table
    timing = next(line for line in report.splitlines() if line.startswith("| sdpa_flash"))
    # 2e12 FLOP in 10 ms = 200 TFLOP/s = 50% of the 400 TFLOP/s measured bf16 peak; 250 in 8 ms of kernels;
    # 1e9 bytes in 10 ms = 100 GB/s = 2.5% of the 4000 GB/s measured copy bandwidth; no KV read (a plain case)
    assert timing.endswith(
        "| cuda_graph | 10.000 | 0.4% | 10.000 | 8.000 | 2.000 | 200 | 250 | 50.0% | 100 | 2.5% | - | - |"
    )


def test_all_checks_passing_passes_and_a_timeout_fails(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT.format(failure=""))
    checks = verify.read_junit(tmp_path / "junit.xml")
    report, passed = verify.verification_report(ENV, checks, [result()], None, 0, 420)
    assert (
        passed and "**Result: PASS**" in report and "| - |" in report
    )  # no peaks: no share of peak
    report, passed = verify.verification_report(ENV, checks, [result()], None, 124, 420)
    assert not passed and "ran past its 420 s budget" in report
    report, passed = verify.verification_report(ENV, [], [], None, 0, 420)
    assert not passed and "no check ran" in report


def test_run_verify_on_cuda_reads_the_results_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "environment", lambda: dict(ENV))
    (tmp_path / "junit.xml").write_text(JUNIT.format(failure=FAILURE))
    write_run(tmp_path, [result()], [], {"peaks": {"matmul_tflops": {"bf16": 400.0}}})
    assert main(["verify", "--results", str(tmp_path), "--suite-exit", "1"]) == 1
    report = (tmp_path / "verification.md").read_text()
    assert "50.0%" in report and "FAILED" in report


def test_an_unreadable_junit_file_is_a_failed_check_in_a_written_report(tmp_path, monkeypatch):
    monkeypatch.setattr(verify, "environment", lambda: dict(ENV))
    (tmp_path / "junit.xml").write_text("<testsuites><testcase")
    assert main(["verify", "--results", str(tmp_path)]) == 1
    assert "not a readable JUnit XML file" in (tmp_path / "verification.md").read_text()
