"""Device plans within the caller's visible list; software that differs between shards is flagged."""

from __future__ import annotations

import re

import pytest

from perfsuite.errors import ConfigError
from perfsuite.fleet import devices, outcome


def test_the_outer_list_is_the_whole_world():
    plan = devices.plan(None, {"CUDA_VISIBLE_DEVICES": "2, 3"}, device_count=8)
    assert plan.devices == ("2", "3") and plan.variable == "CUDA_VISIBLE_DEVICES"
    assert devices.plan("3", {"CUDA_VISIBLE_DEVICES": "2,3"}, 8).devices == ("3",)
    with pytest.raises(
        ConfigError, match="0 not in the caller's CUDA_VISIBLE_DEVICES=2,3; allowed: 2, 3"
    ):
        devices.plan("0", {"CUDA_VISIBLE_DEVICES": "2,3"}, 8)


def test_uuids_and_rocm_and_counts():
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}
    assert devices.plan(None, uuids, 2).devices == ("GPU-aaa", "GPU-bbb")
    assert devices.plan(None, {}, 4).devices == ("0", "1", "2", "3")
    assert devices.plan(None, {}, 2, rocm=True).variable == "HIP_VISIBLE_DEVICES"
    assert (
        devices.plan(None, {"CUDA_VISIBLE_DEVICES": "1"}, 2, rocm=True).variable
        == "CUDA_VISIBLE_DEVICES"
    )
    assert devices.plan("0,1", {}, 0).devices == ("0", "1")  # no GPU: CPU processes stand in
    with pytest.raises(ConfigError, match="this machine has 2 GPU"):
        devices.plan("5", {}, 2)
    with pytest.raises(ConfigError, match="more than once"):
        devices.plan("1,1", {}, 2)
    with pytest.raises(ConfigError, match="no device to run on"):
        devices.plan(None, {}, 0)
    with pytest.raises(ConfigError, match="no device to run on .CUDA_VISIBLE_DEVICES=''"):
        devices.plan(None, {"CUDA_VISIBLE_DEVICES": ""}, 4)


def test_a_shard_with_another_torch_or_driver_is_flagged_not_pooled():
    same = {"torch_version": "2.13.0", "driver_version": "nvidia-smi: 550.54.15"}
    flagged = outcome.software_differences(
        {
            "shard-1-of-3": same,
            "shard-2-of-3": same,
            "shard-3-of-3": {**same, "driver_version": "nvidia-smi: 535.104.05"},
        }
    )
    assert flagged == {
        "shard-3-of-3": [
            "driver_version 'nvidia-smi: 535.104.05', the others' 'nvidia-smi: 550.54.15'"
        ]
    }
    assert outcome.software_differences({"a": same, "b": same}) == {}


def test_a_fleet_record_refuses_another_fleet(tmp_path):
    outcome.update_fleet_file(tmp_path, "f1", 2, {"shard-1-of-2": {"state": "complete"}})
    outcome.update_fleet_file(tmp_path, "f1", 2, {"shard-2-of-2": {"state": "partial"}})
    assert set(outcome.read_fleet_file(tmp_path / "fleet.json")["shards"]) == {
        "shard-1-of-2",
        "shard-2-of-2",
    }
    with pytest.raises(Exception, match="is fleet 'f1' with 2 shards, not 'f2' with 4"):
        outcome.update_fleet_file(tmp_path, "f2", 4, {})


@pytest.mark.parametrize(
    ("env", "requested", "said"),
    [
        (
            {"CUDA_VISIBLE_DEVICES": "bogus"},
            None,
            "CUDA_VISIBLE_DEVICES='bogus': 'bogus' matches no device",
        ),
        ({}, "0,gpu1", "--devices '0,gpu1': 'gpu1' matches no device"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,7"}, None, "the driver finds 2 device(s) with it, so 1 of"),
    ],
)
def test_a_device_list_that_matches_no_device_is_an_error(env, requested, said):
    """Before: CUDA_VISIBLE_DEVICES=bogus ran a shard 'on GPU bogus' that timed CPU cases and passed."""
    with pytest.raises(ConfigError, match=re.escape(said)):
        devices.plan(requested, env, device_count=2)


@pytest.mark.parametrize(
    ("visible", "said"),
    [
        ("GPU-deadbeef", "GPU-deadbeef: the driver finds no GPU here, so no device has that UUID"),
        ("0,0", "CUDA_VISIBLE_DEVICES='0,0' names 0 more than once"),
    ],
)
def test_a_visible_list_no_gpu_here_can_match_is_refused(visible, said):
    with pytest.raises(ConfigError, match=re.escape(said)):
        devices.plan(None, {"CUDA_VISIBLE_DEVICES": visible}, device_count=0)


def test_without_a_gpu_a_shard_is_named_a_stand_in_not_a_gpu(tmp_path):
    from perfsuite.fleet.local import plan_jobs

    plan = devices.plan(None, {"CUDA_VISIBLE_DEVICES": "7"}, device_count=0)
    assert plan.stand_ins and plan.devices == ("7",)
    (job,) = plan_jobs(plan.devices, plan.variable, 1, None, tmp_path, "f", plan.stand_ins)
    assert "on GPU" not in job.label and "stand-in 7 (no GPU here: a CPU process" in job.label
    assert not devices.plan(None, {"CUDA_VISIBLE_DEVICES": "7"}, device_count=8).stand_ins
