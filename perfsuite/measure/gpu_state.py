"""The identity and state of the GPU a run timed on: UUID, clocks, power limit, temperature and
throttle reasons, so a slow GPU in a fleet is visible beside its timings.

Read from ``nvidia-smi --query-gpu`` for the device this process sees first (its UUID from
``torch.cuda.get_device_properties(0).uuid`` where torch has it, else the first entry of
``CUDA_VISIBLE_DEVICES``: nvidia-smi itself ignores that variable and numbers every GPU).
Fields nvidia-smi reports as ``[N/A]`` or ``[Not Supported]`` are None. On a CPU-only run, or
where no nvidia-smi answers (ROCm, containers without it), the reading is ``{"present": False,
"reason": ...}``: recorded as absent, never guessed. Field names: ``nvidia-smi --help-query-gpu``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable

QUERY_TIMEOUT_S = 10
# nvidia-smi field -> our key (units in the names: MHz, W, degrees C)
FIELDS = {
    "uuid": "uuid",
    "name": "name",
    "pci.bus_id": "pci_bus_id",
    "driver_version": "driver_version",
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "memory_clock_mhz",
    "clocks.max.sm": "max_sm_clock_mhz",
    "clocks.max.mem": "max_memory_clock_mhz",
    "power.limit": "power_limit_w",
    "power.draw": "power_draw_w",
    "temperature.gpu": "temperature_c",
    "clocks_event_reasons.active": "throttle_reasons_mask",
}
OLD_REASONS_FIELD = (
    "clocks_throttle_reasons.active"  # the name before driver 535 (still accepted by some later)
)
# NVML's nvmlClocksEventReasons bits (nvml.h, "ClocksEventReason" / formerly "ClocksThrottleReason")
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
VISIBLE_DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_NUMBERS = {
    "sm_clock_mhz",
    "memory_clock_mhz",
    "max_sm_clock_mhz",
    "max_memory_clock_mhz",
    "power_limit_w",
    "power_draw_w",
    "temperature_c",
}


def throttle_reasons(mask: int) -> list[str]:
    """Names of the active clock event (throttle) reasons in NVML's bit ``mask``; ``[]`` for 0."""
    return [name for bit, name in REASON_BITS.items() if mask & bit]


def _value(key: str, text: str) -> object:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    if key in _NUMBERS:
        return float(text)
    return text


def parse_query(csv_line: str, fields: list[str]) -> dict[str, object]:
    """One line of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` as our keys.

    ``throttle_reasons_mask`` (hex) adds ``throttle_reasons``, the names. Raises ValueError when the
    line has another number of columns than ``fields``.
    """
    columns = [c.strip() for c in csv_line.split(",")]
    if len(columns) != len(fields):
        raise ValueError(
            f"nvidia-smi line has {len(columns)} columns, expected {len(fields)}: {csv_line!r}"
        )
    reading = {
        FIELDS.get(f, "throttle_reasons_mask"): _value(FIELDS.get(f, ""), c)
        for f, c in zip(fields, columns)
    }
    mask = reading.get("throttle_reasons_mask")
    if isinstance(mask, str):
        reading["throttle_reasons"] = throttle_reasons(int(mask, 16))
    return reading


def visible_devices(env: dict[str, str] | None = None) -> dict[str, str]:
    """The visible-device variables set in ``env`` (default: this process's), e.g. ``{"CUDA_VISIBLE_DEVICES": "3"}``."""
    env = os.environ if env is None else env
    return {name: env[name] for name in VISIBLE_DEVICE_VARIABLES if name in env}


def torch_uuid() -> str | None:
    """``GPU-...`` UUID of CUDA device 0 as torch sees it, None without CUDA or where torch lacks ``uuid``."""
    import torch

    if not torch.cuda.is_available():
        return None
    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    return (
        f"GPU-{uuid}"
        if uuid is not None and not str(uuid).startswith("GPU-")
        else (str(uuid) if uuid else None)
    )


def read_gpu_state(
    device_id: str | None = None, run: Callable = subprocess.run
) -> dict[str, object]:
    """The state of one NVIDIA GPU, or ``{"present": False, "reason": ...}``.

    ``device_id``: what ``nvidia-smi -i`` accepts (a UUID, a PCI bus id, an nvidia-smi index);
    default: torch's UUID of device 0, else the first ``CUDA_VISIBLE_DEVICES`` entry, else index 0.
    """
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {"present": False, "reason": "nvidia-smi not found"}
    if device_id is None:
        device_id = torch_uuid() or (
            os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
        )
    last_error = ""
    for reasons_field in ("clocks_event_reasons.active", OLD_REASONS_FIELD):
        fields = [f for f in FIELDS if f != "clocks_event_reasons.active"] + [reasons_field]
        try:
            done = run(
                [
                    tool,
                    "-i",
                    device_id,
                    f"--query-gpu={','.join(fields)}",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=QUERY_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"present": False, "reason": f"nvidia-smi did not answer: {exc}"}
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode == 0 and lines:
            return {"present": True, **parse_query(lines[0], fields)}
        last_error = (done.stderr or done.stdout).strip().splitlines()[:1]
    return {
        "present": False,
        "reason": f"nvidia-smi -i {device_id} failed: {' '.join(last_error) or 'no output'}",
    }


def gpu_state(devices: list[str]) -> dict[str, object]:
    """What a run records: the visible-device variables, and the GPU's state when ``cuda`` is among
    ``devices`` (absent, with the reason, on a CPU-only run)."""
    state = (
        read_gpu_state()
        if "cuda" in devices
        else {"present": False, "reason": "no CUDA device in this run"}
    )
    return {"visible_devices": visible_devices(), **state}


# Throttle reasons that slow a benchmark down (NVML's power and thermal reasons); gpu_idle,
# applications_clocks_setting (locked clocks), sync_boost and display_clock_setting do not.
SLOWING_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
_NVML: dict[str, object] = {}  # the initialized module and device handle, per process


def _read_nvml(pynvml) -> dict[str, object]:
    """Clocks, power and throttle reasons of device 0 through NVML (``nvidia-ml-py``); raises
    ``pynvml.NVMLError`` (or ``AttributeError`` on an old binding) when NVML cannot answer."""
    if "handle" not in _NVML:
        pynvml.nvmlInit()
        uuid = torch_uuid()
        _NVML["handle"] = (
            pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)
        )
    handle = _NVML["handle"]
    reasons = getattr(
        pynvml,
        "nvmlDeviceGetCurrentClocksEventReasons",
        getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
    )
    mask = int(reasons(handle)) if reasons else None
    return {
        "present": True,
        "source": "nvml",
        "sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "memory_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        "max_sm_clock_mhz": float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "power_draw_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,  # milliwatts
        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3,
        "temperature_c": float(
            pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
        ),
        "throttle_reasons_mask": None if mask is None else hex(mask),
        "throttle_reasons": throttle_reasons(mask) if mask is not None else None,
    }


# NVML's cumulative clock-event counters (nanoseconds the reason held the clocks down since the
# driver loaded), read with nvmlDeviceGetFieldValues; the first name the binding has is used (the
# power and thermal ones had PERF_POLICY names before CLOCKS_EVENT_REASON ones).
THROTTLE_COUNTER_FIELDS = {
    "sw_power_cap": (
        "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
        "NVML_FI_DEV_PERF_POLICY_POWER",
    ),
    "sw_thermal_slowdown": (
        "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
        "NVML_FI_DEV_PERF_POLICY_THERMAL",
    ),
    "hw_thermal_slowdown": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",),
    "hw_power_brake_slowdown": ("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",),
}


def throttle_field_ids(pynvml) -> dict[str, int]:
    """Reason -> NVML field id, for the reasons of ``THROTTLE_COUNTER_FIELDS`` the binding names."""
    found = {}
    for reason, names in THROTTLE_COUNTER_FIELDS.items():
        for name in names:
            if isinstance(getattr(pynvml, name, None), int):
                found[reason] = getattr(pynvml, name)
                break
    return found


def read_throttle_counters(pynvml=None) -> dict[str, int] | None:
    """NVML's cumulative throttle counters of the device (reason -> nanoseconds), read before and
    after each timed sample so a throttle that bites only while the step runs is seen (nvbench
    brackets its timed region the same way). None where NVML is not installed or does not answer;
    a reason the device does not report is left out."""
    if pynvml is None:
        try:
            import pynvml
        except ImportError:
            return None
    if _NVML.get("counters_refused"):  # asked once per process: a refusal does not change
        return None
    try:
        if "handle" not in _NVML:
            pynvml.nvmlInit()
            uuid = torch_uuid()
            _NVML["handle"] = (
                pynvml.nvmlDeviceGetHandleByUUID(uuid)
                if uuid
                else pynvml.nvmlDeviceGetHandleByIndex(0)
            )
        ids = throttle_field_ids(pynvml)
        values = pynvml.nvmlDeviceGetFieldValues(_NVML["handle"], list(ids.values()))
    except Exception:  # NVML absent or refusing: no counters, the clock check stands alone
        _NVML["counters_refused"] = True
        return None
    return {
        reason: int(value.value.ullVal)
        for reason, value in zip(ids, values, strict=True)
        if value.nvmlReturn == getattr(pynvml, "NVML_SUCCESS", 0)
    }


_ROCM_CLOCK = re.compile(r"(\d+(?:\.\d+)?)\s*mhz", re.IGNORECASE)


def _read_rocm(run: Callable = subprocess.run) -> dict[str, object]:
    """SM (``sclk``/GFX) and memory clocks of an AMD GPU: ``amdsmi`` where importable, else
    ``rocm-smi --showclocks --json``, else absent with the reason. ROCm reports no throttle
    reasons in the NVML sense (``throttle_reasons`` is None)."""
    try:
        import amdsmi
    except ImportError:
        amdsmi = None
    if amdsmi is not None:
        try:
            amdsmi.amdsmi_init()
            handle = amdsmi.amdsmi_get_processor_handles()[0]
            gfx = amdsmi.amdsmi_get_clock_info(handle, amdsmi.AmdSmiClkType.GFX)
            mem = amdsmi.amdsmi_get_clock_info(handle, amdsmi.AmdSmiClkType.MEM)
            return {
                "present": True,
                "source": "amdsmi",
                "sm_clock_mhz": float(gfx["clk"]),
                "max_sm_clock_mhz": float(gfx["max_clk"]),
                "memory_clock_mhz": float(mem["clk"]),
                "throttle_reasons": None,
            }
        except Exception as exc:  # reported as absent, with amdsmi's words
            return {"present": False, "reason": f"amdsmi did not answer: {exc}"}
    tool = shutil.which("rocm-smi")
    if tool is None:
        return {"present": False, "reason": "ROCm GPU: neither amdsmi nor rocm-smi is installed"}
    try:
        done = run(
            [tool, "--showclocks", "--json"],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            check=False,
        )
        card = next(iter(json.loads(done.stdout).values()))
    except (OSError, subprocess.TimeoutExpired, ValueError, StopIteration, AttributeError) as exc:
        return {"present": False, "reason": f"rocm-smi --showclocks --json failed: {exc}"}

    def clock(prefix: str) -> float | None:
        for key, value in card.items():
            found = _ROCM_CLOCK.search(str(value))
            if key.lower().startswith(prefix) and found:
                return float(found.group(1))
        return None

    return {
        "present": True,
        "source": "rocm-smi",
        "sm_clock_mhz": clock("sclk"),
        "memory_clock_mhz": clock("mclk"),
        "max_sm_clock_mhz": None,
        "throttle_reasons": None,
    }


def read_clocks(hip: bool | None = None) -> dict[str, object]:
    """The GPU's clocks, power and throttle reasons, read before and after each benchmark:
    NVML through ``nvidia-ml-py`` (``import pynvml``) when installed (microseconds a read),
    else ``nvidia-smi`` (``read_gpu_state``, tens of milliseconds); on ROCm (``hip``, default:
    ``torch.version.hip`` is set) ``amdsmi`` or ``rocm-smi``. ``{"present": False, "reason": ...}``
    when none answers. ``source`` says which tool read it."""
    if hip is None:
        import torch

        hip = bool(getattr(torch.version, "hip", None))
    if hip:
        return _read_rocm()
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            return _read_nvml(pynvml)
        except Exception as exc:  # NVML absent or refusing: nvidia-smi below, and say why
            fallback = read_gpu_state()
            return {
                **fallback,
                "source": "nvidia-smi",
                "nvml_error": f"{type(exc).__name__}: {exc}",
            }
    return {**read_gpu_state(), "source": "nvidia-smi"}


def slowing_reasons(state: dict[str, object]) -> list[str]:
    """The power and thermal throttle reasons (``SLOWING_REASONS``) active in one reading."""
    return [r for r in (state.get("throttle_reasons") or []) if r in SLOWING_REASONS]
