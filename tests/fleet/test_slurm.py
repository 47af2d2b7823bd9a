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


def test_no_file_written_for_an_array_holds_the_store_password(
    user_repo, postgresql_store_url, monkeypatch, capsys
):
    """submitit's local executor runs the same tasks (its pickles, logs and our files written as on a
    cluster): every file under the repository and the results folder is read, and none holds the
    password; the URL reaches the tasks through a file only its owner can read, and they record."""
    from sqlalchemy.engine import make_url

    password = "S3cret-pw-53"
    url = (
        make_url(postgresql_store_url).set(password=password).render_as_string(hide_password=False)
    )
    monkeypatch.setenv("PYTHONPATH", str(user_repo))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(user_repo)
    args = ["fleet", "slurm", "--shards", "1", "--gpus-per-task", "0", "--executor", "local"]
    assert main([*args, "--store", url]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert password not in out and ", recorded" in out, out
    results = user_repo / "perfsuite-results" / "fleet"
    holding = [
        str(p)
        for p in user_repo.rglob("*")
        if p.is_file() and ".git" not in p.parts and password.encode() in p.read_bytes()
    ]
    reference = results / "store-url"
    assert holding == [str(reference)], holding
    assert reference.stat().st_mode & 0o777 == 0o600
    with open_store(postgresql_store_url, create=False) as store:
        assert len(store.runs()) == 1


def test_without_slurm_the_command_says_so_in_one_line(user_repo, tmp_path, monkeypatch, capsys):
    """No sbatch on the PATH: a usage error naming Slurm and the local executor, no traceback."""
    pytest.importorskip("submitit")
    import shutil

    tools = tmp_path / "bin"  # git and this Python, no Slurm
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git"))
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.chdir(user_repo)
    code = main(["fleet", "slurm", "--shards", "2", "--gpus-per-task", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "Slurm is not installed here (no sbatch on the PATH)" in err, err
    assert "Traceback" not in err
