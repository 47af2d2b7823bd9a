"""Atomic file writes: a reader sees the old file or the whole new one, never half of it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    Parent folders are created. The temporary file is removed if anything fails.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(temp_name, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """``write_bytes_atomic`` for UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def read_json(path: Path, error: type[Exception], what: str) -> Any:
    """Parse the JSON file ``path``; raise ``error`` naming the file and ``what`` it should be
    when it is missing, unreadable, truncated or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: corrupt or truncated {what} ({exc})") from None


# Versions of what perfsuite stores: each benchmark's ``extra_info`` (``suite/record.py``) and
# ``run.json`` (``report/results.py``). A reader refuses a newer version (``check_schema_version``).
EXTRA_INFO_SCHEMA_VERSION = 2
RUN_SCHEMA_VERSION = 2
# The key of a saved pytest-benchmark file that says why the run is partial (``suite/session.py``).
INCOMPLETE_KEY = "perfsuite_incomplete"


def check_schema_version(found: Any, supported: int, what: str, error: type[Exception]) -> None:
    """Raise ``error`` naming ``what`` and the version when ``found`` is not a schema version up to ``supported``.

    A missing or non-integer version, or one newer than this perfsuite writes, is refused: a newer
    record may hold fields whose meaning this reader does not know.
    """
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise error(
            f"{what}: schema_version {found!r} is not a perfsuite schema version (this perfsuite "
            f"reads versions 1 to {supported})"
        )
    if found > supported:
        raise error(
            f"{what}: schema_version {found} is newer than this perfsuite reads ({supported}); "
            "upgrade perfsuite to read it"
        )


def unwritable_directory_reason(path: str | Path) -> str | None:
    """Why files cannot be written into the folder ``path`` (made if missing), or None when they can.

    ``path`` or one of its parents is a file, or the folder (or the nearest existing parent, which
    the missing ones would be made in) is not writable by this process.
    """
    path = Path(path)
    current = path
    while not current.exists():
        if current.parent == current:
            break
        current = current.parent
    if current.exists() and not current.is_dir():
        which = "" if current == path else f" (a parent of {path})"
        return f"{current}{which} is a file, not a folder"
    if not os.access(current, os.W_OK | os.X_OK):
        which = "" if current == path else f" (where {path} would be made)"
        return f"{current}{which} is not writable"
    return None


_SAFE_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-=,")


def safe_file_name(name: str) -> str:
    """``name`` as one file name: each character other than letters, digits and ``_ . + - = ,``
    replaced by ``_``, and a leading ``.`` too (no ``..``, no separator, no hidden file). The result
    is never empty."""
    cleaned = "".join(c if c in _SAFE_CHARACTERS else "_" for c in name)
    if cleaned.startswith("."):
        cleaned = "_" + cleaned[1:]
    return cleaned or "_"


def path_inside(folder: str | Path, name: str) -> Path:
    """``folder / safe_file_name(name)``, proven inside ``folder`` (after resolving links).

    Raises:
        ValueError: the path resolves outside ``folder`` (a link inside it pointing out), naming both.
    """
    base = Path(folder)
    path = base / safe_file_name(name)
    if not path.resolve().is_relative_to(base.resolve()):
        raise ValueError(f"{path} resolves to {path.resolve()}, outside {base.resolve()}; refused")
    return path
