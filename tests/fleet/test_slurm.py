"""perfsuite fleet slurm on a real one-node Slurm cluster: a 4-shard job array submitted through submitit
(CPU tasks), every shard recorded exactly once into one PostgreSQL store the tasks share."""

from __future__ import annotations

import json

import pytest

from perfsuite.cli.main import main
from perfsuite.history import open_store

pytestmark = pytest.mark.slow
FOUR_GROUPS = "b1h2s16d8-fp32-causal-cpu b1h2s8d4-fp32-noncausal-cpu"  # 2 variants x 2 cases: one group per shard


def test_a_four_shard_array_lands_once_per_shard_in_one_postgresql_store(
    user_repo, slurm_cluster, postgresql_store_url, monkeypatch, capsys
):
    url = postgresql_store_url
    pyproject = user_repo / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('"b1h2s16d8-fp32-causal-cpu"', f'"{FOUR_GROUPS}"')
    )
    for name, value in {**slurm_cluster, "PYTHONPATH": str(user_repo)}.items():
        monkeypatch.setenv(name, value)
    for name in ("CUDA_VISIBLE_DEVICES", "FLEET_TEST_KILL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(user_repo)
    args = [
        "fleet",
        "slurm",
        "--shards",
        "4",
        "--gpus-per-task",
        "0",
        "--timeout-min",
        "20",
        "--store",
        url,
    ]
    assert main(args) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "4 of 4 shard(s) passed" in out and out.count(", recorded") == 4, out
    record = json.loads((user_repo / "perfsuite-results/fleet/fleet.json").read_text())
    assert sorted(record["shards"]) == [f"shard-{i}-of-4" for i in range(1, 5)]
    assert {e["slurm"]["slurm_array_task_id"] for e in record["shards"].values()} == {
        "0",
        "1",
        "2",
        "3",
    }
    with open_store(url, create=False) as store:
        runs = store.runs()
        assert sorted(r["uid"] for r in runs) == sorted(
            f"{record['fleet_id']}-shard-{i}-of-4" for i in range(1, 5)
        )
        assert {r["run_group"] for r in runs} == {record["fleet_id"]}  # one logical run
        assert len({r["commit_sha"] for r in runs}) == 1 and all(
            r["benchmarks"] == 1 for r in runs
        )  # one commit
        benchmarks = {s.key.benchmark for s in store.list_series(measure="time_s")}
    assert (
        len(benchmarks) == 4
    )  # every (variant, case) pair's forward benchmark, each from one shard

    # a rerun of one shard submits one task, which records nothing new
    assert main([*args, "--rerun", "3", "--fleet-id", record["fleet_id"]]) == 0
    assert "already in the store" in capsys.readouterr().out
    with open_store(url, create=False) as store:
        assert len(store.runs()) == 4
