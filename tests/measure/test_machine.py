import subprocess

import torch

from perfsuite.measure import machine


def test_machine_info_records_numerics_flags_and_versions():
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True  # a flag module: monkeypatch cannot restore it
    try:
        info = machine.torch_machine_info(["cpu"])
        precision = torch.get_float32_matmul_precision()  # allow_tf32 moves it to "high"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    numerics = info["numerics"]
    assert numerics["cuda_matmul_allow_tf32"] is True
    assert numerics["float32_matmul_precision"] == precision
    assert set(numerics["sdpa_enabled"]) == {
        "FLASH_ATTENTION",
        "EFFICIENT_ATTENTION",
        "CUDNN_ATTENTION",
        "MATH",
    }
    order = numerics["sdpa_priority_order"]
    assert order is None or "FLASH_ATTENTION" in order
    assert (
        info["cuda_version"] == torch.version.cuda and info["driver_version"] is None
    )  # no CUDA device asked for


def test_driver_version_reads_nvidia_smi(monkeypatch):
    monkeypatch.setattr(
        machine.shutil, "which", lambda tool: f"/usr/bin/{tool}" if tool == "nvidia-smi" else None
    )

    def fake_run(args, **kwargs):
        assert args[0] == "/usr/bin/nvidia-smi"
        return subprocess.CompletedProcess(args, 0, stdout="570.86.15\n", stderr="")

    assert machine.driver_version(run=fake_run) == "nvidia-smi: 570.86.15"


def test_driver_version_is_none_without_tools_or_answers(monkeypatch):
    monkeypatch.setattr(machine.shutil, "which", lambda tool: None)
    assert machine.driver_version() is None
    monkeypatch.setattr(machine.shutil, "which", lambda tool: f"/usr/bin/{tool}")

    def hangs(args, **kwargs):
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])

    assert machine.driver_version(run=hangs) is None
