"""Which Chrome traces in a folder belong to which run: ``manifest.json`` beside the traces.

Runs write traces into one folder (``perfsuite-results/traces``), each file named for its
variant, case and mode, so an interrupted run leaves some files of its own beside older files
of another run. The manifest lists, per run, the traces it wrote and how the run ended:

    {"schema_version": 1, "runs": [{"run_id": "...", "started": "2026-12-01T02:40:00+00:00",
      "status": "complete", "traces": ["naive-b2h8s256d64-fp32-causal-cpu.pt.trace.json.gz", ...]}]}

``status`` is ``"running"`` while the run is on (and stays so if the process dies),
then ``"complete"`` or the reason it stopped (``"interrupted"``, ``"failed"``). A file a later
run rewrites moves to that run's list. The manifest is rewritten atomically at every change
(``perfsuite.storage``); nothing in the folder is deleted.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from perfsuite.storage import write_text_atomic

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1
KEPT_RUNS = 20  # older runs' entries are dropped from the manifest (their files stay)


class TraceManifest:
    """The manifest of one run in ``folder``; ``start``, ``add`` each trace, then ``finish``."""

    def __init__(self, folder: Path, run_id: str):
        self.folder = Path(folder)
        self.path = self.folder / MANIFEST_NAME
        self.run_id = run_id
        self._entry: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            data = None  # unreadable: start afresh (the trace files themselves are untouched)
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            data = {"schema_version": SCHEMA_VERSION, "runs": []}
        return data

    def _write(self, data: dict[str, Any]) -> None:
        data["runs"] = data["runs"][-KEPT_RUNS:]
        write_text_atomic(self.path, json.dumps(data, indent=2) + "\n")

    def _update(self, change) -> None:
        data = self._load()
        runs = [r for r in data["runs"] if isinstance(r, dict) and r.get("run_id") != self.run_id]
        change(runs)
        data["runs"] = runs + [self._entry]
        self._write(data)

    def start(self) -> None:
        """Record this run as ``running`` with no traces yet."""
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self._entry = {"run_id": self.run_id, "started": started, "status": "running", "traces": []}
        self._update(lambda runs: None)

    def add(self, trace: Path) -> None:
        """Record ``trace`` (a file in the folder) as this run's; older runs no longer list it."""
        if self._entry is None:
            self.start()
        name = Path(trace).name
        if name not in self._entry["traces"]:
            self._entry["traces"].append(name)

        def drop_from_older(runs):
            for run in runs:
                if name in run.get("traces", []):
                    run["traces"] = [t for t in run["traces"] if t != name]

        self._update(drop_from_older)

    def finish(self, status: str) -> None:
        """Record how the run ended: ``"complete"``, ``"interrupted"``, ``"failed"``."""
        if self._entry is None:
            return
        self._entry["status"] = status
        self._update(lambda runs: None)


def read_manifest(folder: Path) -> list[dict[str, Any]]:
    """The runs listed in ``folder``'s manifest, oldest first (``[]`` when there is none)."""
    return TraceManifest(folder, "")._load()["runs"]
