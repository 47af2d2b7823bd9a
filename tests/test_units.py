"""Bytes in binary units, as the profiler writes them."""

import pytest

from perfsuite.units import format_bytes


@pytest.mark.parametrize(
    "size, text",
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (4 * 1024**2, "4.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (5 * 1024**4, "5120.0 GiB"),
        (-4096, "-4.0 KiB"),
    ],
)
def test_format_bytes_uses_the_largest_binary_unit_below_1024(size, text):
    assert format_bytes(size) == text
