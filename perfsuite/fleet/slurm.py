"""A Slurm job array through submitit: one task per shard (and GPU), every task recording into one store.

    from perfsuite.fleet.slurm import submit_array
    jobs = submit_array(Path.cwd(), count=8, store_url="postgresql+psycopg://bench@db/perfsuite",
                        partition="gpu", gpus_per_task=1)
    entries = wait_for(jobs)        # shard name -> what happened (fleet.json's entries)

Each task runs ``run_shard`` on its node: the timed suite's shard in a child pytest (the same command
``perfsuite fleet local`` runs; Slurm sets the task's ``CUDA_VISIBLE_DEVICES`` from its GPU allocation,
so perfsuite leaves it alone), then records the shard into the store under the run id
``<fleet id>-shard-<i>-of-<N>`` (idempotent: a requeued or rerun task adds nothing). Tasks on several
machines need a store they all reach: PostgreSQL (``postgresql+psycopg://``). The root folder and the
results folder must be on a file system the nodes share (submitit's pickles live there too).
``executor="local"`` runs the same tasks as processes on this machine (submitit's local executor).
submitit is the optional extra ``perfsuite[slurm]``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from perfsuite.errors import UsageError
from perfsuite.fleet import outcome
from perfsuite.fleet.local import (
    EXIT_MEANINGS,
    FLEET_ID_VARIABLE,
    RUN_ID_VARIABLE,
    ShardJob,
    child_arguments,
)
from perfsuite.fleet.record import record_shard
from perfsuite.measure.conditions import required_env
from perfsuite.suite.shards import Shard


def _submitit():
    try:
        import submitit
    except ImportError:
        raise UsageError(
            "perfsuite fleet slurm needs submitit: pip install 'perfsuite[slurm]'"
        ) from None
    return submitit


def run_shard(
    root: str,
    index: int,
    count: int,
    fleet_id: str,
    results_root: str,
    pytest_args: Sequence[str],
    store_url: str | None,
) -> dict:
    """One array task: shard ``index`` of ``count`` in a child pytest, then its record. Returns the shard's
    fleet.json entry (exit code, state, recorded, host, Slurm ids); never raises for a failed pytest."""
    job = ShardJob(
        Shard(index, count),
        os.environ.get("CUDA_VISIBLE_DEVICES", "none"),
        "CUDA_VISIBLE_DEVICES",
        Path(results_root) / f"shard-{index}-of-{count}",
        fleet_id,
    )
    job.results_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **required_env(), RUN_ID_VARIABLE: job.run_id, FLEET_ID_VARIABLE: fleet_id}
    with open(job.log_path, "w", encoding="utf-8") as log:
        code = subprocess.call(
            child_arguments(job, Path(root), list(pytest_args)),
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    state, machine = outcome.shard_state(job.results_dir)
    state = (
        "empty" if code == 5 or (code == 0 and state == "missing") else state
    )  # nothing timed in it
    slurm = {
        k.lower(): os.environ[k]
        for k in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURMD_NODENAME")
        if k in os.environ
    }
    recorded = "not recorded: it crashed"
    if state == "empty":
        recorded = "nothing to record"
    elif code in (0, 1) and state == "complete":
        try:
            recorded = record_shard(
                job.results_dir,
                job.run_id,
                fleet_id,
                {"shard": str(job.shard), **slurm, "device": job.device},
                Path(root),
                store_url,
            )
        except (
            Exception
        ) as exc:  # a store error is reported with the shard, never lost in a task's log
            recorded = f"not recorded: {exc}"
    elif code in (0, 1):
        recorded = f"not recorded: its run is {state}"
    return {
        "shard": str(job.shard),
        "device": job.device,
        "variable": job.variable,
        "run_id": job.run_id,
        "exit_code": code,
        "ended": EXIT_MEANINGS.get(code, f"exit {code}")
        if code >= 0
        else f"killed by signal {-code}",
        "state": state,
        "recorded": recorded,
        "log": str(job.log_path),
        "slurm": slurm,
        "software": {f: machine.get(f) for f in outcome.SOFTWARE_FIELDS},
    }


def submit_array(
    root: Path,
    count: int,
    *,
    fleet_id: str,
    results_root: Path,
    store_url: str | None = None,
    pytest_args: Sequence[str] = (),
    only: set[int] | None = None,
    executor: str = "slurm",
    partition: str | None = None,
    gpus_per_task: int = 1,
    cpus_per_task: int | None = None,
    timeout_min: int = 120,
    parallelism: int | None = None,
    mem_gb: float | None = None,
) -> list:
    """Submit shards 1..count (or ``only``) as one job array; the submitit jobs, in shard order.

    ``store_url``: resolve it before submitting (``history.resolve_url``), so every task writes the same store.
    Raises UsageError without submitit.
    """
    submitit = _submitit()
    indices = [i for i in range(1, count + 1) if only is None or i in only]
    folder = results_root / "submitit" / "%j"
    chosen = submitit.AutoExecutor(folder=folder, cluster=executor)
    parameters = {
        "timeout_min": timeout_min,
        "nodes": 1,
        "tasks_per_node": 1,
        "gpus_per_node": gpus_per_task,
        "name": f"perfsuite-{fleet_id}",
    }
    if cpus_per_task:
        parameters["cpus_per_task"] = cpus_per_task
    if mem_gb:
        parameters["mem_gb"] = mem_gb
    if executor == "slurm":
        parameters["slurm_array_parallelism"] = parallelism or len(indices)
        if partition:
            parameters["slurm_partition"] = partition
    chosen.update_parameters(**parameters)
    n = len(indices)
    return chosen.map_array(
        run_shard,
        [str(root)] * n,
        indices,
        [count] * n,
        [fleet_id] * n,
        [str(results_root)] * n,
        [list(pytest_args)] * n,
        [store_url] * n,
    )


def wait_for(
    jobs: list,
    indices: list[int],
    count: int,
    say: Callable[[str], None] = print,
    poll_s: float = 2.0,
) -> dict[str, dict]:
    """Wait for every job; say each as it ends. Shard name -> entry (``run_shard``'s, or why the task failed)."""
    entries: dict[str, dict] = {}
    pending = dict(zip(indices, jobs))
    while pending:
        for index, job in list(pending.items()):
            if not job.done():
                continue
            name = f"shard-{index}-of-{count}"
            try:
                entries[name] = job.result()
            except (
                Exception
            ) as exc:  # submitit's FailedJobError / UncompletedJobError: the task itself died
                entries[name] = {
                    "shard": f"{index}/{count}",
                    "exit_code": None,
                    "state": "missing",
                    "ended": f"task failed: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}",
                    "recorded": "not recorded: the task died",
                    "slurm": {"job_id": job.job_id},
                }
            entry = entries[name]
            say(
                f"shard {index}/{count} (job {job.job_id}): {entry['ended']}, run {entry['state']}, {entry['recorded']}"
            )
            del pending[index]
        if pending:
            time.sleep(poll_s)
    return entries
