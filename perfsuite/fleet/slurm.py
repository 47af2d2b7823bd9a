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
The store's URL never enters a job file: submitit pickles each task's arguments into the results
folder, readable by others, so a task gets the path of ``store-url`` there, a file only its owner can
read (mode 0600, ``write_store_reference``), and reads the URL from it on its node.
``executor="local"`` runs the same tasks as processes on this machine (submitit's local executor).
submitit is the optional extra ``perfsuite[slurm]``.
"""

from __future__ import annotations

import os
import shutil
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


STORE_REFERENCE = "store-url"  # in the results folder, mode 0600: the URL a task records into


def write_store_reference(results_root: Path, store_url: str) -> Path:
    """Write ``store_url`` to ``results_root/store-url``, readable and writable by its owner only
    (0600 from its creation: there is no moment at which others could read it); returns its path."""
    results_root.mkdir(parents=True, exist_ok=True)
    path = results_root / STORE_REFERENCE
    temporary = path.with_name(f".{STORE_REFERENCE}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)  # whatever the umask, and for a file left by a crash
        os.write(descriptor, store_url.encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    return path


def read_store_reference(path: str | None) -> str | None:
    """The URL ``write_store_reference`` wrote at ``path`` (None: the default store)."""
    return Path(path).read_text(encoding="utf-8") if path else None


def run_shard(
    root: str,
    index: int,
    count: int,
    fleet_id: str,
    results_root: str,
    pytest_args: Sequence[str],
    store_reference: str | None,
) -> dict:
    """One array task: shard ``index`` of ``count`` in a child pytest, then its record into the store
    whose URL the file ``store_reference`` holds (``write_store_reference``; None: the default store).
    Returns the shard's fleet.json entry (exit code, state, recorded, host, Slurm ids); never raises
    for a failed pytest."""
    store_url = read_store_reference(store_reference)
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

    ``store_url``: resolve it before submitting (``history.resolve_url``), so every task writes the same
    store; the tasks get a reference to it (``write_store_reference``), never the URL itself.
    Raises UsageError without submitit, or with ``executor="slurm"`` where Slurm's ``sbatch`` is not
    on the PATH or refuses the array (its message).
    """
    submitit = _submitit()
    if executor == "slurm" and shutil.which("sbatch") is None:
        raise UsageError(
            "perfsuite fleet slurm: Slurm is not installed here (no sbatch on the PATH); run it "
            "on a Slurm login node, or try the tasks on this machine with --executor local"
        )
    reference = str(write_store_reference(results_root, store_url)) if store_url else None
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
    try:
        return chosen.map_array(
            run_shard,
            [str(root)] * n,
            indices,
            [count] * n,
            [fleet_id] * n,
            [str(results_root)] * n,
            [list(pytest_args)] * n,
            [reference] * n,
        )
    except (OSError, subprocess.CalledProcessError) as exc:  # sbatch missing or refusing the array
        detail = getattr(exc, "stderr", None) or getattr(exc, "output", None) or exc
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        raise UsageError(
            f"perfsuite fleet slurm: submitting the array failed: {str(detail).strip()}"
        ) from None


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
