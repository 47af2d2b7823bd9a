"""A finished shard into the history store: its saved pytest-benchmark file under the shard's run id.

The run's uid is the shard's run id (``<fleet id>-shard-<i>-of-<N>``): recording a shard again (a
rerun, or the plugin having recorded it already under ``PERFSUITE_RUN_ID``) adds nothing; its
``run_group`` is the fleet id, so the store and dashboard see the shards as one run of one commit;
its labels carry the shard, the device and the GPU's state (``measure.gpu_state``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from perfsuite.history import open_store
from perfsuite.history.capture import commit_of
from perfsuite.history.importing import COMMIT_KEY, run_from_benchmark_json


def saved_file(results_dir: Path) -> Path | None:
    """The newest pytest-benchmark file a shard saved under ``results_dir/benchmarks``, or None."""
    found = sorted(
        (results_dir / "benchmarks").rglob("*.json"), key=lambda p: (p.stat().st_mtime, p.name)
    )
    return found[-1] if found else None


def shard_run(results_dir: Path, run_id: str, fleet_id: str, labels: dict, root: Path):
    """The ``RunRecord`` of a shard's saved file; None when it saved none (it died before the end)."""
    path = saved_file(results_dir)
    if path is None:
        return None
    data = json.loads(
        path.read_text()
    )  # its commit, testbed and software as the shard saw them (capture.py)
    run = run_from_benchmark_json(
        data,
        source="plugin",
        commit=None if COMMIT_KEY in data else commit_of(root),
        run_group=fleet_id,
        labels={**labels, "gpu_state": data.get("perfsuite_gpu_state"), "saved_file": str(path)},
    )
    return dataclasses.replace(run, uid=run_id)


def record_shard(
    results_dir: Path,
    run_id: str,
    fleet_id: str,
    labels: dict,
    root: Path,
    url: str | None = None,
    ini_value: str | None = None,
) -> str:
    """Record a shard; what happened, as a phrase: ``recorded``, ``already in the store``, ``nothing saved``.

    Raises:
        HistoryError: the store cannot be opened or written (naming it).
    """
    run = shard_run(results_dir, run_id, fleet_id, labels, root)
    if run is None:
        return "nothing saved"
    with open_store(url, ini_value, root=root) as store:
        return "recorded" if store.record(run) else "already in the store"


def _timed_option(name: str, default: float) -> float:
    from perfsuite.suite.runner import TIMED_OPTIONS

    found = [o.split("=", 1)[1] for o in TIMED_OPTIONS if o.startswith(f"{name}=")]
    return float(found[0]) if found else default


def snapshot_weights(
    results_root: Path, root: Path, url: str | None = None, ini_value: str | None = None
) -> Path:
    """Write the durations every shard of a fleet balances by (``suite.shards.stored_durations``) to
    ``results_root/shard-weights.json``, once before any shard starts, so shards that record while
    others start still split alike; ``{}`` when the store is missing or knows none. Returns the file."""
    from perfsuite.storage import write_text_atomic
    from perfsuite.suite.shards import stored_durations

    try:
        with open_store(url, ini_value, root=root, create=False) as store:
            durations = stored_durations(
                store,
                commit_of(root).sha,
                int(_timed_option("--benchmark-min-rounds", 5)),
                _timed_option("--benchmark-max-time", 1.0),
            )
    except Exception:  # no store yet, or unreadable: shards split by test count, all alike
        durations = {}
    return write_text_atomic(
        results_root / "shard-weights.json", json.dumps(durations, indent=1, sort_keys=True) + "\n"
    )
