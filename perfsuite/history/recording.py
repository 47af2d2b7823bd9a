"""Recording a finished run into the store, for the front ends (plugin, ``perfsuite run``, ``ab``):
after timing, timed, and never raising: a store error comes back as a message to print."""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from pathlib import Path

from perfsuite.errors import HistoryError, NoHistoryStoreYet
from perfsuite.history.records import RunRecord

DISABLE_VALUES = ("off", "false", "0", "no")


@dataclasses.dataclass(frozen=True)
class Recorded:
    """How recording went: ``added`` runs (0 when already stored), ``benchmarks`` written (all added
    runs together: an A/B run adds a base and a head run), the store (as it may be printed),
    ``seconds`` spent, ``error`` (None on success), ``dirty``: a run from a tree with uncommitted
    changes (stored, never used as a point)."""

    added: int
    benchmarks: int
    store: str
    seconds: float
    error: str | None = None
    dirty: bool = False

    def line(self) -> str:
        """One line for the end of a run."""
        if self.error:
            return (
                f"perfsuite: warning: the run was not recorded in the history store ({self.error}); "
                "its files are saved as usual"
            )
        if not self.added:
            return f"perfsuite: history: this run is already in {self.store}"
        dirty = (
            " from a tree with uncommitted changes: shown, never used by history detect or the dashboard"
            if self.dirty
            else ""
        )
        return (
            f"perfsuite: history: recorded {self._what()} in {self.store} "
            f"({self.seconds:.2f} s){dirty}"
        )

    def _what(self) -> str:
        """``N benchmark(s)`` for one run; ``R runs of N benchmark(s) each`` (or ``in all``) for several."""
        if self.added == 1:
            return f"{self.benchmarks} benchmark(s)"
        each, uneven = divmod(self.benchmarks, self.added)
        if uneven:
            return f"{self.added} runs, {self.benchmarks} benchmark(s) in all"
        return f"{self.added} runs of {each} benchmark(s) each"


def record_runs(
    runs: list[RunRecord],
    url: str | None = None,
    ini_value: str | None = None,
    root: Path | None = None,
) -> Recorded:
    """Write ``runs`` into the store (``store.resolve_url(url, ini_value, root)``), each in its own
    transaction; any error is caught and returned in ``Recorded.error``."""
    started = time.perf_counter()
    name = url or ini_value or "the history store"
    try:
        # imported here: SQLAlchemy only when a run is recorded, not in every pytest run that loads
        # the plugin; an offline install (pip --no-deps) may lack it
        from perfsuite.history.store import open_store, shown
    except ImportError as exc:
        why = f"{exc}; perfsuite's history store needs it: pip install 'sqlalchemy>=2'"
        return Recorded(0, 0, name, time.perf_counter() - started, why)
    try:
        with open_store(url, ini_value, root) as store:
            name = shown(store.url).removeprefix("sqlite:///")
            written = [len(run.benchmarks) for run in runs if store.record(run)]
    except HistoryError as exc:
        return Recorded(0, 0, name, time.perf_counter() - started, str(exc))
    except Exception as exc:  # the store never fails a run: any failure becomes a warning
        return Recorded(0, 0, name, time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
    dirty = any(run.commit.dirty for run in runs)
    return Recorded(len(written), sum(written), name, time.perf_counter() - started, dirty=dirty)


def disabled(value: str | None) -> bool:
    """True when the ``perfsuite_history`` setting turns recording off."""
    return (value or "").strip().lower() in DISABLE_VALUES


@dataclasses.dataclass(frozen=True)
class AbSide:
    """One side of a ``perfsuite ab`` run as the store records it: ``ref`` (a git ref, None for a
    tree), ``tree`` (its source tree, None for installed code), ``python`` (its interpreter) and
    ``overridden`` (a ``--*-variant`` ran instead of the commit's code: not recorded)."""

    ref: str | None
    tree: Path | None
    python: str
    overridden: bool = False


def record_ab(
    payload: dict, info: dict, sides: dict[str, AbSide], repo: Path, ini_value: str | None = None
) -> str | None:
    """Record both sides of an A/B run (``sides``: ``base`` and ``head``) in the history store, each
    side that is a commit's code; the history facts go into ``payload`` (the ``--json`` file) too, so
    importing that file later adds nothing. ``info``: the head worker's machine info, with the base's
    under ``base_machine``; ``repo``: the repository the refs are of; ``ini_value``: the configured
    ``perfsuite_history_url``. Returns the line to print, None when nothing was recorded."""
    from perfsuite.history import capture, importing
    from perfsuite.history.records import Commit

    def commit(side: AbSide) -> Commit:
        if side.ref:
            return capture.commit_of(repo, side.ref, dirty=False)
        return capture.commit_of(side.tree) if side.tree else Commit()

    machines = {"base": info["base_machine"], "head": info}
    payload.update(
        {
            importing.RUN_UID_KEY: uuid.uuid4().hex,
            "recorded_at": time.time(),
            "commits": {name: dataclasses.asdict(commit(side)) for name, side in sides.items()},
            importing.TESTBED_KEY: dataclasses.asdict(capture.testbed_now(info)),
            # this interpreter's versions for a side that runs it (the usual case); another
            # interpreter's side keeps the torch/CUDA versions its worker reported
            importing.SOFTWARE_KEY: {
                name: capture.software_versions(machines[name])
                for name, side in sides.items()
                if side.python == sys.executable
            },
        }
    )
    runs = [
        run
        for run in importing.runs_from_ab_json(payload, repository=capture.repository_name(repo))
        if not sides[run.source.removeprefix("ab-")].overridden and run.benchmarks
    ]
    return record_runs(runs, ini_value=ini_value).line() if runs else None


def aa_spreads_here(
    machine_info: dict, newest: int, ini_value: str | None = None, root: Path | None = None
) -> tuple[dict[str, list[float]], str]:
    """The spreads between worker pairs of the A/A gates the history store holds for this machine
    (``Store.aa_spreads`` on ``capture.testbed_now(machine_info)``, the ``newest`` per benchmark) and a
    line to print: what was read, or why nothing was ("" for a store that does not exist yet). Never
    raises: the history never fails a gate."""
    from perfsuite.history import capture

    try:
        from perfsuite.history.store import open_store, shown

        with open_store(None, ini_value, root, create=False) as store:
            testbed = capture.testbed_now(machine_info).fingerprint
            spreads = store.aa_spreads(testbed, newest)
            name = shown(store.url).removeprefix("sqlite:///")
    except NoHistoryStoreYet:
        return {}, ""
    except HistoryError as exc:
        return {}, f"perfsuite: warning: no A/A noise floor read from the history store ({exc})"
    except Exception as exc:  # as recording: the store never fails a gate
        return (
            {},
            f"perfsuite: warning: no A/A noise floor read from the history store ({type(exc).__name__}: {exc})",
        )
    if not spreads:
        return {}, ""
    gates = max(len(s) for s in spreads.values())
    return spreads, (
        f"perfsuite: note: noise floor: the A/A gates recorded in {name} on this machine set it for "
        f"{len(spreads)} benchmark(s) (up to {gates} gate(s) each; a --noise-floor document overrides)"
    )
