"""Units as the field writes them: bytes in binary units (KiB, MiB, GiB)."""

from __future__ import annotations


def format_bytes(size: int) -> str:
    """Binary units, as the profiler and the post write them: ``4.0 MiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
