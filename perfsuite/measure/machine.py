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


# The fields of ``torch_machine_info`` that must be equal for two timings to be comparable:
# other hardware, another torch/CUDA/cuDNN build or another thread count changes the timings
# themselves. Used by the plugin (a warning), ``perfsuite compare`` and ``perfsuite ab`` (a refusal).
MUST_MATCH = ("device_names", "torch_version", "cuda_version", "cudnn_version", "num_threads")


def machine_differences(base: dict, head: dict, base_name: str = "base", head_name: str = "head",
                        fields: tuple[str, ...] = MUST_MATCH) -> list[str]:
    """One line per field of ``fields`` whose value differs between two ``torch_machine_info`` dicts.

    Example: ``"torch_version: '2.13.0' in base, '2.14.1' in head"``; ``[]`` when comparable.
    """
    return [f"{field}: {base.get(field)!r} in {base_name}, {head.get(field)!r} in {head_name}"
            for field in fields if base.get(field) != head.get(field)]
