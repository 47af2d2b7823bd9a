"""The GPU verification's smoke step on the CPU lane, and scripts/gpu_suite.sh's offline mode end to
end: an interpreter with torch preinstalled, no package index and (where the kernel allows a network
namespace) no network at all, through setup to the "NO CUDA DEVICE" report."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from perfsuite.cli.gpu_smoke import CPU_CASE, run_smoke, score_copy_check, smoke_report
from perfsuite.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_smoke_on_the_cpu_lane_sees_naives_copy_and_none_for_naive_inplace(tmp_path):
    checks = {c.name: c for c in run_smoke("cpu", scratch=tmp_path)}
    assert (
        checks["naive score copy"].outcome == "pass"
        and "aten::clone" in checks["naive score copy"].detail
    )
    assert checks["naive_inplace score copy"].outcome == "pass"
    assert checks["sdpa_math"].outcome == "pass"
    assert {checks[n].outcome for n in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn")} == {"skip"}
    assert "**Smoke: PASS**" in smoke_report(list(checks.values()))


def test_smoke_fails_when_the_expected_copy_is_missing(tmp_path):
    check = score_copy_check("naive_inplace", CPU_CASE, tmp_path, expect_copy=True)
    assert check.outcome == "FAIL" and "expected a copy; saw no score-sized copy" in check.detail
    assert "**Smoke: FAIL: naive_inplace score copy**" in smoke_report([check])


def test_a_failed_smoke_step_fails_the_verification_report(tmp_path, monkeypatch):

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "fake")
    (tmp_path / "smoke.md").write_text("## Smoke step\n\n**Smoke: FAIL: sdpa_flash**\n")
    assert main(["verify", "--results", str(tmp_path)]) == 1
    assert "**Smoke: FAIL: sdpa_flash**" in (tmp_path / "verification.md").read_text()


def _interpreter_with_torch_preinstalled(root: Path) -> Path:
    """A venv made with --system-site-packages that sees this environment's packages (torch, pytest,
    ...) as a GPU image's python3 does, but has no perfsuite installed in it."""
    # --without-pip: pip and setuptools come from the preinstalled packages, as in such an image.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)],
        check=True,
    )
    site = Path(
        subprocess.run(
            [
                str(root / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "preinstalled.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root / "bin" / "python"


def _no_network_prefix() -> list[str]:
    """``unshare -n`` (a network namespace with no interface) where this kernel and user allow it."""
    if (
        shutil.which("unshare")
        and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    ):
        return ["unshare", "-n"]
    return []


@pytest.mark.slow
def test_offline_gpu_suite_reaches_the_no_cuda_report_without_the_network(tmp_path):
    python = _interpreter_with_torch_preinstalled(tmp_path / "image-python")
    results, collect = tmp_path / "results", tmp_path / "out"
    env = {
        **os.environ,
        "PERFSUITE_PYTHON": str(python),
        "PIP_NO_INDEX": "1",
        "PERFSUITE_GPU_RESULTS": str(results),
        "PERFSUITE_GPU_OUT": str(collect),
        "CUDA_VISIBLE_DEVICES": "",
    }
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(
        _no_network_prefix() + ["bash", str(REPO / "scripts" / "gpu_suite.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "installing perfsuite from" in proc.stdout and "(no index, no dependencies)" in proc.stdout
    )
    assert "creating .venv" not in proc.stdout and "installing torch" not in proc.stdout
    assert "NO CUDA DEVICE" in proc.stdout
    assert "**Result: NO CUDA DEVICE**" in (results / "verification.md").read_text()
    files = sorted(p.name for p in collect.iterdir())
    assert "verification.md" in files and "gpu_suite.log" in files and len(files) <= 8
    assert proc.stdout.rstrip().splitlines()[-1].startswith("files: ")
    # The perfsuite it installed is this tree's, loaded as a pytest plugin by that interpreter.
    check = subprocess.run(
        [
            str(python),
            "-I",
            "-c",
            "import perfsuite, pathlib; print(pathlib.Path(perfsuite.__file__).parent)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(check.stdout.strip()) == REPO / "perfsuite"
