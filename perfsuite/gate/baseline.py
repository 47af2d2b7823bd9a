"""Checks on the baseline a run compares with (``--benchmark-compare``), gate or not.

pytest-benchmark on its own skips a corrupt newest file and compares with an older one,
exits 0 when the named baseline does not exist, takes a partial (interrupted) run as a
baseline, and lets ``--benchmark-compare perfsuite/suite/test_attention.py`` swallow the test
path as its value. Here each of those is a ``BaselineError`` naming the value or the file,
and a baseline that covers few of this run's benchmarks is named in a note.

An interrupted or crashed run's saved file carries ``INCOMPLETE_KEY`` (what ran, what was
expected, why it stopped); ``check_baseline_file`` refuses it as a baseline.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from perfsuite.errors import BaselineError
from perfsuite.gate.compare import benchmark_key, load_benchmark_file
from perfsuite.storage import EXTRA_INFO_SCHEMA_VERSION, INCOMPLETE_KEY, check_schema_version

NEWEST = "[0-9][0-9][0-9][0-9]_"  # pytest-benchmark's glob for "the newest saved run"
FEW_COVERED_FRACTION = 0.5  # a baseline with fewer of this run's benchmarks is named as partial


@dataclasses.dataclass(frozen=True)
class Incomplete:
    """Why a run's saved results are partial: ``reason`` (``"interrupted (Ctrl-C)"``,
    ``"crashed"``, ``"tests failed to run"``), benchmarks ``finished`` of ``expected``."""

    reason: str
    finished: int
    expected: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return f"{self.reason}: {self.finished} of {self.expected} benchmarks finished"


def looks_like_test_path(value: str) -> bool:
    """True when a ``--benchmark-compare`` value is really a test path pytest should have got:
    an existing ``.py`` file or directory, a node id (``::``), or a name ending in ``.py``."""
    if "::" in value or value.endswith(".py"):
        return True
    path = Path(value)
    try:
        return path.is_dir() or (path.is_file() and path.suffix != ".json")
    except OSError:
        return False


def compare_value_error(value: str) -> str:
    """The message for a ``--benchmark-compare`` value that is a test path."""
    return (
        f"--benchmark-compare took {value!r} as the run to compare with, but it is a test path: the option's "
        "value is optional, so a path right after it becomes its value (a pytest-benchmark parsing trap). "
        f"Write --benchmark-compare=NUM (or --benchmark-compare= for the newest run), or put {value!r} before "
        "--benchmark-compare"
    )


def check_compare_value(value: str | bool | None) -> None:
    """Refuse a ``--benchmark-compare`` value that is a test path (``compare_value_error``).

    Raises:
        BaselineError: ``value`` is a node id, a ``.py`` file or a folder of tests.
    """
    if isinstance(value, str) and looks_like_test_path(value):
        raise BaselineError(compare_value_error(value))


def check_baseline_file(path: str | Path, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load ``path`` (unless ``data`` is given) and refuse it when corrupt, truncated or incomplete.

    Raises:
        BaselineError: unreadable or not a pytest-benchmark file, or marked ``INCOMPLETE_KEY``
            (a partial run), or holding benchmarks of a newer schema than this perfsuite reads;
            the message names the file and says what to do.
    """
    data = load_benchmark_file(path) if data is None else data
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        if isinstance(info, dict) and "schema_version" in info:
            check_schema_version(
                info["schema_version"],
                EXTRA_INFO_SCHEMA_VERSION,
                f"{path}: benchmark {benchmark_key(bench)}",
                BaselineError,
            )
    marker = data.get(INCOMPLETE_KEY)
    if marker:
        what = (
            Incomplete(**marker).describe()
            if isinstance(marker, dict) and set(marker) == {"reason", "finished", "expected"}
            else marker
        )
        raise BaselineError(
            f"{path}: an incomplete run ({what}) is not used as a baseline; compare with a complete "
            "run (--benchmark-compare=NUM) or rerun"
        )
    return data


def resolve_baseline(storage: Any, compare: str | bool) -> tuple[Path, dict[str, Any]]:
    """The file ``--benchmark-compare`` will load and its contents, checked.

    ``storage``: pytest-benchmark's storage (``query(glob)`` lists files oldest first);
    ``compare``: the option's value (True for the newest run).

    Raises:
        BaselineError: the value is a test path, nothing matches (comparing is impossible),
            or the newest matching file is corrupt, truncated or incomplete (pytest-benchmark
            would skip it for an older one).
    """
    check_compare_value(compare)
    pattern = NEWEST if compare is True else str(compare)
    try:
        files = storage.query(pattern)
    except ValueError as exc:  # pytest-benchmark: not an existing file or acceptable glob
        raise BaselineError(f"--benchmark-compare={compare!r}: {exc}") from None
    if not files:
        wanted = "saved run" if compare is True else f"saved run matching {compare!r}"
        raise BaselineError(
            f"--benchmark-compare: no {wanted} in {storage}; nothing to compare with "
            "(save one first: a timed run with --benchmark-autosave, or pytest -c benchmarks.ini)"
        )
    chosen = Path(files[-1])
    return chosen, check_baseline_file(chosen)


def coverage_note(baseline: dict[str, Any], head_keys: Iterable[str], name: str) -> str | None:
    """A note when the baseline ``name`` has only some of this run's benchmarks (``variant/case[/mode]``
    keys), else None: ``baseline 0003 has 5 of this run's 20 benchmarks; 15 are compared with nothing``."""
    head = list(dict.fromkeys(head_keys))
    if not head:
        return None
    theirs = {benchmark_key(b) for b in baseline.get("benchmarks", [])}
    covered = [k for k in head if k in theirs]
    if len(covered) == len(head):
        return None
    few = " (few: under half)" if len(covered) < FEW_COVERED_FRACTION * len(head) else ""
    missing = [k for k in head if k not in theirs]
    shown = ", ".join(missing[:5]) + (f", and {len(missing) - 5} more" if len(missing) > 5 else "")
    return (
        f"baseline {name} has {len(covered)} of this run's {len(head)} benchmarks{few}; "
        f"{len(missing)} are compared with nothing: {shown}"
    )
