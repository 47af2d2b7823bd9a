"""Stored runs carry a schema version; a reader refuses a newer one by name and never invents a verdict."""

import json

import pytest

from perfsuite.errors import ReportError
from perfsuite.report.saved import load_run
from perfsuite.storage import EXTRA_INFO_SCHEMA_VERSION, RUN_SCHEMA_VERSION

INFO = {
    "schema_version": EXTRA_INFO_SCHEMA_VERSION,
    "variant": "sdpa",
    "case": "b1h2s8d4-fp32-causal-cpu",
    "mode": "forward",
    "case_fields": {"device": "cpu"},
    "flop": 10,
    "bytes_read": 1,
    "bytes_written": 1,
    "cpu_ops_per_step": 3,
    "kernels_per_step": 0,
    "score_copies_per_step": 0,
    "allocated_bytes_per_step": 0,
    "peak_memory_bytes": 0,
    "max_abs_error": 1e-7,
    "correct": True,
}


def _benchmark_file(tmp_path, **changes):
    info = {k: v for k, v in (INFO | changes).items() if v is not None}
    path = tmp_path / "0001_x.json"
    path.write_text(json.dumps({"benchmarks": [{"extra_info": info, "stats": {"median": 0.001}}]}))
    return path


def test_a_current_record_is_read(tmp_path):
    [result] = load_run(_benchmark_file(tmp_path)).results
    assert result.correct is True


def test_a_newer_extra_info_schema_is_refused_with_its_version(tmp_path):
    with pytest.raises(
        ReportError,
        match=f"schema_version 99 is newer than this perfsuite reads \\({EXTRA_INFO_SCHEMA_VERSION}\\)",
    ):
        load_run(_benchmark_file(tmp_path, schema_version=99))


def test_a_record_without_correct_is_not_taken_as_correct(tmp_path):
    with pytest.raises(ReportError, match="missing or malformed field .*correct"):
        load_run(_benchmark_file(tmp_path, correct=None))


def test_a_newer_run_json_is_refused_with_its_version(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema_version": RUN_SCHEMA_VERSION + 1, "results": [{}]}))
    with pytest.raises(
        ReportError, match=f"schema_version {RUN_SCHEMA_VERSION + 1} is newer"
    ) as info:
        load_run(path)
    assert str(path) in str(info.value)
