"""Measured peaks of a device: matmul rate and memory bandwidth, for the roofline chart.

Measured once per machine (device name, torch version, thread count) and cached in a JSON
file beside the baselines; ``torch.utils.benchmark.Timer`` does the timing (median of
``blocked_autorange``, synchronizing CUDA itself). These are achievable peaks of plain
torch ops, not datasheet numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from perfsuite.attention.cases import DTYPES, Device
from perfsuite.measure.contention import Probe
from perfsuite.measure.machine import device_name
from perfsuite.storage import write_text_atomic

MATMUL_MAX_SIZE = {Device.CPU: 2048, Device.CUDA: 8192}
TARGET_CALL_S = 0.1  # size the matmul so one call takes about this long
COPY_BYTES = {Device.CPU: 256 * 2**20, Device.CUDA: 2 * 2**30}


def _median_s(statement: str, **names) -> float:
    timer = Timer(
        stmt=statement, globals=names, num_threads=torch.get_num_threads()
    )  # Timer defaults to 1 thread
    return timer.blocked_autorange(min_run_time=0.5).median


def _square_matmul_tflops(device: str, dtype: str, n: int) -> float:
    a = torch.randn(n, n, device=device).to(DTYPES[dtype])
    b = torch.randn(n, n, device=device).to(DTYPES[dtype])
    return 2 * n**3 / _median_s("torch.matmul(a, b)", torch=torch, a=a, b=b) / 1e12


def matmul_tflops(device: str, dtype: str) -> float:
    """TFLOP/s of a square ``n x n @ n x n`` matmul (``2 n^3`` FLOP) in ``dtype`` on ``device``,
    ``n`` grown from 512 until one call takes about ``TARGET_CALL_S`` (at most the device's max)."""
    rate = _square_matmul_tflops(device, dtype, 512)
    n = int((TARGET_CALL_S * rate * 1e12 / 2) ** (1 / 3)) // 256 * 256
    n = min(max(n, 512), MATMUL_MAX_SIZE[device])
    return rate if n == 512 else _square_matmul_tflops(device, dtype, n)


def copy_gbps(device: str) -> float:
    """GB/s of ``dst.copy_(src)`` on a large buffer (bytes read + bytes written)."""
    count = COPY_BYTES[device] // 4
    src = torch.empty(count, device=device).uniform_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / _median_s("dst.copy_(src)", dst=dst, src=src) / 1e9


def machine_key(device: str) -> str:
    return f"{device_name(device)} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def measured_peaks(device: str, dtypes: list[str], cache: Path) -> dict[str, object]:
    """``{"memory_gbps": ..., "matmul_tflops": {dtype: ...}}`` for this machine, from ``cache``
    when it holds them, otherwise measured (a few seconds) and written there atomically.

    Peaks measured while other processes took the CPU (``perfsuite.measure.contention``) are
    returned with ``"contended": [reasons]`` and not cached, so the next run measures them again.
    """
    stored = json.loads(cache.read_text()) if cache.exists() else {}
    key = machine_key(device)
    peaks = stored.get(key, {"memory_gbps": None, "matmul_tflops": {}})
    missing = [d for d in dtypes if d not in peaks["matmul_tflops"]]
    if peaks["memory_gbps"] is not None and not missing:
        return peaks
    with Probe() as probe:
        if peaks["memory_gbps"] is None:
            peaks["memory_gbps"] = copy_gbps(device)
        for dtype in missing:
            peaks["matmul_tflops"][dtype] = matmul_tflops(device, dtype)
    evidence = probe.evidence()
    if evidence.contended:
        return dict(peaks, contended=list(evidence.reasons))
    stored[key] = peaks
    write_text_atomic(cache, json.dumps(stored, indent=2, sort_keys=True) + "\n")
    return peaks
