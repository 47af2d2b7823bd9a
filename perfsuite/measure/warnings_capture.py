"""Warnings a variant raises on its first call: recorded, one line each, and shown once per variant."""

from __future__ import annotations

import contextlib
import re
import sys
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


# torch's own warn-once registries (a set of warning ids per module): a warning already shown for one
# variant would otherwise never be seen for the next (flex_attention's "unfused implementation").
TORCH_WARN_ONCE = (("torch.nn.attention.flex_attention", "_WARNINGS_SHOWN"),)


@contextlib.contextmanager
def _torch_warns_again():
    """Empty torch's warn-once sets (``TORCH_WARN_ONCE``, where imported) inside; restore them after."""
    registries = [
        found
        for module, name in TORCH_WARN_ONCE
        if isinstance(found := getattr(sys.modules.get(module), name, None), set)
    ]
    saved = [set(registry) for registry in registries]
    for registry in registries:
        registry.clear()
    try:
        yield
    finally:
        for registry, before in zip(registries, saved):
            registry |= before


@contextlib.contextmanager
def recorded_warnings():
    """Every warning raised inside, in a list: Python's filters and torch's warn-once sets set aside."""
    with warnings.catch_warnings(record=True) as caught, _torch_warns_again():
        warnings.simplefilter("always")
        yield caught


@contextlib.contextmanager
def announced_once(variant: Variant):
    """Record warnings raised inside; show each once per variant and message (``announce_warnings``)."""
    with recorded_warnings() as caught:
        yield
    announce_warnings(variant, shown_warnings(caught))
