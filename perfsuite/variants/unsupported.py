"""How a variant says it cannot run a case: ``CaseUnsupported``, raised from ``prepare`` or the call.

The suite (``perfsuite.measure.evidence.run_once``) turns it into a skip whose reason is the
message, so a limitation of a library or a package that is not installed is a named skip, never a
silent pass or an error. The message must say what is missing or unsupported and why.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class CaseUnsupported(Exception):
    """The variant cannot run this case on this machine; the message names the limitation."""


def optional_module(name: str, install_hint: str) -> tuple[ModuleType | None, str | None]:
    """``(module, None)`` when ``name`` imports, else ``(None, reason)`` naming the error and ``install_hint``."""
    try:
        return importlib.import_module(name), None
    except (
        Exception
    ) as exc:  # ImportError, or a package that fails while importing (a CUDA build on a CPU host)
        return (
            None,
            f"{name} is not importable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); {install_hint}",
        )
