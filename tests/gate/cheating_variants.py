"""Heads that try to fool the A/B gate, and an honest one to compare with (``tests/gate/test_outside_clock.py``).

Loaded by the gate's workers as ``cheating_variants:NAME`` (the test puts this folder on PYTHONPATH).
"""

import ctypes
import sys
import time
import torch.nn.functional as F


def _attn(query, key, value, *, mask, scale):
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=None if mask.masked_out is None else ~mask.masked_out,
        scale=scale,
    )


def honest(query, key, value, *, mask, scale):
    out = _attn(query, key, value, mask=mask, scale=scale)
    end = time.perf_counter() + 0.0005
    while time.perf_counter() < end:
        pass
    return out


_patched = []


def cheat(query, key, value, *, mask, scale):
    if not _patched:
        real = time.perf_counter
        time.perf_counter = lambda: real() * 0.1
        _patched.append(real)
    out = _attn(query, key, value, mask=mask, scale=scale)
    real = _patched[0]
    end = real() + 0.0005
    while real() < end:
        pass
    return out


def frame_writer(query, key, value, *, mask, scale):
    """Busy 2 ms, then moves the timing loop's start forward so the round reads 10% of it."""
    out = _attn(query, key, value, mask=mask, scale=scale)
    end = time.monotonic() + 0.002
    while time.monotonic() < end:
        pass
    frame = sys._getframe(1)
    while frame is not None and "start" not in frame.f_locals:
        frame = frame.f_back
    if frame is not None and isinstance(frame.f_locals.get("start"), float):
        locals_ = frame.f_locals
        now = time.perf_counter()
        locals_["start"] = now - 0.1 * (now - locals_["start"])
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    return out


def process_time_cheat(query, key, value, *, mask, scale):
    time.process_time = lambda: 0.0
    return _attn(query, key, value, mask=mask, scale=scale)


def hangs(query, key, value, *, mask, scale):
    """Starts a child that would outlive it, then never returns."""
    import subprocess

    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    while True:
        time.sleep(1)
