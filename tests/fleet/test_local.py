"""perfsuite fleet local with two fake devices (CPU processes standing in for GPUs 2 and 3): the outer
visible list, a shard killed mid-run and rerun alone, and the store holding each shard once."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from perfsuite.history import open_store

pytestmark = pytest.mark.slow


def _runs(url: str) -> list[dict]:
    with open_store(url, create=False) as store:
        return store.runs()


def test_two_fake_gpus_a_killed_shard_rerun_alone_and_each_shard_stored_once(
    user_repo, run_perfsuite
):
    perfsuite = run_perfsuite
    url = f"sqlite:///{user_repo / 'fleet.sqlite'}"
    outer = {"CUDA_VISIBLE_DEVICES": "2,3"}
    killed = perfsuite(
        user_repo, "fleet", "local", "--store", url, env={**outer, "FLEET_TEST_KILL": "1"}
    )
    assert killed.returncode == 1, killed.stdout + killed.stderr
    assert (
        "2 of 2 shard(s) on CUDA_VISIBLE_DEVICES=2,3 (within the caller's CUDA_VISIBLE_DEVICES=2,3)"
        in killed.stdout
    )
    failed = re.search(
        r"FAILED shard (\d)/2 on (?:stand-in|GPU) ([23]) \((?:no GPU here: a CPU process; )?"
        r"CUDA_VISIBLE_DEVICES=\2\): crashed: killed by SIGKILL; "
        r"log .*; rerun it alone: perfsuite (fleet local .*)",
        killed.stdout,
    )
    assert failed, killed.stdout
    assert "1 of 2 shard(s) passed" in killed.stdout
    assert (
        len(_runs(url)) == 1
    )  # the shard that lived is in the store; the killed one left nothing half-written

    record = json.loads((user_repo / "perfsuite-results/fleet/fleet.json").read_text())
    for entry in record[
        "shards"
    ].values():  # each child saw one device of the outer list, never GPU 0
        assert entry["device"] in ("2", "3")
        if entry["state"] == "complete":
            run = json.loads(
                (
                    user_repo
                    / f"perfsuite-results/fleet/shard-{entry['shard'].replace('/', '-of-')}"
                    "/run.json"
                ).read_text()
            )
            assert run["machine"]["gpu_state"]["visible_devices"] == {
                "CUDA_VISIBLE_DEVICES": entry["device"]
            }

    rerun = perfsuite(user_repo, *shlex.split(failed.group(3)), "--store", url, env=outer)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert (
        re.search(rf"shard {failed.group(1)}/2 on (GPU|stand-in) {failed.group(2)}", rerun.stdout)
        and "1 of 1 shard(s) passed" in rerun.stdout
    )
    runs = _runs(url)
    assert len(runs) == 2 and len({r["run_group"] for r in runs}) == 1  # two shards, one fleet run
    assert sorted(r["uid"].rsplit("-shard-", 1)[1] for r in runs) == ["1-of-2", "2-of-2"]

    again = perfsuite(user_repo, *shlex.split(failed.group(3)), "--store", url, env=outer)
    assert again.returncode == 0 and "already in the store" in again.stdout
    assert len(_runs(url)) == 2  # rerunning duplicates nothing and replaces nothing
    assert {
        s["state"]
        for s in json.loads((user_repo / "perfsuite-results/fleet/fleet.json").read_text())[
            "shards"
        ].values()
    } == {"complete"}


def test_a_device_outside_the_callers_visible_list_is_refused(user_repo, run_perfsuite):
    perfsuite = run_perfsuite
    refused = perfsuite(
        user_repo, "fleet", "local", "--devices", "0,3", env={"CUDA_VISIBLE_DEVICES": "2,3"}
    )
    assert refused.returncode == 2
    assert (
        "--devices '0,3': 0 not in the caller's CUDA_VISIBLE_DEVICES=2,3; allowed: 2, 3"
        in refused.stderr
    )
