"""Shards: pure splitting rules, and the plugin's --perfsuite-shard on a collected suite (pytester)."""

from __future__ import annotations

from pathlib import Path

import pytest

# The history store's modules are imported here, not first inside the in-process runs below: pytester
# drops what such a run imported, and SQLAlchemy's modules loaded twice have classes that differ.
import perfsuite.history.capture  # noqa: F401
from perfsuite.errors import ConfigError
from perfsuite.history import open_store
from perfsuite.suite import shards

SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()
ARGS = (
    "--perfsuite-shapes=1x2x16x8 1x2x8x4",
    "--perfsuite-dtypes=fp32",
    "--perfsuite-masks=causal noncausal",
    "--perfsuite-variants=naive naive_inplace sdpa",
    "--co",
    "-q",
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0/2", "INDEX must be in 1..2"),
        ("3/2", "INDEX must be in 1..2"),
        ("1/0", "COUNT must be at least 1"),
        ("2", "is not INDEX/COUNT"),
        ("a/b", "is not INDEX/COUNT"),
        ("-1/3", "INDEX must be in 1..3"),
    ],
)
def test_bad_shards_name_the_value_and_the_rule(text, expected):
    with pytest.raises(ConfigError, match=expected) as raised:
        shards.parse_shard(text, "option --perfsuite-shard")
    assert repr(text) in str(raised.value) and "option --perfsuite-shard" in str(raised.value)


def test_parse_accepts_spaces_and_empty_means_unsharded():
    assert shards.parse_shard(" 2 / 4 ") == shards.Shard(2, 4)
    assert shards.parse_shard("") is None


def test_known_durations_balance_the_shards():
    durations = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0, "e": 1.0}
    placed = shards.assign(shards.group_weights(dict.fromkeys(durations, 1), durations), 2)
    loads = {i: sum(durations[g] for g, s in placed.items() if s == i) for i in (1, 2)}
    assert loads == {
        1: 14.0,
        2: 12.0,
    }  # LPT: a+d | b+c+e (the best split is 13 | 13; LPT is within 4/3)
    # by count only, the slow group sits with as many others as the rest: 16 | 10
    by_count = shards.assign(shards.group_weights(dict.fromkeys(durations, 1), {}), 2)
    assert sorted(sum(durations[g] for g, s in by_count.items() if s == i) for i in (1, 2)) == [
        10.0,
        16.0,
    ]


def test_unknown_groups_weigh_the_median_seconds_per_test():
    weights = shards.group_weights({"known": 2, "new": 4}, {"known": 3.0})
    assert weights == {"known": 3.0, "new": 6.0}


def test_split_keeps_a_group_together_and_covers_everything():
    groups = [f"g{i % 7}" for i in range(40)]
    for count in (1, 2, 3, 8):
        kept = [shards.split(groups, shards.Shard(i, count)) for i in range(1, count + 1)]
        assert all(sum(column) == 1 for column in zip(*kept))  # each item in exactly one shard
        for mask in kept:
            assert (
                len(
                    {g for g, k in zip(groups, mask) if k}
                    & {g for g, k in zip(groups, mask) if not k}
                )
                == 0
            )


def _collected(result) -> list[str]:
    return [
        line.strip()
        for line in result.outlines
        if "::" in line and not line.startswith(("perfsuite", "="))
    ]


@pytest.mark.slow
def test_shards_of_the_collected_suite_are_disjoint_and_their_union_is_the_suite(pytester):
    pytester.makepyfile(test_attention=SUITE)
    whole = _collected(pytester.runpytest_inprocess(*ARGS))
    assert len(whole) > 20 and len(set(whole)) == len(whole)
    pair = lambda nodeid: nodeid.split("[", 1)[1].rsplit("-cpu", 1)[
        0
    ]  # variant-case of a suite test
    for count in (2, 5):  # one shard is the whole suite
        parts = []
        for index in range(1, count + 1):
            result = pytester.runpytest_inprocess(*ARGS, f"--perfsuite-shard={index}/{count}")
            assert result.ret == 0, result.outlines
            result.stdout.fnmatch_lines(
                [f"perfsuite: shard {index}/{count}: * of {len(whole)} tests, balanced by *"]
            )
            parts.append(_collected(result))
        assert sorted(sum(parts, [])) == sorted(whole), f"{count} shards do not add up to the suite"
        pairs = [
            {pair(n) for n in part if "-cpu" in n} for part in parts
        ]  # not the skipped no-such-variant ids
        assert all(not (a & b) for i, a in enumerate(pairs) for b in pairs[i + 1 :]), (
            "a pair was split"
        )
        assert all(parts), f"an empty shard among {count}"


@pytest.mark.slow
def test_ini_key_and_bad_option(pytester):
    pytester.makepyfile(test_attention=SUITE)
    pytester.makeini("[pytest]\nperfsuite_shard = 2/2\n")
    result = pytester.runpytest_subprocess(*ARGS)
    result.stdout.fnmatch_lines(["perfsuite: shard 2/2: *"])
    bad = pytester.runpytest_subprocess(*ARGS, "--perfsuite-shard=3/2")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        ["*option --perfsuite-shard='3/2': shard '3/2': INDEX must be in 1..2*"]
    )


def _run(uid: str, sha: str, position: int, medians: dict[str, float]):
    from perfsuite.history import BenchmarkRecord, Commit, RunRecord, Software, Testbed

    benches = tuple(
        BenchmarkRecord(
            name=name,
            variant=name.split("/")[0],
            case_id=name.split("/")[1],
            mode=name.split("/")[2],
            device="cpu",
            rounds_s=(m, m, m),
            median_s=m,
        )
        for name, m in medians.items()
    )
    return RunRecord(
        uid=uid,
        source="plugin",
        commit=Commit(
            sha=sha, branch="main", commit_time=1.7e9 + position, dirty=False, position=position
        ),
        testbed=Testbed({"cpu": "x86_64"}, 0, "cpu", 2**33, 2),
        software=Software({"torch": "2.13.0"}),
        benchmarks=benches,
        recorded_at=1.7e9 + position,
    )


def test_durations_come_from_the_store_but_never_from_the_commit_being_sharded(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'h.sqlite'}") as store:
        store.record(
            _run(
                "old",
                "a" * 40,
                1,
                {"naive/c1/forward": 0.1, "naive/c1/backward": 0.2, "sdpa/c1/forward": 0.01},
            )
        )
        store.record(
            _run("head", "b" * 40, 2, {"naive/c1/forward": 9.0})
        )  # a shard of HEAD already recorded
        durations = shards.stored_durations(store, "b" * 40, min_rounds=15, max_time_s=0.5)
    # naive-c1: 15 x 0.1 + 15 x 0.2 (rounds above max_time); sdpa-c1: max_time wins (15 x 0.01 < 0.5)
    assert durations == pytest.approx({"naive-c1": 4.5, "sdpa-c1": 0.5})
