"""What a baseline was measured on, so runs from different hardware are never mixed up."""

from __future__ import annotations

import platform
import shutil
import subprocess

import torch

from perfsuite.attention.cases import Device

DRIVER_QUERY_TIMEOUT_S = 10


def device_name(device: str) -> str:
    """``torch.cuda.get_device_name()`` on CUDA; the CPU's model name (or architecture) on CPU."""
    if device == Device.CUDA:
        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda (not available)"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def driver_version(run=subprocess.run) -> str | None:
    """The GPU driver version from ``nvidia-smi`` (NVIDIA) or ``rocm-smi`` (AMD), or None when
    neither tool is installed or answers within ``DRIVER_QUERY_TIMEOUT_S`` seconds."""
    queries = (
        ("nvidia-smi", ["--query-gpu=driver_version", "--format=csv,noheader"]),
        ("rocm-smi", ["--showdriverversion"]),
    )
    for tool, args in queries:
        path = shutil.which(tool)
        if not path:
            continue
        try:
            done = run(
                [path, *args],
                capture_output=True,
                text=True,
                timeout=DRIVER_QUERY_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = [
            line.strip()
            for line in done.stdout.splitlines()
            if line.strip() and not line.startswith("=")
        ]
        if done.returncode == 0 and lines:
            return f"{tool}: {lines[0] if tool == 'nvidia-smi' else lines[-1]}"
    return None


def sdpa_priority_order() -> list[str] | None:
    """SDPA's backend priority order (``["FLASH_ATTENTION", "EFFICIENT_ATTENTION", ...]``), read
    from torch's private ``_get_sdp_priority_order``; None where this torch lacks it."""
    get_order = getattr(torch._C, "_get_sdp_priority_order", None)
    if get_order is None:
        return None
    return [torch._C._SDPBackend(value).name for value in get_order()]


def numerics_flags() -> dict[str, object]:
    """Flags that change which kernels run and how precise they are: TF32 for matmul and cuDNN,
    ``float32_matmul_precision``, reduced-precision reductions, and the enabled SDPA backends."""
    matmul = torch.backends.cuda.matmul
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
        "matmul_allow_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
        "sdpa_enabled": {
            "FLASH_ATTENTION": torch.backends.cuda.flash_sdp_enabled(),
            "EFFICIENT_ATTENTION": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "CUDNN_ATTENTION": torch.backends.cuda.cudnn_sdp_enabled(),
            "MATH": torch.backends.cuda.math_sdp_enabled(),
        },
        "sdpa_priority_order": sdpa_priority_order(),
        # FlashAttention 3 inside the flash backend (Hopper), where this torch has the switch (private).
        "sdpa_flash_uses_fa3": torch._C._get_fa3_sdp_enabled()
        if hasattr(torch._C, "_get_fa3_sdp_enabled")
        else None,
    }


def torch_machine_info(devices: list[str]) -> dict[str, object]:
    """Versions, devices and numerics flags for pytest-benchmark's ``machine_info['perfsuite']``.

    ``driver_version`` is asked of ``nvidia-smi`` / ``rocm-smi`` only when a CUDA device is among
    ``devices`` (None otherwise, or when the tool is missing); ``numerics`` is ``numerics_flags()``.
    """
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": cudnn,
        "driver_version": driver_version() if Device.CUDA in devices else None,
        "num_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device_names": {device: device_name(device) for device in devices},
        "numerics": numerics_flags(),
    }


# The fields of ``torch_machine_info`` that must be equal for two timings to be comparable:
# other hardware, another torch/CUDA/cuDNN build or another thread count changes the timings
# themselves. Used by the plugin (a warning), ``perfsuite compare`` and ``perfsuite ab`` (a refusal).
MUST_MATCH = ("device_names", "torch_version", "cuda_version", "cudnn_version", "num_threads")


def machine_differences(
    base: dict,
    head: dict,
    base_name: str = "base",
    head_name: str = "head",
    fields: tuple[str, ...] = MUST_MATCH,
) -> list[str]:
    """One line per field of ``fields`` whose value differs between two ``torch_machine_info`` dicts.

    Example: ``"torch_version: '2.13.0' in base, '2.14.1' in head"``; ``[]`` when comparable.
    """
    return [
        f"{field}: {base.get(field)!r} in {base_name}, {head.get(field)!r} in {head_name}"
        for field in fields
        if base.get(field) != head.get(field)
    ]
