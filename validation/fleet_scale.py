"""Scale of a fleet's history: the store's ingest rate on SQLite and PostgreSQL, the size of 64 GPUs x nightly x
one year of the default case set, and ``perfsuite history detect`` timed on a generated store of that many series
and commits.

    .venv/bin/python validation/fleet_scale.py [--postgresql auto|URL] [--runs 20] [--commits 365]

``--postgresql auto`` starts a temporary PostgreSQL server from Debian's binaries (as the postgres user when run
as root) and removes it afterwards; leave it out to measure SQLite only. The data are made (seeded log-normal
rounds, a 20% step in every tenth series at mid-year), so the figures measure the store, not benchmarks; they
depend on the machine and are what this command prints on it. A "point" is one benchmark result of one run
(with its ROUNDS raw round times stored beside it).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, Testbed, open_store

FLEET_GPUS, NIGHTS = 64, 365


def default_benchmarks() -> list[tuple[str, str, str]]:
    """(variant, case id, mode) of every benchmark the default case set times on a CUDA machine, all variants."""
    from perfsuite.suite import settings

    raw = {
        name: settings.RawValue(spec.default, "default", "default")
        for name, spec in settings.SETTINGS.items()
    }
    raw["devices"] = settings.RawValue("cuda", "default", "default")
    resolved = settings.resolve(raw, True, ())
    return [(v, c.id, m) for v in resolved.variants for c in resolved.cases for m in resolved.modes]


def make_run(
    uid: str,
    position: int,
    benchmarks: list[tuple[str, str, str]],
    rounds: int,
    rng: random.Random,
    testbed: Testbed,
    commits: int,
) -> RunRecord:
    records = []
    for k, (variant, case, mode) in enumerate(benchmarks):
        base = 1e-4 * (1 + k % 7) * (1.2 if k % 10 == 0 and position > commits // 2 else 1.0)
        values = tuple(base * rng.lognormvariate(0, 0.03) for _ in range(rounds))
        records.append(
            BenchmarkRecord(
                name=f"{variant}/{case}/{mode}",
                variant=variant,
                case_id=case,
                mode=mode,
                device="cuda",
                rounds_s=values,
                median_s=sorted(values)[rounds // 2],
            )
        )
    return RunRecord(
        uid=uid,
        source="import",
        commit=Commit(
            sha="%040x" % (position + 1),
            branch="main",
            commit_time=1.7e9 + 86400 * position,
            position=position + 1,
        ),
        testbed=testbed,
        software=Software({"python": "3.11", "torch": "2.13.0", "cuda": "12.8"}),
        benchmarks=tuple(records),
        recorded_at=1.7e9 + 86400 * position,
    )


TESTBED = Testbed(
    device_names={"cuda": "NVIDIA H100 80GB HBM3"},
    device_count=1,
    cpu_model="Scale CPU",
    memory_bytes=2**40,
    num_threads=16,
)


def ingest_rate(url: str, runs: int, benchmarks: list, rounds: int) -> tuple[float, float]:
    """(points per second, runs per second) recording ``runs`` runs one transaction each into ``url``."""
    rng = random.Random(0)
    made = [make_run(f"ingest-{i}", i, benchmarks, rounds, rng, TESTBED, runs) for i in range(runs)]
    with open_store(url) as store:
        start = time.perf_counter()
        for run in made:
            store.record(run)
        seconds = time.perf_counter() - start
    return runs * len(benchmarks) / seconds, runs / seconds


@contextmanager
def temporary_postgresql() -> Iterator[str]:
    """A PostgreSQL server in a temporary folder (Debian's /usr/lib/postgresql/*/bin), its URL; stopped after."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        raise SystemExit("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
    bin_dir = found[-1].parent
    folder = Path(tempfile.mkdtemp(prefix="fleet-scale-pg-"))
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(folder, "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = folder / "data"
    subprocess.run(
        [*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *as_postgres,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(folder / "log"),
            "-w",
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"],
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


def time_detect(url: str) -> tuple[float, int]:
    """(seconds, exit code) of ``perfsuite history --store URL detect`` over every series."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "perfsuite", "history", "--store", url, "detect"],
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - start, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--postgresql", help="'auto' (a temporary server) or a postgresql+psycopg:// URL"
    )
    parser.add_argument(
        "--runs", type=int, default=20, help="runs recorded to measure the ingest rate (default 20)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=15,
        help="rounds per benchmark (default 15: --benchmark-min-rounds)",
    )
    parser.add_argument(
        "--commits",
        type=int,
        default=NIGHTS,
        help="commits (nights) in the detect store (default 365)",
    )
    parser.add_argument(
        "--runs-per-commit",
        type=int,
        default=1,
        help="runs per commit in the detect store (a fleet pools 64 into one point; default 1)",
    )
    args = parser.parse_args(argv)
    benchmarks = default_benchmarks()
    print(f"default case set on CUDA, every variant and mode: {len(benchmarks)} benchmarks per run")
    folder = Path(tempfile.mkdtemp(prefix="fleet-scale-"))
    rates = {
        "SQLite": ingest_rate(
            f"sqlite:///{folder / 'ingest.sqlite'}", args.runs, benchmarks, args.rounds
        )
    }
    with temporary_postgresql() if args.postgresql == "auto" else _given(args.postgresql) as pg_url:
        if pg_url:
            rates["PostgreSQL"] = ingest_rate(pg_url, args.runs, benchmarks, args.rounds)
    year_points = FLEET_GPUS * NIGHTS * len(benchmarks)
    for engine, (points_s, runs_s) in rates.items():
        print(
            f"ingest {engine}: {points_s:,.0f} points/s ({runs_s:.1f} runs/s of {len(benchmarks)} benchmarks, "
            f"{args.rounds} rounds each)"
        )
        print(
            f"  {FLEET_GPUS} GPUs x {NIGHTS} nights: {year_points:,} points ({year_points * args.rounds:,} rounds) a "
            f"year; one night's {FLEET_GPUS} runs take {FLEET_GPUS * len(benchmarks) / points_s:.1f} s to record, "
            f"the year {year_points / points_s / 3600:.1f} h"
        )
    url = f"sqlite:///{folder / 'detect.sqlite'}"
    rng = random.Random(1)
    start = time.perf_counter()
    with open_store(url) as store:
        for position in range(args.commits):
            for r in range(args.runs_per_commit):
                store.record(
                    make_run(
                        f"night-{position}-{r}",
                        position,
                        benchmarks,
                        args.rounds,
                        rng,
                        TESTBED,
                        args.commits,
                    )
                )
    built = time.perf_counter() - start
    seconds, code = time_detect(url)
    size = (folder / "detect.sqlite").stat().st_size
    print(
        f"detect store: {len(benchmarks)} series x {args.commits} commits x {args.runs_per_commit} run(s) "
        f"({len(benchmarks) * args.commits:,} points, {size / 2**20:.0f} MiB SQLite, built in {built:.0f} s)"
    )
    print(
        f"perfsuite history detect over every series: {seconds:.1f} s (exit {code}; "
        f"{len(benchmarks) * args.commits / seconds:,.0f} points/s)"
    )
    shutil.rmtree(folder, ignore_errors=True)
    return 0


@contextmanager
def _given(url: str | None) -> Iterator[str | None]:
    yield url


if __name__ == "__main__":
    sys.exit(main())
