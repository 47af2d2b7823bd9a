"""``perfsuite verify --preflight``: a clear "no GPU" exit on a CPU machine, one JSON out, and
checks that report failures and skips without stopping the next."""

import json

import torch

from perfsuite.cli import preflight
from perfsuite.cli.main import main
from perfsuite.variants.unsupported import CaseUnsupported


def test_on_a_machine_without_cuda_the_preflight_says_no_gpu_and_exits_3(tmp_path, capsys):
    assert not torch.cuda.is_available()  # the CPU machine this test runs on
    assert main(["verify", "--preflight", "--results", str(tmp_path)]) == preflight.NO_GPU_EXIT == 3
    report = json.loads((tmp_path / "preflight.json").read_text())
    assert report["outcome"] == "NO GPU" and report["checks"] == [] and report["device"] is None
    assert report["torch"] == torch.__version__
    assert "perfsuite preflight: NO GPU" in capsys.readouterr().out


def test_a_check_that_raises_fails_naming_the_error_and_a_refusal_is_a_skip():
    def broken():
        raise AttributeError("'_KinetoEvent' object has no attribute 'activity_type'\nmore")

    def refused():
        raise CaseUnsupported("SDPA's quantized path runs on FA3: not installed")

    failed = preflight.run_check("kineto_records", broken)
    assert (failed.outcome, failed.detail) == (
        "FAIL",
        "AttributeError: '_KinetoEvent' object has no attribute 'activity_type'",
    )
    skipped = preflight.run_check("sdpa_fp8_gqa", refused)
    assert (skipped.outcome, skipped.detail) == (
        "skip",
        "SDPA's quantized path runs on FA3: not installed",
    )
    assert preflight.run_check("x", lambda: "seen").outcome == "pass"


def test_the_preflight_checks_every_finding_and_its_cases_parse():
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.variants import get_variant

    assert set(preflight.CHECKS) == {
        "kineto_records",
        "failed_capture_released",
        "backward_capture",
        "unrolled_graph",
        "sdpa_fp8_gqa",
        "varlen_attn_gqa",
        "flex_paged_decode",
        "nvml_throttle_counters",
    }
    for name, case_id in preflight.GQA_CASES.items():
        case = parse_case_id(case_id)
        assert case.num_heads == 4 * case.num_kv_heads and case.device == "cuda", case_id
        get_variant(name)
        get_variant(preflight.PLAIN.get(name, name))


def test_on_the_cpu_each_device_check_gets_as_far_as_its_first_cuda_call():
    """Without a GPU every device check fails at its first CUDA call, naming CUDA or the driver:
    not earlier, on a name or import of its own."""
    for name, check in preflight.CHECKS.items():
        if name == "nvml_throttle_counters":
            continue
        found = preflight.run_check(name, check)
        assert found.outcome == "FAIL" and any(
            word in found.detail for word in ("CUDA", "NVIDIA", "cuda")
        ), (name, found.detail)
