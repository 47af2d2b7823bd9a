"""The A/A noise floor: the spread between worker pairs read from recorded A/A documents, pooled, and
refused when a document is not an A/A run (``perfsuite ab --noise-floor``)."""

import json
import math

import numpy as np
import pytest

from perfsuite.cli.main import main
from perfsuite.errors import UsageError
from perfsuite.gate.noise_floor import between_pairs_sd, floors_from_files, floors_from_payloads

KEY = "naive/b1h2s16d8-fp32-causal-cpu"


def aa_benchmark(cluster_logs, contended=(), key=KEY, structure=()):
    """One benchmark of an ``ab --json`` document whose worker pair ``c`` measured the log ratios
    ``cluster_logs[c]`` (one block pair each, base 1 s); the pairs at ``contended`` set aside."""
    clusters = [c for c, logs in enumerate(cluster_logs) for _ in logs]
    logs = [x for group in cluster_logs for x in group]
    return {
        "key": key,
        "base_blocks_s": [[1.0] for _ in logs],
        "head_blocks_s": [[math.exp(x)] for x in logs],
        "contended_pairs": [i in contended for i in range(len(logs))],
        "clusters": clusters,
        "structure": list(structure),
    }


def test_the_floor_is_the_spread_between_worker_pairs_of_the_kept_pairs():
    """Worker pairs centred at -0.01, 0 and +0.02 (their Hodges-Lehmann centres); a contended pair of
    +0.5 is not counted; pooled pairs (no clusters) and a single worker pair give no floor."""
    benchmark = aa_benchmark(
        [[-0.01, -0.01, -0.01], [0.0, 0.0, 0.5, 0.0], [0.02, 0.02, 0.02]], contended={5}
    )
    assert between_pairs_sd(benchmark) == pytest.approx(np.std([-0.01, 0.0, 0.02], ddof=1))
    pooled = dict(benchmark, clusters=[None] * len(benchmark["clusters"]))
    assert between_pairs_sd(pooled) is None
    assert between_pairs_sd(aa_benchmark([[0.01] * 3])) is None
    assert between_pairs_sd({"key": KEY, "base_blocks_s": [], "clusters": []}) is None
    # the gate keeps a spread as a floor only from FLOOR_MIN_WORKER_PAIRS worker pairs with kept pairs
    assert between_pairs_sd(benchmark, min_worker_pairs=4) is None
    assert between_pairs_sd(benchmark, min_worker_pairs=3) == pytest.approx(
        np.std([-0.01, 0.0, 0.02], ddof=1)
    )


def test_several_a_a_runs_pool_their_variances():
    """Two nights measured sd 0.01 and 0.03: the floor is sqrt((0.01**2 + 0.03**2) / 2), not the lower."""
    night = [
        {"benchmarks": [aa_benchmark([[-sd] * 3, [0.0] * 3, [sd] * 3])]} for sd in (0.01, 0.03)
    ]
    [(key, floor)] = floors_from_payloads(night).items()
    assert key == KEY and floor == pytest.approx(math.sqrt((0.01**2 + 0.03**2) / 2))


def test_a_file_that_is_not_an_a_a_document_is_refused_naming_it(tmp_path):
    missing = tmp_path / "missing.json"
    not_json = tmp_path / "broken.json"
    not_json.write_text("{")
    no_list = tmp_path / "other.json"
    no_list.write_text(json.dumps({"benchmarks": {}}))
    changed = tmp_path / "ab.json"
    changed.write_text(
        json.dumps({"benchmarks": [aa_benchmark([[0.0] * 3] * 2, structure=["+1 aten::clone"])]})
    )
    for path, why in (
        (missing, "cannot read it"),
        (not_json, "cannot read it"),
        (no_list, "not a `perfsuite ab --json` document"),
        (changed, f"not an A/A run: structure differs in {KEY}"),
    ):
        with pytest.raises(UsageError, match="--noise-floor") as raised:
            floors_from_files([path])
        assert str(path) in str(raised.value) and why in str(raised.value)
    good = tmp_path / "aa.json"
    good.write_text(json.dumps({"benchmarks": [aa_benchmark([[-0.01] * 3, [0.01] * 3])]}))
    assert floors_from_files([good]) == {KEY: pytest.approx(np.std([-0.01, 0.01], ddof=1))}


def test_ab_refuses_a_bad_noise_floor_before_starting_a_worker(tmp_path, capsys):
    missing = tmp_path / "aa.json"
    code = main(["ab", "--noise-floor", str(missing), "--cases", "b1h2s16d8-fp32-causal-cpu"])
    err = capsys.readouterr().err
    assert code == 2 and f"--noise-floor {missing}: cannot read it" in err
    assert "Traceback" not in err
