"""The GPU's identity and state, read from nvidia-smi output in its CSV format (tests/data/nvidia_smi)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from perfsuite.measure import gpu_state

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi"
FIELDS = list(gpu_state.FIELDS)


def test_a_busy_gpu_capped_and_throttled():
    reading = gpu_state.parse_query((DATA / "h100_throttled.csv").read_text(), FIELDS)
    assert reading["uuid"] == "GPU-9e0b2c44-1f3a-4b5c-8d6e-7f8091a2b3c4"
    assert reading["sm_clock_mhz"] == 1410.0 and reading["max_sm_clock_mhz"] == 1980.0
    assert reading["power_limit_w"] == 500.0 and reading["temperature_c"] == 87.0
    assert reading["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]  # 0x4 | 0x20


def test_unreported_fields_are_none_not_zero():
    reading = gpu_state.parse_query((DATA / "a10g_na.csv").read_text(), FIELDS)
    assert reading["power_limit_w"] is None and reading["power_draw_w"] is None
    assert reading["throttle_reasons"] == ["gpu_idle"]


def test_a_line_with_other_columns_is_refused():
    with pytest.raises(ValueError, match="expected 12"):
        gpu_state.parse_query("GPU-1, H100", FIELDS)


def _fake_nvidia_smi(folder: Path, body: str) -> None:
    """An nvidia-smi on PATH: a real executable the reader starts, printing a recorded line."""
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_reads_the_visible_gpu_by_its_id_and_falls_back_to_the_old_field_name(
    tmp_path, monkeypatch
):
    # a driver before 535 rejects clocks_event_reasons.active; the reader asks again with the old name
    _fake_nvidia_smi(
        tmp_path,
        f'echo "$@" >> {tmp_path}/calls\n'
        'case "$*" in *clocks_event_reasons*) echo "Field is not a valid field" >&2; exit 2;; esac\n'
        f"cat {DATA}/h100_idle.csv",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    reading = gpu_state.read_gpu_state(device_id=None if not gpu_state.torch_uuid() else "3")
    assert reading["present"] is True and reading["throttle_reasons"] == []
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("-i 3 ") and "clocks_throttle_reasons.active" in calls[1]


def test_absent_without_nvidia_smi_or_without_cuda(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_state.read_gpu_state() == {"present": False, "reason": "nvidia-smi not found"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    state = gpu_state.gpu_state(["cpu"])
    assert state["present"] is False and state["visible_devices"] == {"CUDA_VISIBLE_DEVICES": "1"}


def test_a_failing_nvidia_smi_is_absent_with_its_message(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path, 'echo "No devices were found" >&2; exit 6')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    reading = gpu_state.read_gpu_state("0")
    assert reading == {"present": False, "reason": "nvidia-smi -i 0 failed: No devices were found"}
