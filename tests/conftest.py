"""Fixtures every test folder shares. (Throwaway git repositories, shared with the validation tools:
``validation/user_repo.py``.)"""

from __future__ import annotations

import pytest

from perfsuite.report.results import BenchmarkResult

RESULT = {
    "variant": "naive",
    "case_id": "b1h1s8d8-fp32-causal-cpu",
    "device": "cpu",
    "flop": 2_000_000,
    "bytes_moved": 1000,
    "rounds": 10,
    "work_per_step": 45,
    "work_unit": "ops",
    "score_copies_per_step": 1,
    "allocated_bytes": 4 * 1024 * 1024,
    "peak_bytes": 3 * 1024,
    "max_abs_error": 1.5e-7,
    "correct": True,
}


def make_result(median_s: float | None = 0.002, **fields) -> BenchmarkResult:
    """A timed forward of naive on a small CPU case (2 MFLOP, 1000 bytes, 10 rounds, 45 ops, one
    score copy, correct) with ``median_s`` and any other ``fields`` changed."""
    return BenchmarkResult(**{**RESULT, "median_s": median_s, **fields})


@pytest.fixture(name="make_result")
def make_result_fixture():
    """``make_result(median_s=0.002, **fields)``: a ``BenchmarkResult`` row (``make_result`` above)."""
    return make_result


@pytest.fixture
def variant_of():
    """``variant_of(name, fn)`` registers a test's function as a variant, unregistered after the test."""
    from perfsuite.variants import registry

    names = []

    def register(name, fn):
        registry.register_variant(name, "a test's function")(fn)
        names.append(name)
        return registry.get_variant(name)

    yield register
    for name in names:
        registry.unregister_variant(name)
