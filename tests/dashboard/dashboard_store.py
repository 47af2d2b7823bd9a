"""A history store built in the test: a repository's commits timed on one CPU testbed, one commit with a
planted extra score copy (its structure and its rounds say so), and a torch upgrade part way."""

from __future__ import annotations

import random

from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, Testbed, open_store

CASE = "b2h8s256d64-fp32-causal-cpu"
COPY = "cpu aten::clone [2x8x256x256]"
# made-up peaks and work: the roofline is arithmetic on them (findings.roofline_fraction)
PEAKS = {"matmul_tflops": {"fp32": 10.0}, "memory_gbps": 100.0}
FLOP = 4 * 2 * 8 * 256 * 256 * 64  # two matmuls of 2 x B x H x S x S x D
BYTES = 4 * 2 * 8 * 256 * 64 * 4  # query, key, value and output, fp32
TESTBED = Testbed(
    device_names={"cpu": "x86_64"}, cpu_model="Test CPU", memory_bytes=2**34, num_threads=2
)


def structure(copies: int) -> dict:
    """A structural fingerprint with ``copies`` score-sized clones (each 2x8x256x256 fp32: 4 MiB)."""
    return {
        "cpu_ops": {"aten::softmax": 1, **({"aten::clone": copies} if copies else {})},
        "kernels": {},
        "copies": {COPY: copies} if copies else {},
        "memcpy": {},
        "allocated_bytes": (4 + 4 * copies) * 2**20,
        "sdpa_backends": [],
    }


def build_store(
    url: str,
    commits: int = 6,
    planted: int = 4,
    upgrade: int = 2,
    seed: int = 0,
    variants: tuple[str, ...] = ("naive", "naive_inplace", "sdpa_math"),
    modes: tuple[str, ...] = ("forward",),
    device_clock: bool = False,
    shards: int = 1,
    peaks: dict | None = PEAKS,
) -> list[str]:
    """Record one run per commit into the store at ``url``; from commit ``planted`` on, naive makes one more
        score copy and its rounds are 40% longer (what the copy costs here is not measured: the store's data is
        made, so no test depends on this machine's speed). ``device_clock``: runs also carry wall and device medians,
        as the suite's device timers record them. ``shards``: each commit's benchmarks split over that many runs
    of one run group, as a fleet's shards record them; ``peaks`` each run's measured peaks. Returns the shas, oldest first."""
    rng = random.Random(seed)
    shas = [f"{i + 1:02d}" + f"{rng.getrandbits(152):038x}" for i in range(commits)]
    with open_store(url) as store:
        for i, sha in enumerate(shas):
            benchmarks = []
            for variant in variants:
                for mode in modes:
                    slow = variant == "naive" and i >= planted
                    base = {"naive": 120e-6, "naive_inplace": 100e-6, "sdpa_math": 80e-6}.get(
                        variant, 90e-6
                    )
                    base *= 1.4 if slow else 1.0
                    copies = (1 if variant == "naive" else 0) + (1 if slow else 0)
                    rounds = tuple(base * rng.lognormvariate(0, 0.02) for _ in range(25))
                    benchmarks.append(
                        BenchmarkRecord(
                            name=f"{variant}/{CASE}/{mode}",
                            variant=variant,
                            case_id=CASE,
                            mode=mode,
                            device="cpu",
                            rounds_s=rounds,
                            median_s=sorted(rounds)[12],
                            score_copies=float(copies),
                            wall_median_s=sorted(rounds)[12] * 1.1 if device_clock else None,
                            device_median_s=sorted(rounds)[12] if device_clock else None,
                            structure=structure(copies)
                            | ({"sdpa_backends": ["MATH"]} if variant == "sdpa_math" else {}),
                            contended=(i == 1 and variant == "naive_inplace"),
                            flop=FLOP,
                            bytes_moved=BYTES,
                            tflops=FLOP / sorted(rounds)[12] / 1e12,
                        )
                    )
            torch = "2.13.0" if i >= upgrade else "2.12.0"
            for shard in range(shards):
                store.record(
                    RunRecord(
                        uid=f"run-{sha}" + (f"-shard{shard}" if shards > 1 else ""),
                        source="plugin",
                        commit=Commit(
                            sha=sha,
                            branch="main",
                            commit_time=1.7e9 + 3600 * i,
                            position=i + 1,
                            subject="plant an extra copy" if i == planted else f"commit {i + 1}",
                        ),
                        testbed=TESTBED,
                        software=Software({"python": "3.11", "torch": torch}),
                        benchmarks=tuple(benchmarks[shard::shards]),
                        recorded_at=1.7e9 + 3600 * i + 60 + shard,
                        run_group=f"fleet-{sha}" if shards > 1 else None,
                        labels={"shard": f"{shard}/{shards}"} if shards > 1 else None,
                        peaks=peaks,
                    )
                )
    return shas
