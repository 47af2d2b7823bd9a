"""The verdicts hold against variants that misbehave, through the suite as a user runs it."""

import os
import sys
import textwrap
from pathlib import Path

import pytest

SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()

pytestmark = pytest.mark.slow

MISBEHAVING = textwrap.dedent("""
    import torch

    F = torch.nn.functional

    def _sdpa(query, key, value, mask, scale):
        return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)

    def doubled_wrong(query, key, value, *, mask, scale):
        query.mul_(2)
        return _sdpa(query, key, value, mask, scale)

    def doubled_right(query, key, value, *, mask, scale):
        out = _sdpa(query, key, value, mask, scale)
        query.mul_(2)
        return out

    calls = []

    def nan_every_third(query, key, value, *, mask, scale):
        calls.append(1)
        out = _sdpa(query, key, value, mask, scale)
        return out * float("nan") if len(calls) % 3 == 0 else out
""")


def _run(pytester, *variants, extra=()):
    pytester.makepyfile(test_attention=SUITE, misbehaving=MISBEHAVING)
    specs = [arg for name in variants for arg in ("--perfsuite-variant", f"misbehaving:{name}")]
    return pytester.runpytest_subprocess(
        *specs,
        "--perfsuite-variants",
        ",".join(variants),
        "--perfsuite-cases",
        "b1h2s16d8-fp32-causal-cpu",
        "--perfsuite-modes",
        "forward",
        "-k",
        "float64 or benchmark",
        "-p",
        "no:randomly",
        *extra,
    )


def test_a_variant_changing_its_inputs_fails_the_reference_check_and_is_not_timed(
    pytester, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path)] + sys.path))
    result = _run(pytester, "doubled_wrong", "doubled_right", extra=("--benchmark-disable", "-rs"))
    # the reference check fails naming it; the benchmark is not timed, a skip that names that check
    result.assert_outcomes(failed=2, skipped=2)
    out = result.stdout.str()
    for name in ("doubled_wrong", "doubled_right"):
        assert f"variant {name} modified its `query` in place" in out
        assert f"not timed: variant {name} modified its `query` in place" in out
    assert "(test_matches_float64_reference fails for it)" in out


def test_nan_on_every_third_call_fails_the_timed_run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path)] + sys.path))
    result = _run(
        pytester, "nan_every_third", extra=("--benchmark-min-rounds=2", "--benchmark-max-time=0.01")
    )
    result.assert_outcomes(passed=1, failed=1)
    assert "returned non-finite values" in result.stdout.str()
