"""What a baseline was measured on, so runs from different hardware are never mixed up."""

from __future__ import annotations

import platform

import torch


def device_name(device: str) -> str:
    """``torch.cuda.get_device_name()`` on CUDA; the CPU's model name (or architecture) on CPU."""
    if device == "cuda":
        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda (not available)"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_machine_info(devices: list[str]) -> dict[str, object]:
    """Versions and devices for pytest-benchmark's ``machine_info['perfsuite']``."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": cudnn,
        "num_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device_names": {device: device_name(device) for device in devices},
    }
