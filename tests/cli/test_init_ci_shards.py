"""perfsuite init-ci --shards N: one job per shard, then a job that records and gates; lints clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.cli.init_ci import render_shards
from perfsuite.cli.main import main
from perfsuite.errors import UsageError

BIN = Path(sys.executable).parent
REQUIREMENT = "git+https://github.com/example/perfsuite@v0.1.0"


def test_three_shards_one_job_each_then_record_and_gate(tmp_path):
    output = tmp_path / "perfsuite-shards.yml"
    assert (
        main(["init-ci", "--shards", "3", "--perfsuite", REQUIREMENT, "--output", str(output)]) == 0
    )
    text = output.read_text()
    assert (
        "shard: [1, 2, 3]" in text
        and '--perfsuite-shard "$SHARD/3"' in text
        and "@" + "SHARDS@" not in text
    )
    assert (
        "needs: shard" in text
        and "perfsuite history import shards/" in text
        and "perfsuite history detect" in text
    )
    assert (
        "PERFSUITE_RUN_ID: ${{ github.run_id }}-shard-${{ matrix.shard }}-of-3" in text
    )  # idempotent on re-runs
    lint = subprocess.run([BIN / "actionlint", str(output)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    zizmor = subprocess.run(
        [BIN / "zizmor", "--offline", "--no-progress", str(output)], capture_output=True, text=True
    )
    assert zizmor.returncode == 0 and "No findings" in zizmor.stdout + zizmor.stderr, (
        zizmor.stdout + zizmor.stderr
    )
    assert (
        main(["init-ci", "--shards", "3", "--perfsuite", REQUIREMENT, "--output", str(output)]) == 2
    )  # kept


@pytest.mark.parametrize("count", [0, 257])
def test_a_shard_count_outside_the_matrix_limit_is_refused(count):
    with pytest.raises(UsageError, match=f"--shards {count}: give 1..256"):
        render_shards(count, "torch==2.13.0", REQUIREMENT, "3.11")
