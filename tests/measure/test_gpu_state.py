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


class FakeNvml:
    """``pynvml`` (nvidia-ml-py) as a module answering one throttled H100's readings."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle {index}"

    nvmlDeviceGetHandleByUUID = nvmlDeviceGetHandleByIndex

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return {1: 1410, 2: 2619}[kind]

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle):
        return 498_000  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 500_000

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 81

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4 | 0x1


def test_nvml_is_read_when_installed_and_power_capping_counts_as_throttling(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", FakeNvml())
    monkeypatch.setattr(gpu_state, "_NVML", {})
    reading = gpu_state.read_clocks(hip=False)
    assert reading["source"] == "nvml" and reading["sm_clock_mhz"] == 1410.0
    assert reading["max_sm_clock_mhz"] == 1980.0 and reading["power_draw_w"] == 498.0
    assert reading["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert gpu_state.slowing_reasons(reading) == ["sw_power_cap"]  # idle does not slow a step


def test_rocm_without_amdsmi_or_rocm_smi_is_said_absent(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "amdsmi", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_state.read_clocks(hip=True) == {
        "present": False,
        "reason": "ROCm GPU: neither amdsmi nor rocm-smi is installed",
    }
    tool = tmp_path / "rocm-smi"
    tool.write_text(
        '#!/bin/sh\necho \'{"card0": {"sclk clock speed:": "(1700Mhz)", "mclk clock speed:": "(1600Mhz)"}}\'\n'
    )
    tool.chmod(0o755)
    reading = gpu_state.read_clocks(hip=True)
    assert reading["source"] == "rocm-smi" and reading["sm_clock_mhz"] == 1700.0
    assert reading["memory_clock_mhz"] == 1600.0 and reading["throttle_reasons"] is None


class CountingNvml(FakeNvml):
    """NVML's field-value API as nvidia-ml-py shapes it (its real structs), one cumulative
    nanosecond counter per throttle reason; ``refuse``: nvmlInit fails (no driver)."""

    def __init__(self, refuse=False):
        import pynvml

        self.real, self.refuse, self.inits = pynvml, refuse, 0
        for names in gpu_state.THROTTLE_COUNTER_FIELDS.values():
            setattr(self, names[0], getattr(pynvml, names[0]))
        self.NVML_SUCCESS = pynvml.NVML_SUCCESS
        self.power_cap_ns = 0

    def nvmlInit(self):
        self.inits += 1
        if self.refuse:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetFieldValues(self, handle, ids):
        values = (self.real.c_nvmlFieldValue_t * len(ids))()
        for value, field in zip(values, ids, strict=True):
            value.fieldId, value.nvmlReturn = field, self.real.NVML_SUCCESS
            value.value.ullVal = (
                self.power_cap_ns
                if field == self.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
                else 0
            )
        return values


def test_nvml_throttle_counters_are_read_by_field_and_a_refusal_is_asked_once(monkeypatch):
    pytest.importorskip("pynvml")
    nvml = CountingNvml()
    monkeypatch.setattr(gpu_state, "_NVML", {})
    nvml.power_cap_ns = 1_500_000
    counters = gpu_state.read_throttle_counters(nvml)
    assert counters["sw_power_cap"] == 1_500_000 and set(counters) == set(
        gpu_state.THROTTLE_COUNTER_FIELDS
    )
    refusing = CountingNvml(refuse=True)
    monkeypatch.setattr(gpu_state, "_NVML", {})
    assert gpu_state.read_throttle_counters(refusing) is None
    assert gpu_state.read_throttle_counters(refusing) is None and refusing.inits == 1
