"""Warnings a variant raises on its first call: recorded, one line each, and shown once per variant."""

from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path

from perfsuite.variants import Variant


class VariantWarning(UserWarning):
    """A warning a variant raised on its first call, re-issued once per process with the variant named."""


_ANNOUNCED: set[tuple[str, str]] = set()
LOCATION_RE = re.compile(r" \([^()]*:\d+\)$")  # warning_line's "(file.py:12)"
TRIGGERED_RE = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")


def warning_line(caught: warnings.WarningMessage) -> str:
    """``UserWarning: <first line of the message> (file.py:12)``, without torch's ``Triggered internally`` note."""
    text = TRIGGERED_RE.sub("", str(caught.message)).strip().splitlines()
    where = f"{Path(caught.filename).name}:{caught.lineno}"
    return f"{caught.category.__name__}: {text[0] if text else ''} ({where})"


def shown_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """Lines of the warnings worth showing: not our own ``VariantWarning``s, and not torch's deprecation
    notices about its own internals (``torch.jit.script_method`` while ``torch.compile`` sets up)."""
    lines = []
    for found in caught:
        if issubclass(found.category, VariantWarning):
            continue
        if (
            issubclass(found.category, (DeprecationWarning, PendingDeprecationWarning))
            and "torch" in Path(found.filename).parts
        ):
            continue
        lines.append(warning_line(found))
    return list(dict.fromkeys(lines))


def announce_warnings(variant: Variant, lines: list[str]) -> None:
    """Re-issue each warning line as a ``VariantWarning`` naming the variant, once per process."""
    for line in lines:
        # keyed without its location: a warning with stacklevel > 1 points at whichever of
        # perfsuite's call sites called the variant (the checked first call, a mode's step)
        key = (variant.name, LOCATION_RE.sub("", line))
        if key not in _ANNOUNCED:
            _ANNOUNCED.add(key)
            warnings.warn(
                VariantWarning(f"variant {variant.name} warned on its first call: {line}"),
                stacklevel=3,
            )


@contextlib.contextmanager
def announced_once(variant: Variant):
    """Record warnings raised inside; show each once per variant and message (``announce_warnings``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    announce_warnings(variant, shown_warnings(caught))
