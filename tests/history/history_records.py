"""Runs for the store tests, built through the record API (``make_run``)."""

from __future__ import annotations


def make_run(
    uid: str,
    sha: str,
    position: int,
    times: tuple[float, ...] = (1.0e-3, 1.1e-3, 0.9e-3),
    *,
    torch: str = "2.13.0",
    contended: bool = False,
    copies: int = 0,
    dirty: bool = False,
    benchmarks: tuple[str, ...] = ("naive/b2h4s64d32-fp32-causal-cpu/forward",),
    cpu: str = "test cpu",
):
    """A run of ``benchmarks`` on commit ``sha`` (first-parent ``position``) with the rounds ``times``."""
    from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, Testbed

    structure = {
        "copies": {"cpu aten::clone [2x4x64x64]": copies} if copies else {},
        "cpu_ops": {"aten::bmm": 2},
    }
    benches = tuple(
        BenchmarkRecord(
            name=name,
            variant=name.split("/")[0],
            case_id=name.split("/")[1],
            mode=name.split("/")[2],
            device="cpu",
            rounds_s=times,
            median_s=sorted(times)[len(times) // 2],
            score_copies=float(copies),
            structure=structure,
            contended=contended,
        )
        for name in benchmarks
    )
    return RunRecord(
        uid=uid,
        source="plugin",
        commit=Commit(
            sha=sha,
            branch="main",
            commit_time=1_700_000_000.0 + position,
            dirty=dirty,
            position=position,
        ),
        testbed=Testbed({"cpu": "x86_64"}, 0, cpu, 8 * 2**30, 2, host="test"),
        software=Software({"python": "3.11", "torch": torch}),
        benchmarks=benches,
        recorded_at=1_800_000_000.0 - position,
    )  # recorded in reverse: order must follow commits
