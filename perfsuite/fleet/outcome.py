"""What a fleet's shards left behind: each shard's state, software that differs between shards, and
``fleet.json``, the fleet's record (a rerun of one shard updates its entry, never the others').

A shard is ``complete`` when its process passed or failed tests (exit 0 or 1) and its ``run.json`` says
complete; ``partial`` when ``run.json`` says it was cut short (a crash or kill mid-run leaves that);
``missing`` when the process died before writing any. A shard whose torch, CUDA, cuDNN, HIP or driver
differs from most of the fleet is flagged: its timings belong to another series, not pooled with the rest.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from perfsuite.errors import PerfsuiteError
from perfsuite.storage import read_json, write_text_atomic

# software that must agree for shards' timings to pool (the ``run.json`` machine fields, measure.machine)
SOFTWARE_FIELDS = (
    "torch_version",
    "cuda_version",
    "cudnn_version",
    "hip_version",
    "driver_version",
)
FLEET_FILE = "fleet.json"


def shard_state(results_dir: Path) -> tuple[str, dict]:
    """(``complete`` | ``partial`` | ``missing``, the run's machine fields) from ``results_dir/run.json``."""
    path = results_dir / "run.json"
    if not path.is_file():
        return "missing", {}
    try:
        run = read_json(path, PerfsuiteError, "run summary")
    except PerfsuiteError:
        return "missing", {}
    return ("complete" if run.get("complete") else "partial"), run.get("machine") or {}


def software_differences(machines: dict[str, dict]) -> dict[str, list[str]]:
    """Shard name -> lines naming each software field where it differs from the most common value among
    ``machines`` (shard name -> machine fields); shards that agree are left out."""
    flagged: dict[str, list[str]] = {}
    for field in SOFTWARE_FIELDS:
        values = Counter(json.dumps(m.get(field)) for m in machines.values())
        if len(values) < 2:
            continue
        common = values.most_common(1)[0][0]
        for name, machine in machines.items():
            if json.dumps(machine.get(field)) != common:
                flagged.setdefault(name, []).append(
                    f"{field} {machine.get(field)!r}, the others' {json.loads(common)!r}"
                )
    return flagged


def update_fleet_file(
    results_root: Path, fleet_id: str, count: int, entries: dict[str, dict]
) -> Path:
    """Merge ``entries`` (shard name -> record) into ``results_root/fleet.json`` atomically.

    Raises:
        PerfsuiteError: the file belongs to another fleet id or shard count (a rerun must name the same).
    """
    path = results_root / FLEET_FILE
    record = {"fleet_id": fleet_id, "shard_count": count, "shards": {}}
    if path.is_file():
        record = read_json(path, PerfsuiteError, "fleet record")
        if (record.get("fleet_id"), record.get("shard_count")) != (fleet_id, count):
            raise PerfsuiteError(
                f"{path} is fleet {record.get('fleet_id')!r} with {record.get('shard_count')} shards, "
                f"not {fleet_id!r} with {count}; give another --results folder, or --fleet-id "
                f"{record.get('fleet_id')} --shards {record.get('shard_count')} to rerun its shards"
            )
    record["shards"].update(entries)
    return write_text_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def read_fleet_file(path: Path) -> dict:
    """``fleet.json`` as written by ``update_fleet_file``. Raises PerfsuiteError naming an unreadable file."""
    return read_json(path, PerfsuiteError, "fleet record")
