"""``perfsuite fleet``: the timed suite spread over GPUs and machines, one shard per process.

    perfsuite fleet local [--devices LIST] [--shards N] [--rerun I,J] [--fleet-id ID] [--results DIR] [PYTEST ARGS]
    perfsuite fleet slurm --shards N [--partition P] [--gpus-per-task 1] [--store URL] [...] [PYTEST ARGS]

``local`` starts one pytest process per GPU of this machine (``perfsuite.fleet.local``); each sees one
device of your visible list (``CUDA_VISIBLE_DEVICES=2,3 perfsuite fleet local`` uses GPUs 2 and 3 only;
ROCm: ``HIP_VISIBLE_DEVICES``), runs shard i of N (``--perfsuite-shard``) and records into the history
store. ``--devices 0,1`` on a machine without GPUs runs CPU processes standing in for GPUs. A shard that
crashed is named with its GPU; rerun it alone with the ``--rerun`` line printed (same fleet id: the store
keeps one run per shard). Exit codes: 0 every shard passed, 1 a shard failed or crashed, 2 bad arguments.
``slurm``: a submitit job array, one task per shard (``perfsuite.fleet.slurm``, extra ``perfsuite[slurm]``).
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from perfsuite.errors import UsageError


def add_command(commands) -> None:
    fleet = commands.add_parser(
        "fleet",
        help="the timed suite over several GPUs (one process per GPU) or a Slurm array",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = fleet.add_subparsers(dest="fleet_command", required=True)
    local = where.add_parser(
        "local",
        help="one pytest process per GPU of this machine, each its own shard",
        usage="perfsuite fleet local [-h] [--devices LIST] [--shards N] [--rerun I,J] "
        "[--fleet-id ID] [--results DIR] [PYTEST ARGS ...]",
    )
    local.add_argument(
        "--devices",
        help="devices as your CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES spells them "
        "(default: every visible GPU); without GPUs, CPU processes stand in for them",
    )
    _common(local)
    slurm = where.add_parser(
        "slurm", help="a Slurm job array through submitit, one task per shard and GPU"
    )
    _common(slurm)
    slurm.add_argument("--partition", help="Slurm partition")
    slurm.add_argument(
        "--gpus-per-task", type=int, default=1, help="GPUs per task (0: CPU tasks; default 1)"
    )
    slurm.add_argument(
        "--timeout-min",
        type=int,
        default=120,
        help="time limit of each task, minutes (default 120)",
    )
    slurm.add_argument(
        "--executor",
        choices=("slurm", "local"),
        default="slurm",
        help="submitit executor: slurm, or local (processes on this machine, for trying it out)",
    )
    slurm.add_argument(
        "--no-wait", action="store_true", help="submit and print the job ids without waiting"
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, help="number of shards N (default: one per device)")
    parser.add_argument(
        "--rerun", help="run only these shards of N (comma-separated indices, from 1)"
    )
    parser.add_argument(
        "--fleet-id",
        help="the fleet's id (default: commit and time); a rerun gives the printed one",
    )
    parser.add_argument(
        "--store",
        help="history store URL (default: $PERFSUITE_HISTORY_URL, the ini key "
        "perfsuite_history_url, else .perfsuite/history.sqlite); Slurm tasks on several "
        "machines share a postgresql+psycopg:// one",
    )
    parser.add_argument(
        "--results",
        default="perfsuite-results/fleet",
        help="folder for fleet.json and each shard's results (default perfsuite-results/fleet)",
    )


def default_fleet_id(root: Path) -> str:
    """``<short commit>-<UTC time>``, or ``nogit-<UTC time>`` outside a git repository."""
    done = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    commit = done.stdout.strip() if done.returncode == 0 else "nogit"
    return f"{commit}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"


def shard_selection(count: int, rerun: str | None) -> set[int] | None:
    """``--rerun "2,4"`` -> {2, 4} (None: every shard). Raises UsageError naming a bad index."""
    if count < 1:
        raise UsageError(f"--shards {count}: give at least 1")
    if rerun is None:
        return None
    chosen = set()
    for text in rerun.split(","):
        if not text.strip().isdigit() or not 1 <= int(text) <= count:
            raise UsageError(
                f"--rerun {rerun!r}: {text.strip()!r} is not a shard index in 1..{count}"
            )
        chosen.add(int(text))
    return chosen


def run_fleet(args: argparse.Namespace) -> int:
    if args.fleet_command == "slurm":
        return run_slurm_command(args)
    return run_local(args)


def run_local(args: argparse.Namespace) -> int:
    import os

    import torch

    from perfsuite.fleet import devices, local, outcome
    from perfsuite.fleet.record import snapshot_weights
    from perfsuite.suite.runner import ini_value
    from perfsuite.suite.shards import WEIGHTS_VARIABLE

    root = Path.cwd()
    plan = devices.plan(
        args.devices, os.environ, torch.cuda.device_count(), rocm=torch.version.hip is not None
    )
    count = args.shards or len(plan.devices)
    only = shard_selection(count, args.rerun)
    fleet_id = args.fleet_id or default_fleet_id(root)
    results_root = (root / args.results).resolve()
    outcome.update_fleet_file(
        results_root, fleet_id, count, {}
    )  # refuses another fleet's folder before starting
    jobs = local.plan_jobs(
        plan.devices, plan.variable, count, only, results_root, fleet_id, plan.stand_ins
    )
    within = f" (within the caller's {plan.variable}={','.join(plan.outer)})" if plan.outer else ""
    within += " (no GPU here: CPU processes stand in for them)" if plan.stand_ins else ""
    print(
        f"perfsuite fleet: {fleet_id}: {len(jobs)} of {count} shard(s) on {plan.variable}={','.join(plan.devices)}{within}"
    )
    weights = snapshot_weights(
        results_root, root, args.store, " ".join(ini_value(root, "perfsuite_history_url")) or None
    )
    exits = local.run_jobs(
        jobs, root, list(args.pytest_args), environ={**os.environ, WEIGHTS_VARIABLE: str(weights)}
    )
    entries = {}
    for done in exits:
        state, machine = outcome.shard_state(done.job.results_dir)
        state = (
            "empty"
            if done.returncode == 5 or (done.returncode == 0 and state == "missing")
            else state
        )
        if state == "empty":
            recorded = "nothing to record"
        elif done.returncode in (0, 1):  # passed, or some tests failed: its benchmarks still count
            recorded = record(done.job, state, root, args.store)
        else:
            recorded = "not recorded: it crashed"
        entries[done.job.name] = {
            "recorded": recorded,
            "shard": str(done.job.shard),
            "device": done.job.device,
            "variable": plan.variable,
            "run_id": done.job.run_id,
            "exit_code": done.returncode,
            "ended": done.meaning,
            "state": state,
            "log": str(done.job.log_path),
            "software": {f: machine.get(f) for f in outcome.SOFTWARE_FIELDS},
        }
    path = outcome.update_fleet_file(results_root, fleet_id, count, entries)
    fleet_record = outcome.read_fleet_file(path)
    flagged = outcome.software_differences(
        {
            name: e["software"]
            for name, e in fleet_record["shards"].items()
            if e.get("state") in ("complete", "partial")
        }
    )
    return report(exits, entries, flagged, fleet_id, count, path)


def record(job, state: str, root: Path, url: str | None) -> str:
    """Record a finished shard into the store (``fleet.record``); a store error is said, not raised."""
    from perfsuite.errors import HistoryError
    from perfsuite.fleet.record import record_shard
    from perfsuite.suite.runner import ini_value

    if state != "complete":
        return f"not recorded: its run is {state}"
    labels = {
        "shard": str(job.shard),
        "device": job.device,
        job.variable: job.device,
        "fleet_id": job.fleet_id,
    }
    try:
        return record_shard(
            job.results_dir,
            job.run_id,
            job.fleet_id,
            labels,
            root,
            url,
            " ".join(ini_value(root, "perfsuite_history_url")) or None,
        )
    except HistoryError as exc:
        return f"not recorded: {exc}"


def report(
    exits, entries: dict, flagged: dict[str, list[str]], fleet_id: str, count: int, path: Path
) -> int:
    """The end-of-fleet lines: one per shard, failures with their rerun command; the exit code."""
    failed = [
        d
        for d in exits
        if not d.ok
        or entries[d.job.name]["state"] not in ("complete", "empty")
        or entries[d.job.name]["recorded"].startswith("not recorded")
    ]
    for done in exits:
        entry = entries[done.job.name]
        print(
            f"perfsuite fleet: {done.job.label}: {done.meaning}, run {entry['state']}, {entry['recorded']} "
            f"({done.wall_s:.0f} s)"
        )
    for name, lines in sorted(flagged.items()):
        print(
            f"perfsuite fleet: {name} FLAGGED, not pooled with the other shards: {'; '.join(lines)}"
        )
    for done in failed:
        print(
            f"perfsuite fleet: FAILED {done.job.label}: {done.meaning}; log {done.job.log_path}; rerun it alone: "
            f"perfsuite fleet local --devices {done.job.device} --shards {count} --rerun {done.job.shard.index} "
            f"--fleet-id {fleet_id}"
        )
    print(
        f"perfsuite fleet: {len(exits) - len(failed)} of {len(exits)} shard(s) passed; record {path}"
    )
    return 1 if failed else 0


def run_slurm_command(args) -> int:
    """``perfsuite fleet slurm``: submit, wait (unless --no-wait), write fleet.json; 0 when every shard
    passed and was recorded, 1 otherwise."""
    import os

    from perfsuite.fleet import outcome
    from perfsuite.fleet.slurm import submit_array, wait_for
    from perfsuite.history import resolve_url
    from perfsuite.suite.runner import ini_value

    if not args.shards:
        raise UsageError("perfsuite fleet slurm: give --shards N (one array task per shard)")
    root = Path.cwd()
    only = shard_selection(args.shards, args.rerun)
    fleet_id = args.fleet_id or default_fleet_id(root)
    results_root = (root / args.results).resolve()
    outcome.update_fleet_file(results_root, fleet_id, args.shards, {})
    url = resolve_url(args.store, " ".join(ini_value(root, "perfsuite_history_url")) or None, root)
    from perfsuite.fleet.record import snapshot_weights
    from perfsuite.suite.shards import WEIGHTS_VARIABLE

    os.environ[WEIGHTS_VARIABLE] = str(
        snapshot_weights(results_root, root, url)
    )  # the tasks inherit it
    jobs = submit_array(
        root,
        args.shards,
        fleet_id=fleet_id,
        results_root=results_root,
        store_url=url,
        pytest_args=list(args.pytest_args),
        only=only,
        executor=args.executor,
        partition=args.partition,
        gpus_per_task=args.gpus_per_task,
        timeout_min=args.timeout_min,
    )
    indices = sorted(only) if only else list(range(1, args.shards + 1))
    print(
        f"perfsuite fleet: {fleet_id}: submitted {len(jobs)} task(s): {', '.join(j.job_id for j in jobs)}"
    )
    if args.no_wait:
        return 0
    entries = wait_for(jobs, indices, args.shards)
    path = outcome.update_fleet_file(results_root, fleet_id, args.shards, entries)
    failed = [
        n
        for n, e in entries.items()
        if e.get("exit_code") not in (0, 5)
        or e["state"] not in ("complete", "empty")
        or str(e["recorded"]).startswith("not recorded")
    ]
    flagged = outcome.software_differences(
        {
            n: e.get("software") or {}
            for n, e in outcome.read_fleet_file(path)["shards"].items()
            if e.get("state") == "complete"
        }
    )
    for name, lines in sorted(flagged.items()):
        print(
            f"perfsuite fleet: {name} FLAGGED, not pooled with the other shards: {'; '.join(lines)}"
        )
    for name in sorted(failed):
        index = int(name.split("-")[1])
        print(
            f"perfsuite fleet: FAILED {name} ({entries[name]['ended']}); rerun it alone: perfsuite fleet slurm "
            f"--shards {args.shards} --rerun {index} --fleet-id {fleet_id}"
        )
    print(
        f"perfsuite fleet: {len(entries) - len(failed)} of {len(entries)} shard(s) passed; record {path}"
    )
    return 1 if failed else 0
